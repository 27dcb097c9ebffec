"""Poisson-sampled Gaussian steps under replace-one, for the PLD accountant: the +-1 pair.

Both ends of the PLD bracket use (units of the clip norm C, s = sigma)

    P = (1-q) N(0, s^2) + q N(1, s^2),   Q = (1-q) N(0, s^2) + q N(-1, s^2),

realised by a data set and dominating the mechanism (Schuchardt et al. 2024, Thm 3.8; the
argument and the peers are in docs/accounting.md). This module registers the
PLD rule of :class:`~accounting.events.SampledGaussian` and
:class:`~accounting.events.GaussianSchedule` that turns such steps into a
:class:`~accounting.registry.PLDPart`; every other accountant keeps the "*" rule
(:func:`accounting.relations.gaussian_upper`: sigma/2 without amplification, and group
privacy of size 2 in the RDP accountant), and every other step keeps its Poisson add/remove
pair.
"""

from __future__ import annotations

import numpy as np

from ._grid import Groups, group_pairs, rounded_groups
from .events import Event, GaussianSchedule, SampledGaussian, gaussian_pairs
from .pld import replace_loss_limits, replace_pmfs, replace_variance
from .registry import PLDPart, register_event
from .relations import uses_group_privacy

__all__ = ["ReplaceOnePoisson"]


class ReplaceOnePoisson:
    """Poisson-sampled Gaussian steps (rate 0 < q < 1, multipliers ``sigmas`` > 0, step
    ``counts``) under replace-one, for the PLD accountant (a :class:`PLDPart`): the +-1
    pair, upper and lower (module doc). Many distinct sigmas are rounded onto the geometric
    grid (1 + 5e-3)^k, down for the upper end and up for the lower end."""

    #: more distinct sigmas than this: rounded onto the grid (as the add/remove groups)
    max_distinct = 64

    def __init__(self, q: float, sigmas: np.ndarray, counts: np.ndarray) -> None:
        _, sig, cnt = group_pairs(np.full(np.size(sigmas), float(q)),
                                   np.asarray(sigmas, dtype=float),
                                   np.asarray(counts, dtype=np.int64))
        self.q, self.sigmas, self.counts = float(q), sig, cnt

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def describe(self) -> str:
        return (f"{self.count} Poisson step(s) q={self.q:.6g} under replace-one "
                f"({self.sigmas.size} distinct sigma(s), the +-1 pair)")

    def pld_loss_variance(self) -> float:
        """Mean per-step loss variance (sets the grid step)."""
        var = replace_variance(np.full(self.sigmas.size, self.q), self.sigmas)
        return float((var * self.counts).sum() / max(self.count, 1))

    def pld_loss_range(self) -> float:
        """Widest loss range of one step (bounds the grid step from below)."""
        llo, lhi = replace_loss_limits(np.full(self.sigmas.size, self.q), self.sigmas)
        return float(np.max(lhi - llo))

    def pld_parts(self, h: float, direction: str, upper: bool) -> tuple[list, float]:
        """The steps' discrete PLDs on {k h} (either direction: the pair is symmetric)."""
        sig, cnt = self.sigmas, self.counts
        if sig.size > self.max_distinct:
            rounded = rounded_groups(Groups(np.full(sig.size, self.q), sig, cnt), 5e-3,
                                     "down" if upper else "up")
            sig, cnt = rounded.sigmas, rounded.counts
        return replace_pmfs(np.full(sig.size, self.q), sig, cnt, h, upper), 0.0


def _gaussian_pld_pairs(e: Event, q: float, sigmas: np.ndarray, counts: np.ndarray,
                        side: str) -> list:
    """PLD rule: Poisson steps (0 < q < 1) under replace-one are the realisable +-1 pair on
    both sides (:class:`ReplaceOnePoisson`, a :class:`PLDPart`); every other
    step (and a noiseless one, which stays infinite) as :func:`gaussian_pairs`."""
    if not uses_group_privacy(e.sampling, e.relation, q):
        return gaussian_pairs(e, q, sigmas, counts, side)
    noisy = sigmas > 0
    out: list = []
    if noisy.any():
        out.append(PLDPart(ReplaceOnePoisson(q, sigmas[noisy], counts[noisy])))
    if not noisy.all():
        out.extend(gaussian_pairs(e, q, sigmas[~noisy], counts[~noisy], side))
    return out


register_event(SampledGaussian, pld=lambda e, side: _gaussian_pld_pairs(
    e, e.q, np.array([e.sigma]), np.array([e.count]), side))
register_event(GaussianSchedule, pld=lambda e, side: _gaussian_pld_pairs(
    e, e.q, *np.unique(e.sigmas, return_counts=True), side))
