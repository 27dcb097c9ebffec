"""Certified eps brackets of a random allocation.

:func:`allocation_epsilon_bounds`: the PLD bracket of :class:`RandomAllocation`, with a
second pass built for the target delta where the first is over 1% wide, and the closed-form
no-amplification upper end where neither certifies an amplified one (never 0).
:func:`allocation_gaussian_bounds`: that closed form (upper: k E Gaussian releases; lower:
the sum of an epoch's outputs), valid for every sigma, t, k and delta.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .event import RandomAllocation


def allocation_gaussian_bounds(sigma: float, steps: int, delta: float, *, selected: int = 1,
                               epochs: int = 1) -> tuple[float, float]:
    """Closed-form certified (lower, upper) eps of ``epochs`` epochs of k-of-t random
    allocation, valid for every sigma, t, k and delta (no discretisation, never 0 or NaN).

    upper: no amplification: conditioned on the allocation the example is in k Gaussian
    releases per epoch, and a mixture of mechanisms each dominated by one pair is dominated
    by it (joint convexity of the hockey-stick divergence), so the k E releases compose into
    one Gaussian with multiplier sigma / sqrt(k E) (Balle & Wang 2018, Thm 8).
    lower: the sum of the t outputs of an epoch, N(k, t sigma^2) against N(0, t sigma^2),
    a post-processing of the realised pair: E epochs give the Gaussian with multiplier
    sigma sqrt(t) / (k sqrt(E)).
    """
    from .._validate import check_delta
    from ..composition import analytic_gaussian_epsilons

    ev = RandomAllocation(sigma, steps, selected, epochs)
    delta = check_delta("delta", delta)
    k, e = ev.selected, ev.epochs
    up = float(analytic_gaussian_epsilons(np.array([ev.sigma / math.sqrt(k * e)]), delta)[0])
    lo = float(analytic_gaussian_epsilons(
        np.array([ev.sigma * math.sqrt(ev.steps_per_epoch) / (k * math.sqrt(e))]), delta)[0])
    return lo * (1.0 - 1e-11), up


def allocation_epsilon_bounds(sigma: float, steps: int, delta: float, *, selected: int = 1,
                              epochs: int = 1, **kwargs: Any):
    """Certified (lower, estimate, upper) eps of ``epochs`` epochs of random allocation
    (:class:`RandomAllocation`), via :func:`accounting.pld_epsilon` (``kwargs``).

    The lower end is a lower bound on the eps of the k-of-t scheme that ran (for k > 1 a
    post-processing of its realised pair, :attr:`RandomAllocation.lower_kind`); the upper
    end for k > 1 is that of k concurrent 1-of-floor(t/k) allocations (docs/accounting.md). Where
    the default event's bracket is over 1% wide (its allowances, ~1e-9, near delta), the
    variant built for this delta (:meth:`RandomAllocation.for_delta`) is tried too and the
    better end of each side kept. Where neither certifies an amplified upper end (delta
    1e-12 at t = 1,000: the round-off floor), the upper end is the closed-form
    no-amplification bound of :func:`allocation_gaussian_bounds`, never 0: the bracket is
    then wide, but true.
    """
    from ..pld import PLDBounds, pld_epsilon

    g_lo, g_up = allocation_gaussian_bounds(sigma, steps, delta, selected=selected,
                                            epochs=epochs)
    ev = RandomAllocation(sigma, steps, selected, epochs)
    b = pld_epsilon([ev], delta, **kwargs)
    lower, upper = b.lower, b.upper
    if not (upper >= g_lo) or not (lower < upper) or upper - lower > 0.01 * upper:
        # the allowances (tails, error bounds ~1e-9) are a sizeable part of delta: the
        # variant built for this delta (:meth:`RandomAllocation.for_delta`; pld_epsilon
        # itself retries with it only where its upper end is infinite). Both brackets are
        # certified: keep the better end of each
        b = pld_epsilon([ev.for_delta(delta)], delta, **kwargs)
        if b.upper >= g_lo and b.lower < b.upper:
            if not (upper >= g_lo) or not (lower < upper):
                lower, upper = b.lower, b.upper
            else:
                lower, upper = max(lower, b.lower), min(upper, b.upper)
        if not (upper >= g_lo) or not (lower < upper):
            upper = g_up
            lower = _lower_only(sigma, steps, delta, selected, epochs, kwargs)
    upper = min(upper, g_up)
    lower = min(max(lower, g_lo), upper)
    return PLDBounds(lower, (lower + upper) / 2.0, upper)


def _lower_only(sigma: float, steps: int, delta: float, selected: int, epochs: int,
                kwargs: dict[str, Any]) -> float:
    """The certified lower end alone: the PLD bracket's lower end of a ledger whose upper
    side cannot fail (the event's lower pair, composed with itself, asked at ``delta``),
    via pld_delta's lower side at a few eps (bisection on the monotone delta(eps))."""
    from ..pld import pld_delta

    ev = RandomAllocation(sigma, steps, selected, epochs)
    opts = {key: kwargs[key] for key in ("value_interval", "sigma_resolution", "max_distinct")
            if key in kwargs}
    _, hi = allocation_gaussian_bounds(sigma, steps, delta, selected=selected, epochs=epochs)
    lo_eps, hi_eps = 0.0, hi
    for _ in range(30):
        mid = (lo_eps + hi_eps) / 2.0
        low_delta, _ = pld_delta([ev], mid, **opts)
        if low_delta > delta:  # the true delta(mid) > delta: the true eps is above mid
            lo_eps = mid
        else:
            hi_eps = mid
        if hi_eps - lo_eps < 1e-4 * hi_eps:
            break
    return lo_eps
