"""The one-call audit: train under each defense, tap the leak points, attack, score, report.

Data flows one way (docs/attacks.md, "The audit"):
  data -> simulator (+ defense) -> leak point -> attack -> metrics -> report.

Per defense a *training* run (the profile's federated setting, with the profile's defense
parameters: ``AuditProfile.defense_params``, at which the quick profile's defended models
learn) gives test accuracy and the claimed and sound eps; then per audited ``stage`` an
*attack* run takes one round from the weights of that stage ("initial"; after 1 or 5 rounds
of the training run under the defense: "round1", "round5"; or at its end: "trained") with
``local_steps`` local SGD steps of batch size
``batch_size`` (default 1 and 1, the DLG/iDLG/CPL setting: the three leak points then differ
only by where the defense acted) and taps points 0, 1, 2 for ``examples`` sampled clients.
With L > 1 each attacked client holds exactly B examples and takes every step on all of them
(L local epochs: the FedAvg case of Geiping et al.). Types 1 and 0 observe an update dW;
the attacker uses g = -dW / (lr * L) as the gradient (exact for L = 1); an attack is also
told what it declares it needs from the observation (``Attack.protocol``: the "fedavg"
attacks get L, lr and the optimizer and simulate the local steps). From the observations on,
the audit is :func:`leakaudit.audit_observations`'s: the same job builder and run loop
(:mod:`.pipeline`), which runs a cell once per distinct content: where leak points or
defenses give the very same observation (points 0 and 1 of a defense acting elsewhere,
point 2 of every defense acting after the local step), the others reuse its record.

Every finished cell is appended to the results file; a rerun with the same file skips what
is done (:mod:`.results`). The attack cells (:mod:`.cells`) are independent and run on an *engine*
(:mod:`.engines`): "serial" (this process), "process" (a local process pool) or "ray" (Ray tasks,
on a local Ray instance or a cluster). Whatever the engine, results come back to this process,
which alone writes the results file, as each cell finishes: resuming works the same way and
the same seed gives the same table.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from tqdm.auto import tqdm

from .. import attacks as attacks_mod
from .. import data as data_mod
from .. import defenses as defenses_mod
from .. import fl
from .. import models as models_mod
from .._jsonsafe import finite_json
from .._validate import check_device, check_int, check_number, check_probability
from ..fl.simulate import evaluate
from ..records import ResultsFile, fingerprint
from .cells import CellJob
from .engines import ENGINES, Engine, check_ray_address, import_ray, make_engine
from .pipeline import Target, build_jobs, run_jobs
from .report import AuditReport

__all__ = ["audit", "PROFILES", "DEFAULT_DEFENSES", "AuditProfile", "ENGINES", "MeasuredEps",
           "PAPER_PARAMS", "STAGES"]

#: training stage of the audited weights -> rounds of the training run before the attack
#: (None: all of them, the profile's ``rounds``; the weights whose accuracy the report shows)
STAGES: dict[str, int | None] = {"initial": 0, "round1": 1, "round5": 5, "trained": None}

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
    #: parameters of a bare defense name in this profile (over ``PAPER_PARAMS``; the
    #: caller's ``defense_params`` override both)
    defense_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


#: The quick profile's DP parameters: the papers' (clip 4, sigma 6) leave LeNet at chance on
#: digits (test accuracy 0.08-0.20 after training); with these, T = 30 rounds of L = 10 Adam
#: steps reach (seed 0, measured 2026-11-25) fed-cdp 0.85 at sound eps 54, fed-alpha-cdp
#: 0.88 (sound eps inf: its data-dependent noise scale), fed-sdp 0.96 at sound eps ~6,500
#: (client-level DP with 10 clients: no meaningful guarantee), delta 1e-5, against 0.97
#: undefended (benchmarks/utility.py has the same training setting).
QUICK_DEFENSE_PARAMS: dict[str, dict[str, Any]] = {
    "fed-sdp-server": {"clip": 3.0, "sigma": 0.1},
    "fed-sdp-client": {"clip": 3.0, "sigma": 0.1},
    "fed-cdp": {"clip": 4.0, "sigma": 0.7},
    "fed-alpha-cdp": {"clip": 4.0, "sigma": 0.7},
}

PROFILES: dict[str, AuditProfile] = {
    # minutes on 2 cores with the built-in digits: the utility benchmark's training setting
    "quick": AuditProfile(clients=10, clients_per_round=5, rounds=30, local_steps=10,
                          batch_size=32, lr=0.01, optimizer="adam", examples=2,
                          max_iterations=40, restarts=1, attack_lr=0.1,
                          defense_params=QUICK_DEFENSE_PARAMS),
    # the papers' attack budget (300 L-BFGS steps, more examples); hours
    "paper": AuditProfile(clients=100, clients_per_round=10, rounds=100, local_steps=10,
                          batch_size=32, lr=0.01, optimizer="adam", examples=20,
                          max_iterations=300, restarts=2, attack_lr=0.1),
}

#: defense parameters used when the caller gives a bare name (the source papers' settings;
#: the one table of :mod:`leakaudit.defenses`, which every entry point uses)
PAPER_PARAMS = defenses_mod.PAPER_PARAMS


class MeasuredEps(Protocol):
    """A measured lower bound on eps of a defense's releases at the audited points (the
    largest over the points where it releases; 0 where it releases nothing there), from
    ``trials`` runs per side: e.g. :class:`leakaudit.api.EmpiricalEps`, the empirical
    audit's. (The audit and the empirical audit are siblings: the caller wires them.)"""

    trials: int

    def __call__(self, defense: Any, points: Sequence[int], *, delta: float,
                 seed: int) -> float: ...


@dataclass(frozen=True)
class _Plan:
    """The checked sizes of one audit call."""

    profile: AuditProfile
    examples: int
    rounds: int
    max_iterations: int
    restarts: int
    workers: int
    points: tuple[int, ...]
    attacks: tuple[str, ...]
    batch_size: int = 1
    local_steps: int = 1
    stages: tuple[str, ...] = ("initial",)
    #: where the attacks run ("cpu", "cuda", ...; None: the CPU, where the model is built)
    device: str | None = None


def _resolve_defenses(defenses: Sequence[Any], params: dict[str, dict[str, Any]] | None,
                      profile: AuditProfile | None = None) -> list[defenses_mod.Defense]:
    """Defense objects as given; a bare name with the profile's parameters, overridden by
    ``params``."""
    base = {} if profile is None else profile.defense_params
    out = []
    for d in defenses:
        if isinstance(d, defenses_mod.Defense):
            out.append(d)
            continue
        if not isinstance(d, str):
            raise ValueError(f"defenses must be names or Defense objects, got {d!r}")
        out.append(defenses_mod.get(d, **{**base.get(d, {}), **(params or {}).get(d, {})}))
    names = [d.describe() for d in out]
    if len(set(names)) != len(names):
        raise ValueError(f"defenses must be distinct, got {names}")
    return out


def audit(
    defenses: Sequence[Any] = DEFAULT_DEFENSES,
    *,
    dataset: Any = "digits",
    model: nn.Module | None = None,
    attacks: Sequence[str] = ("dlg", "idlg", "cpl"),
    points: Sequence[int] = (0, 1, 2),
    examples: int | None = None,
    rounds: int | None = None,
    seed: int = 0,
    profile: str = "quick",
    results: str | None = None,
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
    batch_size: int = 1,
    local_steps: int = 1,
    stage: str = "initial",
    device: str | None = None,
    measure: MeasuredEps | None = None,
    stages: Sequence[str] | None = None,
) -> AuditReport:
    """Audit defenses against gradient-leakage attacks; see the module docstring. Every
    argument after ``defenses`` is keyword-only.

    Args:
        defenses: names (bare names get the profile's parameters,
            ``AuditProfile.defense_params``, else the source papers', ``PAPER_PARAMS``;
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
        batch_size, local_steps, stage: B, L (L > 1: each attacked client holds B examples)
            and weights (``STAGES``) attacked; device: "cpu", "cuda[:i]" or "auto" (attacks).
        stages: several stages, e.g. ``("initial", "trained")`` (replaces ``stage``): a report
            row per (defense, stage), with the attacked weights' accuracy and eps spent.
        measure: a measured lower bound on eps of each defense's releases at the audited
            points (:class:`MeasuredEps`; ``leakaudit.audit(empirical=True)`` passes the
            empirical audit's): the defense table gains a "measured eps >=" column.
    """
    _check_engine(engine, ray_address)
    _check_numbers(threshold, delta, seed)
    plan = _plan(profile, examples, rounds, max_iterations, restarts, workers, points, attacks,
                 batch_size, local_steps, _stages(stage, stages), device)
    defs = _resolve_defenses(defenses, defense_params, plan.profile)
    ds = data_mod.resolve(dataset, seed=seed)
    model = models_mod.resolve(model, ds, seed=seed)
    clients = max(plan.profile.clients, plan.examples)
    config = (_config(ds, model, seed, profile, plan, threshold, delta, trained, clients)
              | _empirical_config(measure))
    store = ResultsFile(results, config)
    cells = [(d, *c) for d in defs for c in _cells(plan)]
    bar = tqdm(total=len(cells) + len(defs), disable=not progress, desc="audit")
    report = AuditReport(config=config, threshold=threshold, delta=delta)
    runner: Engine | None = None
    memo: dict[str, dict[str, Any]] = {}  # cells of the same content run once (run_jobs)
    try:
        for d in defs:
            trained_net: dict[str, nn.Module] = {}  # the training run's model once trained
            train = _training(d, store, bar, ds, model, plan, clients, seed, delta, trained,
                              measure, trained_net)
            report.add_defense(d.describe(), d.name, train)
            bar.update(1)
            for stage in plan.stages:
                jobs = _stage(d, stage, cells, store, bar, report, ds, model, plan, clients,
                              seed, delta, threshold, trained, train, trained_net)
                if jobs and runner is None:  # started at the first pending cell, if any
                    runner = make_engine(engine, plan.workers, ray_address)
                if jobs:
                    run_jobs(jobs, runner, store, on_done=lambda: bar.update(1), memo=memo)
    finally:
        if runner is not None:
            runner.close()
        bar.close()
    return _with_cells(report, store, cells)


def _stage(d: defenses_mod.Defense, stage: str, cells: list[tuple], store: ResultsFile,
           bar: Any, report: AuditReport, ds: data_mod.Dataset, model: nn.Module, plan: _Plan,
           clients: int, seed: int, delta: float, threshold: float, trained: bool,
           train: dict[str, Any], trained_net: dict[str, nn.Module]
           ) -> list[tuple[str, CellJob]]:
    """One stage of one defense: its record into the report (stored, or the stage's
    weights made now and stored) and the jobs of its pending cells (none when resumed)."""
    own = [c for c in cells if c[0] is d and c[1] == stage]
    pending = [c for c in own if not store.has("cell", _cell_key(*c))]
    bar.update(len(own) - len(pending))
    key = f"{d.describe()}|{stage}"
    done = store.get("stage", key)
    if not pending and done is not None:
        report.add_stage(d.describe(), stage, done)
        return []
    bar.set_description(f"{d.name}: {stage} weights")
    start, info = _stage_model(d, ds, model, plan, clients, seed, stage, delta, trained, train,
                               trained_net)
    if done is None:
        store.put("stage", key, info)
    report.add_stage(d.describe(), stage, done or info)
    if not pending:
        return []
    bar.set_description(f"{d.name}: attack {stage}")
    return _attack_jobs(d, ds, start, model, plan, clients, seed, threshold, stage,
                        pending={_cell_key(*c) for c in pending})


def _check_numbers(threshold: float, delta: float, seed: int) -> None:
    check_number("threshold", threshold, minimum=0.0, open_min=True)
    check_probability("delta", delta)
    check_int("seed", seed, 0)


def _training(d: defenses_mod.Defense, store: ResultsFile, bar: Any, ds: data_mod.Dataset,
              model: nn.Module, plan: _Plan, clients: int, seed: int, delta: float,
              trained: bool, measure: MeasuredEps | None,
              trained_net: dict[str, nn.Module]) -> dict[str, Any]:
    """The defense's training record (stored, or trained now and stored, its model kept in
    ``trained_net["model"]`` for the "trained" stage), with the measured eps when asked; the
    progress bar says which phase runs."""
    bar.set_description(f"{d.name}: train")
    train = store.get("training", d.describe())
    if train is None:
        train = _train_record(d, ds, model, plan, clients, seed, delta, trained, trained_net)
        store.put("training", d.describe(), train)
    if measure is not None and "eps_measured" not in train:
        bar.set_description(f"{d.name}: measure eps")
    return _with_measured(train, d, store, plan.points, measure, seed, delta)


def _cells(plan: _Plan) -> list[tuple[str, int, str, int]]:
    """(stage, point, attack, example) of every cell of one defense."""
    return [(s, p, a, e) for s in plan.stages for p in plan.points for a in plan.attacks
            for e in range(plan.examples)]


def _with_cells(report: AuditReport, store: ResultsFile, cells: list[tuple]) -> AuditReport:
    """The report with every cell, in canonical order (whatever order they finished in),
    each with its stage."""
    for cell in cells:
        report.add_cell(dict(store.get("cell", _cell_key(*cell)), stage=cell[1]))
    return report


def _config(ds: data_mod.Dataset, model: nn.Module, seed: int, profile: str, plan: _Plan,
            threshold: float, delta: float, trained: bool, clients: int) -> dict[str, Any]:
    """What the report records about the audit (and the results file's fingerprint)."""
    return {"dataset": ds.name, "model": repr(model), "weights": _weights_digest(model),
            "seed": seed, "profile": profile, "examples": plan.examples,
            "rounds": plan.rounds, "max_iterations": plan.max_iterations,
            "restarts": plan.restarts, "threshold": threshold, "delta": delta,
            "trained": trained, "clients": clients, "batch_size": plan.batch_size,
            "local_steps": plan.local_steps, "stage": ", ".join(plan.stages),
            "device": plan.device}


def _empirical_config(measure: MeasuredEps | None) -> dict[str, Any]:
    """The config entry of a measured audit (none otherwise: old results files resume)."""
    if measure is None:
        return {}
    return {"empirical_trials": check_int("empirical_trials", measure.trials, 100)}


def _with_measured(train: dict[str, Any], defense: Any, store: ResultsFile,
                   points: Sequence[int], measure: MeasuredEps | None, seed: int,
                   delta: float) -> dict[str, Any]:
    """The training record with "eps_measured": the largest measured lower bound on eps over
    the points where the defense releases (stored, so a resumed audit does not remeasure)."""
    if measure is None or "eps_measured" in train:
        return train
    train = dict(train, eps_measured=measure(defense, points, delta=delta, seed=seed))
    store.put("training", defense.describe(), train)
    return train


def _check_engine(engine: str, ray_address: str | None) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    if ray_address is not None and engine != "ray":
        raise ValueError(f"ray_address is only used with engine='ray', got engine={engine!r}")
    if engine == "ray":
        import_ray()  # fail before any work if Ray is missing
        check_ray_address(ray_address)  # or nothing answers at the address


def _stages(stage: str, stages: Sequence[str] | None) -> tuple[str, ...]:
    """The audited stages: ``stages`` (distinct names of ``STAGES``, at least one), else
    ``stage`` alone."""
    if stages is None:
        if not isinstance(stage, str) or stage not in STAGES:
            raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
        return (stage,)
    if stage != "initial":
        raise ValueError(f"give stage or stages, not both (stage={stage!r}, stages={stages!r})")
    if isinstance(stages, str) or not isinstance(stages, Sequence):
        raise ValueError(f"stages must be a sequence of stage names, got {stages!r}")
    out = tuple(stages)
    bad = [s for s in out if not isinstance(s, str) or s not in STAGES]
    if not out or bad or len(set(out)) != len(out):
        raise ValueError(f"stages must be distinct names among {list(STAGES)}, at least one, "
                         f"got {list(out)}")
    return out


def _plan(profile: str, examples: int | None, rounds: int | None,
          max_iterations: int | None, restarts: int | None, workers: int | None,
          points: Sequence[int], attacks: Sequence[str], batch_size: int = 1,
          local_steps: int = 1, stages: Sequence[str] = ("initial",),
          device: str | None = None) -> _Plan:
    """Check the sizes of an audit (the profile's unless given)."""
    where = check_device("device", device)
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    prof = PROFILES[profile]
    points = tuple(points)
    if not points or any(p not in (0, 1, 2) for p in points):
        raise ValueError(f"points must be a non-empty subset of (0, 1, 2), got {points!r}")
    attacks = tuple(attacks)
    unknown = [a for a in attacks if a not in attacks_mod.available()]
    if not attacks or unknown:
        raise ValueError(f"attacks must be among {attacks_mod.available()}, got {list(attacks)}")
    return _Plan(
        profile=prof, points=points, attacks=attacks,
        examples=check_int("examples", prof.examples if examples is None else examples, 1),
        rounds=check_int("rounds", prof.rounds if rounds is None else rounds, 1),
        max_iterations=check_int("max_iterations", prof.max_iterations
                                 if max_iterations is None else max_iterations, 1),
        restarts=check_int("restarts", prof.restarts if restarts is None else restarts, 1),
        workers=check_int("workers", min(4, os.cpu_count() or 1)
                          if workers is None else workers, 1),
        batch_size=check_int("batch_size", batch_size, 1),
        local_steps=check_int("local_steps", local_steps, 1),
        stages=tuple(stages), device=None if where is None else str(where))


def _attack_round(d: defenses_mod.Defense, ds: data_mod.Dataset, start: nn.Module,
                  plan: _Plan, clients: int, seed: int) -> fl.Run:
    """The attacked round: one round from the stage's weights ``start``, L local steps of
    batch B, taps at the audited points for ``plan.examples`` clients (each holding exactly
    B examples when L > 1: L local epochs)."""
    setting: dict[str, Any] = {"clients": clients}
    if plan.local_steps > 1:  # each attacked client holds B examples: L local epochs
        setting = {"clients": plan.examples,
                   "partition": _holdings(len(ds.y_train), plan.examples, plan.batch_size,
                                          seed)}
    return fl.simulate(start, dataset=ds, defense=copy.deepcopy(d),
                       clients_per_round=plan.examples, rounds=1,
                       local_steps=plan.local_steps, batch_size=plan.batch_size,
                       lr=plan.profile.attack_lr, seed=seed, progress=False,
                       batch_sampling="shuffle",  # the attacks' view: exactly B examples
                       taps=[fl.Tap(p, clients=plan.examples) for p in plan.points],
                       **setting)


def _attack_jobs(d: defenses_mod.Defense, ds: data_mod.Dataset, start: nn.Module,
                 model: nn.Module, plan: _Plan, clients: int, seed: int, threshold: float,
                 stage: str, pending: set[str]) -> list[tuple[str, CellJob]]:
    """The attacked round's observations (from the stage's weights ``start``), through the
    pipeline every audit shares (:func:`.pipeline.build_jobs`): one job per pending cell."""
    run = _attack_round(d, ds, start, plan, clients, seed)
    targets = [Target(observation=obs, truth=run.truth(obs), defense=d.describe(),
                      example=e, seed=seed + e)
               for p in plan.points for e, obs in enumerate(run.observations_at(p))
               if e < plan.examples]
    return build_jobs(targets, plan.attacks, model, input_shape=ds.input_shape,
                      num_classes=ds.num_classes, threshold=threshold,
                      max_iterations=plan.max_iterations, restarts=plan.restarts,
                      image=ds.kind == "image", device=plan.device,
                      key=lambda i, t, a: _cell_key(d, stage, t.observation.point, a,
                                                    t.example),
                      pending=pending.__contains__)


def _stage_model(d: defenses_mod.Defense, ds: data_mod.Dataset, model: nn.Module,
                 plan: _Plan, clients: int, seed: int, stage: str, delta: float,
                 trained: bool, train: dict[str, Any], trained_net: dict[str, nn.Module]
                 ) -> tuple[nn.Module, dict[str, Any]]:
    """The weights of the audited ``stage`` and their record: the starting model, or that
    model after ``STAGES[stage]`` rounds of the profile's training run under the defense
    ("trained": all ``plan.rounds``, the training run's own model; with ``trained``, the given
    weights); the record holds the rounds, the test accuracy of these weights and the eps
    their training spent (0 before any round)."""
    rounds = STAGES[stage]
    rounds = (0 if trained else plan.rounds) if rounds is None else rounds
    info: dict[str, Any] = {"stage": stage, "rounds": rounds}
    if rounds == 0:
        net = copy.deepcopy(model)
        spent = None if trained else 0.0  # given trained weights: their eps is unknown
        return net, finite_json({**info, "accuracy": _accuracy(net, ds), "eps_claimed": spent,
                                 "eps_sound": spent})
    if rounds == plan.rounds and not trained:
        if "model" not in trained_net:  # resumed: the same seed trains the same model
            _train_record(d, ds, model, plan, clients, seed, delta, trained, trained_net)
        return trained_net["model"], {**info, **{k: train[k] for k in (
            "accuracy", "eps_claimed", "eps_sound")}}
    prof = plan.profile
    run = fl.simulate(model, dataset=ds, defense=copy.deepcopy(d), clients=clients,
                      clients_per_round=prof.clients_per_round, rounds=rounds,
                      local_steps=prof.local_steps, batch_size=prof.batch_size, lr=prof.lr,
                      optimizer=prof.optimizer, seed=seed, progress=False)
    return run.model, finite_json({**info, "accuracy": run.final_accuracy,
                                   "eps_claimed": run.epsilon(delta, "claimed"),
                                   "eps_sound": run.epsilon(delta, "sound")})


def _accuracy(model: nn.Module, ds: data_mod.Dataset) -> float:
    """Test accuracy of ``model`` (as the simulator measures it)."""
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    return evaluate(model, params, buffers, ds.x_test, ds.y_test)[0]


def _holdings(n: int, clients: int, batch_size: int, seed: int) -> list[list[int]]:
    """Disjoint sets of ``batch_size`` training examples, one per attacked client."""
    if clients * batch_size > n:
        raise ValueError(f"batch_size {batch_size} x examples {clients} exceeds the "
                         f"{n} training examples")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return [order[i * batch_size:(i + 1) * batch_size].tolist() for i in range(clients)]


def _cell_key(d: defenses_mod.Defense, stage: str, point: int, attack: str,
              example: int) -> str:
    return f"{d.describe()}|{stage}|{point}|{attack}|{example}"


def _weights_digest(model: nn.Module) -> str:
    flat = [float(p.detach().double().sum()) for p in model.state_dict().values()]
    return fingerprint({"sums": flat})


def _train_record(d: defenses_mod.Defense, ds: data_mod.Dataset, model: nn.Module,
                  plan: _Plan, clients: int, seed: int, delta: float,
                  trained: bool, trained_net: dict[str, nn.Module] | None = None
                  ) -> dict[str, Any]:
    """Accuracy and claimed/sound eps of the profile's training run (with ``trained``: of
    the one audited round on the given weights); its model into ``trained_net["model"]``."""
    prof = plan.profile
    if trained:
        run = fl.simulate(model, dataset=ds, defense=copy.deepcopy(d), clients=clients,
                          clients_per_round=prof.clients_per_round, rounds=1, local_steps=1,
                          batch_size=1, lr=prof.attack_lr, seed=seed, progress=False,
                          batch_sampling="shuffle")
    else:
        run = fl.simulate(model, dataset=ds, defense=copy.deepcopy(d), clients=clients,
                          clients_per_round=prof.clients_per_round, rounds=plan.rounds,
                          local_steps=prof.local_steps, batch_size=prof.batch_size, lr=prof.lr,
                          optimizer=prof.optimizer, seed=seed, progress=False)
        if trained_net is not None:
            trained_net["model"] = run.model
    return finite_json({
        "defense": d.describe(), "name": d.name, "level": d.level,
        "accuracy": run.final_accuracy,
        "eps_claimed": run.epsilon(delta, "claimed"),
        # the tightest certified bound the sound ledger allows (exact Gaussian, PLD or RDP)
        "eps_sound": run.epsilon(delta, "sound"),
        "eps_sound_rdp": run.epsilon(delta, "sound", method="rdp"),
        "reason": d.claimed_vs_sound if d.level != "none" else "no DP guarantee",
        "settings": {k: v for k, v in run.settings.items() if k != "defense"},
    })
