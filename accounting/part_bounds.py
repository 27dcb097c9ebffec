"""A ledger's PLD bracket at least as tight as the best certified function of each part.

Some event types have a standalone certified bracket that does more than the ledger's
composed PLD can (random allocation: the variant built for the target delta, a closed-form
lower end and a lower-only bisection, :func:`accounting.allocation.allocation_epsilon_bounds`;
fixed-size batches: the realised pairs and Theorem 9's RDP,
:func:`accounting.without_replacement.epsilon_bounds_without_replacement`).

* One event: the bracket is the better end of each side of the composed PLD's and the
  event's own function's (both certified for the same mechanism).
* Several events: the composed lower end, or any part's certified lower end if larger:
  eps of a composition is at least that of any part (the adversary may ignore the other
  releases: post-processing). The upper end stays the composed one (a part's upper end is
  not one of the whole). Only asked where the composed bracket is wider than 1 %.

:func:`part_function` maps an event to its function (None: no standalone function).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["part_function", "tightened"]

#: A bracket narrower than this (relative to its upper end) is not tightened further.
_WIDTH = 0.01


def _allocation(e: Any, delta: float, opts: dict) -> tuple[float, float]:
    from .allocation import allocation_epsilon_bounds

    b = allocation_epsilon_bounds(e.sigma, e.steps_per_epoch, delta, selected=e.selected,
                                  epochs=e.epochs, **opts)
    return b.lower, b.upper


def _without_replacement(e: Any, delta: float, opts: dict) -> tuple[float, float]:
    from .without_replacement import epsilon_bounds_without_replacement

    b = epsilon_bounds_without_replacement(e.sigma, e.batch_size, e.dataset_size, e.count,
                                           delta)
    return b.lower, b.upper


def part_function(event: object) -> Callable[[Any, float, dict], tuple[float, float]] | None:
    """The standalone certified ``(lower, upper)`` function of ``event``'s type, or None."""
    from .allocation import RandomAllocation
    from .fixed_size import SampledWithoutReplacement

    if isinstance(event, RandomAllocation):
        return _allocation
    if isinstance(event, SampledWithoutReplacement):
        return _without_replacement
    return None


def _part(event: object, delta: float, opts: dict) -> tuple[float, float] | None:
    fn = part_function(event)
    if fn is None:
        return None
    try:
        lo, up = fn(event, delta, opts)
    except (ValueError, OverflowError, MemoryError):  # a refusal: no tightening from it
        return None
    return (lo, up) if math.isfinite(lo) or math.isinf(up) else None


def tightened(events: Sequence[object], delta: float, lower: float, upper: float,
              opts: dict) -> tuple[float, float]:
    """(lower, upper) of the composed bracket, tightened by the parts (module doc)."""
    if not (upper - lower > _WIDTH * upper) or math.isinf(upper) and len(events) > 1:
        return lower, upper
    if len(events) == 1:
        got = _part(events[0], delta, opts)
        if got is not None:
            lower, upper = max(lower, got[0]), min(upper, got[1])
        return _ordered(lower, upper), upper
    seen: set = set()
    for e in events:
        key = (type(e), repr(e))
        if key in seen or part_function(e) is None:
            continue
        seen.add(key)
        got = _part(e, delta, opts)
        if got is not None:
            lower = max(lower, got[0])
    return _ordered(lower, upper), upper


def _ordered(lower: float, upper: float) -> float:
    """``lower`` checked against ``upper`` (round-off clamped; a clear inversion raised)."""
    if lower <= upper:
        return lower
    if lower <= upper * (1.0 + 1e-9) + 1e-12:
        return upper
    raise RuntimeError(f"bracket inverted: a part's certified lower end {lower!r} > the "
                       f"composed upper end {upper!r}; please report this input")
