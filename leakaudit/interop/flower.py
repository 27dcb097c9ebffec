"""Audit a Flower federation: tap the uploads and the aggregate; ledgers for its DP wrappers.

Leak points in a Flower app (Wei et al., "Securing distributed SGD against gradient leakage
threats"): **point 1** is a client's update as it leaves the client, after every other mod
(:class:`ClientTap`, a client mod placed first in ``ClientApp(mods=[...])``, so that it wraps
the DP mods); **point 0** is the aggregated update the server publishes, after the DP
strategy wrappers added their noise (:class:`StrategyTap`, wrapping the outermost strategy).

The ground truth never rides with an observation: the client's train function hands the
examples it used to :func:`keep_truth` (the node's local ``Context.state``); the client tap
writes the observation and the truth to separate files of a directory on that node. The
truth behind an aggregate is joined afterwards from its clients' truths (:func:`load`).

Ledgers (:func:`ledgers`; Flower's optional accountant counts the population's releases,
none counts a client's: its issue #605):

- central DP with fixed clipping (``DifferentialPrivacyServerSideFixedClipping``,
  ``...ClientSideFixedClipping``; McMahan et al. 2018): noise N(0, (z C / K)^2) on the mean of
  K clipped updates (equal client weights assumed, as Flower's own accountant requires).
  Claimed, the DP-FedAvg convention: every client, every round, one Poisson-sampled
  Gaussian step with q = K/N and multiplier z. Sound, per client with its participation:
  one Gaussian step (q = 1) of multiplier z per round its update was aggregated; Flower
  samples a fixed-size set with Python's ``random.sample`` and the server knows it, so no
  amplification by sampling is taken.
- ``LocalDpMod``: clip to C, add N(0, s^2) with s = Delta sqrt(2 ln(1.25/delta)) / eps
  (Dwork & Roth 2014, Thm A.1, a proof for eps < 1 only) where Delta is the user's
  ``sensitivity``. Claimed: (eps, delta) per round the client took part in, composed soundly
  by the ledger. Sound: the Gaussian actually added, multiplier s / (2 C) per round (the
  clipped update can be anything in the C-ball: its L2 sensitivity is 2C, whatever Delta).
- adaptive clipping wrappers (Andrew et al. 2021): claimed as fixed clipping with the
  requested multiplier; sound: per round taken part, the update's Gaussian (multiplier z_Delta
  after Flower's split) and the clipped-count Gaussian (0/1 bits, sensitivity 1, std
  ``clipped_count_stddev``) as two releases.

Flower is imported when this module is (``pip install 'leakaudit[flower]'``); ``import
leakaudit`` never imports it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accounting import PrivacyLedger

from .._validate import check_int, check_number
from ..records import GroundTruth, Observation

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType
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
                      "pip install 'leakaudit[flower]'") from exc

__all__ = ["ClientTap", "StrategyTap", "Captured", "keep_truth", "load", "ledgers",
           "AGGREGATE"]

#: ``Observation.client`` of an aggregated update (point 0): every client of the round
AGGREGATE = -1
_TRUTH_KEY = "leakaudit.truth"
_FIXED = (DifferentialPrivacyServerSideFixedClipping, DifferentialPrivacyClientSideFixedClipping)
_ADAPTIVE = (DifferentialPrivacyServerSideAdaptiveClipping,
             DifferentialPrivacyClientSideAdaptiveClipping)


# ---------------------------------------------------------------------------- the truth
def keep_truth(context: Context, inputs: torch.Tensor, labels: torch.Tensor) -> None:
    """Call in the client's train function with the examples it trained on this round.

    They stay on the node (``context.state``, which Flower never sends); :class:`ClientTap`
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


def _save(directory: Path, name: str, payload: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    torch.save(payload, tmp)
    tmp.replace(directory / name)  # whole files only, even if a run is killed


class ClientTap:
    """A Flower client mod that records each client's upload (leak point 1).

    Place it first, ``ClientApp(mods=[ClientTap(d, ...), fixedclipping_mod])``, so that it
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
    """

    def __init__(self, directory: str | Path, *, label: str = "flower",
                 lr: float | None = None, local_steps: int | None = None,
                 batch_size: int | None = None,
                 parameter_keys: Sequence[str] | None = None) -> None:
        self.directory = Path(directory)
        self.label = str(label)
        self.training = _Training(lr, local_steps, batch_size)
        self.keys = None if parameter_keys is None else list(parameter_keys)

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
            "batch_size": batch, "defense": self.label, "nodes": [node]})
        if truth is not None:
            _save(self.directory, f"truth-r{round_:05d}-n{node}.pt",
                  {"inputs": truth.inputs, "labels": truth.labels, "client": client})
        return out


class StrategyTap(Strategy):
    """Wraps a Flower strategy (DP wrappers included) and records the aggregated update
    (leak point 0): ``obs-r{round}-p0-agg.pt`` in ``directory``, naming the nodes whose
    updates were aggregated. Everything else is the wrapped strategy's.

    ``lr``, ``local_steps``, ``batch_size`` (per client) as for :class:`ClientTap`; the
    aggregate's batch size is that of one client times the number of clients aggregated.
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

    def __repr__(self) -> str:
        return f"StrategyTap({self.strategy!r})"

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self._current[server_round] = (arrays, config)
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> Any:
        replies = list(replies)
        nodes = sorted(int(r.metadata.src_node_id) for r in replies if not r.has_error())
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        start, config = self._current.pop(server_round)
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
@dataclass
class Captured:
    """What the taps wrote: observations, their truths apart, and who took part when."""

    observations: list[Observation]
    truths: list[GroundTruth] = field(repr=False)
    #: client -> the rounds in which its update was aggregated (point 0 taps) or sent
    #: (point 1 taps, when no point 0 tap ran)
    participation: dict[int, list[int]]

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
                             f"function must call keep_truth() (and ClientTap write to "
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
    return Captured(observations, gts, {c: sorted(r) for c, r in sorted(participation.items())})


# ---------------------------------------------------------------------------- ledgers
def ledgers(dp: Any, participation: Mapping[int, Sequence[int]], *, num_clients: int,
            rounds: int) -> tuple[dict[int, PrivacyLedger], dict[int, PrivacyLedger]]:
    """(claimed, sound) ledgers per client for a Flower DP wrapper or ``LocalDpMod``.

    Args:
        dp: a ``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping`` strategy
            (for central DP) or a ``LocalDpMod``; None for no DP (every client that took
            part has an infinite eps).
        participation: client -> rounds its update was aggregated (``Captured``'s).
        num_clients: N, the clients Flower sampled from; rounds: rounds run.
    """
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    for c, rs in participation.items():
        if any(not 1 <= int(r) <= rounds for r in rs):
            raise ValueError(f"participation of client {c} has rounds {list(rs)} outside "
                             f"1..{rounds}")
    clients = range(num_clients)
    claimed = {c: PrivacyLedger() for c in clients}
    sound = {c: PrivacyLedger() for c in clients}
    taken = {c: len(participation.get(c, ())) for c in clients}
    if dp is None:
        for c in clients:
            for lg in (claimed[c], sound[c]):
                lg.step(q=1.0, sigma=0.0, count=taken[c], note="no DP: update sent in clear")
    elif isinstance(dp, _FIXED + _ADAPTIVE):
        _central(dp, claimed, sound, taken, num_clients, rounds)
    elif isinstance(dp, LocalDpMod):
        _local(dp, claimed, sound, taken)
    else:
        raise ValueError(f"dp must be a Flower DP strategy wrapper "
                         f"({', '.join(c.__name__ for c in _FIXED + _ADAPTIVE)}), a LocalDpMod "
                         f"or None, got {type(dp).__module__}.{type(dp).__name__}")
    return claimed, sound


def central_noise_multiplier(noise_multiplier: float, num_sampled: int, share: float) -> float:
    """Multiplier of the Gaussian on one client's contribution to a noised mean.

    Noise N(0, (z C / K)^2) on sum_i w_i clip(u_i): client i's L2 sensitivity is w_i C
    (add/remove, fixed denominator), so its multiplier is z C / K / (w_i C) = z / (K w_i);
    z for equal weights w_i = 1/K (McMahan et al. 2018).
    """
    return noise_multiplier / (num_sampled * share)


def local_dp_noise_multiplier(std: float, clipping_norm: float) -> float:
    """Multiplier of LocalDpMod's Gaussian: its std over the update's L2 sensitivity 2C
    (a clipped update is anywhere in the C-ball; two of them differ by up to 2C)."""
    return std / (2.0 * clipping_norm)


def classical_gaussian_std(sensitivity: float, eps: float, delta: float) -> float:
    """Dwork & Roth 2014, Thm A.1: s = Delta sqrt(2 ln(1.25/delta)) / eps (a proof for eps<1)."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / eps


def _central(dp: Any, claimed: dict, sound: dict, taken: dict, n: int, rounds: int) -> None:
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
    for c in claimed:
        claimed[c].step(q=q, sigma=z_claim, count=rounds,
                        note=f"{name}: DP-FedAvg, q=K/N every round")
        z = central_noise_multiplier(z_update, k, 1.0 / k)
        sound[c].step(q=1.0, sigma=z, count=taken[c],
                      note=f"{name}: rounds aggregated, no amplification")
        if adaptive:
            sound[c].step(q=1.0, sigma=count_std, count=taken[c],
                          note=f"{name}: clipped-count bit, sensitivity 1")


def _local(dp: Any, claimed: dict, sound: dict, taken: dict) -> None:
    if not (dp.epsilon > 0 and 0 < dp.delta < 1):
        raise ValueError(f"LocalDpMod has epsilon={dp.epsilon}, delta={dp.delta}: its noise "
                         f"std needs epsilon > 0 and 0 < delta < 1")
    std = classical_gaussian_std(dp.sensitivity, dp.epsilon, dp.delta)
    z = local_dp_noise_multiplier(std, dp.clipping_norm)
    for c in claimed:
        claimed[c].dp_step(dp.epsilon, dp.delta, count=taken[c],
                           note="LocalDpMod: (eps, delta) per round taken part")
        sound[c].step(q=1.0, sigma=z, count=taken[c],
                      note=f"LocalDpMod: Gaussian std {std:.4g} on an update of L2 "
                           f"sensitivity 2C={2 * dp.clipping_norm:g}")
