"""Cross-check by numerical composition of privacy random variables (prv-accountant).

Gopi, Lee, Wutschitz 2021, "Numerical composition of differential privacy" (NeurIPS):
``prv_accountant.PRVAccountant`` composes heterogeneous mechanisms and returns
(lower, estimate, upper) bounds on eps with a guaranteed error. This adapter feeds it the
same ledger, grouped by distinct (q, sigma).

Many distinct sigmas (a schedule with a new sigma each step) would make prv-accountant
discretise thousands of PRVs. Above ``max_distinct`` distinct sigmas we bucket them on a
geometric grid: the UPPER bound and the estimate come from sigmas rounded DOWN (more noise
removed, eps can only grow), the LOWER bound from sigmas rounded UP (eps can only shrink), so
(lower, upper) still bracket the true eps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ._validate import check_count, check_delta, check_positive
from .events import ApproxDP, Laplace

if TYPE_CHECKING:  # pragma: no cover
    from .ledger import PrivacyLedger

__all__ = ["PRVBounds", "PRVUnavailable", "prv_epsilon", "round_sigmas"]


class PRVUnavailable(RuntimeError):
    """prv-accountant failed on this ledger (a limitation of the peer, not of the ledger)."""


class PRVBounds(NamedTuple):
    """prv-accountant's bracket on the true eps: lower <= eps <= upper."""

    lower: float
    estimate: float
    upper: float


def round_sigmas(sigmas: np.ndarray, resolution: float, direction: str) -> np.ndarray:
    """Round sigmas onto the geometric grid (1 + resolution)^k, "down" or "up".

    Rounding sigma down can only increase eps (less noise), so results computed on the
    rounded-down schedule are valid upper bounds; rounding up gives lower bounds.
    """
    resolution = check_positive("resolution", resolution)
    if direction not in ("down", "up"):
        raise ValueError(f"direction must be 'down' or 'up', got {direction!r}")
    s = np.asarray(sigmas, dtype=float)
    out = s.copy()
    pos = s > 0
    step = math.log1p(resolution)
    k = np.log(s[pos]) / step
    k = np.floor(k + 1e-12) if direction == "down" else np.ceil(k - 1e-12)
    out[pos] = np.exp(k * step)
    if direction == "down":
        out[pos] = np.minimum(out[pos], s[pos])
    else:
        out[pos] = np.maximum(out[pos], s[pos])
    return out


def _build(ledger: PrivacyLedger, sigma_map: str | None, resolution: float):
    from prv_accountant.privacy_random_variables import (
        ApproximateDPMechanism,
        GaussianMechanism,
        LaplaceMechanism,
        PoissonSubsampledGaussianMechanism,
        PureDPMechanism,
    )

    qs, sigmas, counts = ledger.sgm_groups()
    keep = qs > 0
    qs, sigmas, counts = qs[keep], sigmas[keep], counts[keep]
    if sigma_map is not None:
        sigmas = round_sigmas(sigmas, resolution, sigma_map)
        from .ledger import group_pairs

        qs, sigmas, counts = group_pairs(qs, sigmas, counts)
    prvs, comps = [], []
    for q, s, c in zip(qs, sigmas, counts):
        if q == 1:
            prvs.append(GaussianMechanism(noise_multiplier=float(s)))
        else:
            prvs.append(PoissonSubsampledGaussianMechanism(sampling_probability=float(q),
                                                           noise_multiplier=float(s)))
        comps.append(int(c))
    for e in ledger.events:
        if isinstance(e, Laplace):
            prvs.append(LaplaceMechanism(mu=e.eps))
            comps.append(e.count)
        elif isinstance(e, ApproxDP) and e.eps > 0:
            prvs.append(PureDPMechanism(eps=e.eps) if e.pure
                        else ApproximateDPMechanism(epsilon=e.eps, delta=e.delta))
            comps.append(e.count)
    return prvs, comps


def _run(prvs, comps, delta: float, eps_error: float, delta_error: float) -> PRVBounds:
    from prv_accountant import PRVAccountant

    try:
        acc = PRVAccountant(prvs=prvs, max_self_compositions=comps, eps_error=eps_error,
                            delta_error=delta_error)
        lo, est, up = acc.compute_epsilon(delta=delta, num_self_compositions=comps)
    except (RuntimeError, ValueError) as exc:
        # e.g. "Discrete mean differs from continuous mean significantly": prv-accountant's
        # discretisation breaks for large eps (its open issue #42, q=0.2, sigma=1).
        raise PRVUnavailable(f"prv-accountant could not compose this ledger: {exc}") from exc
    return PRVBounds(max(0.0, float(lo)), max(0.0, float(est)), max(0.0, float(up)))


def prv_epsilon(
    ledger: PrivacyLedger,
    delta: float,
    *,
    eps_error: float = 0.05,
    delta_error: float | None = None,
    max_distinct: int = 16,
    resolution: float = 0.01,
) -> PRVBounds:
    """(lower, estimate, upper) eps of the ledger from prv-accountant.

    Args:
        ledger: the ledger to compose.
        delta: target delta.
        eps_error: prv-accountant's eps error (the width of its bracket is about 2x this).
        delta_error: its delta error; default delta / 1000.
        max_distinct: above this many distinct Gaussian steps, bucket sigmas (see module doc).
        resolution: relative grid spacing of the bucketing.
    """
    delta = check_delta("delta", delta)
    eps_error = check_positive("eps_error", eps_error)
    delta_error = delta / 1000.0 if delta_error is None else check_delta("delta_error",
                                                                         delta_error)
    max_distinct = check_count("max_distinct", max_distinct, minimum=1)
    if ledger.why_infinite() is not None:
        return PRVBounds(math.inf, math.inf, math.inf)
    if ledger.steps == 0:
        return PRVBounds(0.0, 0.0, 0.0)
    prvs, comps = _build(ledger, None, resolution)
    if not prvs:
        return PRVBounds(0.0, 0.0, 0.0)
    if len(prvs) <= max_distinct:
        return _run(prvs, comps, delta, eps_error, delta_error)
    res = resolution
    while True:  # coarsen until the bucketed schedule is small enough
        up_prvs, up_comps = _build(ledger, "down", res)
        if len(up_prvs) <= max_distinct:
            break
        res *= 2.0
    upper = _run(up_prvs, up_comps, delta, eps_error, delta_error)
    lo_prvs, lo_comps = _build(ledger, "up", res)
    lower = _run(lo_prvs, lo_comps, delta, eps_error, delta_error)
    return PRVBounds(lower.lower, upper.estimate, upper.upper)
