"""The taps of a Flower federation and what they wrote: recorders, the truth, :func:`load`.

**Point 1** is a client's update as it leaves the client, after every other mod
(:class:`ClientRecorder`, a client mod placed first in ``ClientApp(mods=[...])``, so that it wraps
the DP mods); **point 0** is the aggregated update the server publishes, after the DP
strategy wrappers added their noise (:class:`StrategyRecorder`, wrapping the outermost strategy).

The ground truth never rides with an observation: the client's train function hands the
examples it used to :func:`keep_truth` (the node's local ``Context.state``); the client tap
writes the observation and the truth to separate files of a directory on that node. The
truth behind an aggregate is joined afterwards from its clients' truths (:func:`load`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..._validate import check_int, check_number
from ...records import GroundTruth, Observation

__all__ = ["ClientRecorder", "StrategyRecorder", "Captured", "RoundRecord", "keep_truth",
           "load", "AGGREGATE", "SAMPLING"]

#: how Flower's strategies pick a round's clients: ``random.sample`` of a fixed number
SAMPLING = "fixed-size"

#: ``Observation.client`` of an aggregated update (point 0): every client of the round
AGGREGATE = -1
_TRUTH_KEY = "leakaudit.truth"


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
    return GroundTruth(inputs=torch.from_numpy(record["inputs"].numpy().copy()),
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
            "num-examples"), recorded so that :func:`.ledgers` can check equal weights.
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
    :func:`.ledgers` checks against what the DP wrapper's ledger assumes.
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
    each round aggregated (:class:`RoundRecord`, for :func:`.ledgers`' checks)."""

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
        gts.append(GroundTruth(inputs=torch.cat([t["inputs"] for t in parts]),
                               labels=torch.cat([t["labels"] for t in parts])))
        observations.append(Observation(
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

