"""The cells of the leakage-curves benchmark: profiles, the runs a cell observes and attacks,
the jobs of the grid and the noise sweeps, and their execution on the library's engines
(:mod:`benchmarks.leakage_curves` is the command line and says what each section measures)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from benchmarks._common import (
    Stopwatch,
)
from leakaudit import attacks, data, fl, grads, metrics, models
from leakaudit import defenses as D
from leakaudit.auditing import identification
from leakaudit.auditing.identification import release_mu
from leakaudit.auditing.pipeline import protocol_options, with_weights
from leakaudit.auditing.results import ResultsFile
from leakaudit.engines import EngineConfig
from leakaudit.workload import Workload

COLUMNS = ("defense", "point", "attack", "model", "stage", "batch_size", "local_steps",
           "sigma", "eps_release", "eps_train", "mu", "asr", "psnr", "ssim",
           "identification", "bound_asr", "bound_id", "label_accuracy")
SWEEP_DEFENSES = ("fed-cdp", "fed-sdp-client", "fed-alpha-cdp", "adaclip")
#: training rounds behind each stage (weights after that many undefended FedAvg rounds)
STAGES = {"initial": 0, "round1": 1, "round5": 5}
DELTA = 1e-5
#: two-sided confidence level of the identification intervals (Clopper-Pearson)
ID_CONFIDENCE = 0.95
#: the leak point at which each defense site acts (its noise protects that point and later)
SITE_POINT = {"example": 2, "client": 1, "server": 0}


@dataclasses.dataclass(frozen=True)
class Profile:
    """Sizes of one run of the curves (every attack budget is explicit here)."""

    dataset: str
    models: tuple[str, ...]
    stages: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    local_steps: tuple[int, ...]
    grid_attacks: tuple[str, ...]
    sigmas: tuple[float, ...]
    sweep_defenses: tuple[str, ...]
    #: batch size -> attacks of the noise sweep
    sweep_attacks: tuple[tuple[int, tuple[str, ...]], ...]
    points: tuple[int, ...]
    #: attack -> optimiser steps
    iterations: tuple[tuple[str, int], ...]
    examples: int
    client_lr: float
    #: the standard training run (eps at each sigma; stages): N, K, T, L, B, lr, optimizer
    train: tuple[tuple[str, Any], ...]
    #: batches per sweep cell
    sweep_examples: int = 1
    #: sigmas at which the standard run's sound eps is computed (one training run each)
    eps_sigmas: tuple[float, ...] = ()
    #: adaptive refinement passes of the sigma grid
    refine: int = 0
    #: attack -> options (the schedule and TV of the signed-Adam attacks)
    options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    restarts: int = 1
    #: defense -> attacks of its sweep lines at every B instead of ``sweep_attacks`` (the
    #: per-tensor attacks against per-layer clipping)
    defense_attacks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: batches per batch size of the label-count section (c)
    label_batches: int = 10
    #: batch size -> factor on every grid attack's steps (B = 8 needs ~4x iDLG's B = 1 steps)
    budget_scale: tuple[tuple[int, int], ...] = ()
    #: section (d), the prior-aware attack: defenses, sigmas, candidate-set sizes, trials per
    #: cell, pool the targets and candidates come from, the defenses' clip
    id_defenses: tuple[str, ...] = ()
    id_sigmas: tuple[float, ...] = ()
    id_ks: tuple[int, ...] = (2, 10, 100)
    id_trials: int = 300
    id_pool: int = 300
    id_clip: float = 0.5


_TRAIN = (("clients", 10), ("clients_per_round", 5), ("rounds", 10), ("local_steps", 5),
          ("batch_size", 32), ("lr", 0.01), ("optimizer", "adam"))
_SIGMAS = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0)
_ADAM = (("tv_weight", 0.01), ("schedule", "cosine"))
_OPTIONS = (("ig", _ADAM), ("fedavg", _ADAM), ("ig-layer", _ADAM))
PROFILES: dict[str, Profile] = {
    "quick": Profile(
        dataset="digits", models=("lenet",), stages=("initial",),
        batch_sizes=(1, 8), local_steps=(1, 2),
        grid_attacks=("ig", "fedavg", "idlg", "fedavg-l2"), sigmas=_SIGMAS,
        sweep_defenses=("fed-cdp", "fed-sdp-client", "fed-alpha-cdp"),
        sweep_attacks=((1, ("ig",)),), points=(1,),
        defense_attacks=(("fed-alpha-cdp", ("idlg-layer",)),),
        iterations=(("ig", 300), ("fedavg", 300), ("idlg", 50), ("fedavg-l2", 30),
                    ("idlg-norm", 20), ("idlg-layer", 20), ("ig-layer", 300)),
        examples=1, client_lr=0.01, train=_TRAIN, sweep_examples=3,
        eps_sigmas=(1.0,), refine=2, options=_OPTIONS, budget_scale=((8, 4),),
        id_defenses=("fed-cdp", "fed-sdp-client"), id_sigmas=(0.5, 1.0, 2.0)),
    "full": Profile(
        dataset="fashion-mnist", models=("lenet", "relu_cnn"),
        stages=("initial", "round1", "round5"),
        batch_sizes=(1, 2, 4, 8, 16, 32), local_steps=(1, 2, 5, 10),
        grid_attacks=("ig", "fedavg", "idlg", "fedavg-l2"),
        sigmas=(0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 0.5, 1.0,
                2.0),
        sweep_defenses=SWEEP_DEFENSES,
        sweep_attacks=((1, ("ig", "idlg-norm", "idlg-layer")), (4, ("ig", "idlg-layer")),
                       (8, ("ig", "ig-layer"))),
        points=(0, 1, 2),
        iterations=(("ig", 2000), ("fedavg", 2000), ("idlg", 300), ("fedavg-l2", 300),
                    ("idlg-norm", 300), ("idlg-layer", 300), ("ig-layer", 2000)),
        examples=2, client_lr=0.01, train=_TRAIN, sweep_examples=4,
        eps_sigmas=(0.1, 0.3, 0.5, 1.0, 2.0), refine=3, options=_OPTIONS, restarts=2,
        defense_attacks=(("fed-alpha-cdp", ("idlg-layer", "ig-layer")),),
        budget_scale=((8, 4), (16, 8), (32, 8)),
        id_defenses=("fed-cdp", "fed-sdp-client"), id_sigmas=(0.5, 1.0, 2.0),
        id_trials=1000),
}
#: what the tiny profile changes in the quick one (one optimiser step per attack)
TINY = dict(batch_sizes=(1, 2), local_steps=(1, 2), sigmas=(0.0, 1.0),
            sweep_defenses=("fed-cdp",), sweep_attacks=((1, ("idlg",)),), points=(2,),
            iterations=(("ig", 2), ("fedavg", 2), ("idlg", 1), ("fedavg-l2", 1),
                        ("idlg-norm", 1), ("idlg-layer", 1), ("ig-layer", 2)),
            sweep_examples=1, eps_sigmas=(1.0,), refine=1, restarts=1, defense_attacks=(),
            train=(("clients", 2), ("clients_per_round", 2), ("rounds", 1),
                   ("local_steps", 1), ("batch_size", 4), ("lr", 0.01), ("optimizer", "sgd")),
            label_batches=1, budget_scale=(), id_defenses=("fed-cdp",), id_sigmas=(1.0,),
            id_ks=(2, 10), id_trials=20, id_pool=20)
PROFILES["tiny"] = dataclasses.replace(PROFILES["quick"], **TINY)


# ------------------------------------------------------------------------------ the cells
@functools.lru_cache(maxsize=2)
def load_dataset(name: str, seed: int) -> data.Dataset:
    """``data.load`` once per process (every job reads the same data; the jobs never change
    it), not once per job."""
    return data.load(name, seed=seed)


def build_model(name: str, ds: data.Dataset, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    if name == "lenet":
        return models.lenet(ds.in_channels, ds.image_size, ds.num_classes, generator=gen)
    if name == "relu_cnn":
        return models.relu_cnn(ds.in_channels, ds.image_size, ds.num_classes, generator=gen)
    raise ValueError(f"model must be 'lenet' or 'relu_cnn', got {name!r}")


def batch_indices(n: int, batch_size: int, example: int, seed: int) -> list[int]:
    """The examples a client holds: the same for every attack, L and defense (paired)."""
    rng = np.random.default_rng([seed, batch_size, example])
    return sorted(int(i) for i in rng.choice(n, size=batch_size, replace=False))


def observe(model: torch.nn.Module, ds: data.Dataset, defense: Any, idx: list[int],
            local_steps: int, lr: float, points: Sequence[int], seed: int) -> fl.Run:
    """One client holding ``idx`` takes ``local_steps`` full-batch SGD steps under
    ``defense``; the taps record what leaves it."""
    config = fl.FLConfig.make(clients=1, clients_per_round=1, rounds=1,
                              local_steps=local_steps, batch_size=len(idx), lr=lr,
                              partition=[idx], taps=[fl.Tap(p) for p in points], seed=seed,
                              progress=False)
    return fl.simulate(model, dataset=ds, defense=defense, config=config)


def attack_observation(obs: fl.Observation, model: torch.nn.Module, ds: data.Dataset,
                       attack: str, iterations: int, seed: int,
                       options: dict[str, Any] | None = None,
                       restarts: int = 1) -> attacks.Reconstruction:
    """Attack one observation with what the attacker sees (never the truth)."""
    net = with_weights(model, obs.weights)
    # what the protocol tells the attack, as it declares it (Attack.protocol)
    opts = {**dict(options or {}), **protocol_options(attack, obs)}
    return attacks.reconstruct(attack, net, obs.as_gradient(),
                               input_shape=tuple(ds.input_shape), num_classes=ds.num_classes,
                               batch_size=obs.batch_size, max_iterations=iterations,
                               restarts=restarts, seed=seed, **opts)


def score(rec: attacks.Reconstruction, truth: fl.GroundTruth,
          pool: torch.Tensor | None = None) -> dict[str, Any]:
    """Per-image scores against the truth (the scorer's only view of it)."""
    scores = metrics.image_scores(rec.inputs, truth.inputs, pool=pool)
    out = {"asr": scores["asr"], "psnr": scores["mean_psnr"], "ssim": scores["mean_ssim"],
           "images": len(truth.labels),
           "label_accuracy": metrics.label_accuracy(rec.labels, truth.labels)}
    if pool is not None:
        out["identification"] = scores["identification"]
    return out


def release_bound(run: fl.Run, defense: Any, point: int, kappas: dict[str, float],
                  guesses: int = 1) -> dict[str, float]:
    """The attacked release's sound eps, mu and the reconstruction bound at each kappa
    (times ``guesses``, the batch size: B guesses, capped at 1). Without a Gaussian mu:
    the (eps, delta) pair of the certified PLD at delta 1e-5 (add/remove, no group
    privacy)."""
    sites = getattr(defense, "sites", frozenset())
    if not any(SITE_POINT[s] >= point for s in sites):  # the noise acts after the leak
        return {"eps_release": math.inf, "mu": math.inf,
                **{f"bound_{k}": 1.0 for k in kappas}}
    eps = run.epsilon(DELTA, "sound")
    mu = release_mu(run.sound)
    out = {"eps_release": eps, "mu": math.nan if mu is None else mu}
    for k, kappa in kappas.items():
        kappa = min(1.0, guesses * kappa)
        if mu is not None:
            out[f"bound_{k}"] = metrics.rero_bound_gdp(kappa, mu)
        else:
            pairs = [] if not math.isfinite(eps) or eps > 300 else [(eps, DELTA)]
            out[f"bound_{k}"] = metrics.rero_bound_dp(kappa, pairs)
    return out


def thumbnail(x: torch.Tensor) -> list[list[int]]:
    """One image (C, H, W) in [0, 1] as 8-bit rows of its first channel (for the figure)."""
    return (x[0].clamp(0, 1) * 255).round().to(torch.uint8).tolist()


def run_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One job: a training run for eps, or one attack on every view of one observed client
    (the simulation is repeated per attack: cheap, and it keeps each job a pure function)."""
    clock = Stopwatch()
    with grads.torch_threads(1):  # one thread per worker; the caller's setting is restored
        rows = _job_rows(job)
    for row in rows:
        row["seconds"] = clock.seconds / len(rows)
    return rows


def _job_rows(job: dict[str, Any]) -> list[dict[str, Any]]:
    if job["kind"] == "identify":
        return identification_job(job)
    ds = load_dataset(job["dataset"], job["seed"])
    if job["kind"] == "eps":
        defense = D.get(job["defense"], sigma=job["sigma"])
        config = fl.FLConfig.make(seed=job["seed"], progress=False, **dict(job["train"]))
        run = fl.simulate(None, dataset=ds, defense=defense, config=config)
        return [{"eps_sound": run.epsilon(DELTA, "sound")}]
    model = build_model(job["model"], ds, job["seed"])
    if job["weights"] is not None:
        model.load_state_dict(job["weights"])
    defense = (D.get(job["defense"], sigma=job["sigma"]) if job["defense"] != "none"
               else "none")
    idx = batch_indices(len(ds.y_train), job["batch_size"], job["example"], job["seed"])
    run = observe(model, ds, defense, idx, job["local_steps"], job["lr"], job["points"],
                  job["seed"])
    out = []
    for obs in run.observations:
        rec = attack_observation(obs, model, ds, job["attack"], job["iterations"],
                                 job["seed"] + job["example"], dict(job["options"]),
                                 job["restarts"])
        truth = run.truth(obs)
        row = {"point": obs.point, "attack": job["attack"], **score(rec, truth, ds.x_train),
               **release_bound(run, defense, obs.point, dict(job["kappas"]),
                               job["batch_size"])}
        if job["example"] == 0:
            row["image"] = thumbnail(rec.inputs[0])
            row["truth"] = thumbnail(truth.inputs[0])
        out.append(row)
    return out


# ------------------------------------------------------------------------------ planning
def _common(prof: Profile, seed: int, kappas: dict[str, float]) -> dict[str, Any]:
    return {"dataset": prof.dataset, "seed": seed, "lr": prof.client_lr,
            "kappas": sorted(kappas.items()), "restarts": prof.restarts}


def plan(prof: Profile, seed: int, weights: dict[tuple[str, str], Any],
         kappas: dict[str, float]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, job) of the undefended grid and the eps runs; a key names everything its
    result depends on, so a run resumes across edits of the profile's lists."""
    its, opts = dict(prof.iterations), dict(prof.options)
    scale = dict(prof.budget_scale)
    common = _common(prof, seed, kappas)
    for m in prof.models:
        for stage in prof.stages:
            for b in prof.batch_sizes:
                for steps in prof.local_steps:
                    for e in range(prof.examples):
                        for a in prof.grid_attacks:
                            n_its = its[a] * scale.get(b, 1)
                            yield f"grid|{m}|{stage}|{b}|{steps}|{e}|{a}|{n_its}", {
                                **common, "kind": "grid", "model": m, "stage": stage,
                                "weights": weights[(m, stage)], "defense": "none",
                                "sigma": 0.0, "batch_size": b, "local_steps": steps,
                                "example": e, "points": (1,), "attack": a,
                                "iterations": n_its, "options": opts.get(a, ())}
    for d in prof.sweep_defenses:
        for sigma in prof.eps_sigmas:
            yield f"eps|{d}|{sigma}", {**common, "kind": "eps", "defense": d, "sigma": sigma,
                                        "train": prof.train}


def sweep_jobs(prof: Profile, seed: int, weights: dict[tuple[str, str], Any],
               kappas: dict[str, float], defense: str, batch_size: int,
               sigmas: Sequence[float]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, job) of one sweep line (defense, B) at ``sigmas``."""
    its, opts = dict(prof.iterations), dict(prof.options)
    names = dict(prof.defense_attacks).get(defense, dict(prof.sweep_attacks)[batch_size])
    m = prof.models[0]
    for sigma in sigmas:
        for e in range(prof.sweep_examples):
            for a in names:
                yield f"sweep|{defense}|{sigma:.6g}|{batch_size}|{e}|{a}|{its[a]}", {
                    **_common(prof, seed, kappas), "kind": "sweep", "model": m,
                    "stage": "initial", "weights": weights[(m, "initial")],
                    "defense": defense, "sigma": float(f"{sigma:.6g}"),
                    "batch_size": batch_size, "local_steps": 1, "example": e,
                    "points": prof.points, "attack": a, "iterations": its[a],
                    "options": opts.get(a, ())}


def leak_levels(rows: list[dict[str, Any]]) -> dict[float, float]:
    """sigma -> success of one line: the best over attacks and points of max(ASR,
    identification)."""
    out: dict[float, float] = {}
    for r in rows:
        level = max(r["asr"], r.get("identification", 0.0))
        out[r["sigma"]] = max(out.get(r["sigma"], 0.0), level)
    return out


def refine_sigmas(levels: dict[float, float]) -> list[float]:
    """New sigmas: geometric midpoints of the gaps (last fully leaking, next) and (last
    leaking, first resisting) of one line; a gap narrower than x1.5 is left alone."""
    grid = sorted(levels)
    new = set()
    full = [i for i, s in enumerate(grid) if levels[s] >= 1.0]
    some = [i for i, s in enumerate(grid) if levels[s] > 0.0]
    for idx in ({full[-1]} if full else set()) | ({some[-1]} if some else set()):
        if idx + 1 >= len(grid):
            continue
        a, b = grid[idx], grid[idx + 1]
        if a > 0 and b / a < 1.5:
            continue
        mid = math.sqrt(a * b) if a > 0 else b / math.sqrt(10.0)
        new.add(float(f"{mid:.3g}"))
    return sorted(new - set(grid))


def stage_weights(prof: Profile, ds: data.Dataset, seed: int) -> dict[tuple[str, str], Any]:
    """Weights of every (model, stage): initial, or after k undefended FedAvg rounds of the
    standard training run."""
    out: dict[tuple[str, str], Any] = {}
    for m in prof.models:
        for stage in {"initial", *prof.stages}:
            rounds = STAGES[stage]
            if rounds == 0:
                out[(m, stage)] = None
                continue
            train = {**dict(prof.train), "rounds": rounds}
            config = fl.FLConfig.make(seed=seed, progress=False, **train)
            run = fl.simulate(build_model(m, ds, seed), dataset=ds, defense="none",
                              config=config)
            out[(m, stage)] = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
    return out


@dataclasses.dataclass
class Job:
    """One job as a unit of the library's engines (:mod:`leakaudit.engines`)."""

    job: dict[str, Any]

    def run(self) -> dict[str, Any]:
        return {"rows": run_job(self.job)}


def engine_of(args: argparse.Namespace) -> EngineConfig:
    """Where the jobs run: ``--engine`` with ``--workers`` (one worker: this process) and,
    for Ray, ``--ray-address`` (or ``RAY_ADDRESS``)."""
    if args.engine == "process" and args.workers <= 1:
        return EngineConfig.make("serial")
    return EngineConfig.make(args.engine, workers=args.workers,
                             ray_address=args.ray_address)


def execute(jobs: list[tuple[str, dict[str, Any]]], store: ResultsFile,
            engine: EngineConfig) -> None:
    """Run the jobs not in ``store`` yet on ``engine``; each result is stored as it
    finishes (resume)."""
    units = [(k, Job(j)) for k, j in jobs]
    with Workload(engine, total=len(units), done=0, desc="leakage curves",
                  progress=False) as work:
        work.units(store, "job", units)


def run_sweeps(prof: Profile, seed: int, weights: dict[tuple[str, str], Any],
               kappas: dict[str, float], store: ResultsFile, engine: EngineConfig,
               first: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The base pass (with ``first``, the grid and eps jobs, in one pool), then
    ``prof.refine`` passes adding the midpoints of every line's gaps."""
    lines = [(d, b) for d in prof.sweep_defenses for b, _ in prof.sweep_attacks]
    sigmas = {line: list(prof.sigmas) for line in lines}
    jobs = [j for line in lines for j in sweep_jobs(prof, seed, weights, kappas, *line,
                                                    sigmas[line])]
    execute(first + jobs, store, engine)
    for _ in range(prof.refine):
        new = []
        for line in lines:
            mine = [r for k, j in jobs if (j["defense"], j["batch_size"]) == line
                    for r in _rows_with_sigma(store, k, j)]
            extra = refine_sigmas(leak_levels(mine))
            sigmas[line] += extra
            new += list(sweep_jobs(prof, seed, weights, kappas, *line, extra))
        if not new:
            break
        execute(new, store, engine)
        jobs += new
    return jobs


def _rows_with_sigma(store: ResultsFile, key: str, job: dict[str, Any]
                     ) -> list[dict[str, Any]]:
    return [{**r, "sigma": job["sigma"]} for r in store.get("job", key)["rows"]]


# ------------------------------------------------------------------------------ results
def collect(jobs: list[tuple[str, dict[str, Any]]], store: ResultsFile) -> list[dict[str, Any]]:
    """One CSV row per (defense, sigma, point, attack, model, stage, B, L), averaged over
    the batches of the cell (ASR and identification over all their images)."""
    eps = {(j["defense"], j["sigma"]): store.get("job", k)["rows"][0]["eps_sound"]
           for k, j in jobs if j["kind"] == "eps"}
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for key, job in jobs:
        if job["kind"] in ("eps", "identify"):
            continue
        for r in store.get("job", key)["rows"]:
            cell = (job["defense"], r["point"], r["attack"], job["model"], job["stage"],
                    job["batch_size"], job["local_steps"], job["sigma"])
            cells.setdefault(cell, []).append(r)
    rows = []
    for cell, rs in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0][:7]))
                           + (kv[0][7],)):
        defense, sigma = cell[0], cell[7]
        rows.append(dict(zip(COLUMNS, (
            *cell, rs[0].get("eps_release", math.inf),
            math.inf if defense == "none" or sigma == 0 else eps.get((defense, sigma),
                                                                     math.nan),
            rs[0].get("mu", math.inf), _share(rs, "asr"), _mean(rs, "psnr"),
            _mean(rs, "ssim"), _share(rs, "identification"), rs[0].get("bound_asr", 1.0),
            rs[0].get("bound_id", 1.0), _mean(rs, "label_accuracy"))),
            images=sum(r["images"] for r in rs)))
    return rows


def _share(rs: list[dict[str, Any]], name: str) -> float:
    """Image-weighted mean of a per-batch share."""
    return sum(r.get(name, math.nan) * r["images"] for r in rs) / sum(r["images"] for r in rs)


def _mean(rs: list[dict[str, Any]], name: str) -> float:
    return float(np.mean([r.get(name, math.nan) for r in rs]))


def store_config(prof: Profile, args: argparse.Namespace) -> dict[str, Any]:
    return {"dataset": prof.dataset, "seed": args.seed, "lr": prof.client_lr,
            "train": prof.train, "points": prof.points, "options": prof.options,
            "version": 3}


def identification_cell(defense: Any, ds: data.Dataset, model: torch.nn.Module,
                        ks: Sequence[int], trials: int, pool: int, lr: float, seed: int
                        ) -> list[dict[str, Any]]:
    """Hayes et al.'s prior-aware attack against one defense at B = 1, L = 1, leak point 1,
    one :func:`leakaudit.auditing.identification.identification` per k: ``trials``
    releases each, of a target drawn uniformly from a pool of ``pool`` training images,
    among k candidates (kappa = 1 / k), every release with a noise draw of its own (per
    defense, sigma, k and trial: no two cells share one); scored on the whole release and
    on each tensor, the best scorer with its Bonferroni interval. Bound: Phi(Phi^-1(1/k) +
    mu), mu the attacked release's add/remove mu from its sound ledger."""
    out = []
    for k in ks:
        budget = identification.IdentificationBudget(k=k, trials=trials, pool=pool,
                                                     confidence=ID_CONFIDENCE)
        r = identification.identification(model, ds, defense, point=1, budget=budget,
                                          lr=lr, seed=seed, cell=f"k={k}")
        out.append({"defense": defense.name, "sigma": float(defense.params()["sigma"]),
                    **{c: r[c] for c in ("k", "trials", "successes", "success", "ci_low",
                                         "ci_high", "mu", "bound", "scorer")},
                    "kappa": metrics.prior_success_identification(k),
                    "ratio": r["success"] / r["bound"]})
    return out


def identification_model(ds: data.Dataset, seed: int) -> torch.nn.Module:
    """The model of the identification cells: a ReLU MLP with one hidden layer of 100 units
    (untrained, PyTorch's default initialisation), whose per-example gradients of different
    digits are far from parallel (untrained LeNet-Sigmoid maps two digits of one label to
    gradients of cosine ~0.99, which no attack can tell apart)."""
    gen = torch.Generator().manual_seed(seed)
    return models.mlp(int(np.prod(ds.input_shape)), ds.num_classes, (100,), "relu",
                      generator=gen)


def identification_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    ds = load_dataset(job["dataset"], job["seed"])
    defense = D.get(job["defense"], clip=job["clip"], sigma=job["sigma"])
    with grads.torch_threads(1):
        return identification_cell(defense, ds, identification_model(ds, job["seed"]),
                                   job["ks"], job["trials"], job["pool"], job["lr"],
                                   job["seed"])
