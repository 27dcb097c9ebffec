"""Audit a real Flower federation: no DP and three of Flower's DP settings, on digits.

Ten Flower clients (the digits split in ten) train LeNet with Flower's simulation engine
(``flwr.simulation.run_simulation``, Ray underneath). Each round the server samples one
client, which takes one SGD step on one example (the gradient-leakage setting of DLG/iDLG;
with one client per round the aggregate is that client's update, so without DP it leaks as
the upload does).
leakaudit records every client's upload (leak point 1, ``ClientRecorder``, the first mod) and
the aggregate the server publishes (point 0, ``StrategyRecorder`` around the DP wrapper), attacks
each with iDLG (and DLG without --quick), and writes ``DIR/audit.{md,csv,tex,json,png}``
(:class:`leakaudit.report.AuditReport`) with eps per client appended to ``audit.md`` and
``DIR/eps_per_client.csv``. Claimed eps is what an RDP accountant prints for the claim
(DP-FedAvg's Poisson q = K/N steps; LocalDpMod's own (eps, delta)); sound eps is the tightest
certified bound (``accounting.tightest_epsilon``), both at ``--delta``; the sound ledgers
state their neighbouring relation (``--neighbouring``, default replace-one: a client's
clipped update moves the noised sum by up to 2C, so the fixed-clipping multiplier is z/2)
and ``lf.ledgers`` checks, from the taps, that every round aggregated K updates of equal
FedAvg weight.

    python examples/flower_audit.py --quick --out results/flower

Settings: "no DP"; "server-side fixed clipping" (``DifferentialPrivacyServerSideFixedClipping``:
the server clips each update and noises the aggregate); "client-side fixed clipping"
(``fixedclipping_mod`` clips at the client, ``DifferentialPrivacyClientSideFixedClipping``
noises the aggregate at the server); ``LocalDpMod`` (clip and noise at the client).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # nothing leaves this machine
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import leakaudit  # noqa: E402
from leakaudit import data, models  # noqa: E402

NUM_CLIENTS = 10
SETTINGS = ("no DP", "server-side fixed clipping", "client-side fixed clipping", "LocalDpMod")


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds, iDLG only, 40 steps")
    ap.add_argument("--out", default="results/flower", help="output directory")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.01, help="local SGD learning rate")
    ap.add_argument("--clip", type=float, default=1.0, help="clipping norm C (all settings)")
    ap.add_argument("--noise-multiplier", type=float, default=1.0, help="central DP z")
    ap.add_argument("--local-epsilon", type=float, default=1.0, help="LocalDpMod eps")
    ap.add_argument("--local-delta", type=float, default=1e-6, help="LocalDpMod delta")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta of the eps columns")
    ap.add_argument("--neighbouring", default="replace-one",
                    choices=("replace-one", "add-remove", "zero-out"),
                    help="neighbouring relation of the sound ledgers")
    ap.add_argument("--workers", type=int, default=2, help="attack worker processes")
    args = ap.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 10)
    args.attacks = ("idlg",) if args.quick else ("idlg", "dlg")
    args.max_iterations = 40 if args.quick else 100
    return args


def _client_app(setting: str, args: argparse.Namespace, tap_dir: Path, keys: list[str]):
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import fixedclipping_mod

    from leakaudit.interop.flower import ClientRecorder, keep_truth

    mods: list[Any] = [ClientRecorder(tap_dir, label=setting, lr=args.lr, local_steps=1,
                                      batch_size=1, parameter_keys=keys)]
    if setting == "client-side fixed clipping":
        mods.append(_train_only(fixedclipping_mod))
    elif setting == "LocalDpMod":
        mods.append(_train_only(_local_dp(args)))
    app = ClientApp(mods=mods)

    @app.query()
    def query(msg: Message, context: Any) -> Message:
        """The server asks each node its partition, to sample clients by partition (below)."""
        info = ConfigRecord({"partition-id": int(context.node_config["partition-id"])})
        return Message(content=RecordDict({"info": info}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Any) -> Message:
        client = int(context.node_config["partition-id"])
        server_round = int(msg.content["config"]["server-round"])
        ds = data.load("digits", seed=args.seed)
        part = np.array_split(np.random.default_rng(args.seed).permutation(
            ds.x_train.shape[0]), NUM_CLIENTS)[client]
        rng = np.random.default_rng([args.seed, server_round, client])
        idx = torch.as_tensor(rng.choice(part, size=1))
        np.random.seed(rng.integers(2**32))  # Flower's mods draw their noise from numpy's
        x, y = ds.x_train[idx], ds.y_train[idx]
        keep_truth(context, x, y)  # stays on the node; the tap writes it apart
        net = models.default_for(ds)
        net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        loss = torch.nn.functional.cross_entropy(net(x), y)
        grads = torch.autograd.grad(loss, list(net.parameters()))
        with torch.no_grad():
            for p, g in zip(net.parameters(), grads):
                p -= args.lr * g
        content = RecordDict({"arrays": ArrayRecord(net.state_dict()),
                              "metrics": MetricRecord({"num-examples": 1,
                                                       "train-loss": loss.item()})})
        return Message(content=content, reply_to=msg)

    return app


def _train_only(mod: Any) -> Any:
    """``mod`` on train messages only (LocalDpMod answers any other message with an error)."""
    from flwr.app import MessageType

    def wrapped(msg: Any, context: Any, call_next: Any) -> Any:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, context)
        return mod(msg, context, call_next)

    return wrapped


class _PartitionOrder:
    """The simulation's grid with its node ids in partition order.

    Flower gives each simulated node a random 64-bit id on every run and its strategies draw
    ``random.sample(list(grid.get_node_ids()), k)`` from a set of those ids, whose order
    follows the random ids: the same seed picked other partitions on the next run (accuracy
    0.10, then 0.216). Listed by partition, the seeded draw picks the same clients."""

    def __init__(self, grid: Any, partition: dict[int, int]) -> None:
        self._grid, self._partition = grid, partition

    def get_node_ids(self) -> list[int]:
        return sorted(self._grid.get_node_ids(), key=lambda n: self._partition[n])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


def _partitions(grid: Any) -> dict[int, int]:
    """node id -> partition id, asked of every node (a query message, answered by the
    client app's query function)."""
    from flwr.app import Message, MessageType, RecordDict

    deadline = time.monotonic() + 120
    while len(nodes := sorted(grid.get_node_ids())) < NUM_CLIENTS:  # nodes still joining
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {NUM_CLIENTS} nodes joined in 120 s")
        time.sleep(0.5)
    replies = grid.send_and_receive([
        Message(content=RecordDict(), dst_node_id=n, message_type=MessageType.QUERY)
        for n in nodes])
    out = {r.metadata.src_node_id: int(r.content["info"]["partition-id"]) for r in replies
           if not r.has_error()}
    if set(out) != set(nodes):
        raise RuntimeError(f"{len(nodes) - len(out)} node(s) did not say their partition")
    return out


def _local_dp(args: argparse.Namespace) -> Any:
    from flwr.clientapp.mod import LocalDpMod

    # sensitivity = the clipping norm, as a user reading "the sensitivity of the client
    # model" would set it; the sound ledger says what that gives
    return LocalDpMod(clipping_norm=args.clip, sensitivity=args.clip,
                      epsilon=args.local_epsilon, delta=args.local_delta)


def _dp_strategy(setting: str, args: argparse.Namespace, strategy: Any) -> Any:
    from flwr.serverapp.strategy import (
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideFixedClipping,
    )

    if setting == "server-side fixed clipping":
        return DifferentialPrivacyServerSideFixedClipping(
            strategy, args.noise_multiplier, args.clip, num_sampled_clients=1)
    if setting == "client-side fixed clipping":
        return DifferentialPrivacyClientSideFixedClipping(
            strategy, args.noise_multiplier, args.clip, num_sampled_clients=1)
    return None


def _server_app(setting: str, args: argparse.Namespace, tap_dir: Path, keys: list[str],
                result: dict[str, Any]):
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    from leakaudit.interop.flower import StrategyRecorder

    app = ServerApp()
    ds = data.load("digits", seed=args.seed)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = models.default_for(ds)
        net.load_state_dict(arrays.to_torch_state_dict())
        with torch.no_grad():
            acc = float((net(ds.x_test).argmax(1) == ds.y_test).float().mean())
        result["accuracy"] = acc
        return MetricRecord({"accuracy": acc})

    @app.main()
    def main(grid: Any, context: Any) -> None:
        grid = _PartitionOrder(grid, _partitions(grid))  # the same clients on every run
        random.seed(args.seed)  # Flower samples nodes with Python's random.sample
        np.random.seed(args.seed)  # and its server-side DP noise comes from numpy's
        base = FedAvg(fraction_train=1 / NUM_CLIENTS, min_train_nodes=1,
                      min_available_nodes=NUM_CLIENTS, fraction_evaluate=0.0)
        dp = _dp_strategy(setting, args, base)
        if dp is not None:
            result["dp"] = dp
        tapped = StrategyRecorder(dp or base, tap_dir, label=setting, lr=args.lr,
                                  local_steps=1, batch_size=1, parameter_keys=keys)
        start = models.default_for(ds, generator=torch.Generator().manual_seed(args.seed))
        tapped.start(grid=grid, initial_arrays=ArrayRecord(start.state_dict()),
                     num_rounds=args.rounds, train_config=ConfigRecord({"lr": args.lr}),
                     evaluate_fn=evaluate)

    return app


def simulate(setting: str, args: argparse.Namespace, tap_dir: Path) -> dict[str, Any]:
    """One Flower simulation; the taps write into ``tap_dir``."""
    from flwr.simulation import run_simulation

    keys = [n for n, _ in models.default_for(data.load("digits")).named_parameters()]
    result: dict[str, Any] = {}
    if setting == "LocalDpMod":
        result["dp"] = _local_dp(args)
    run_simulation(server_app=_server_app(setting, args, tap_dir, keys, result),
                   client_app=_client_app(setting, args, tap_dir, keys),
                   num_supernodes=NUM_CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False}})
    return result


def main() -> None:
    args = _parse()
    from leakaudit.interop import flower as lf

    logging.getLogger("flwr").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ds = data.load("digits", seed=args.seed)
    observations, truths, defenses, per_client = [], [], {}, {}
    t0 = time.perf_counter()
    for setting in SETTINGS:
        with tempfile.TemporaryDirectory() as tmp:
            result = simulate(setting, args, Path(tmp))
            captured = lf.load(tmp)
        pair = lf.ledgers(result.get("dp"), participation=captured, num_clients=NUM_CLIENTS,
                          rounds=args.rounds, neighbouring=args.neighbouring)
        claimed, sound = pair
        # claimed: what an RDP accountant of the claim prints; sound: the tightest bound
        per_client[setting] = {c: (claimed[c].epsilon(args.delta, warn=False),
                                   _eps(sound[c], args.delta),
                                   len(captured.participation.get(c, [])))
                               for c in range(NUM_CLIENTS)}
        defenses[setting] = {
            "accuracy": result.get("accuracy", float("nan")), "level": "client",
            "eps_claimed": max(v[0] for v in per_client[setting].values()),
            "eps_sound": max(v[1] for v in per_client[setting].values()),
            "reason": pair.reason}
        observations += captured.observations
        truths += captured.truths
    t_sim = time.perf_counter() - t0
    report = leakaudit.audit_observations(observations, attacks=args.attacks,
                                          model=models.default_for(ds), truths=truths,
                                          input_shape=ds.input_shape, num_classes=ds.num_classes,
                                          threshold=0.01, max_iterations=args.max_iterations,
                                          seed=args.seed, delta=args.delta, workers=args.workers,
                                          defenses=defenses)
    paths = report.save(out)
    table = _eps_table(per_client, args.delta, args.neighbouring)
    paths["md"].write_text(paths["md"].read_text() + "\n" + table)
    _eps_csv(per_client, out / "eps_per_client.csv")
    print(report.to_markdown() + "\n" + table)
    print(f"simulations {t_sim:.0f} s, attacks {time.perf_counter() - t0 - t_sim:.0f} s; "
          f"wrote {', '.join(str(p) for p in paths.values())}")


def _eps(ledger: Any, delta: float) -> float:
    """The tightest certified eps of a client's ledger; 0 for a client that never took part."""
    from accounting import tightest_epsilon

    return tightest_epsilon(ledger, delta) if ledger.steps else 0.0


def _fmt(v: float) -> str:
    return "inf" if v == float("inf") else f"{v:.3g}"


def _eps_table(per_client: dict, delta: float, relation: str) -> str:
    head = "| client | " + " | ".join(f"{s} (rounds, claimed / sound)" for s in per_client)
    lines = [f"Eps per client (delta = {delta:g}; claimed: DP-FedAvg, Poisson q = K/N, "
             f"add-remove (LocalDpMod: its own claim); sound: {relation}, no amplification; "
             f"rounds = rounds its update was aggregated)",
             "", head + " |", "|---|" + "---|" * len(per_client)]
    for c in range(NUM_CLIENTS):
        cells = [f"{v[c][2]}, {_fmt(v[c][0])} / {_fmt(v[c][1])}" for v in per_client.values()]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _eps_csv(per_client: dict, path: Path) -> None:
    rows = ["setting,client,rounds,eps_claimed,eps_sound"]
    for setting, values in per_client.items():
        rows += [f"{setting},{c},{r},{a},{b}" for c, (a, b, r) in values.items()]
    path.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
