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
from .registry import _rule, gaussian_groups, group_pairs, why_infinite

__all__ = ["Groups", "group_pairs", "round_sigmas", "sgm_groups", "rounded_groups",
           "no_privacy_reason"]


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
        rule = _rule(e, family)
        if rule is not None:
            items.extend(rule(e, side))
    return Groups(*gaussian_groups(items))


def rounded_groups(groups: Groups, resolution: float, direction: str) -> Groups:
    """``groups`` with every sigma rounded ``direction`` onto the grid, regrouped."""
    rounded = round_sigmas(groups.sigmas, resolution, direction)
    return Groups(*group_pairs(groups.qs, rounded, groups.counts))


def no_privacy_reason(groups: Groups, events: Iterable[Event]) -> str | None:
    """Why eps is unbounded (a noiseless sampled step, an eps = inf release), or None
    (``groups`` is kept for the old signature; the events' parts decide)."""
    return why_infinite(events)
