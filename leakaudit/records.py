"""The records every layer above shares: what an attacker saw, the truth kept apart, the taps
that ask for them, and the resumable results file. Neither the simulator nor the audit owns
them: the simulator writes observations, the audit and the interop adapters (Opacus, Flower)
read them, and every audit writes the results file; this module imports only torch.

Leak points. Wei et al. ("Securing distributed SGD against gradient leakage threats") name
three places an attacker may stand: type 2, a client's batch gradient about to be applied at
one local step; type 1, the client's update as it leaves the client; type 0, that update as
it enters the server's aggregation. A :class:`Tap` asks the simulator to record one of them.
Each view is an :class:`Observation` (only what the attacker sees) and, separately, a
:class:`GroundTruth` (the examples behind it), which only a scorer may read: breaching's
"shared data" versus "true data, for analysis only". A :class:`Recorder` holds the taps of a
run and records the views they ask for.

Results file. :class:`ResultsFile` is append-only JSON lines, so that a killed audit resumes
where it stopped. Every finished cell is one line, written and flushed (and fsync'ed) as
soon as it is done. A rerun with the same file and the same configuration reads the finished
keys and skips them: nothing is lost and nothing is repeated. A line cut short by a kill is
ignored. Only the audit's own process writes the file, whatever engine runs the cells
(worker processes and Ray tasks send their results back to it), so there is one writer.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ._validate import check_int

__all__ = ["FORMAT", "GroundTruth", "LedgerPair", "Observation", "Recorder", "ResultsFile",
           "Tap", "fingerprint"]



class LedgerPair(tuple):
    """``(claimed, sound)``: what a paper or framework claims and what the code that ran
    allows; the one pair type every layer returns (the simulator's :class:`~leakaudit.fl.Run`,
    the Opacus and Flower adapters).

    Unpacks as a pair (``claimed, sound = ledgers(...)``) and names its parts:

    - ``claimed``, ``sound``: ledgers (or, for Flower, one ledger per client);
    - ``relation`` / ``sampling``: the neighbouring relation and the sampling the sound
      ledger accounts (``claimed_relation`` / ``claimed_sampling``: the claim's);
    - ``reason``: why sound differs from claimed ("" where they are the same events).
    """

    relation: str
    sampling: str
    claimed_relation: str
    claimed_sampling: str
    reason: str

    def __new__(cls, claimed: Any, sound: Any, *, relation: str = "", sampling: str = "",
                claimed_relation: str = "", claimed_sampling: str = "",
                reason: str = "") -> LedgerPair:
        pair = super().__new__(cls, (claimed, sound))
        pair.__dict__.update(relation=relation, sampling=sampling,
                             claimed_relation=claimed_relation,
                             claimed_sampling=claimed_sampling, reason=reason)
        return pair

    @property
    def claimed(self) -> Any:
        return self[0]

    @property
    def sound(self) -> Any:
        return self[1]

    def __getnewargs_ex__(self) -> tuple[tuple[Any, Any], dict[str, str]]:
        return (self[0], self[1]), dict(self.__dict__)

    def __repr__(self) -> str:
        return (f"LedgerPair(claimed={self[0]!r}, sound={self[1]!r}, "
                f"relation={self.relation!r}, sampling={self.sampling!r})")

    def describe(self, delta: float, eps: Any = None) -> str:
        """Claimed and sound eps at ``delta`` with their relation and sampling, and why.

        ``eps(ledger, delta)`` computes each (default :func:`accounting.tightest_epsilon`);
        for per-client dicts the largest over the clients is shown.
        """
        if eps is None:
            from accounting import tightest_epsilon as eps
        values = []
        for part in self:
            ledgers = (part.values() if isinstance(part, dict) else part
                       if isinstance(part, (list, tuple)) else [part])
            values.append(max((eps(lg, delta) if lg.steps else 0.0 for lg in ledgers),
                              default=0.0))
        text = (f"claimed eps {_fmt(values[0])} ({self.claimed_sampling}, "
                f"{self.claimed_relation}); sound eps {_fmt(values[1])} ({self.sampling}, "
                f"{self.relation}); delta {delta:g}")
        return text + (f"\n  why: {self.reason}" if self.reason else "")


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


@dataclass(frozen=True)
class Tap:
    """Record leak point ``point`` at ``round`` (and ``local_step`` for type 2) for the first
    ``clients`` sampled clients of that round."""

    point: int
    round: int = 0
    local_step: int = 0
    clients: int = 1

    def __post_init__(self) -> None:
        if self.point not in (0, 1, 2) or isinstance(self.point, bool):
            raise ValueError(f"point must be 0, 1 or 2, got {self.point!r}")
        check_int("round", self.round, 0)
        check_int("local_step", self.local_step, 0)
        check_int("clients", self.clients, 1)


@dataclass
class Observation:
    """What an attacker at a leak point saw; nothing else (the truth is a GroundTruth)."""

    point: int
    round: int
    client: int
    local_step: int | None
    #: the observed tensors, in parameter order (type 2: the batch gradient about to be
    #: applied; types 1/0: the update w_local - w_global as it leaves the client / enters
    #: aggregation)
    tensors: list[torch.Tensor] = field(repr=False)
    #: model weights at that moment (type 2: before the local step; 1/0: the global model
    #: the round started from)
    weights: dict[str, torch.Tensor] = field(repr=False)
    lr: float
    local_steps: int
    batch_size: int
    defense: str = ""
    #: how many distinct examples the client processed to produce it (a count the protocol
    #: tells: B for one batch; more when a defense draws fresh batches or over L steps);
    #: None: ``batch_size``
    examples: int | None = None
    #: the client's local optimizer ("sgd", "adam"; a fresh state each round), as the
    #: protocol tells it; None: not known (an attack that needs it assumes its default)
    optimizer: str | None = None

    @property
    def examples_behind(self) -> int:
        """The number of examples an attacker reconstructs from this observation."""
        return self.batch_size if self.examples is None else self.examples

    def as_gradient(self) -> list[torch.Tensor]:
        """The gradient an attacker uses: type 2 as observed; types 1/0 the naive
        g = -dW / (lr L) (exact for one local SGD step)."""
        if self.point == 2:
            return [t.clone() for t in self.tensors]
        scale = -1.0 / (self.lr * self.local_steps)
        return [t * scale for t in self.tensors]


@dataclass(frozen=True)
class GroundTruth:
    """The examples behind an observation: for scoring only, never for an attack."""

    inputs: torch.Tensor = field(repr=False)
    labels: torch.Tensor = field(repr=False)


class Recorder:
    """Holds the taps of a run and records the views they ask for."""

    def __init__(self, taps: tuple[Tap, ...], defense: str, optimizer: str | None = None) -> None:
        self.taps = taps
        self.defense = defense
        self.optimizer = optimizer
        self.observations: list[Observation] = []
        self.truths: list[GroundTruth] = []

    def wants(self, point: int, r: int, pos: int, step: int | None = None) -> bool:
        """Whether a tap asks for ``point`` of the ``pos``-th participant of round ``r``."""
        return any(t.point == point and t.round == r and pos < t.clients
                   and (point != 2 or t.local_step == step) for t in self.taps)

    def batch_gradient(self, r: int, c: int, step: int, g: list[torch.Tensor],
                       weights: dict[str, torch.Tensor], lr: float, x: torch.Tensor,
                       y: torch.Tensor) -> None:
        """A type-2 view: the batch gradient applied at local step ``step``."""
        self._add(Observation(point=2, round=r, client=c, local_step=step,
                              tensors=[t.detach().clone() for t in g],
                              weights={n: v.clone() for n, v in weights.items()},
                              lr=float(lr), local_steps=1, batch_size=int(x.shape[0]),
                              defense=self.defense), x, y)

    def update(self, point: int, r: int, c: int, update: list[torch.Tensor],
               weights: dict[str, torch.Tensor], lr: float, local_steps: int,
               batch_size: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """A type-1 or type-0 view: a client's update."""
        self._add(Observation(point=point, round=r, client=c, local_step=None,
                              tensors=[u.detach().clone() for u in update],
                              weights={n: v.clone() for n, v in weights.items()},
                              lr=float(lr), local_steps=local_steps, batch_size=batch_size,
                              defense=self.defense, examples=int(x.shape[0]),
                              optimizer=self.optimizer), x, y)

    def _add(self, obs: Observation, x: torch.Tensor, y: torch.Tensor) -> None:
        self.observations.append(obs)
        self.truths.append(GroundTruth(inputs=x.clone(), labels=y.clone()))


FORMAT = "leakaudit.results/1"


def fingerprint(config: dict[str, Any]) -> str:
    """A short stable hash of a configuration (sorted JSON)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ResultsFile:
    """Records keyed by (kind, key) under a configuration fingerprint; None: in memory only."""

    def __init__(self, path: str | Path | None, config: dict[str, Any]) -> None:
        self.path = None if path is None else Path(path)
        self.config = config
        self.run_id = fingerprint(config)
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        if self.path is not None:
            if self.path.exists() and self.path.is_dir():
                raise ValueError(f"results path {str(self.path)!r} is a directory, not a file")
            if not self.path.parent.exists():
                raise ValueError(f"results directory {str(self.path.parent)!r} does not exist")
            writable = self.path if self.path.exists() else self.path.parent
            if not os.access(writable, os.W_OK):
                raise ValueError(f"results path {str(self.path)!r} is not writable")
            for rec in self._read():
                if rec.get("run") == self.run_id:
                    self._records[(rec["kind"], rec["key"])] = rec["data"]

    def _read(self) -> Iterator[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return
        with self.path.open() as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill: that cell simply reruns
                if isinstance(rec, dict) and rec.get("format") == FORMAT and "kind" in rec:
                    yield rec

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        return self._records.get((kind, key))

    def has(self, kind: str, key: str) -> bool:
        return (kind, key) in self._records

    def put(self, kind: str, key: str, data: dict[str, Any]) -> None:
        """Store one finished cell, durably, before returning."""
        self._records[(kind, key)] = data
        if self.path is None:
            return
        line = json.dumps({"format": FORMAT, "run": self.run_id, "kind": kind, "key": key,
                           "data": data})
        with self.path.open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def items(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(k, v) for (kd, k), v in self._records.items() if kd == kind]
