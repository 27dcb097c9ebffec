"""The one-call audit: train under each defense, tap the leak points, attack, score, report.

Data flows one way (SPEC-attacks "The audit"):
  data -> simulator (+ defense) -> leak point -> attack -> metrics -> report.

Per defense two simulations: a *training* run (the profile's federated setting) gives test
accuracy and the claimed and sound eps; an *attack* run takes one round from the starting
weights with one local step of batch size 1 (the DLG/iDLG/CPL setting: L = 1 so that the
three leak points differ only by where the defense acted) and taps points 0, 1, 2 for
``examples`` sampled clients. Types 1 and 0 observe an update dW; the attacker uses
g = -dW / (lr * L) as the gradient (exact for L = 1).

Every finished cell is appended to the results file; a rerun with the same file skips what
is done (:mod:`leakaudit.results`). The attack cells are independent and run on an *engine*
(``ENGINES``): "serial" (this process), "process" (a local process pool) or "ray" (Ray tasks,
on a local Ray instance or a cluster). Whatever the engine, results come back to this process,
which alone writes the results file, as each cell finishes: resuming works the same way and
the same seed gives the same table.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from . import data as data_mod
from . import defenses as defenses_mod
from . import fl
from . import models as models_mod
from .report import AuditReport
from .results import ResultsFile

__all__ = ["audit", "PROFILES", "DEFAULT_DEFENSES", "AuditProfile", "ENGINES"]

#: where the attack cells run (``audit(engine=...)``)
ENGINES = ("process", "serial", "ray")

DEFAULT_DEFENSES = ("none", "fed-sdp-server", "fed-sdp-client", "fed-cdp", "fed-alpha-cdp",
                    "prune", "random-noise")


@dataclass(frozen=True)
class AuditProfile:
    """Sizes of an audit: the training run and the attacks."""

    clients: int
    clients_per_round: int
    rounds: int
    local_steps: int
    batch_size: int
    lr: float
    optimizer: str
    examples: int
    max_iterations: int
    restarts: int
    attack_lr: float


PROFILES: dict[str, AuditProfile] = {
    # minutes on 2 cores with the built-in digits
    "quick": AuditProfile(clients=10, clients_per_round=5, rounds=10, local_steps=5,
                          batch_size=32, lr=0.01, optimizer="adam", examples=3,
                          max_iterations=40, restarts=1, attack_lr=0.1),
    # the papers' attack budget (300 L-BFGS steps, more examples); hours
    "paper": AuditProfile(clients=100, clients_per_round=10, rounds=100, local_steps=10,
                          batch_size=32, lr=0.01, optimizer="adam", examples=20,
                          max_iterations=300, restarts=2, attack_lr=0.1),
}

#: defense parameters used when the caller gives a bare name (the source papers' settings)
PAPER_PARAMS: dict[str, dict[str, Any]] = {
    "fed-sdp-server": {"clip": 4.0, "sigma": 6.0},
    "fed-sdp-client": {"clip": 4.0, "sigma": 6.0},
    "fed-cdp": {"clip": 4.0, "sigma": 6.0},
    "fed-alpha-cdp": {"clip": 4.0, "sigma": 6.0},
    "prune": {"rate": 0.1},
    "random-noise": {"variance": 0.001},
}


def _as_gradient(obs: fl.Observation) -> list[torch.Tensor]:
    if obs.point == 2:
        return [t.clone() for t in obs.tensors]
    scale = -1.0 / (obs.lr * obs.local_steps)
    return [t * scale for t in obs.tensors]


def _resolve_defenses(defenses: Sequence[Any],
                      params: dict[str, dict[str, Any]] | None) -> list[defenses_mod.Defense]:
    out = []
    for d in defenses:
        if isinstance(d, defenses_mod.Defense):
            out.append(d)
            continue
        if not isinstance(d, str):
            raise ValueError(f"defenses must be names or Defense objects, got {d!r}")
        kwargs = dict(PAPER_PARAMS.get(d, {}))
        kwargs.update((params or {}).get(d, {}))
        out.append(defenses_mod.get(d, **kwargs))
    names = [d.describe() for d in out]
    if len(set(names)) != len(names):
        raise ValueError(f"defenses must be distinct, got {names}")
    return out


def audit(
    defenses: Sequence[Any] = DEFAULT_DEFENSES,
    dataset: Any = "digits",
    model: nn.Module | None = None,
    attacks: Sequence[str] = ("dlg", "idlg", "cpl"),
    points: Sequence[int] = (0, 1, 2),
    examples: int | None = None,
    rounds: int | None = None,
    seed: int = 0,
    profile: str = "quick",
    results: str | None = None,
    *,
    delta: float = 1e-5,
    threshold: float = 0.01,
    max_iterations: int | None = None,
    restarts: int | None = None,
    defense_params: dict[str, dict[str, Any]] | None = None,
    trained: bool = False,
    workers: int | None = None,
    progress: bool = True,
    engine: str = "process",
    ray_address: str | None = None,
) -> AuditReport:
    """Audit defenses against gradient-leakage attacks; see the module docstring.

    Args:
        defenses: names (bare names get the source papers' parameters, ``PAPER_PARAMS``,
            overridable per name with ``defense_params``) or Defense objects.
        dataset: name or Dataset. model: the architecture and starting weights (default
            ``models.default_for(dataset)``, LeNet-Sigmoid with U(-0.5, 0.5) weights).
        attacks: attack names (``leakaudit.attacks.available()``); points: leak points.
        examples: attacked examples per (defense, point, attack); rounds: training rounds.
        profile: "quick" or "paper" (sizes, see ``PROFILES``).
        results: path of the JSON-lines results file (resume); None keeps results in memory.
        delta: for the eps columns; threshold: MSE at or below which an attack succeeds.
        trained: ``model`` is already trained: skip the training run (accuracy is then
            measured on the given weights, eps is that of the one audited round).
        workers: processes for the attack cells (default: the CPU count, at most 4; 1 runs
            them in this process). Results are identical whatever the number. Workers are
            spawned: call audit() under ``if __name__ == "__main__":`` in a script (if they
            fail, the audit warns and finishes in this process).
        engine: where the attack cells run: "process" (default; the local process pool of
            ``workers``), "serial" (this process; ``workers`` is ignored) or "ray" (one Ray
            task per cell; needs ``pip install leakaudit[ray]``). Training runs in this
            process for every engine, and the same seed gives the same results.
        ray_address: with engine="ray", the cluster to connect to (``ray.init(address=...)``;
            every node needs leakaudit and torch installed). None starts a local Ray instance
            with ``workers`` CPUs. If this process has already initialised Ray, that Ray is
            used as it is and left running; a Ray started by audit() is shut down at the end.
    """
    from . import attacks as attacks_mod

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    if ray_address is not None and engine != "ray":
        raise ValueError(f"ray_address is only used with engine='ray', got engine={engine!r}")
    if engine == "ray":
        _import_ray()  # fail before any work if Ray is missing
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    prof = PROFILES[profile]
    examples = prof.examples if examples is None else int(examples)
    rounds = prof.rounds if rounds is None else int(rounds)
    max_iterations = prof.max_iterations if max_iterations is None else int(max_iterations)
    restarts = prof.restarts if restarts is None else int(restarts)
    workers = min(4, os.cpu_count() or 1) if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if examples < 1:
        raise ValueError(f"examples must be >= 1, got {examples}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    points = tuple(points)
    if not points or any(p not in (0, 1, 2) for p in points):
        raise ValueError(f"points must be a non-empty subset of (0, 1, 2), got {points!r}")
    attacks = tuple(attacks)
    unknown = [a for a in attacks if a not in attacks_mod.available()]
    if not attacks or unknown:
        raise ValueError(f"attacks must be among {attacks_mod.available()}, got {list(attacks)}")
    defs = _resolve_defenses(defenses, defense_params)
    ds = data_mod.load(dataset, seed=seed) if isinstance(dataset, str) else dataset
    clients = max(prof.clients, examples)
    if model is None:
        model = models_mod.default_for(ds, generator=torch.Generator().manual_seed(seed))
    start_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    config = {"dataset": ds.name, "model": repr(model), "weights": _weights_digest(model),
              "seed": seed, "profile": profile, "examples": examples, "rounds": rounds,
              "max_iterations": max_iterations, "restarts": restarts, "threshold": threshold,
              "delta": delta, "trained": trained, "clients": clients}
    store = ResultsFile(results, config)
    cells = [(d, p, a, e) for d in defs for p in points for a in attacks for e in range(examples)]
    bar = tqdm(total=len(cells) + len(defs), disable=not progress, desc="audit")
    report = AuditReport(config=config, threshold=threshold, delta=delta)
    runner: _Engine | None = None
    try:
        for d in defs:
            key = d.describe()
            train = store.get("training", key)
            if train is None:
                train = _train_record(d, ds, model, prof, rounds, clients, seed, delta, trained)
                store.put("training", key, train)
            report.add_defense(key, d.name, train)
            bar.update(1)
            own = [c for c in cells if c[0] is d]
            pending = [c for c in own if not store.has("cell", _cell_key(*c))]
            bar.update(len(own) - len(pending))
            if not pending:
                continue
            attack_model = models_mod_copy(model, start_state)
            run = fl.simulate(attack_model, ds, _fresh(d, defense_params), clients=clients,
                              clients_per_round=examples, rounds=1, local_steps=1,
                              batch_size=1, lr=prof.attack_lr, seed=seed, progress=False,
                              taps=[fl.Tap(p, clients=examples) for p in points])
            jobs = []
            for cell in pending:
                _, p, a, e = cell
                obs = run.observations_at(p)[e]
                jobs.append((_cell_key(*cell), dict(
                    defense=key, point=p, attack=a, example=e,
                    model=models_mod_copy(model, obs.weights, strict=False),
                    gradients=_as_gradient(obs), truth=obs.inputs, labels=obs.labels,
                    input_shape=tuple(ds.input_shape), num_classes=ds.num_classes,
                    image=ds.kind == "image", max_iterations=max_iterations,
                    restarts=restarts, seed=seed + e, threshold=threshold)))
            if runner is None:  # started at the first pending cell: a full resume starts none
                runner = _make_engine(engine, workers, ray_address)
            with contextlib.closing(runner.run(jobs)) as finished:
                for ck, rec in finished:
                    store.put("cell", ck, rec)  # written as each finishes, by this process
                    bar.update(1)
    finally:
        if runner is not None:
            runner.close()
        bar.close()
    for cell in cells:  # canonical order, whatever order the cells finished in
        report.add_cell(store.get("cell", _cell_key(*cell)))
    return report


def _attack_cell(job: dict[str, Any]) -> dict[str, Any]:
    """Run one attack on one observation and score it (a pure function: runs in a worker).

    Always on one torch thread: float results depend on how a reduction is split between
    threads, and one thread is what a worker process or a Ray task has (one per core); so
    every engine, and any number of workers, gives the same results.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_attack_cell(job)
    finally:
        torch.set_num_threads(threads)


def _run_attack_cell(job: dict[str, Any]) -> dict[str, Any]:
    from . import attacks as attacks_mod
    from . import metrics

    t0 = time.perf_counter()
    rec = attacks_mod.reconstruct(
        job["attack"], job["model"], job["gradients"], input_shape=job["input_shape"],
        num_classes=job["num_classes"], batch_size=job["truth"].shape[0],
        max_iterations=job["max_iterations"], restarts=job["restarts"], seed=job["seed"],
        track=job["truth"], track_every=1)
    seconds = time.perf_counter() - t0
    truth = job["truth"]
    rec_x = rec.inputs[metrics.match(rec.inputs, truth)]
    mse = metrics.mse(rec_x, truth)
    thr = job["threshold"]
    return _finite_json({
        "defense": job["defense"], "point": job["point"], "attack": job["attack"],
        "example": job["example"], "mse": mse, "rmse": math.sqrt(mse),
        "psnr": metrics.psnr(rec_x, truth),
        "ssim": metrics.ssim(rec_x, truth) if job["image"] else None,
        "success": bool(metrics.success(mse, thr)),
        "tau": metrics.tau(rec.history, thr, job["max_iterations"]),
        "label_accuracy": metrics.label_accuracy(rec.labels, job["labels"]),
        "iterations": rec.iterations, "gradient_loss": rec.gradient_loss, "seconds": seconds,
        "truth": truth[0].tolist(), "reconstruction": rec_x[0].tolist(),
    })


def _worker_init() -> None:
    torch.set_num_threads(1)  # one process per core; no oversubscription


def _make_pool(workers: int) -> ProcessPoolExecutor:
    ctx = multiprocessing.get_context("spawn")  # fork after torch threads start can hang
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init)


# ---------------------------------------------------------------------------- engines
Jobs = list[tuple[str, dict[str, Any]]]


class _Engine:
    """Runs attack cells; ``run`` yields (cell key, record) as each cell finishes."""

    def run(self, jobs: Jobs) -> Iterator[tuple[str, dict[str, Any]]]:
        for ck, job in jobs:
            yield ck, _attack_cell(job)

    def close(self) -> None:
        pass


class _SerialEngine(_Engine):
    """In this process, one cell after another."""


class _ProcessEngine(_Engine):
    """A local pool of spawned processes; if they fail, the rest runs in this process."""

    def __init__(self, workers: int) -> None:
        self.pool = _make_pool(workers) if workers > 1 else None

    def run(self, jobs: Jobs) -> Iterator[tuple[str, dict[str, Any]]]:
        if self.pool is None:
            yield from super().run(jobs)
            return
        done: set[str] = set()
        try:
            futures = {self.pool.submit(_attack_cell, job): ck for ck, job in jobs}
            for fut in as_completed(futures):
                rec = fut.result()
                done.add(futures[fut])
                yield futures[fut], rec
        except BrokenProcessPool as exc:
            # e.g. audit() called from a script without `if __name__ == "__main__":`
            # (spawned workers re-run it): finish in this process, nothing is lost
            warnings.warn(f"worker processes failed ({exc}); continuing in this process",
                          RuntimeWarning, stacklevel=3)
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
            yield from super().run([(ck, job) for ck, job in jobs if ck not in done])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("engine='ray' needs Ray, which is not installed: "
                          "pip install 'leakaudit[ray]'") from exc
    return ray


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Set environment variables for the duration (those the caller set are kept)."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)


class _RayEngine(_Engine):
    """One Ray task per cell; the driver collects results as they finish (``ray.wait``)."""

    def __init__(self, workers: int, address: str | None) -> None:
        ray = self.ray = _import_ray()
        self.started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {}
            if address is None and not os.environ.get("RAY_ADDRESS"):
                # a local single-node instance with `workers` CPUs (with RAY_ADDRESS set,
                # ray.init joins that cluster, which takes no num_cpus)
                kwargs.update(num_cpus=workers, include_dashboard=False)
                if sys.platform.startswith("linux") and not os.path.isdir("/dev/shm"):
                    # Ray sizes and places its object store by /dev/shm; the cells are small
                    kwargs.update(object_store_memory=256 * 2**20,
                                  _plasma_directory=tempfile.gettempdir())
            # no usage statistics sent anywhere; the caller's own setting wins
            with _env(RAY_USAGE_STATS_ENABLED="0"):
                ray.init(address=address, **kwargs)
            self.started = True
        self.task = ray.remote(num_cpus=1)(_attack_cell)  # a cell: one CPU

    def run(self, jobs: Jobs) -> Iterator[tuple[str, dict[str, Any]]]:
        ray = self.ray
        keys = {self.task.remote(job): ck for ck, job in jobs}
        pending = list(keys)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    yield keys[ref], ray.get(ref)
        finally:
            for ref in pending:  # an error or an interrupt: stop what has not finished
                with contextlib.suppress(Exception):
                    ray.cancel(ref)

    def close(self) -> None:
        if self.started:  # never shut down a Ray the caller started
            self.ray.shutdown()
            self.started = False


def _make_engine(engine: str, workers: int, ray_address: str | None) -> _Engine:
    if engine == "serial":
        return _SerialEngine()
    if engine == "ray":
        return _RayEngine(workers, ray_address)
    return _ProcessEngine(workers)


def _cell_key(d: defenses_mod.Defense, point: int, attack: str, example: int) -> str:
    return f"{d.describe()}|{point}|{attack}|{example}"


def _fresh(d: defenses_mod.Defense, params: dict | None) -> defenses_mod.Defense:
    """A new defense object with the same parameters (no state carried between runs)."""
    import copy

    return copy.deepcopy(d)


def models_mod_copy(model: nn.Module, state: dict[str, torch.Tensor],
                    strict: bool = True) -> nn.Module:
    import copy

    net = copy.deepcopy(model)
    net.load_state_dict(state, strict=strict)
    return net


def _weights_digest(model: nn.Module) -> str:
    from .results import fingerprint

    flat = [float(p.detach().double().sum()) for p in model.state_dict().values()]
    return fingerprint({"sums": flat})


def _train_record(d: defenses_mod.Defense, ds: Any, model: nn.Module, prof: AuditProfile,
                  rounds: int, clients: int, seed: int, delta: float,
                  trained: bool) -> dict[str, Any]:
    if trained:
        run = fl.simulate(model, ds, _fresh(d, None), clients=clients,
                          clients_per_round=prof.clients_per_round, rounds=1,
                          local_steps=1, batch_size=1, lr=prof.attack_lr, seed=seed,
                          progress=False)
    else:
        run = fl.simulate(model, ds, _fresh(d, None), clients=clients,
                          clients_per_round=prof.clients_per_round, rounds=rounds,
                          local_steps=prof.local_steps, batch_size=prof.batch_size,
                          lr=prof.lr, optimizer=prof.optimizer, seed=seed, progress=False)
    return _finite_json({
        "defense": d.describe(), "name": d.name, "level": d.level,
        "accuracy": run.final_accuracy,
        "eps_claimed": run.epsilon(delta, "claimed"), "eps_sound": run.epsilon(delta, "sound"),
        "reason": d.claimed_vs_sound if d.level != "none" else "no DP guarantee",
        "settings": {k: v for k, v in run.settings.items() if k != "defense"},
    })


def _finite_json(rec: dict[str, Any]) -> dict[str, Any]:
    """JSON has no inf/NaN: store them as strings and turn them back on reading."""
    out: dict[str, Any] = {}
    for k, v in rec.items():
        if isinstance(v, float) and not math.isfinite(v):
            out[k] = "inf" if v > 0 else ("-inf" if v < 0 else "nan")
        elif isinstance(v, (np.floating, np.integer)):
            out[k] = v.item()
        else:
            out[k] = v
    return out
