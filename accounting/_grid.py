"""Grouping of Gaussian steps by distinct (q, sigma), and rounding of sigmas onto a grid.

Every numerical accountant (conservative RDP, PRV, PLD) composes *groups*: one
(q, sigma, count) triple per distinct Poisson-sampled Gaussian step. With many distinct
sigmas (a new sigma every step) the sigmas are rounded onto the geometric grid
(1 + resolution)^k: rounding DOWN (less noise) can only increase eps, so anything computed
from rounded-down groups is an upper bound; rounding UP gives lower bounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from ._validate import check_choice, check_positive
from .events import Event
from .registry import (
    DPPart,
    LaplacePart,
    gaussian_groups,
    group_pairs,
    merge_repeats,
    rule_for,
    why_infinite,
)

__all__ = ["Groups", "group_pairs", "round_sigmas", "sgm_groups", "rounded_groups",
           "rounded_releases", "too_many_releases", "no_privacy_reason"]


class Groups(NamedTuple):
    """Distinct (q, sigma) pairs of Gaussian steps and their counts, sorted by (q, sigma)."""

    qs: np.ndarray
    sigmas: np.ndarray
    counts: np.ndarray


def round_sigmas(sigmas: np.ndarray, resolution: float, direction: str) -> np.ndarray:
    """Round sigmas onto the geometric grid (1 + resolution)^k, "down" or "up".

    Rounding sigma down can only increase eps (less noise), so results computed on the
    rounded-down schedule are valid upper bounds; rounding up gives lower bounds.
    """
    resolution = check_positive("resolution", resolution)
    check_choice("direction", direction, ("down", "up"))
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


def sgm_groups(events: Iterable[Event], side: str = "upper", family: str = "pld") -> Groups:
    """The Gaussian steps of ``events`` as distinct (q, sigma) groups with step counts.

    Each step is mapped to the Poisson add/remove pair that accounts it under its sampling
    and relation (the event's ``family`` rule in :mod:`accounting.registry`, default the PLD
    one, under which random allocation is not a Gaussian step): ``side="upper"`` gives the
    pair of a valid upper bound, ``side="lower"`` that of a valid lower bound (q = 0 where a
    step is left out). Events without a rule for ``family`` contribute nothing here.
    """
    check_choice("side", side, ("upper", "lower"))
    items: list = []
    for e in events:
        rule = rule_for(e, family)
        if rule is not None:
            items.extend(rule(e, side))
    return Groups(*gaussian_groups(items))


def rounded_groups(groups: Groups, resolution: float, direction: str) -> Groups:
    """``groups`` with every sigma rounded ``direction`` onto the grid, regrouped."""
    rounded = round_sigmas(groups.sigmas, resolution, direction)
    return Groups(*group_pairs(groups.qs, rounded, groups.counts))


def _on_grid(x: float, step: float, up: bool) -> float:
    """``x`` > 0 rounded onto the grid exp(k step): up or down (never past ``x``)."""
    k = math.log(x) / step
    e = (math.ceil(k - 1e-12) if up else math.floor(k + 1e-12)) * step
    if abs(e) > 700.0:
        return x  # past exp's range: kept as it is
    out = math.exp(e)
    return max(out, x) if up else min(out, x)


def _rounded_release(p: object, step: float, up: bool) -> object:
    if isinstance(p, LaplacePart) and math.isfinite(p.eps) and p.eps > 0:
        return LaplacePart(1.0 / _on_grid(p.eps, step, up), 1.0, p.count)
    if isinstance(p, DPPart) and math.isfinite(p.eps) and p.eps > 0:
        d = _on_grid(p.delta, step, up) if p.delta > 0 else 0.0
        return DPPart(_on_grid(p.eps, step, up), min(d, 1.0), p.count)
    return p


def _distinct_releases(items: list) -> int:
    """How many Laplace and (eps, delta) parts ``items`` holds (merged: distinct ones)."""
    return sum(isinstance(p, (LaplacePart, DPPart)) for p in items)


def too_many_releases(items: list, max_distinct: int) -> bool:
    """Would :func:`rounded_releases` round ``items``?"""
    return _distinct_releases(items) > max_distinct


def rounded_releases(items: list, resolution: float, max_distinct: int, up: bool) -> list:
    """Laplace and (eps, delta) parts among ``items`` with at most ``max_distinct`` distinct
    releases: beyond it, eps (and delta) rounded onto the geometric grid
    (1 + resolution)^k, UP for an upper bound and DOWN for a lower one, the resolution
    doubled until the releases fit, then equal ones merged. Valid because a Laplace pair of
    larger eps dominates one of smaller eps (shifted Laplace laws have a monotone likelihood
    ratio: the trade-off function falls with the shift) and the (eps, delta) pair of larger
    eps and delta dominates the other; composition keeps domination (Dong, Roth, Su 2022)."""
    if not too_many_releases(items, max_distinct):
        return items
    step = math.log1p(resolution)
    for _ in range(40):
        out = merge_repeats([_rounded_release(p, step, up) for p in items])
        if not too_many_releases(out, max_distinct):
            break
        step *= 2.0
    return out


def no_privacy_reason(groups: Groups, events: Iterable[Event]) -> str | None:
    """Why eps is unbounded (a noiseless sampled step, an eps = inf release), or None
    (``groups`` is kept for the old signature; the events' parts decide)."""
    return why_infinite(events)
