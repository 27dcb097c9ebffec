"""The result of a simulation: accuracy, ledgers, taps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from accounting import PrivacyLedger, parallel_epsilon, tightest_epsilon

from ..defenses import Defense
from ..records import GroundTruth, LedgerPair, Observation

__all__ = ["Run", "accuracy_within", "worst_epsilon"]


def _signature(ledger: PrivacyLedger) -> str:
    return repr([e.to_dict() for e in ledger.events])


def worst_epsilon(ledgers: Sequence[PrivacyLedger], delta: float,
                  method: str | None = None) -> float:
    """The worst client's eps (parallel composition over disjoint client data).

    ``method`` None: the tightest certified bound of each ledger
    (:func:`accounting.tightest_epsilon`), computed once per distinct ledger; else that
    method of :meth:`PrivacyLedger.epsilon`.
    """
    if method is not None:
        return parallel_epsilon(ledgers, delta, method, warn=False)
    seen: dict[str, float] = {}
    for ledger in ledgers:
        key = _signature(ledger)
        if key not in seen:
            seen[key] = tightest_epsilon(ledger, delta) if ledger.events else 0.0
    return max(seen.values(), default=0.0)


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

    def epsilon(self, delta: float = 1e-5, kind: str = "sound",
                method: str | None = None) -> float:
        """Worst client's eps at ``delta`` (parallel composition over disjoint client data).

        ``kind`` "sound": the tightest certified bound (:func:`accounting.tightest_epsilon`)
        of the sound ledgers, under the neighbouring relation :attr:`relation` and the
        client sampling of ``settings["client_sampling"]``; "claimed": the defense's paper.
        Instance level for per-example defenses, client level for client-level ones
        (``defense.level``). ``method`` picks one accounting method instead of the
        tightest (e.g. "rdp").
        """
        if kind not in ("claimed", "sound"):
            raise ValueError(f"kind must be 'claimed' or 'sound', got {kind!r}")
        return worst_epsilon(self.claimed if kind == "claimed" else self.sound, delta, method)

    @property
    def relation(self) -> str:
        """The neighbouring relation of the sound eps (of one example or one client, after
        ``defense.level``): "add-remove", "replace-one" or "zero-out"."""
        ledger = self.sound[0] if self.sound else None
        stated = getattr(ledger, "relation", None)   # PrivacyLedger(relation=) when it has it
        if isinstance(stated, str):
            return stated
        relation = self.defense.relation
        if relation == "add-remove" and self.defense.fixed_denominator \
                and self.settings.get("client_sampling") == "fixed-size":
            return "replace-one"
        return relation

    @property
    def ledgers(self) -> LedgerPair:
        """The per-client (claimed, sound) ledgers as the one pair type of the toolkit, with
        the sound ledgers' relation and client sampling."""
        return LedgerPair(self.claimed, self.sound, relation=self.relation,
                          sampling=str(self.settings.get("client_sampling", "")),
                          claimed_relation="add-remove",
                          claimed_sampling=str(self.settings.get("client_sampling", "")))

    def describe_epsilon(self, delta: float = 1e-5) -> str:
        """"sound eps = X (delta = d, relation, <level> level, <sampling> clients[, fixed
        public denominator D = x])": the denominator of client-level DP aggregation is an
        assumption of the guarantee (a constant published in advance)."""
        eps = self.epsilon(delta, "sound")
        d = self.settings.get("denominator")
        fixed = "" if d is None else f", fixed public denominator D = {d:g}"
        return (f"sound eps = {eps:.4g} (delta = {delta:g}, {self.relation}, "
                f"{self.defense.level} level, {self.settings.get('client_sampling')} "
                f"clients{fixed})")

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
