"""(eps, delta) composition theorems, per-step Gaussian calibration, sampling, and zCDP.

Pure functions; each cites its theorem. These are the looser accountants the seed papers
used; the ledger offers them next to RDP so a reader can see how much they overstate.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy import optimize, special

from ._validate import (
    check_array,
    check_choice,
    check_count,
    check_delta,
    check_eps,
    check_nonnegative,
    check_probability,
    check_same_length,
    check_sigma,
)

__all__ = [
    "DP",
    "RangeWarning",
    "gaussian_step_epsilon",
    "gaussian_delta",
    "analytic_gaussian_epsilons",
    "amplify_by_sampling",
    "compose_basic",
    "compose_advanced",
    "compose_advanced_heterogeneous",
    "joint_gaussian_multiplier",
    "zcdp_gaussian",
    "zcdp_sampled_gaussian_approx",
    "zcdp_to_dp",
    "per_step_dp",
    "composition_epsilon",
]


class DP(NamedTuple):
    """An (eps, delta) guarantee."""

    eps: float
    delta: float


class RangeWarning(UserWarning):
    """A bound was used outside the range where its theorem holds."""


def _gaussian_delta_vec(sigma: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Vectorised exact delta(eps) of the Gaussian mechanism (sigma > 0, finite eps)."""
    a = special.log_ndtr(1.0 / (2 * sigma) - eps * sigma)
    b = eps + special.log_ndtr(-1.0 / (2 * sigma) - eps * sigma)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(b < a, np.exp(a) * -np.expm1(np.minimum(b - a, 0.0)), 0.0)
    return np.clip(d, 0.0, 1.0)


def gaussian_delta(sigma: float, eps: float) -> float:
    """Exact delta(eps) of the Gaussian mechanism with noise multiplier sigma.

    Balle & Wang 2018, "Improving the Gaussian mechanism for DP", Thm 8 (sensitivity 1):
    delta = Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma); in log space.
    """
    sigma = check_sigma("sigma", sigma)
    eps = check_eps("eps", eps, allow_inf=True)
    if sigma == 0:
        return 1.0
    if math.isinf(eps):
        return 0.0
    return float(_gaussian_delta_vec(np.array([sigma]), np.array([eps]))[0])


def analytic_gaussian_epsilons(sigmas: np.ndarray, deltas: np.ndarray | float) -> np.ndarray:
    """Exact per-step eps of Gaussian steps (Balle & Wang 2018), vectorised bisection.

    Returns the smallest eps (to 1e-12 relative, rounded up) with delta(eps) <= delta;
    sigma = 0 gives inf.
    """
    s = check_array("sigmas", sigmas, low=0.0, what="noise multipliers")
    try:
        d = np.broadcast_to(np.asarray(deltas, dtype=float), s.shape).copy()
    except ValueError as exc:
        raise ValueError("deltas must be a scalar or have the same length as sigmas") from exc
    d = check_array("deltas", d, low=0.0, high=1.0, low_open=True, high_open=True)
    return _analytic_rows(s[None, :], d[None, :])[0]


def _analytic_rows(s: np.ndarray, d: np.ndarray) -> np.ndarray:
    """:func:`analytic_gaussian_epsilons` of each row of ``s``, ``d`` (2-D, checked), the
    rows bisected side by side: a row stops when all its entries have converged, so each
    row's result is bit for bit that of its own call."""
    out = np.full(s.shape, np.inf)
    ok = s > 0
    if not ok.any():
        return out
    s, d = np.where(ok, s, 1.0), np.where(ok, d, 0.5)  # placeholders, left at eps 0
    lo = np.zeros_like(s)
    hi = np.where(ok, 1.0, 0.0)
    for _ in range(200):
        bad = ok & (_gaussian_delta_vec(s, hi) > d)
        if not bad.any():
            break
        hi = np.where(bad, hi * 2.0, hi)
    zero = _gaussian_delta_vec(s, lo) <= d
    live = np.ones(s.shape[0], dtype=bool)
    for _ in range(200):
        step = live[:, None] & ok
        mid = 0.5 * (lo + hi)
        good = _gaussian_delta_vec(s, mid) <= d
        hi = np.where(step & good, mid, hi)
        lo = np.where(step & ~good, mid, lo)
        done = np.all((hi - lo <= 1e-12 * np.maximum(hi, 1e-300)) | ~ok, axis=1)
        live &= ~done
        if not live.any():
            break
    return np.where(ok, np.where(zero, 0.0, hi), np.inf)


def gaussian_step_epsilon(sigma: float, delta: float, method: str = "classical") -> float:
    """eps of ONE Gaussian step with noise multiplier sigma at the given delta.

    method="classical": Dwork & Roth 2014, Thm A.1, eps = sqrt(2 ln(1.25/delta)) / sigma. The
    theorem assumes eps < 1; outside that range a :class:`RangeWarning` says so (the number
    is then not a proven bound). method="analytic": the exact value (Balle & Wang 2018,
    Thm 8), valid for every eps and never larger than the classical one where that holds.
    sigma = 0 gives math.inf.
    """
    sigma = check_sigma("sigma", sigma)
    delta = check_delta("delta", delta)
    check_choice("method", method, ("classical", "analytic"))
    if sigma == 0:
        return math.inf
    if method == "analytic":
        return float(analytic_gaussian_epsilons(np.array([sigma]), delta)[0])
    eps = math.sqrt(2.0 * math.log(1.25 / delta)) / sigma
    if eps >= 1.0:
        warnings.warn(
            f"the classical Gaussian calibration (Dwork & Roth Thm A.1) holds for eps < 1; "
            f"sigma={sigma:g}, delta={delta:g} gives eps={eps:.3g}: not a proven bound, "
            f"use method='analytic'",
            RangeWarning,
            stacklevel=2,
        )
    return eps


def amplify_by_sampling(eps: float, delta: float, q: float) -> DP:
    """Privacy amplification by Poisson subsampling with probability q.

    Balle, Barthe, Gaboardi 2018 ("Privacy amplification by subsampling"), Thm 8 / Li, Qardaji,
    Su 2012: an (eps, delta)-DP step run on a Poisson sample is
    (log(1 + q (e^eps - 1)), q delta)-DP.
    """
    eps = check_eps("eps", eps, allow_inf=True)
    delta = check_probability("delta", delta)
    q = check_probability("q", q)
    if q == 0:
        return DP(0.0, 0.0)
    if math.isinf(eps):
        return DP(math.inf, q * delta)
    # log(1 + q (e^eps - 1)) = log1p(q expm1(eps)), stable for small and large eps
    if eps > 700:
        new_eps = eps + math.log(q) + math.log1p((1 - q) * math.exp(-eps) / q)
    else:
        new_eps = math.log1p(q * math.expm1(eps))
    return DP(float(new_eps), q * delta)


def compose_basic(
    eps: float | Sequence[float], delta: float | Sequence[float], k: int = 1
) -> DP:
    """Basic composition (Dwork et al. 2006; Dwork & Roth Thm 3.16): (sum eps_i, sum delta_i).

    Scalars with ``k`` compose k identical steps; sequences compose heterogeneous steps
    (``k`` then multiplies the whole sequence).
    """
    k = check_count("k", k)
    eps_arr = np.atleast_1d(np.asarray(eps, dtype=float))
    delta_arr = np.atleast_1d(np.asarray(delta, dtype=float))
    if eps_arr.size != delta_arr.size and delta_arr.size != 1 and eps_arr.size != 1:
        raise ValueError("eps and delta must have the same length (or one of them be scalar)")
    check_array("eps", eps_arr, low=0.0, allow_inf=True)
    check_array("delta", delta_arr, low=0.0, high=1.0)
    n = max(eps_arr.size, delta_arr.size)
    e = np.broadcast_to(eps_arr, (n,))
    d = np.broadcast_to(delta_arr, (n,))
    return DP(float(k * e.sum()), float(min(1.0, k * d.sum())))


def compose_advanced(eps: float, delta: float, k: int, delta_prime: float) -> DP:
    """Advanced composition, homogeneous (Dwork, Rothblum, Vadhan 2010; Dwork & Roth Thm 3.20).

    k-fold composition of (eps, delta)-DP is
    (sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')-DP.
    """
    eps = check_eps("eps", eps)
    delta = check_probability("delta", delta)
    k = check_count("k", k)
    delta_prime = check_delta("delta_prime", delta_prime)
    return compose_advanced_heterogeneous([eps] * k if k else [], [delta] * k if k else [],
                                          delta_prime)


def compose_advanced_heterogeneous(
    eps: Sequence[float], delta: Sequence[float] | float, delta_prime: float
) -> DP:
    """Advanced composition, heterogeneous form (Dwork, Rothblum, Vadhan 2010, Thm III.3).

    eps_total = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1),
    delta_total = sum delta_i + delta'.
    """
    delta_prime = check_delta("delta_prime", delta_prime)
    e = np.atleast_1d(np.asarray(eps, dtype=float))
    check_array("eps", e, low=0.0, allow_inf=True)
    d = np.atleast_1d(np.asarray(delta, dtype=float))
    if d.size == 1 and e.size != 1:
        d = np.full(e.size, d[0] if d.size else 0.0)
    check_same_length(("eps", "delta"), e, d)
    check_array("delta", d, low=0.0, high=1.0)
    if e.size == 0:
        return DP(0.0, 0.0)
    if np.isinf(e).any():
        return DP(math.inf, float(min(1.0, d.sum() + delta_prime)))
    total = math.sqrt(2.0 * math.log(1.0 / delta_prime) * float(np.sum(e * e)))
    total += float(np.sum(e * np.expm1(e)))
    return DP(total, float(min(1.0, d.sum() + delta_prime)))


def joint_gaussian_multiplier(*multipliers: float) -> float:
    """The one noise multiplier of several Gaussian releases of the same data.

    Gaussian mechanisms with multipliers sigma_i (noise std / sensitivity), even chosen
    adaptively, compose to one Gaussian mechanism with multiplier
    (sum_i sigma_i^-2)^(-1/2) (Dong, Roth & Su 2022, Cor. 3.3: mu-GDP composes as
    sqrt(sum mu_i^2), mu_i = 1/sigma_i). On one Poisson subsample it is one sampled Gaussian
    step with that multiplier (two releases at sigma: sigma / sqrt(2); Andrew et al. 2021's
    update and count: z^-2 = sigma_Delta^-2 + (2 sigma_b)^-2).
    """
    if not multipliers:
        raise ValueError("multipliers must name at least one Gaussian release")
    sigmas = [check_sigma("multipliers", m) for m in multipliers]
    if any(m == 0 for m in sigmas):
        return 0.0
    return float(sum(m**-2 for m in sigmas) ** -0.5)


def zcdp_gaussian(sigma: float) -> float:
    """rho of one Gaussian step: 1 / (2 sigma^2)-zCDP (Bun & Steinke 2016, Prop. 1.6).

    This is also the conservative rho of a *subsampled* step: zCDP has no general
    amplification by subsampling, so the sampling rate is ignored (an upper bound).
    """
    sigma = check_sigma("sigma", sigma)
    return math.inf if sigma**2 == 0 else 1.0 / (2.0 * sigma**2)  # sigma^2 may underflow


def zcdp_sampled_gaussian_approx(q: float, sigma: float) -> float:
    """APPROXIMATION: rho ~ q^2 / sigma^2 for a Poisson-sampled Gaussian step.

    The convention of Yu, Liu, Pu, Gursoy, Truex 2019 ("Differentially private model
    publishing for deep learning"), valid only for small q and large sigma. It is not a
    proven bound: never use it for a budget decision.
    """
    q = check_probability("q", q)
    sigma = check_sigma("sigma", sigma)
    if q == 0:
        return 0.0
    return math.inf if sigma**2 == 0 else q * q / sigma**2  # sigma^2 may underflow


def zcdp_to_dp(rho: float, delta: float, conversion: str = "classic") -> DP:
    """(eps, delta) from rho-zCDP.

    classic: eps = rho + 2 sqrt(rho ln(1/delta)) (Bun & Steinke 2016, Prop. 1.3). Note that
    min_alpha (alpha rho + ln(1/delta)/(alpha-1)) over real alpha > 1 is exactly this value
    (at alpha = 1 + sqrt(ln(1/delta)/rho)), so the "tighter min_alpha form" adds nothing.
    improved: min_alpha of the improved RDP conversion (Canonne, Kamath, Steinke 2020,
    Prop. 12) applied to the curve alpha * rho: genuinely smaller.
    """
    rho = check_nonnegative("rho", rho, allow_inf=True)
    delta = check_delta("delta", delta)
    check_choice("conversion", conversion, ("classic", "improved"))
    if math.isinf(rho):
        return DP(math.inf, delta)
    if rho == 0:
        return DP(0.0, delta)
    log_inv = math.log(1.0 / delta)
    classic = rho + 2.0 * math.sqrt(rho * log_inv)
    if conversion == "classic":
        return DP(classic, delta)

    def f(alpha: float) -> float:
        return (alpha * rho + math.log1p(-1.0 / alpha)
                - (math.log(delta) + math.log(alpha)) / (alpha - 1.0))

    a_star = 1.0 + math.sqrt(log_inv / rho)
    res = optimize.minimize_scalar(f, bounds=(1.0 + 1e-9, max(4 * a_star, 2.0)),
                                   method="bounded", options={"xatol": 1e-10})
    return DP(float(max(0.0, min(classic, f(float(res.x))))), delta)


_ADVANCED_SPLITS = np.linspace(0.05, 0.95, 19)


def per_step_dp(groups: tuple[np.ndarray, np.ndarray, np.ndarray],
                others: list[tuple[float, float, int]], delta_per_step: float,
                gaussian: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(eps_i, delta_i, count_i) of every release: each Gaussian row (q, sigma, count) of
    ``groups`` calibrated so that its delta after amplification by sampling is
    ``delta_per_step`` (analytic, Balle & Wang 2018; or classical, Dwork & Roth Thm A.1,
    warning outside eps < 1), amplified by ``log(1 + q (e^eps - 1))``; ``others`` are
    (eps, delta, count) releases taken as they are."""
    if gaussian == "analytic":
        return _per_step_rows(groups, others, [delta_per_step])[0]
    qs, sigmas, counts = _sampled(groups)
    d_step = np.minimum(delta_per_step / np.maximum(qs, 1e-300), 0.5)
    with np.errstate(divide="ignore"):
        e0 = np.sqrt(2.0 * np.log(1.25 / d_step)) / sigmas
    if (e0 >= 1).any():
        warnings.warn("the classical Gaussian calibration (Dwork & Roth Thm A.1) is "
                      "used outside eps < 1 for some steps: not a proven bound",
                      RangeWarning, stacklevel=4)
    return _amplified(qs, counts, e0, d_step, others)


def _sampled(groups: tuple[np.ndarray, np.ndarray, np.ndarray]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (q, sigma, count) rows of ``groups`` with q > 0 (q = 0 releases nothing)."""
    qs, sigmas, counts = groups
    keep = qs > 0
    return qs[keep], sigmas[keep], counts[keep]


def _per_step_rows(groups: tuple[np.ndarray, np.ndarray, np.ndarray],
                   others: list[tuple[float, float, int]], deltas_per_step: Sequence[float]
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`per_step_dp` (analytic) at each of ``deltas_per_step``, one bisection for all
    (each row's result is that of its own call)."""
    qs, sigmas, counts = _sampled(groups)
    s = check_array("sigmas", sigmas, low=0.0, what="noise multipliers")
    d_rows = [np.minimum(x / np.maximum(qs, 1e-300), 0.5) for x in deltas_per_step]
    for d in d_rows:
        check_array("deltas", d, low=0.0, high=1.0, low_open=True, high_open=True)
    e0 = _analytic_rows(np.broadcast_to(s, (len(d_rows), s.size)), np.array(d_rows))
    return [_amplified(qs, counts, e, d, others) for e, d in zip(e0, d_rows)]


def _amplified(qs: np.ndarray, counts: np.ndarray, e0: np.ndarray, d_step: np.ndarray,
               others: list[tuple[float, float, int]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step (eps, delta) of Gaussian steps amplified by their sampling rates
    (``log(1 + q (e^eps - 1))``, ``q delta``), then ``others`` as they are."""
    with np.errstate(over="ignore"):
        amp = np.where(np.isinf(e0), np.inf, np.log1p(qs * np.expm1(np.minimum(e0, 700.0))))
    big = np.isfinite(e0) & (e0 > 700.0)
    amp[big] = e0[big] + np.log(qs[big])  # log(1 + q(e^e - 1)) ~ e + log q for huge e
    extra = np.array(others, dtype=float).reshape(-1, 3)
    return (np.concatenate([amp, extra[:, 0]]), np.concatenate([qs * d_step, extra[:, 1]]),
            np.concatenate([counts.astype(float), extra[:, 2]]))


def composition_epsilon(groups: tuple[np.ndarray, np.ndarray, np.ndarray],
                        others: list[tuple[float, float, int]], delta: float, method: str,
                        gaussian: str = "analytic") -> float:
    """Basic or advanced composition of Gaussian ``groups`` and (eps, delta, count)
    ``others`` with a sound split of ``delta``.

    The (eps, delta > 0) releases keep their own delta; what remains, R, goes to the
    Gaussian steps. basic: each of the T Gaussian steps gets R/T after amplification.
    advanced (Dwork, Rothblum, Vadhan 2010, heterogeneous form): a share f R is the slack
    delta' and each step gets (1 - f) R / T; f from the fixed grid {0.05, ..., 0.95}
    (data-independent, so the minimum over it is still a valid bound).
    """
    check_choice("method", method, ("basic", "advanced"))
    rem = delta - sum(c * d for _, d, c in others)
    if rem <= 0:
        return math.inf
    qs, _, counts = groups
    n_gauss = max(int(counts[qs > 0].sum()) if qs.size else 0, 1)
    if method == "basic":
        e, _, c = per_step_dp(groups, others, rem / n_gauss, gaussian)
        return float(np.sum(e * c)) if e.size else 0.0
    best = math.inf
    splits = [(1.0 - f) * rem / n_gauss for f in _ADVANCED_SPLITS]
    rows = (_per_step_rows(groups, others, splits) if gaussian == "analytic"
            else [per_step_dp(groups, others, x, gaussian) for x in splits])
    for f, (e, _, c) in zip(_ADVANCED_SPLITS, rows):
        if e.size == 0:
            return 0.0
        if np.isinf(e).any():
            return math.inf
        total = math.sqrt(2.0 * math.log(1.0 / (f * rem)) * float(np.sum(c * e * e)))
        best = min(best, total + float(np.sum(c * e * np.expm1(e))))
    return best
