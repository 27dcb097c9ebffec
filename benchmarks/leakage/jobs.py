"""The jobs of the curves, as units of the library's engines: one attack on the views of one
observed client (``fl.simulate``, the attack told what ``Attack.protocol`` declares), a
training run for eps, or an identification cell; their planning and execution."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from benchmarks._common import Stopwatch
from benchmarks.leakage.identification import identification_job
from benchmarks.leakage.profile import (
    DELTA,
    SITE_POINT,
    STAGES,
    Profile,
    build_model,
    load_dataset,
)
from leakaudit import attacks, data, fl, grads, metrics
from leakaudit import defenses as D
from leakaudit.auditing.identification import release_mu
from leakaudit.auditing.pipeline import protocol_options, with_weights
from leakaudit.auditing.results import ResultsFile
from leakaudit.engines import EngineConfig
from leakaudit.workload import Workload


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
