"""Cross-check by numerical composition of privacy random variables (prv-accountant).

Gopi, Lee, Wutschitz 2021, "Numerical composition of differential privacy" (NeurIPS):
``prv_accountant.PRVAccountant`` composes heterogeneous mechanisms and returns
(lower, estimate, upper) bounds on eps with a guaranteed error. This adapter feeds it the
same events, grouped by distinct (q, sigma) (:mod:`accounting._grid`); it takes events or
groups, never a ledger.

Many distinct sigmas (a schedule with a new sigma each step) would make prv-accountant
discretise thousands of PRVs. Above ``max_distinct`` distinct sigmas we bucket them on a
geometric grid: the UPPER bound and the estimate come from sigmas rounded DOWN (more noise
removed, eps can only grow), the LOWER bound from sigmas rounded UP (eps can only shrink), so
(lower, upper) still bracket the true eps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from ._grid import Groups, rounded_groups, sgm_groups
from ._validate import check_count, check_delta, check_instances, check_positive
from .events import Event
from .registry import ACCOUNTANTS, DPPart, GaussianPart, LaplacePart, no_privacy_reason

__all__ = ["PRVBounds", "PRVUnavailable", "prv_epsilon", "prv_bounds"]


class PRVUnavailable(RuntimeError):
    """prv-accountant failed on this ledger (a limitation of the peer, not of the ledger)."""


class PRVBounds(NamedTuple):
    """prv-accountant's bracket on the true eps: lower <= eps <= upper."""

    lower: float
    estimate: float
    upper: float


def _build(groups: Groups, others: Sequence[Event], sigma_map: str | None, resolution: float):
    from prv_accountant.privacy_random_variables import (
        ApproximateDPMechanism,
        GaussianMechanism,
        LaplaceMechanism,
        PoissonSubsampledGaussianMechanism,
        PureDPMechanism,
    )

    keep = groups.qs > 0
    groups = Groups(groups.qs[keep], groups.sigmas[keep], groups.counts[keep])
    if sigma_map is not None:
        groups = rounded_groups(groups, resolution, sigma_map)
    prvs, comps = [], []
    for q, s, c in zip(*groups):
        if q == 1:
            prvs.append(GaussianMechanism(noise_multiplier=float(s)))
        else:
            prvs.append(PoissonSubsampledGaussianMechanism(sampling_probability=float(q),
                                                           noise_multiplier=float(s)))
        comps.append(int(c))
    for e in others:
        if isinstance(e, LaplacePart):
            prvs.append(LaplaceMechanism(mu=e.eps))
            comps.append(e.count)
        elif isinstance(e, DPPart) and e.eps > 0:
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
    events: Iterable[Event],
    delta: float,
    *,
    eps_error: float = 0.05,
    delta_error: float | None = None,
    max_distinct: int = 16,
    resolution: float = 0.01,
) -> PRVBounds:
    """(lower, estimate, upper) eps of a sequence of events from prv-accountant.

    Args:
        events: the releases to compose (e.g. ``ledger.events``).
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
    resolution = check_positive("resolution", resolution)
    events = check_instances("events", events, Event)
    items = ACCOUNTANTS["prv"].parts(events)  # refuses, by name, what it cannot account
    others = [p for p in items if not isinstance(p, GaussianPart)]
    groups = sgm_groups(events, family="prv")
    out = prv_bounds(groups, others, delta, eps_error=eps_error,
                     delta_error=delta_error, max_distinct=max_distinct,
                     resolution=resolution)
    lower = sgm_groups(events, "lower", family="prv")
    if not (np.array_equal(lower.qs, groups.qs) and np.array_equal(lower.sigmas, groups.sigmas)
            and np.array_equal(lower.counts, groups.counts)):
        # steps accounted by an upper bound (fixed-size, shuffle, Poisson under replace-one):
        # PRV's lower end bounds that bound, not the mechanism; omitted (0 is always valid)
        out = PRVBounds(0.0, out.estimate, out.upper)
    return out


def prv_bounds(
    groups: Groups,
    others: Sequence[Event],
    delta: float,
    *,
    eps_error: float,
    delta_error: float,
    max_distinct: int,
    resolution: float,
) -> PRVBounds:
    """:func:`prv_epsilon` on checked arguments: Gaussian ``groups`` plus the Laplace and
    (eps, delta) parts ``others`` (:mod:`accounting.registry`)."""
    if no_privacy_reason([GaussianPart(*groups), *others]) is not None:
        return PRVBounds(math.inf, math.inf, math.inf)
    if int(groups.counts.sum()) + sum(e.count for e in others
                                      if isinstance(e, (LaplacePart, DPPart))) == 0:
        return PRVBounds(0.0, 0.0, 0.0)
    prvs, comps = _build(groups, others, None, resolution)
    if not prvs:
        return PRVBounds(0.0, 0.0, 0.0)
    if len(prvs) <= max_distinct:
        return _run(prvs, comps, delta, eps_error, delta_error)
    res = resolution
    while True:  # coarsen until the bucketed schedule is small enough
        up_prvs, up_comps = _build(groups, others, "down", res)
        if len(up_prvs) <= max_distinct:
            break
        res *= 2.0
    upper = _run(up_prvs, up_comps, delta, eps_error, delta_error)
    lo_prvs, lo_comps = _build(groups, others, "up", res)
    lower = _run(lo_prvs, lo_comps, delta, eps_error, delta_error)
    return PRVBounds(lower.lower, upper.estimate, upper.upper)
