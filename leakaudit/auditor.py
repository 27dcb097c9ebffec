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
is done (:mod:`leakaudit.results`).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import warnings
from collections.abc import Sequence
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

__all__ = ["audit", "PROFILES", "DEFAULT_DEFENSES", "AuditProfile"]

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
    """
    from . import attacks as attacks_mod

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
    pool = _make_pool(workers) if workers > 1 else None
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
            if pool is None:
                for ck, job in jobs:
                    store.put("cell", ck, _attack_cell(job))
                    bar.update(1)
            else:
                try:
                    futures = {pool.submit(_attack_cell, job): ck for ck, job in jobs}
                    for fut in as_completed(futures):
                        store.put("cell", futures[fut], fut.result())  # written when done
                        bar.update(1)
                except BrokenProcessPool as exc:
                    # e.g. audit() called from a script without `if __name__ == "__main__":`
                    # (spawned workers re-run it): finish in this process, nothing is lost
                    warnings.warn(f"worker processes failed ({exc}); continuing in this "
                                  "process", RuntimeWarning, stacklevel=2)
                    pool.shutdown(cancel_futures=True)
                    pool = None
                    for ck, job in jobs:
                        if not store.has("cell", ck):
                            store.put("cell", ck, _attack_cell(job))
                            bar.update(1)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        bar.close()
    for cell in cells:  # canonical order, whatever order the cells finished in
        report.add_cell(store.get("cell", _cell_key(*cell)))
    return report


def _attack_cell(job: dict[str, Any]) -> dict[str, Any]:
    """Run one attack on one observation and score it (a pure function: runs in a worker)."""
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
