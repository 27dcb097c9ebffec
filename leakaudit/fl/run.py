"""The result of a simulation: accuracy, ledgers, taps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from accounting import PrivacyLedger, parallel_epsilon

from ..defenses import Defense
from .observe import GroundTruth, Observation

__all__ = ["Run", "accuracy_within", "worst_epsilon"]


def worst_epsilon(ledgers: Sequence[PrivacyLedger], delta: float, method: str = "rdp") -> float:
    """The worst client's eps (parallel composition over disjoint client data)."""
    return parallel_epsilon(ledgers, delta, method, warn=False)


def accuracy_within(eps_history: Sequence[tuple[int, float, float]],
                    accuracy: Sequence[float], eps_budget: float) -> tuple[int, float] | None:
    """(round, accuracy) of the last evaluation whose sound eps is <= ``eps_budget``."""
    best = None
    for (r, _, sound), acc in zip(eps_history, accuracy):
        if sound <= eps_budget:
            best = (r, acc)
    return best


@dataclass
class Run:
    """The result of :func:`leakaudit.fl.simulate`."""

    model: nn.Module
    defense: Defense
    accuracy: list[float]
    loss: list[float]
    val_loss: list[float]
    claimed: list[PrivacyLedger]
    sound: list[PrivacyLedger]
    observations: list[Observation]
    settings: dict[str, Any]
    #: per round, the clients whose update entered aggregation
    uploads: list[tuple[int, ...]] = field(default_factory=list)
    #: the rounds (0-based) after which ``accuracy`` and ``loss`` were measured
    eval_rounds: list[int] = field(default_factory=list)
    #: with ``track_epsilon=delta``: (round, worst claimed eps, worst sound eps) at each
    #: evaluation, so accuracy can be read against the privacy spent so far
    eps_history: list[tuple[int, float, float]] = field(default_factory=list)
    #: the truth behind each observation (same order), for scoring only: read it through
    #: :meth:`truth`
    truths: list[GroundTruth] = field(default_factory=list, repr=False)

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1] if self.accuracy else math.nan

    def epsilon(self, delta: float = 1e-5, kind: str = "sound", method: str = "rdp") -> float:
        """Worst client's eps (parallel composition over disjoint client data).

        Instance level for per-example defenses, client level for client-level ones
        (``defense.level``); ``kind`` is "claimed" (the defense's paper) or "sound".
        """
        if kind not in ("claimed", "sound"):
            raise ValueError(f"kind must be 'claimed' or 'sound', got {kind!r}")
        return worst_epsilon(self.claimed if kind == "claimed" else self.sound, delta, method)

    def observations_at(self, point: int) -> list[Observation]:
        return [o for o in self.observations if o.point == point]

    def truth(self, observation: Observation) -> GroundTruth:
        """The examples behind ``observation`` (scoring only)."""
        for obs, truth in zip(self.observations, self.truths):
            if obs is observation:
                return truth
        raise ValueError("observation: not one of this run's observations")

    def accuracy_within(self, eps_budget: float) -> tuple[int, float] | None:
        """(round, accuracy) of the last evaluation whose sound eps was <= ``eps_budget``
        (None when none was); needs ``simulate(..., track_epsilon=delta)``."""
        if not self.eps_history:
            raise ValueError("no eps history: run simulate(..., track_epsilon=delta)")
        return accuracy_within(self.eps_history, self.accuracy, eps_budget)
