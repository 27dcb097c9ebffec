"""Audit a Flower federation: tap the uploads and the aggregate; ledgers for its DP wrappers.

Leak points in a Flower app (Wei et al., "Securing distributed SGD against gradient leakage
threats"): **point 1** is a client's update as it leaves the client, after every other mod
(:class:`ClientRecorder`, a client mod placed first in ``ClientApp(mods=[...])``, so that it wraps
the DP mods); **point 0** is the aggregated update the server publishes, after the DP
strategy wrappers added their noise (:class:`StrategyRecorder`, wrapping the outermost strategy).

The ground truth never rides with an observation: the client's train function hands the
examples it used to :func:`keep_truth` (the node's local ``Context.state``); the client tap
writes the observation and the truth to separate files of a directory on that node. The
truth behind an aggregate is joined afterwards from its clients' truths (:func:`load`).

Ledgers (:func:`ledgers`; Flower's optional accountant counts the population's releases,
none counts a client's: its issue #605). One neighbouring relation for every wrapper,
``neighbouring=`` (default "replace-one"): a client's clipped update moves a sum by up to
C when zeroed ("zero-out") and 2C when replaced ("replace-one"; also "add-remove" from the
population, since Flower draws a fixed number K of clients and another takes the place):

- central DP with fixed clipping (``DifferentialPrivacyServerSideFixedClipping``,
  ``...ClientSideFixedClipping``; McMahan et al. 2018): noise N(0, (z C / K)^2) on the mean of
  K clipped updates of equal weight (checked from the taps: a ValueError otherwise).
  Claimed, the DP-FedAvg convention: every client, every round, one Poisson-sampled
  Gaussian step with q = K/N and multiplier z (add-remove). Sound, per client with its
  participation: one Gaussian step (q = 1) per round its update was aggregated, multiplier
  z under zero-out and z/2 otherwise; Flower samples a fixed-size set with Python's
  ``random.sample`` and the server knows it, so no amplification by sampling is taken.
- ``LocalDpMod``: clip to C, add N(0, s^2) with s = Delta sqrt(2 ln(1.25/delta)) / eps
  (Dwork & Roth 2014, Thm A.1, a proof for eps < 1 only) where Delta is the user's
  ``sensitivity``. Claimed: (eps, delta) per round the client took part in, composed soundly
  by the ledger. Sound: the Gaussian actually added, multiplier s / (2 C) per round (s / C
  under zero-out), whatever Delta says.
- adaptive clipping wrappers (Andrew et al. 2021): claimed as fixed clipping with the
  requested multiplier; sound: per round taken part, the update's Gaussian (multiplier z_Delta
  after Flower's split, halved as above) and the clipped-count Gaussian (0/1 bits,
  sensitivity 1 under every relation, std ``clipped_count_stddev``) as two releases.

Names: like :class:`leakaudit.records.Recorder`, :class:`ClientRecorder` and
:class:`StrategyRecorder` record observations (a :class:`leakaudit.fl.Tap` is only the spec of
what to record).

Flower is imported when this module is (from a clone: ``pip install -e '.[flower]'``); ``import
leakaudit`` never imports it.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accounting.relations import gaussian_sensitivity

from .._validate import check_int, check_number
from ..neighbours import canary_out
from ..records import GroundTruth, Observation
from ._ledgers import LedgerPair, check_relation, multiplier, new_ledger
from .replay import ReplayReport

try:
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp.mod import LocalDpMod
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import (
        DifferentialPrivacyClientSideAdaptiveClipping,
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideAdaptiveClipping,
        DifferentialPrivacyServerSideFixedClipping,
        Strategy,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("leakaudit.interop.flower needs Flower: "
                      "pip install -e '.[flower]' (from a clone of leakaudit)") from exc

try:  # Flower's other import path (flwr.client / flwr.server): distinct classes, same fields
    from flwr.client.mod import LocalDpMod as _LegacyLocalDpMod
    from flwr.server.strategy import (
        DifferentialPrivacyClientSideAdaptiveClipping as _LegacyClientAdaptive,
    )
    from flwr.server.strategy import (
        DifferentialPrivacyClientSideFixedClipping as _LegacyClientFixed,
    )
    from flwr.server.strategy import (
        DifferentialPrivacyServerSideAdaptiveClipping as _LegacyServerAdaptive,
    )
    from flwr.server.strategy import (
        DifferentialPrivacyServerSideFixedClipping as _LegacyServerFixed,
    )
    _LEGACY_FIXED: tuple[type, ...] = (_LegacyServerFixed, _LegacyClientFixed)
    _LEGACY_ADAPTIVE: tuple[type, ...] = (_LegacyServerAdaptive, _LegacyClientAdaptive)
    _LEGACY_LOCAL: tuple[type, ...] = (_LegacyLocalDpMod,)
except ImportError:  # pragma: no cover - a Flower without the older path
    _LEGACY_FIXED, _LEGACY_ADAPTIVE, _LEGACY_LOCAL = (), (), ()

__all__ = ["ClientRecorder", "StrategyRecorder", "Captured", "RoundRecord", "keep_truth", "load",
           "ledgers", "audit_dp", "AGGREGATE", "SAMPLING"]

#: how Flower's strategies pick a round's clients: ``random.sample`` of a fixed number
SAMPLING = "fixed-size"

#: ``Observation.client`` of an aggregated update (point 0): every client of the round
AGGREGATE = -1
_TRUTH_KEY = "leakaudit.truth"
#: the DP wrappers and LocalDpMod under both of Flower's import paths (flwr.serverapp /
#: flwr.clientapp and flwr.server / flwr.client export different classes with the same fields)
_FIXED = (DifferentialPrivacyServerSideFixedClipping,
          DifferentialPrivacyClientSideFixedClipping) + _LEGACY_FIXED
_ADAPTIVE = (DifferentialPrivacyServerSideAdaptiveClipping,
             DifferentialPrivacyClientSideAdaptiveClipping) + _LEGACY_ADAPTIVE
_LOCAL = (LocalDpMod,) + _LEGACY_LOCAL



# ---------------------------------------------------------------------------- the truth
def keep_truth(context: Context, inputs: torch.Tensor, labels: torch.Tensor) -> None:
    """Call in the client's train function with the examples it trained on this round.

    They stay on the node (``context.state``, which Flower never sends); :class:`ClientRecorder`
    takes them from there and writes them apart from the observation.
    """
    if not isinstance(inputs, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise ValueError(f"inputs and labels must be tensors, got {type(inputs).__name__} "
                         f"and {type(labels).__name__}")
    if labels.shape != (inputs.shape[0],):
        raise ValueError(f"labels must have shape ({inputs.shape[0]},) to match inputs, "
                         f"got {tuple(labels.shape)}")
    context.state[_TRUTH_KEY] = ArrayRecord({
        "inputs": Array(inputs.detach().cpu().numpy()),
        "labels": Array(labels.detach().cpu().numpy().astype(np.int64))})


def _clear_truth(context: Context) -> None:
    """Before a round: no truth left over from an earlier one."""
    if _TRUTH_KEY in context.state:
        del context.state[_TRUTH_KEY]


def _read_truth(context: Context) -> GroundTruth | None:
    """After the train function: the truth it kept (read, not removed: every tap sees it)."""
    if _TRUTH_KEY not in context.state:
        return None
    record = context.state[_TRUTH_KEY]
    truth_type = GroundTruth
    return truth_type(inputs=torch.from_numpy(record["inputs"].numpy().copy()),
                       labels=torch.from_numpy(record["labels"].numpy().copy()))


# ---------------------------------------------------------------------------- taps
@dataclass(frozen=True)
class _Training:
    """What the attacker knows of local training (the server sets it): lr, L, B."""

    lr: float | None = None
    local_steps: int | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.lr is not None:
            check_number("lr", self.lr, minimum=0.0, open_min=True)
        for name in ("local_steps", "batch_size"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)

    def resolve(self, config: Mapping[str, Any], where: str) -> tuple[float, int, int]:
        """The config sent with the round overrides the tap's defaults (keys "lr",
        "local-steps", "batch-size")."""
        lr = float(config.get("lr", self.lr) or 0.0)
        steps = int(config.get("local-steps", self.local_steps) or 0)
        batch = int(config.get("batch-size", self.batch_size) or 0)
        if lr <= 0 or steps < 1 or batch < 1:
            raise ValueError(f"{where}: lr, local_steps and batch_size must be given to the "
                             f"tap or sent in the round's config ('lr', 'local-steps', "
                             f"'batch-size'); got lr={lr}, local_steps={steps}, "
                             f"batch_size={batch}")
        return lr, steps, batch


def _single(records: Mapping[str, Any], what: str) -> Any:
    if len(records) != 1:
        raise ValueError(f"the tap needs exactly one {what} in the message, found "
                         f"{len(records)}: {sorted(records)}")
    return next(iter(records.values()))


def _tensors(record: ArrayRecord, keys: Sequence[str] | None) -> dict[str, torch.Tensor]:
    names = list(record.keys()) if keys is None else list(keys)
    missing = [k for k in names if k not in record]
    if missing:
        raise ValueError(f"parameter_keys {missing} are not in the message's arrays "
                         f"{list(record.keys())}")
    return {k: torch.from_numpy(np.array(record[k].numpy(), dtype=np.float32)) for k in names}


def _weight(reply: Message, key: str) -> float | None:
    """The FedAvg weight a reply carries (its MetricRecord's ``key``), None without one."""
    for metrics in reply.content.metric_records.values():
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _weight_key(strategy: Any) -> str:
    """The key FedAvg weights replies by: the innermost wrapped strategy's, else Flower's
    default "num-examples"."""
    while strategy is not None:
        key = getattr(strategy, "weighted_by_key", None)
        if isinstance(key, str):
            return key
        strategy = getattr(strategy, "strategy", None)
    return "num-examples"


def _save(directory: Path, name: str, payload: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    torch.save(payload, tmp)
    tmp.replace(directory / name)  # whole files only, even if a run is killed


class ClientRecorder:
    """A Flower client mod that records each client's upload (leak point 1).

    Place it first, ``ClientApp(mods=[ClientRecorder(d, ...), fixedclipping_mod])``, so that it
    sees the upload after the other mods (clipping, local noise). For each train message it
    writes ``obs-r{round}-p1-n{node}.pt`` (the update w_sent - w_global, the global weights,
    lr, local steps, batch size) and, when the train function called :func:`keep_truth`,
    ``truth-r{round}-n{node}.pt`` into ``directory`` on the node.

    Args:
        directory: where to write (created if missing).
        label: the ``defense`` label of the observations (the report's row).
        lr, local_steps, batch_size: local training as the attacker knows it, unless the
            round's config carries "lr", "local-steps", "batch-size".
        parameter_keys: the arrays that are the model's trainable parameters, in its order
            (default: every array of the message, e.g. a state dict without buffers).
        weight_key: the reply metric FedAvg weights the upload by (Flower's default
            "num-examples"), recorded so that :func:`ledgers` can check equal weights.
    """

    def __init__(self, directory: str | Path, *, label: str = "flower",
                 lr: float | None = None, local_steps: int | None = None,
                 batch_size: int | None = None,
                 parameter_keys: Sequence[str] | None = None,
                 weight_key: str = "num-examples") -> None:
        self.directory = Path(directory)
        self.label = str(label)
        self.training = _Training(lr, local_steps, batch_size)
        self.keys = None if parameter_keys is None else list(parameter_keys)
        self.weight_key = str(weight_key)

    def __call__(self, msg: Message, ctxt: Context, call_next: Any) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        sent = _single(msg.content.array_records, "ArrayRecord")
        config = _single(msg.content.config_records, "ConfigRecord")
        _clear_truth(ctxt)
        out = call_next(msg, ctxt)
        truth = _read_truth(ctxt)
        if out.has_error():
            return out
        round_ = int(config.get("server-round", 0))
        node = int(ctxt.node_id)
        client = int(ctxt.node_config.get("partition-id", node))
        lr, steps, batch = self.training.resolve(config, f"client {client}, round {round_}")
        before = _tensors(sent, self.keys)
        after = _tensors(_single(out.content.array_records, "ArrayRecord"), self.keys)
        _save(self.directory, f"obs-r{round_:05d}-p1-n{node}.pt", {
            "point": 1, "round": round_, "client": client, "node": node,
            "tensors": [after[k] - before[k] for k in before], "names": list(before),
            "weights": list(before.values()), "lr": lr, "local_steps": steps,
            "batch_size": batch, "defense": self.label, "nodes": [node],
            "fedavg_weights": [_weight(out, self.weight_key)], "weight_key": self.weight_key})
        if truth is not None:
            _save(self.directory, f"truth-r{round_:05d}-n{node}.pt",
                  {"inputs": truth.inputs, "labels": truth.labels, "client": client})
        return out


class StrategyRecorder(Strategy):
    """Wraps a Flower strategy (DP wrappers included) and records the aggregated update
    (leak point 0): ``obs-r{round}-p0-agg.pt`` in ``directory``, naming the nodes whose
    updates were aggregated. Everything else is the wrapped strategy's.

    ``lr``, ``local_steps``, ``batch_size`` (per client) as for :class:`ClientRecorder`; the
    aggregate's batch size is that of one client times the number of clients aggregated.

    Every round it also writes ``round-r{round}.pt`` (:class:`RoundRecord`): the clients
    sampled, the replies aggregated, their FedAvg weights and the failures, which
    :func:`ledgers` checks against what the DP wrapper's ledger assumes.
    """

    def __init__(self, strategy: Strategy, directory: str | Path, *, label: str = "flower",
                 lr: float | None = None, local_steps: int | None = None,
                 batch_size: int | None = None,
                 parameter_keys: Sequence[str] | None = None) -> None:
        if not isinstance(strategy, Strategy):
            raise ValueError(f"strategy must be a flwr.serverapp.strategy.Strategy, got "
                             f"{type(strategy).__name__}")
        super().__init__()
        self.strategy = strategy
        self.directory = Path(directory)
        self.label = str(label)
        self.training = _Training(lr, local_steps, batch_size)
        self.keys = None if parameter_keys is None else list(parameter_keys)
        self._current: dict[int, tuple[ArrayRecord, ConfigRecord]] = {}
        self._sampled: dict[int, list[int]] = {}
        self.weight_key = _weight_key(strategy)

    def __repr__(self) -> str:
        return f"StrategyRecorder({self.strategy!r})"

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self._current[server_round] = (arrays, config)
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._sampled[server_round] = sorted(int(m.metadata.dst_node_id) for m in messages)
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> Any:
        replies = list(replies)
        ok = sorted((r for r in replies if not r.has_error()),
                    key=lambda r: int(r.metadata.src_node_id))
        nodes = [int(r.metadata.src_node_id) for r in ok]
        weights = [_weight(r, self.weight_key) for r in ok]  # before any wrapper edits them
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        start, config = self._current.pop(server_round)
        sampled = self._sampled.pop(server_round, None)
        _save(self.directory, f"round-r{server_round:05d}.pt", {
            "round": server_round, "sampled": sampled, "nodes": nodes, "weights": weights,
            "weight_key": self.weight_key, "failures": len(replies) - len(ok),
            "aggregated": arrays is not None})
        if arrays is not None and nodes:
            lr, steps, batch = self.training.resolve(config, f"round {server_round}")
            before, after = _tensors(start, self.keys), _tensors(arrays, self.keys)
            _save(self.directory, f"obs-r{server_round:05d}-p0-agg.pt", {
                "point": 0, "round": server_round, "client": AGGREGATE, "node": AGGREGATE,
                "tensors": [after[k] - before[k] for k in before], "names": list(before),
                "weights": list(before.values()), "lr": lr, "local_steps": steps,
                "batch_size": batch * len(nodes), "defense": self.label, "nodes": nodes})
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord,
                           config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> Any:
        return self.strategy.aggregate_evaluate(server_round, replies)


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class RoundRecord:
    """One training round as the ledgers need it: who replied and with which weight.

    ``nodes``: the nodes whose updates reached aggregation; ``weights``: their FedAvg
    weights (the reply metric ``weight_key``; None where a reply had none); ``sampled``: the
    nodes the strategy sent the round to (None when only client taps ran); ``failures``:
    replies with an error; ``aggregated``: whether an aggregate was published. Flower draws
    the round's nodes with ``random.sample``: ``sampling`` is :data:`SAMPLING`.
    """

    round: int
    nodes: tuple[int, ...]
    weights: tuple[float | None, ...]
    weight_key: str = "num-examples"
    sampled: tuple[int, ...] | None = None
    failures: int = 0
    aggregated: bool = True
    sampling: str = SAMPLING


@dataclass
class Captured:
    """What the taps wrote: observations, their truths apart, who took part when, and what
    each round aggregated (:class:`RoundRecord`, for :func:`ledgers`' checks)."""

    observations: list[Observation]
    truths: list[GroundTruth] = field(repr=False)
    #: client -> the rounds in which its update was aggregated (point 0 taps) or sent
    #: (point 1 taps, when no point 0 tap ran)
    participation: dict[int, list[int]]
    #: round -> what it aggregated: from StrategyRecorder's records, else from the client taps'
    rounds: dict[int, RoundRecord] = field(default_factory=dict)

    def at(self, point: int) -> tuple[list[Observation], list[GroundTruth]]:
        keep = [i for i, o in enumerate(self.observations) if o.point == point]
        return [self.observations[i] for i in keep], [self.truths[i] for i in keep]


_OBS = re.compile(r"obs-r(\d+)-p([01])-(n-?\d+|agg)\.pt$")
_TRUTH = re.compile(r"truth-r(\d+)-n(-?\d+)\.pt$")


def load(directory: str | Path) -> Captured:
    """Read a tap directory: observations in (round, point 1 before 0, node) order, each
    with its ground truth (an aggregate's: its clients' truths, concatenated)."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"directory {str(d)!r} does not exist or is not a directory")
    truths: dict[tuple[int, int], dict[str, Any]] = {}
    for p in d.glob("truth-r*-n*.pt"):
        m = _TRUTH.search(p.name)
        if m:
            truths[(int(m[1]), int(m[2]))] = torch.load(p, weights_only=True)
    records = [torch.load(p, weights_only=True) for p in sorted(d.glob("obs-*.pt"))
               if _OBS.search(p.name)]
    if not records:
        raise ValueError(f"no observations in {str(d)!r} (obs-r*-p*-*.pt)")
    records.sort(key=lambda x: (x["round"], -x["point"], x["node"]))
    clients = {(t_round, n): t["client"] for (t_round, n), t in truths.items()}
    clients.update({(x["round"], x["node"]): x["client"] for x in records if x["point"] == 1})
    observation_type, truth_type = Observation, GroundTruth
    observations, gts = [], []
    participation: dict[int, set[int]] = {}
    have_aggregate = any(x["point"] == 0 for x in records)
    for x in records:
        parts = [truths.get((x["round"], n)) for n in x["nodes"]]
        if any(t is None for t in parts):
            missing = [n for n, t in zip(x["nodes"], parts) if t is None]
            raise ValueError(f"round {x['round']}: no truth for node(s) {missing}: the train "
                             f"function must call keep_truth() (and ClientRecorder write to "
                             f"{str(d)!r})")
        gts.append(truth_type(inputs=torch.cat([t["inputs"] for t in parts]),
                               labels=torch.cat([t["labels"] for t in parts])))
        observations.append(observation_type(
            point=x["point"], round=x["round"], client=x["client"], local_step=None,
            tensors=list(x["tensors"]), weights=dict(zip(x["names"], x["weights"])),
            lr=x["lr"], local_steps=x["local_steps"], batch_size=x["batch_size"],
            defense=x["defense"]))
        if (x["point"] == 0) == have_aggregate:
            for n in x["nodes"]:
                participation.setdefault(clients.get((x["round"], n), n), set()).add(x["round"])
    return Captured(observations, gts, {c: sorted(r) for c, r in sorted(participation.items())},
                    _rounds(d, records))


def _rounds(d: Path, records: list[dict[str, Any]]) -> dict[int, RoundRecord]:
    """StrategyRecorder's round records; without them, the client taps' uploads per round."""
    out = {}
    for p in sorted(d.glob("round-r*.pt")):
        x = torch.load(p, weights_only=True)
        out[int(x["round"])] = RoundRecord(
            round=int(x["round"]), nodes=tuple(x["nodes"]), weights=tuple(x["weights"]),
            weight_key=x["weight_key"], failures=int(x["failures"]),
            sampled=None if x["sampled"] is None else tuple(x["sampled"]),
            aggregated=bool(x["aggregated"]))
    if out:
        return out
    uploads: dict[int, list[dict[str, Any]]] = {}
    for x in records:
        if x["point"] == 1:
            uploads.setdefault(x["round"], []).append(x)
    return {r: RoundRecord(round=r, nodes=tuple(x["node"] for x in xs),
                           weights=tuple((x.get("fedavg_weights") or [None])[0] for x in xs),
                           weight_key=xs[0].get("weight_key", "num-examples"))
            for r, xs in sorted(uploads.items())}


# ---------------------------------------------------------------------------- ledgers
#: DP-FedAvg's claim (McMahan et al. 2018): Poisson client sampling, add/remove adjacency
CLAIMED_RELATION = "add-remove"


def ledgers(dp: Any, *, participation: Captured | Mapping[int, Sequence[int]],
            num_clients: int, rounds: int, neighbouring: str = "replace-one") -> LedgerPair:
    """``(claimed, sound)`` ledgers per client for a Flower DP wrapper or ``LocalDpMod``:
    ``ledgers(dp, participation=load(d), num_clients=N, rounds=T)`` (keyword-only after
    ``dp``).

    Both dicts map every client 0..N-1 to its ledger; the returned
    :class:`~leakaudit.interop.LedgerPair` also names the relation, the sampling and why
    sound differs from claimed. One convention for every wrapper: a client's update moves
    a sum of clipped updates by up to ``C`` when it is zeroed ("zero-out") and by up to
    ``2C`` when it is replaced ("replace-one"), or when a client is added to or removed
    from the population ("add-remove": the server draws a fixed number K of clients, so
    another client takes the place). The sound multiplier of the fixed-clipping wrappers is
    z under zero-out and z/2 otherwise; LocalDpMod's is std/C or std/(2C).

    The central wrappers' noise ``N(0, (z C / K)^2)`` on the mean is z C on the sum only when
    the mean has K terms of equal weight. From a :class:`Captured` (what :func:`load` read)
    every round with an aggregate is checked: FedAvg weights equal and exactly K updates
    aggregated, else a ValueError naming the round. A plain mapping cannot be checked (a
    warning says so).

    Args:
        dp: a ``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping`` strategy
            (for central DP) or a ``LocalDpMod``; None for no DP (every client that took
            part has an infinite eps).
        participation: the :class:`Captured` that :func:`load` returned, or client ->
            rounds its update was aggregated.
        num_clients: N, the clients Flower sampled from; rounds: rounds run.
        neighbouring: "replace-one" (default), "add-remove" or "zero-out".
    """
    neighbouring = check_relation("neighbouring", neighbouring)
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    records = participation.rounds if isinstance(participation, Captured) else None
    if isinstance(participation, Captured):
        participation = participation.participation
    if not isinstance(participation, Mapping):
        raise ValueError(f"participation must be a Captured or a mapping client -> rounds, "
                         f"got {type(participation).__name__}")
    for c, rs in participation.items():
        if any(not 1 <= int(r) <= rounds for r in rs):
            raise ValueError(f"participation of client {c} has rounds {list(rs)} outside "
                             f"1..{rounds}")
    if dp is not None and not isinstance(dp, _FIXED + _ADAPTIVE + _LOCAL):
        raise ValueError(f"dp must be a Flower DP strategy wrapper "
                         f"({', '.join(c.__name__ for c in _FIXED + _ADAPTIVE)}), a LocalDpMod "
                         f"or None, got {type(dp).__module__}.{type(dp).__name__}")
    if isinstance(dp, _FIXED + _ADAPTIVE):
        _check_rounds(dp, records)
    clients = range(num_clients)
    claimed_relation = CLAIMED_RELATION if isinstance(dp, _FIXED + _ADAPTIVE) else neighbouring
    claimed = {c: new_ledger(claimed_relation) for c in clients}
    sound = {c: new_ledger(neighbouring) for c in clients}
    taken = {c: len(participation.get(c, ())) for c in clients}
    if dp is None:
        for c in clients:
            for lg in (claimed[c], sound[c]):
                lg.step(q=1.0, sigma=0.0, count=taken[c], note="no DP: update sent in clear")
        reason = "no DP: every aggregated update is released in the clear"
    elif isinstance(dp, _LOCAL):
        reason = _local(dp, claimed, sound, taken, neighbouring)
    else:
        reason = _central(dp, claimed, sound, taken, num_clients, rounds, neighbouring)
    return LedgerPair(claimed, sound, relation=neighbouring, sampling=SAMPLING,
                      claimed_relation=claimed_relation,
                      claimed_sampling="poisson" if isinstance(dp, _FIXED + _ADAPTIVE)
                      else SAMPLING, reason=reason)


def _check_rounds(dp: Any, records: Mapping[int, RoundRecord] | None) -> None:
    """Equal FedAvg weights and K updates in every aggregated round, or a ValueError."""
    name, k = type(dp).__name__, int(dp.num_sampled_clients)
    if records is None:
        warnings.warn(f"ledgers: participation is a plain mapping, so the equal FedAvg weights "
                      f"and the K = {k} updates per round that {name}'s ledger assumes are "
                      f"not checked; pass the Captured that load() returned", stacklevel=3)
        return
    if not records:
        warnings.warn(f"ledgers: the Captured holds no round records (a tap directory without "
                      f"StrategyRecorder's round-r*.pt or ClientRecorder's uploads), so the "
                      f"equal FedAvg weights and the K = {k} updates per round that {name}'s "
                      f"ledger assumes are not checked", stacklevel=3)
        return
    for r, rec in sorted(records.items()):
        if not rec.aggregated:
            continue  # nothing was released this round
        if any(w is None for w in rec.weights):
            missing = [n for n, w in zip(rec.nodes, rec.weights) if w is None]
            raise ValueError(f"round {r}: the replies of node(s) {missing} carry no "
                             f"{rec.weight_key!r} metric, so their FedAvg weights cannot be "
                             f"checked equal as {name}'s ledger assumes")
        if len(set(rec.weights)) > 1:
            raise ValueError(
                f"round {r}: unequal FedAvg weights {list(rec.weights)} ({rec.weight_key!r}) "
                f"under {name}, whose noise z C / K assumes equal ones: a client's share of "
                f"the mean is its weight over the round's total, which depends on the data "
                f"and on who took part; send equal {rec.weight_key!r} values")
        if len(rec.nodes) != k:
            raise ValueError(
                f"round {r}: {len(rec.nodes)} updates were aggregated ({rec.failures} failed) "
                f"but {name} has num_sampled_clients={k}: its noise z C / K on a mean of "
                f"m = {len(rec.nodes)} updates gives a client the multiplier z m / K, not z")


def central_noise_multiplier(noise_multiplier: float, num_sampled: int, share: float,
                             relation: str = "zero-out") -> float:
    """Multiplier of the Gaussian on one client's contribution to a noised mean.

    Noise N(0, (z C / K)^2) on sum_i w_i clip(u_i): zeroing client i's update moves the sum
    by up to w_i C, replacing it by up to 2 w_i C, so its multiplier is z / (K w_i) under
    zero-out and half that under replace-one or add-remove (fixed-size cohorts); for equal
    weights w_i = 1/K, z or z/2 (McMahan et al. 2018).
    """
    return multiplier(noise_multiplier / (num_sampled * share), check_relation(
        "relation", relation))


def local_dp_noise_multiplier(std: float, clipping_norm: float,
                              relation: str = "replace-one") -> float:
    """Multiplier of LocalDpMod's Gaussian: its std over the update's L2 sensitivity, 2C
    (two clipped updates in the C-ball differ by up to 2C) or C under zero-out."""
    return multiplier(std / clipping_norm, check_relation("relation", relation))


def classical_gaussian_std(sensitivity: float, eps: float, delta: float) -> float:
    """Dwork & Roth 2014, Thm A.1: s = Delta sqrt(2 ln(1.25/delta)) / eps (a proof for eps<1)."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / eps


def _span(relation: str) -> str:
    return "C" if relation == "zero-out" else "2C"


def _central(dp: Any, claimed: dict, sound: dict, taken: dict, n: int, rounds: int,
             relation: str) -> str:
    k = int(dp.num_sampled_clients)
    q = min(1.0, k / n)
    z_update = float(dp.noise_multiplier)
    count_std = float(getattr(dp, "clipped_count_stddev", 0.0) or 0.0)
    adaptive = isinstance(dp, _ADAPTIVE)
    # adaptive: Flower splits the requested z into the update's z_Delta and the count's
    # 2 sigma_b (Andrew et al. 2021, Thm 1): z = (z_Delta^-2 + (2 sigma_b)^-2)^(-1/2)
    z_claim = (z_update ** -2 + (2 * count_std) ** -2) ** -0.5 if adaptive and count_std \
        and z_update else z_update
    name = type(dp).__name__
    z = central_noise_multiplier(z_update, k, 1.0 / k, relation)
    for c in claimed:
        claimed[c].step(q=q, sigma=z_claim, count=rounds,
                        note=f"{name}: DP-FedAvg, q=K/N every round")
        # the ledger charges the relation's sensitivity (2C, or C zero-out) itself: z -> {z}
        sound[c].step(q=1.0, sigma=z_update, count=taken[c], sampling="fixed-size",
                      note=f"{name}: rounds aggregated, no amplification, {relation}")
        if adaptive:  # a 0/1 bit moves the count by 1 under every relation
            bit = count_std * gaussian_sensitivity("fixed-size", relation)
            sound[c].step(q=1.0, sigma=bit, count=taken[c], sampling="fixed-size",
                          note=f"{name}: clipped-count bit, sensitivity 1")
    why = (f"claimed: DP-FedAvg's convention, every client every round a Poisson-sampled "
           f"Gaussian step (q = K/N = {q:g}, multiplier {z_claim:g}, add-remove). Flower draws "
           f"a fixed-size cohort with random.sample and the server knows it: no amplification, "
           f"one Gaussian step per round a client's update was aggregated; under {relation} "
           f"it moves the sum of clipped updates by up to {_span(relation)}: multiplier "
           f"{z:g}")
    return why + (f", and the clipped-count bit (std {count_std:g}, sensitivity 1)"
                  if adaptive else "")


def _local(dp: Any, claimed: dict, sound: dict, taken: dict, relation: str) -> str:
    if not (dp.epsilon > 0 and 0 < dp.delta < 1):
        raise ValueError(f"LocalDpMod has epsilon={dp.epsilon}, delta={dp.delta}: its noise "
                         f"std needs epsilon > 0 and 0 < delta < 1")
    std = classical_gaussian_std(dp.sensitivity, dp.epsilon, dp.delta)
    z = local_dp_noise_multiplier(std, dp.clipping_norm, relation)
    span = f"C={dp.clipping_norm:g}" if relation == "zero-out" else \
        f"2C={2 * dp.clipping_norm:g}"
    for c in claimed:
        claimed[c].dp_step(dp.epsilon, dp.delta, count=taken[c],
                           note="LocalDpMod: (eps, delta) per round taken part")
        sound[c].step(q=1.0, sigma=std / dp.clipping_norm, count=taken[c],
                      sampling="fixed-size",
                      note=f"LocalDpMod: Gaussian std {std:.4g} on an update of L2 "
                           f"sensitivity {span} ({relation})")
    return (f"claimed: LocalDpMod's (eps, delta) = ({dp.epsilon:g}, {dp.delta:g}) per round, "
            f"its std {std:.4g} calibrated to sensitivity {dp.sensitivity:g} by Dwork & Roth "
            f"Thm A.1 (a proof for eps < 1 only); sound: that Gaussian on an upload that moves "
            f"by up to {span} under {relation}: multiplier {z:.4g} per round taken part")


# ---------------------------------------------------------------------------- record/replay
class _Identity:
    """Flower's messages need a task identity (a simulation sets one); set while replaying,
    restored afterwards."""

    def __enter__(self) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        self._saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
        for name in ("_task_id", "_run_id", "_node_id"):
            if getattr(TaskIdentity, name) is None:
                setattr(TaskIdentity, name, 1)

    def __exit__(self, *exc: object) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = self._saved


def _record(vector: np.ndarray) -> ArrayRecord:
    return ArrayRecord({"w": Array(np.asarray(vector, dtype=np.float64).copy())})


def _seeded(seed: int) -> Any:
    """numpy's global generator (Flower draws its DP noise from it) seeded, then restored."""
    class _Seeded:
        def __enter__(self) -> None:
            self.state = np.random.get_state()
            np.random.seed(seed % 2**32)

        def __exit__(self, *exc: object) -> None:
            np.random.set_state(self.state)

    return _Seeded()


def _central_release(dp: Any, updates: Sequence[np.ndarray], seed: int) -> np.ndarray:
    """The wrapper's real aggregate_train on K replies (each the global weights, 0, plus an
    update), its accountant detached: the published aggregate."""
    msg = Message(content=RecordDict({"config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=1, message_type=MessageType.TRAIN)
    replies = [Message(RecordDict({"arrays": _record(u),
                                   "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg) for u in updates]
    dp.current_arrays = _record(np.zeros_like(updates[0]))
    with _seeded(seed):
        arrays, _ = dp.aggregate_train(1, replies)
    if arrays is None:
        raise ValueError(f"{type(dp).__name__}.aggregate_train released nothing for "
                         f"{len(updates)} replies (num_sampled_clients="
                         f"{dp.num_sampled_clients})")
    return np.asarray(arrays["w"].numpy(), dtype=np.float64).reshape(-1)


def _local_release(mod: Any, update: np.ndarray, seed: int) -> np.ndarray:
    """LocalDpMod's real __call__ around a client that returns the global weights (0) plus
    ``update``: the upload that leaves the client."""
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    if isinstance(mod, _LEGACY_LOCAL):  # flwr.client.mod's reads the older message layout
        from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters
        from flwr.compat.common import recorddict_compat as compat

        content = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters(
            [np.zeros_like(update)]), {"server-round": 1}), keep_input=True)

        def reply(m: Message) -> Message:
            res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([update.copy()]), 1, {})
            return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=m)
    else:
        content = RecordDict({"arrays": _record(np.zeros_like(update)),
                              "config": ConfigRecord({"server-round": 1})})

        def reply(m: Message) -> Message:
            return Message(RecordDict({"arrays": _record(update),
                                       "metrics": MetricRecord({"num-examples": 1})}),
                           reply_to=m)
    msg = Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)
    with _seeded(seed):
        out = mod(msg, ctx, lambda m, c: reply(m))
    if out.has_error():
        raise ValueError(f"LocalDpMod answered with an error: {out.error}")
    if isinstance(mod, _LEGACY_LOCAL):
        from flwr.common import parameters_to_ndarrays
        from flwr.compat.common import recorddict_compat as compat

        res = compat.recorddict_to_fitres(out.content, keep_input=True)
        return np.asarray(parameters_to_ndarrays(res.parameters)[0],
                          dtype=np.float64).reshape(-1)
    return np.asarray(next(iter(out.content.array_records.values()))["w"].numpy(),
                      dtype=np.float64).reshape(-1)


def _local_setup(dp: Any, canary: np.ndarray, other: np.ndarray, rng: Any,
                 relation: str) -> dict[str, Any]:
    """LocalDpMod: its call around a client returning the canary's (or the other) update;
    declared: its ``sensitivity`` and the std its (eps, delta) calibrate."""
    if not (dp.epsilon > 0 and 0 < dp.delta < 1):
        raise ValueError(f"LocalDpMod has epsilon={dp.epsilon}, delta={dp.delta}: its "
                         f"noise std needs epsilon > 0 and 0 < delta < 1")
    clip = float(dp.clipping_norm)
    std = classical_gaussian_std(dp.sensitivity, dp.epsilon, dp.delta)
    sensitivity = float(dp.sensitivity) if dp.sensitivity > 0 else clip
    span = clip * (1.0 if relation == "zero-out" else 2.0)
    return {"release": lambda world_in, s: _local_release(dp, canary if world_in else other,
                                                          s),
            "mode": f"LocalDpMod ({type(dp).__module__})", "std": std,
            "sensitivity": sensitivity, "detached": None,
            "mu_claimed": sensitivity / std,  # the Gaussian its (eps, delta) calibrates
            "mu_sound": 1.0 / local_dp_noise_multiplier(std, clip, relation),
            "note": (f"its sensitivity {dp.sensitivity:g} calibrates the noise, but the "
                     f"clipped upload moves by up to {span:g} under {relation}: the sound "
                     f"eps of a release is above the claimed one"
                     if span > dp.sensitivity else "")}


def _central_setup(dp: Any, canary: np.ndarray, other: np.ndarray, rng: Any,
                   relation: str) -> dict[str, Any]:
    """A fixed-clipping wrapper: its aggregate over K replies, the canary's in one and
    updates of norm C/2 in the others (through Flower's ``fixedclipping_mod`` first for the
    client-side wrapper); declared: C/K on the mean and the std z C / K."""
    clip, k, z = float(dp.clipping_norm), int(dp.num_sampled_clients), float(
        dp.noise_multiplier)
    rest = [0.5 * clip * v / np.linalg.norm(v) for v in rng.standard_normal((k - 1,
                                                                             canary.size))]
    legacy = isinstance(dp, _LEGACY_FIXED)
    client_side = isinstance(dp, (DifferentialPrivacyClientSideFixedClipping,
                                  *_LEGACY_FIXED[1:]))
    aggregate = _legacy_central_release if legacy else _central_release

    def release(world_in: bool, s: int) -> np.ndarray:
        updates = [canary if world_in else other, *rest]
        if client_side:
            updates = [_client_clipped(u, clip, legacy) for u in updates]
        return aggregate(dp, updates, s)

    return {"release": release, "std": z * clip / k, "sensitivity": clip / k,
            "mode": f"{type(dp).__name__} ({type(dp).__module__}), K={k}",
            "mu_claimed": 1.0 / z,
            "mu_sound": 1.0 / central_noise_multiplier(z, k, 1.0 / k, relation),
            "detached": getattr(dp, "accountant", None),
            "note": "clipped by Flower's fixedclipping_mod at each client" if client_side
            else ""}


def _client_clipped(update: np.ndarray, clip: float, legacy: bool) -> np.ndarray:
    """``update`` as it leaves a client through Flower's ``fixedclipping_mod``."""
    from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

    if legacy:
        from flwr.client.mod import fixedclipping_mod
        from flwr.common import (
            Code,
            FitIns,
            FitRes,
            Status,
            ndarrays_to_parameters,
            parameters_to_ndarrays,
        )
        from flwr.compat.common import recorddict_compat as compat

        content = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters(
            [np.zeros_like(update)]), {KEY_CLIPPING_NORM: clip}), keep_input=True)

        def reply(m: Message, c: Context) -> Message:
            res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([update.copy()]), 1, {})
            return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=m)

        def read(out: Message) -> np.ndarray:
            res = compat.recorddict_to_fitres(out.content, keep_input=True)
            return np.asarray(parameters_to_ndarrays(res.parameters)[0], dtype=np.float64)
    else:
        from flwr.clientapp.mod import fixedclipping_mod

        content = RecordDict({"arrays": _record(np.zeros_like(update)),
                              "config": ConfigRecord({KEY_CLIPPING_NORM: clip})})

        def reply(m: Message, c: Context) -> Message:
            return Message(RecordDict({"arrays": _record(update),
                                       "metrics": MetricRecord({"num-examples": 1})}),
                           reply_to=m)

        def read(out: Message) -> np.ndarray:
            return np.asarray(out.content.array_records["arrays"]["w"].numpy(),
                              dtype=np.float64)
    msg = Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    out = fixedclipping_mod(msg, ctx, reply)
    if out.has_error():
        raise ValueError(f"fixedclipping_mod answered with an error: {out.error}")
    return read(out).reshape(-1)


def _legacy_central_release(dp: Any, updates: Sequence[np.ndarray], seed: int) -> np.ndarray:
    """A flwr.server.strategy wrapper's real aggregate_fit on K FitRes results."""
    from flwr.common import (
        Code,
        FitRes,
        Status,
        ndarrays_to_parameters,
        parameters_to_ndarrays,
    )

    dp.current_round_params = [np.zeros_like(updates[0])]
    results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([u.copy()]), 1, {}))
               for u in updates]
    with _seeded(seed):
        params, _ = dp.aggregate_fit(1, results, [])
    if params is None:
        raise ValueError(f"{type(dp).__name__}.aggregate_fit released nothing")
    return np.asarray(parameters_to_ndarrays(params)[0], dtype=np.float64).reshape(-1)


def audit_dp(dp: Any, *, dim: int = 2000, neighbouring: str = "replace-one",
             trials: int = 200, pairs: int = 8, delta: float = 1e-5,
             confidence: float = 0.95, seed: int = 0) -> ReplayReport:
    """Record/replay a Flower DP wrapper's (or ``LocalDpMod``'s) own code: one public call,
    one report row (:class:`leakaudit.interop.replay.ReplayReport`).

    Central fixed clipping (``DifferentialPrivacy{Server,Client}SideFixedClipping``, either
    import path): the wrapper's real ``aggregate_train`` on K replies (weights ``dim``
    zeros plus an update), the canary's update of norm 10 C in one of them and updates of
    norm C/2 in the others; the out world replaces it by its negative (replace-one and
    add-remove: Flower's cohort has a fixed size K) or by zeros (zero-out). ``LocalDpMod``:
    its real ``__call__`` around a client returning the canary's (or the other) update.
    Each run draws Flower's noise from numpy's global generator seeded per run (restored
    afterwards); the wrapper's accountant, if any, is detached while replaying.

    Checked: the release moves by at most the declared sensitivity (central: C/K on the
    mean per client; LocalDpMod: its ``sensitivity`` argument) and the noise std is the one
    Flower computes (``z C / K``; LocalDpMod's Dwork & Roth std); the game against one
    release as claimed (DP-FedAvg's multiplier z; LocalDpMod's (eps, delta), read as the
    Gaussian it calibrates) and as the sound ledger has it (:func:`ledgers`).
    """
    from .._validate import check_probability
    from .replay import record, replay_row

    if not isinstance(dp, _FIXED + _LOCAL):
        raise ValueError(f"dp must be one of Flower's fixed-clipping DP wrappers or a "
                         f"LocalDpMod (either import path), got {type(dp).__module__}."
                         f"{type(dp).__name__}")
    neighbouring = check_relation("neighbouring", neighbouring)
    for name, value, low in (("dim", dim, 1), ("trials", trials, 8), ("pairs", pairs, 1)):
        check_int(name, value, low)
    for name, value in (("delta", delta), ("confidence", confidence)):
        check_probability(name, value)
    import flwr

    rng = np.random.default_rng(seed)
    clip = float(dp.clipping_norm)
    direction = rng.standard_normal(dim)
    canary = 10.0 * clip * direction / np.linalg.norm(direction)
    # zero-out: Flower's clipping divides by the update's norm (an all-zero update raises
    # ZeroDivisionError in compute_clip_model_update), so the zeroed update is 1e-10 x it
    # (add-remove: Flower's cohort has a fixed size, so an absent client is replaced)
    other = 1e-10 * canary if canary_out(neighbouring) == "zero" else -canary
    setup = (_local_setup if isinstance(dp, _LOCAL) else _central_setup)(
        dp, canary, other, rng, neighbouring)
    release, detached = setup["release"], setup["detached"]
    logger = logging.getLogger("flwr")
    level = logger.level
    with _Identity(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logger.setLevel(logging.ERROR)  # Flower logs every clip and noise draw
        if detached is not None:
            dp.accountant = None
        try:
            out, into, p_out, p_in = record(release, trials=trials, pairs=pairs, seed=seed)
        finally:
            if detached is not None:
                dp.accountant = detached
            logger.setLevel(level)
    row = replay_row(library="flower", version=flwr.__version__, mode=setup["mode"],
                     relation=neighbouring, out=out, into=into, paired_in=p_in,
                     paired_out=p_out, sensitivity=setup["sensitivity"],
                     noise_std=setup["std"], mu_claimed=setup["mu_claimed"],
                     mu_sound=setup["mu_sound"], delta=delta, confidence=confidence,
                     seed=seed, note=setup["note"])
    row["clipping_norm"] = clip
    report = ReplayReport(config={"delta": delta, "confidence": confidence, "seed": seed,
                                  "trials": trials, "pairs": pairs, "dim": dim})
    report.add(row)
    return report
