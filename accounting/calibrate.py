"""Calibration: the noise for a target eps, the steps a budget allows, a schedule's scale.

All answers are conservative: a returned sigma (or scale, or step count) never gives more
than the target eps under the chosen sound method. eps is monotone (non-increasing in sigma,
non-decreasing in steps), so bisection is exact up to its tolerance, and we always return
the feasible end of the final bracket.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._validate import (
    check_array,
    check_choice,
    check_count,
    check_delta,
    check_eps,
    check_positive,
    check_probability,
    keywords_after_first,
)
from .conversions import OrderGridWarning
from .ledger import METHODS, PrivacyLedger

__all__ = ["calibrate_sigma", "max_steps", "scale_schedule"]

def _check_method(method: str) -> str:
    return check_choice("method", method, METHODS)  # sound methods only


def _eps_const(q: float, sigma: float, steps: int, delta: float, method: str,
               orders: object) -> float:
    ledger = PrivacyLedger(orders=orders)
    ledger.step(q=q, sigma=sigma, count=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ledger.epsilon(delta, method)


def _bisect_scale(eps_of, target: float, rtol: float) -> float:
    """Smallest s > 0 (to rtol) with eps_of(s) <= target, for non-increasing eps_of."""
    hi = 1.0
    while eps_of(hi) > target:
        hi *= 2.0
        if hi > 1e12:
            raise ValueError("no noise level reaches the target eps (is it too small?)")
    lo = hi / 2.0
    while eps_of(lo) <= target:
        hi = lo
        lo /= 2.0
        if lo < 1e-12:
            return hi
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@keywords_after_first("delta", "q", "steps", "method")
def calibrate_sigma(
    target_eps: float,
    *,
    delta: float,
    q: float,
    steps: int,
    method: str = "rdp",
    orders: object = None,
    rtol: float = 1e-6,
) -> float:
    """Smallest noise multiplier (to ``rtol``) whose eps after ``steps`` steps <= target_eps:
    ``calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=1000)`` (every argument after the
    first is keyword-only; the old positional form warns).

    Bisection on the monotone eps(sigma); the returned sigma is the feasible end of the
    bracket, so ``eps(calibrate_sigma(...)) <= target_eps`` always holds.
    """
    target_eps = check_positive("target_eps", target_eps)
    delta = check_delta("delta", delta)
    q = check_probability("q", q)
    steps = check_count("steps", steps, minimum=1)
    _check_method(method)
    rtol = check_positive("rtol", rtol)
    if q == 0:
        return 0.0
    return _bisect_scale(lambda s: _eps_const(q, s, steps, delta, method, orders),
                         target_eps, rtol)


@keywords_after_first("delta", "q", "sigma", "method")
def max_steps(
    target_eps: float,
    *,
    delta: float,
    q: float,
    sigma: float,
    method: str = "rdp",
    orders: object = None,
    limit: int = 10**12,
) -> int:
    """Largest number of (q, sigma) steps whose eps stays <= target_eps (0 if none):
    ``max_steps(1.0, delta=1e-5, q=0.01, sigma=1.1)`` (keyword-only after the first
    argument; the old positional form warns).

    Returns ``limit`` when even that many steps stay within the budget.
    """
    target_eps = check_eps("target_eps", target_eps)
    delta = check_delta("delta", delta)
    q = check_probability("q", q)
    sigma = check_positive("sigma", sigma)
    _check_method(method)
    limit = check_count("limit", limit, minimum=1)

    def ok(t: int) -> bool:
        return _eps_const(q, sigma, t, delta, method, orders) <= target_eps

    if not ok(1):
        return 0
    lo = 1
    hi = 2
    while hi <= limit and ok(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        if ok(limit):
            return limit
        hi = limit
    while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


@keywords_after_first("target_eps", "delta", "q", "method")
def scale_schedule(
    sigmas: np.ndarray,
    *,
    target_eps: float,
    delta: float,
    q: float,
    method: str = "rdp",
    orders: object = None,
    rtol: float = 1e-6,
) -> np.ndarray:
    """Scale a whole noise schedule by one factor c so that its eps is at most target_eps:
    ``scale_schedule(sigmas, target_eps=2.0, delta=1e-5, q=0.05)`` (keyword-only after the
    first argument; the old positional form warns).

    Returns c * sigmas with the smallest such c (to ``rtol``), keeping the schedule's shape
    (e.g. an exponential decay 15 -> 4.85 stays exponential with the same ratio).
    """
    base = check_array("sigmas", np.asarray(sigmas, dtype=float).ravel(), low=0.0,
                       low_open=True, allow_empty=False, what="a noise schedule")
    target_eps = check_positive("target_eps", target_eps)
    delta = check_delta("delta", delta)
    q = check_probability("q", q)
    _check_method(method)

    def eps_of(c: float) -> float:
        ledger = PrivacyLedger(orders=orders)
        ledger.step_schedule(q, c * base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OrderGridWarning)
            return ledger.epsilon(delta, method)

    c = _bisect_scale(eps_of, target_eps, rtol)
    return c * base
