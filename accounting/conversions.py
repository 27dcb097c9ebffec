"""From a Rényi DP curve to (eps, delta): classic, improved, and the moments accountant view.

* Classic: Mironov 2017, "Rényi Differential Privacy", Prop. 3:
  eps = min_alpha rdp(alpha) + log(1/delta) / (alpha - 1).
* Improved: Balle, Barthe, Gaboardi, Hsu, Sato 2020, "Hypothesis testing interpretations and
  Rényi DP", Thm 21 (also Canonne, Kamath, Steinke 2020, Prop. 12 of arXiv:2004.00010 v4):
  eps = min_alpha rdp(alpha) + log((alpha-1)/alpha) - (log delta + log alpha) / (alpha - 1).
  We also use the (0, delta) shortcut: D_1 <= D_alpha and Pinsker/Bretagnolle-Huber give
  TV <= sqrt(1 - exp(-rdp)), so rdp <= -log(1 - delta^2) already means (0, delta)-DP.
* Moments accountant: Abadi et al. 2016, "Deep Learning with Differential Privacy", Thm 2:
  log-moment a(lambda) = lambda * rdp(lambda + 1), eps = min_lambda (a + log(1/delta))/lambda,
  which is the classic conversion at alpha = lambda + 1.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import optimize

from ._validate import check_array, check_choice, check_delta, check_eps, check_orders

__all__ = [
    "DPResult",
    "DeltaResult",
    "OrderGridWarning",
    "NoPrivacyWarning",
    "CONVERSIONS",
    "rdp_to_dp",
    "dp_delta",
    "log_moments",
    "moments_epsilon",
    "optimize_order",
]

CONVERSIONS = ("improved", "classic")


class DPResult(NamedTuple):
    """An (eps, order) pair; ``order`` is None when eps is infinite (no finite order helps)."""

    eps: float
    order: float | None


class DeltaResult(NamedTuple):
    """A (delta, order) pair."""

    delta: float
    order: float | None


class OrderGridWarning(UserWarning):
    """The optimal Rényi order sits at the edge of the grid: a wider grid may be tighter."""


class NoPrivacyWarning(UserWarning):
    """The bound is infinite: some release had no noise (or infinite RDP at every order)."""


def _check_curve(rdp: object, orders: object) -> tuple[np.ndarray, np.ndarray]:
    orders_arr = check_orders("orders", orders)
    rdp_arr = np.atleast_1d(np.asarray(rdp, dtype=float))
    if rdp_arr.shape != orders_arr.shape:
        raise ValueError(
            f"rdp and orders must have the same length, got {rdp_arr.size} and {orders_arr.size}"
        )
    check_array("rdp", rdp_arr, low=0.0, allow_inf=True,
                what="a Rényi divergence is non-negative at every order")
    return rdp_arr, orders_arr


def _check_conversion(conversion: str) -> str:
    check_choice("conversion", conversion, CONVERSIONS)
    return conversion


def eps_per_order(
    rdp: np.ndarray, orders: np.ndarray, delta: float, conversion: str = "improved"
) -> np.ndarray:
    """The (eps, delta) bound implied at each order separately (no minimum taken)."""
    a = orders
    with np.errstate(over="ignore", invalid="ignore"):
        if conversion == "classic":
            eps = rdp + math.log(1.0 / delta) / (a - 1.0)
        else:
            eps = rdp + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
            # (0, delta) shortcut: TV <= sqrt(1 - exp(-rdp)) <= delta.
            eps = np.where(-np.expm1(-rdp) <= delta * delta, 0.0, eps)
    return np.where(np.isnan(eps), np.inf, eps)


def _warn_edge(idx: int, n: int, orders: np.ndarray, what: str) -> None:
    if n > 1 and (idx == 0 or idx == n - 1):
        side = "smallest" if idx == 0 else "largest"
        warnings.warn(
            f"the optimal Rényi order for {what} is the {side} of the grid "
            f"({orders[idx]:g}); extend the orders for a tighter bound",
            OrderGridWarning,
            stacklevel=3,
        )


def rdp_to_dp(
    rdp: object,
    orders: object,
    delta: float,
    conversion: str = "improved",
    *,
    warn_edge: bool = True,
) -> DPResult:
    """Smallest eps such that the RDP curve implies (eps, delta)-DP, and the order achieving it.

    Args:
        rdp: RDP values, one per order (already composed over all steps).
        orders: the Rényi orders (> 1).
        delta: target delta in (0, 1).
        conversion: "improved" (Balle et al. 2020, Thm 21; default) or "classic"
            (Mironov 2017, Prop. 3).
        warn_edge: warn (:class:`OrderGridWarning`) when the optimum is at the grid's edge.

    Returns:
        ``DPResult(eps, order)``; eps is ``math.inf`` (order None) when no order is finite.
    """
    rdp_arr, orders_arr = _check_curve(rdp, orders)
    delta = check_delta("delta", delta)
    _check_conversion(conversion)
    eps = eps_per_order(rdp_arr, orders_arr, delta, conversion)
    if not np.isfinite(eps).any():
        return DPResult(math.inf, None)
    idx = int(np.argmin(eps))
    if warn_edge and eps[idx] > 0:
        _warn_edge(idx, orders_arr.size, orders_arr, "eps")
    return DPResult(max(0.0, float(eps[idx])), float(orders_arr[idx]))


def dp_delta(
    rdp: object,
    orders: object,
    eps: float,
    conversion: str = "improved",
    *,
    warn_edge: bool = True,
) -> DeltaResult:
    """Smallest delta such that the RDP curve implies (eps, delta)-DP: the inverse of rdp_to_dp.

    Classic: delta = min_alpha exp((alpha - 1)(rdp - eps)) (Mironov 2017, Prop. 3 solved for
    delta). Improved (Balle et al. 2020, Thm 21): log delta = (alpha-1)(rdp - eps +
    log(1 - 1/alpha)) - log(alpha), also bounded by sqrt(1 - exp(-rdp)) (TV bound).
    """
    rdp_arr, orders_arr = _check_curve(rdp, orders)
    eps = check_eps("eps", eps)
    _check_conversion(conversion)
    a = orders_arr
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if conversion == "classic":
            log_delta = (a - 1.0) * (rdp_arr - eps)
        else:
            log_delta = (a - 1.0) * (rdp_arr - eps + np.log1p(-1.0 / a)) - np.log(a)
            tv = 0.5 * np.log(-np.expm1(-rdp_arr))
            log_delta = np.minimum(log_delta, tv)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    idx = int(np.argmin(log_delta))
    if log_delta[idx] >= 0:
        return DeltaResult(1.0, None)
    if warn_edge and np.isfinite(log_delta[idx]):
        _warn_edge(idx, a.size, a, "delta")
    return DeltaResult(float(min(1.0, math.exp(log_delta[idx]))), float(a[idx]))


def log_moments(rdp: object, orders: object) -> tuple[np.ndarray, np.ndarray]:
    """Abadi et al. 2016's log moments a(lambda) = lambda * rdp(lambda + 1), with lambdas.

    Returns (log_moments, lambdas) where lambdas = orders - 1.
    """
    rdp_arr, orders_arr = _check_curve(rdp, orders)
    lambdas = orders_arr - 1.0
    return lambdas * rdp_arr, lambdas


def moments_epsilon(
    log_moments: object, lambdas: object, delta: float, *, warn_edge: bool = True
) -> DPResult:
    """The moments accountant's eps (Abadi et al. 2016, Thm 2.2 tail bound).

    eps = min_lambda (a(lambda) + log(1/delta)) / lambda, where a(lambda) is the composed
    log moment (sums over steps). Returns ``DPResult(eps, lambda)``.
    """
    lam = np.atleast_1d(np.asarray(lambdas, dtype=float))
    lm = np.atleast_1d(np.asarray(log_moments, dtype=float))
    check_array("lambdas", lam, low=0.0, low_open=True, allow_empty=False)
    if lm.shape != lam.shape:
        raise ValueError(
            f"log_moments and lambdas must have the same length, got {lm.size} and {lam.size}"
        )
    check_array("log_moments", lm, low=0.0, allow_inf=True)
    delta = check_delta("delta", delta)
    with np.errstate(over="ignore", invalid="ignore"):
        eps = (lm + math.log(1.0 / delta)) / lam
    eps = np.where(np.isnan(eps), np.inf, eps)
    if not np.isfinite(eps).any():
        return DPResult(math.inf, None)
    idx = int(np.argmin(eps))
    if warn_edge:
        _warn_edge(idx, lam.size, lam + 1.0, "the moments accountant")
    return DPResult(float(eps[idx]), float(lam[idx]))


def optimize_order(
    rdp_at: Callable[[np.ndarray], np.ndarray],
    delta: float,
    conversion: str = "improved",
    *,
    bracket: tuple[float, float],
    xatol: float = 1e-6,
) -> DPResult:
    """Minimise the conversion over a continuous order in ``bracket`` (bounded Brent search).

    ``rdp_at(orders)`` must return the composed RDP at arbitrary orders > 1. Use a bracket
    around the best grid order (its neighbours): the bound is quasi-convex in alpha in
    practice but need not be globally, so the caller keeps the grid result as a fallback.
    """
    delta = check_delta("delta", delta)
    _check_conversion(conversion)
    lo, hi = float(bracket[0]), float(bracket[1])
    if not 1.0 < lo < hi:
        raise ValueError(f"bracket must satisfy 1 < lo < hi, got {bracket!r}")

    def objective(alpha: float) -> float:
        val = rdp_at(np.array([alpha]))
        e = eps_per_order(np.asarray(val, dtype=float), np.array([alpha]), delta, conversion)
        return float(e[0]) if np.isfinite(e[0]) else 1e300

    res = optimize.minimize_scalar(
        objective, bounds=(lo, hi), method="bounded", options={"xatol": xatol}
    )
    best_alpha = float(res.x)
    best = objective(best_alpha)
    for edge in (lo, hi):  # bounded Brent never evaluates the end points themselves
        val = objective(edge)
        if val < best:
            best, best_alpha = val, edge
    if best >= 1e300:
        return DPResult(math.inf, None)
    return DPResult(max(0.0, best), best_alpha)
