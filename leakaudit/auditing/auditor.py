"""The one-call audit: train under each defense, tap the leak points, attack, score, report.

Data flows one way (docs/attacks.md, "The audit"):
  data -> simulator (+ defense) -> leak point -> attack -> metrics -> report.

The settings are objects built and checked once (:class:`AuditPlan`: what is attacked and
with what budget, at which ``stages``; :class:`~.engines.EngineConfig`: where;
:class:`leakaudit.fl.FLConfig`: each federated run, built by :func:`_training_run` and
:func:`_attacked_round` and run by the one call of the simulator, :func:`_simulate`); the
defenses are resolved by :func:`leakaudit.fl.resolve_defenses`, as everywhere (a bare name
with the profile's defense parameters, ``AuditProfile.defense_params``, as its base).

Per defense a *training* run (the profile's federated setting, with the profile's defense
parameters, at which the quick profile's defended models learn) gives test accuracy and the
claimed and sound eps; then per audited stage (``AuditPlan.stages``) an *attack* run takes
one round from the weights of that stage ("initial"; after 1 or 5 rounds of the training run
under the defense: "round1", "round5"; or at its end: "trained") with
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
from .._validate import (
    Moved,
    check_bool,
    check_device,
    check_int,
    check_probability,
    check_selection,
    legacy_call,
)
from ..fl.simulate import evaluate
from ..records import ResultsFile, fingerprint
from .cells import AttackBudget, CellJob
from .engines import ENGINES, Engine, EngineConfig, fold_engine
from .identification import IdentificationBudget, identification, protected_point
from .pipeline import Target, build_jobs, resolve_attacks, run_jobs
from .report import AuditReport

__all__ = ["audit", "AuditPlan", "PROFILES", "DEFAULT_DEFENSES", "AuditProfile", "ENGINES",
           "DEFAULT_STAGES", "MeasuredEps", "MOVED", "PAPER_PARAMS", "POINTS", "STAGES"]

#: training stage of the audited weights -> rounds of the training run before the attack
#: (None: all of them, the profile's ``rounds``; the weights whose accuracy the report shows)
STAGES: dict[str, int | None] = {"initial": 0, "round1": 1, "round5": 5, "trained": None}

#: the stages a full audit attacks (the CLI's default, ``make audit``): the weights before
#: training and the trained ones; ``AuditPlan.make`` alone attacks "initial"
DEFAULT_STAGES = ("initial", "trained")

#: the leak points (docs/attacks.md): 0 the update after the defense, 1 the update before
#: the server-side step, 2 a local step's gradient
POINTS = (0, 1, 2)

#: the attacks an audit runs unless told otherwise
DEFAULT_ATTACKS = ("dlg", "idlg", "cpl")

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


#: The quick profile's DP parameters. The papers' (clip 4, sigma 6) leave LeNet at chance on
#: digits. With these, T = 30 rounds of L = 10 Adam steps of B = 32 by N = 2 clients (both
#: every round) reach (seed 0, measured 2026-11-28, delta 1e-5): fed-cdp sigma 0.9: 0.80
#: test accuracy at sound eps 7.6 (instance level: q = B / n_c = 32 / 606 per local step; with
#: 10 clients of 121 examples q is 0.26 and sigma 1.2 spends 20.5 for 0.67), fed-alpha-cdp
#: 0.90 (sound eps inf: its data-dependent noise scale), fed-sdp 0.77 at sound eps ~6,500
#: (client-level DP with 2 clients: no meaningful guarantee), against 0.96 undefended.
QUICK_DEFENSE_PARAMS: dict[str, dict[str, Any]] = {
    "fed-sdp-server": {"clip": 3.0, "sigma": 0.1},
    "fed-sdp-client": {"clip": 3.0, "sigma": 0.1},
    "fed-cdp": {"clip": 4.0, "sigma": 0.9},
    "fed-alpha-cdp": {"clip": 4.0, "sigma": 0.7},
}

PROFILES: dict[str, AuditProfile] = {
    # minutes on 2 cores with the built-in digits: two clients with large local data sets,
    # where instance-level DP can spend a meaningful eps and still learn
    "quick": AuditProfile(clients=2, clients_per_round=2, rounds=30, local_steps=10,
                          batch_size=32, lr=0.02, optimizer="adam", examples=2,
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
class AuditPlan:
    """What one audit attacks, and how: the sizes (:class:`AuditProfile`, ``profile``
    names it), the leak ``points`` and ``attacks``, ``examples`` attacked per (defense,
    point, attack), training ``rounds``, the attack ``budget`` (:class:`AttackBudget`), the
    attacked clients' B (``batch_size``) and L (``local_steps``), the ``stages`` of the
    attacked weights (names of ``STAGES``, each its own report row), the ``device`` of the
    attacks, the ``delta`` of the eps columns, and whether the model is already ``trained``
    (no training run). Build it with :meth:`make`, which checks every setting (the
    profile's sizes unless given)."""

    profile: AuditProfile
    profile_name: str
    points: tuple[int, ...]
    attacks: tuple[Any, ...]
    examples: int
    rounds: int
    budget: AttackBudget
    batch_size: int = 1
    local_steps: int = 1
    stages: tuple[str, ...] = ("initial",)
    #: where the attacks run ("cpu", "cuda", ...; None: the CPU, where the model is built)
    device: str | None = None
    delta: float = 1e-5
    trained: bool = False

    @property
    def max_iterations(self) -> int:
        return self.budget.max_iterations

    @property
    def restarts(self) -> int:
        return self.budget.restarts

    @property
    def threshold(self) -> float:
        return self.budget.threshold

    @property
    def stage(self) -> str:
        """The audited stage when there is one (the form before ``stages``)."""
        if len(self.stages) != 1:
            raise ValueError(f"this plan audits several stages {list(self.stages)}: read "
                             f"plan.stages")
        return self.stages[0]

    @property
    def attack_names(self) -> tuple[str, ...]:
        return tuple(a if isinstance(a, str) else a.name for a in self.attacks)

    @classmethod
    def make(cls, *, profile: str = "quick", attacks: Sequence[Any] = DEFAULT_ATTACKS,
             points: Sequence[int] = POINTS, examples: int | None = None,
             rounds: int | None = None, max_iterations: int | None = None,
             restarts: int | None = None, threshold: float = 0.01, delta: float = 1e-5,
             trained: bool = False, batch_size: int = 1, local_steps: int = 1,
             stages: Sequence[str] | None = None, stage: str | None = None,
             device: str | None = None) -> AuditPlan:
        """Check every setting before any work (ValueError naming it), then build the plan;
        sizes left None are the profile's (``PROFILES``). ``stages``: the audited stages,
        e.g. ``("initial", "trained")``; ``stage``: one stage (give one of the two; neither:
        "initial")."""
        chosen_stages = _check_stages(stages, stage)
        where = check_device("device", device)
        if not isinstance(profile, str) or profile not in PROFILES:
            raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
        prof = PROFILES[profile]
        chosen = resolve_attacks(attacks)
        return cls(
            profile=prof, profile_name=profile,
            points=tuple(int(p) for p in check_selection("points", points, POINTS)),
            attacks=tuple(_attack_name_or_object(a) for a in chosen),
            examples=check_int("examples", prof.examples if examples is None else examples, 1),
            rounds=check_int("rounds", prof.rounds if rounds is None else rounds, 1),
            budget=AttackBudget.make(
                max_iterations=prof.max_iterations if max_iterations is None
                else max_iterations,
                restarts=prof.restarts if restarts is None else restarts,
                threshold=threshold),
            batch_size=check_int("batch_size", batch_size, 1),
            local_steps=check_int("local_steps", local_steps, 1),
            stages=chosen_stages, device=None if where is None else str(where),
            delta=check_probability("delta", delta), trained=check_bool("trained", trained))

    def replace(self, **changes: Any) -> AuditPlan:
        """A copy with ``changes`` (keywords of :meth:`make`), checked again; a new
        ``profile`` brings its sizes, except those given with it."""
        now: dict[str, Any] = dict(
            profile=self.profile_name, attacks=self.attacks, points=self.points,
            examples=self.examples, rounds=self.rounds, max_iterations=self.max_iterations,
            restarts=self.restarts, threshold=self.threshold, delta=self.delta,
            trained=self.trained, batch_size=self.batch_size, local_steps=self.local_steps,
            stages=self.stages, stage=None, device=self.device)
        unknown = sorted(set(changes) - set(now))
        if unknown:
            raise ValueError(f"{unknown[0]} is not a setting of AuditPlan; expected one of "
                             f"{list(now)}")
        if "stage" in changes and "stages" not in changes:
            now["stages"] = None  # the one stage given replaces the plan's stages
        if "profile" in changes:
            for size in ("examples", "rounds", "max_iterations", "restarts"):
                now[size] = None
        return AuditPlan.make(**{**now, **changes})


def _check_stages(stages: Sequence[str] | None, stage: str | None) -> tuple[str, ...]:
    """The audited stages: ``stages`` (distinct names of ``STAGES``, at least one), else
    ``stage`` alone, else "initial"; both given is refused."""
    if stages is None:
        stage = "initial" if stage is None else stage
        if not isinstance(stage, str) or stage not in STAGES:
            raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
        return (stage,)
    if stage is not None:
        raise ValueError(f"give stage or stages, not both (stage={stage!r}, stages={stages!r})")
    if isinstance(stages, str) or not isinstance(stages, Sequence):
        raise ValueError(f"stages must be a sequence of stage names, got {stages!r}")
    out = tuple(stages)
    bad = [s for s in out if not isinstance(s, str) or s not in STAGES]
    if not out or bad or len(set(out)) != len(out):
        raise ValueError(f"stages must be distinct names among {list(STAGES)}, at least one, "
                         f"got {list(out)}")
    return out


def _attack_name_or_object(attack: Any) -> Any:
    """A registered attack by its name (what the plan records), another as the object."""
    registered = attack.name in attacks_mod.available() and attacks_mod.get(attack.name)
    return attack.name if registered is attack else attack


def _with_exact_tier(plan: AuditPlan, model: nn.Module, attacks: Sequence[Any] | None
                     ) -> AuditPlan:
    """The default attacks gain the optimiser-free exact tier where the model allows it (a
    biased linear first layer): a "resilient" verdict then does not rest on a step budget
    alone. Attacks the caller chose are left as they are."""
    if (attacks is None and plan.attack_names == tuple(DEFAULT_ATTACKS)
            and attacks_mod.exact.applicable(model)):
        return plan.replace(attacks=(*plan.attacks, "exact"))
    return plan


def _fold_plan(plan: AuditPlan | None, old: dict[str, Any]) -> AuditPlan:
    return (plan or AuditPlan.make()).replace(**old)


#: audit()'s keywords before its settings became objects (still accepted, with a warning):
#: the plan's settings and the engine's
MOVED = {
    "plan": Moved(names=("profile", "points", "examples", "rounds", "max_iterations",
                         "restarts", "threshold", "delta", "trained", "batch_size",
                         "local_steps", "stage", "stages", "device"),
                  fold=_fold_plan, how="AuditPlan.make"),
    "engine": Moved(names=("workers", "ray_address"), fold=fold_engine,
                    how="EngineConfig.make"),
}


@legacy_call(**MOVED)
def audit(
    defenses: Sequence[Any] = DEFAULT_DEFENSES,
    *,
    dataset: Any = "digits",
    model: nn.Module | None = None,
    attacks: Sequence[Any] | None = None,
    plan: AuditPlan | None = None,
    engine: str | EngineConfig = "process",
    seed: int = 0,
    results: str | None = None,
    defense_params: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
    measure: MeasuredEps | None = None,
    identify: IdentificationBudget | None = None,
) -> AuditReport:
    """Audit defenses against gradient-leakage attacks; see the module docstring. Every
    argument after ``defenses`` is keyword-only; the settings are objects
    (``plan=AuditPlan.make(profile="paper", points=(2,))``,
    ``engine=EngineConfig.make("process", workers=8)``); the keywords they replaced
    (``profile=``, ``points=``, ``examples=``, ``workers=``, ...) still work and warn.

    Args:
        defenses: names (bare names get the profile's parameters,
            ``AuditProfile.defense_params``, else the source papers', ``PAPER_PARAMS``;
            overridable per name with ``defense_params``) or Defense objects.
        dataset: name or Dataset. model: the architecture and starting weights (default
            ``models.default_for(dataset)``, LeNet-Sigmoid with U(-0.5, 0.5) weights).
        attacks: attack names (``leakaudit.attacks.available()``) or Attack objects; None:
            the plan's (default "dlg", "idlg", "cpl"; plus the exact tier, "exact", where the
            model has a biased linear first layer).
        plan: what is attacked and how (:class:`AuditPlan`: profile sizes, points, examples,
            rounds, attack budget and success threshold, B and L of the attacked clients,
            stages, e.g. ``AuditPlan.make(stages=("initial", "trained"))``: a report row per
            (defense, stage) with the attacked weights' accuracy and eps spent; device, delta,
            whether ``model`` is already trained); default ``AuditPlan.make()`` (the "quick"
            profile, the "initial" stage).
        engine: where the attack cells run: "process" (default; a local pool of spawned
            processes: call audit() under ``if __name__ == "__main__":`` in a script),
            "serial" (this process) or "ray" (one Ray task per cell; ``pip install
            leakaudit[ray]``), or an :class:`EngineConfig` with the workers and the Ray
            address. Training runs in this process for every engine, and the same seed
            gives the same results whatever the engine and the number of workers.
        seed: the one seed (data split, model, training, attacks).
        results: path of the JSON-lines results file (resume); None keeps results in memory.
        progress: a progress bar.
        measure: a measured lower bound on eps of each defense's releases at the audited
            points (:class:`MeasuredEps`; ``leakaudit.audit(empirical=True)`` passes the
            empirical audit's): the defense table gains a "measured eps >=" column.
        identify: the prior-aware attack's budget per defense and stage (None: not run).
    """
    plan = plan or AuditPlan.make()
    if not isinstance(plan, AuditPlan):
        raise ValueError(f"plan must be an AuditPlan (AuditPlan.make(...)), got {plan!r}")
    if attacks is not None:
        plan = plan.replace(attacks=attacks)
    runs_on = EngineConfig.of(engine)
    check_int("seed", seed, 0)
    defs = fl.resolve_defenses(defenses, defense_params, base=plan.profile.defense_params)
    ds = data_mod.resolve(dataset, seed=seed)
    model = models_mod.resolve(model, ds, seed=seed)
    plan = _with_exact_tier(plan, model, attacks)
    clients = max(plan.profile.clients, plan.examples)
    _check_sizes(plan, ds, clients)
    config = (_config(ds, model, seed, plan.profile_name, plan, plan.threshold, plan.delta,
                      plan.trained, clients)
              | _empirical_config(measure) | _identify_config(identify))
    store = ResultsFile(results, config)
    cells = [(d, *c) for d in defs for c in _cells(plan)]
    todo = sum(not store.has("cell", _cell_key(*c)) for c in cells) + sum(
        store.get("training", d.describe()) is None for d in defs)
    total = len(cells) + len(defs)
    # a resumed audit starts its bar at what is done: the rate (and the ETA) is this run's
    bar = tqdm(total=total, initial=total - todo, disable=not progress, desc="audit")
    report = AuditReport(config=config, threshold=plan.threshold, delta=plan.delta)
    runner: Engine | None = None
    memo: dict[str, dict[str, Any]] = {}  # cells of the same content run once (run_jobs)
    try:
        for d in defs:
            stored = store.get("training", d.describe()) is not None
            trained_net: dict[str, nn.Module] = {}  # the training run's model once trained
            train = _training(d, store, bar, ds, model, plan, clients, seed, plan.delta,
                              plan.trained, measure, trained_net)
            report.add_defense(d.describe(), d.name, train)
            if not stored:
                bar.update(1)
            for stage in plan.stages:
                jobs = _stage(d, stage, cells, store, bar, report, ds, model, plan, clients,
                              seed, train, trained_net)
                _identify_stage(d, stage, store, report, ds, model, plan, clients, seed,
                                train, trained_net, identify)
                if not jobs:
                    continue
                if runner is None:  # started at the first pending cell: a full resume starts none
                    runner = runs_on.start()
                run_jobs(jobs, runner, store, on_done=lambda: bar.update(1), memo=memo)
    finally:
        if runner is not None:
            runner.close()
        bar.close()
    return _with_cells(report, store, cells)


def _check_sizes(plan: AuditPlan, ds: data_mod.Dataset, clients: int) -> None:
    """B of the attacked clients against the data they hold (before any work): each of
    ``clients`` clients holds about (1 - 0.1) n / clients examples, or exactly B with L > 1
    (then ``examples`` x B must fit in the training set)."""
    n = len(ds.y_train)
    if plan.local_steps > 1:
        if plan.examples * plan.batch_size > n:
            raise ValueError(f"batch_size {plan.batch_size} x examples {plan.examples} "
                             f"exceeds the {n} training examples")
        return
    held = (n - int(round(0.1 * n))) // clients  # the simulator's validation share: 0.1
    if plan.batch_size > held:
        raise ValueError(f"batch_size must be at most the attacked clients' data (about "
                         f"{held} examples each: {n} training examples, {clients} "
                         f"clients), got {plan.batch_size}")


def _stage(d: defenses_mod.Defense, stage: str, cells: list[tuple], store: ResultsFile,
           bar: Any, report: AuditReport, ds: data_mod.Dataset, model: nn.Module,
           plan: AuditPlan, clients: int, seed: int, train: dict[str, Any],
           trained_net: dict[str, nn.Module]) -> list[tuple[str, CellJob]]:
    """One stage of one defense: its record into the report (stored, or the stage's
    weights made now and stored) and the jobs of its pending cells (none when resumed; the
    progress bar started at the cells already done)."""
    own = [c for c in cells if c[0] is d and c[1] == stage]
    pending = [c for c in own if not store.has("cell", _cell_key(*c))]
    key = f"{d.describe()}|{stage}"
    done = store.get("stage", key)
    if not pending and done is not None:
        report.add_stage(d.describe(), stage, done)
        return []
    bar.set_description(f"{d.name}: {stage} weights")
    start, info = _stage_model(d, ds, model, plan, clients, seed, stage, train, trained_net)
    if done is None:
        store.put("stage", key, info)
    report.add_stage(d.describe(), stage, done or info)
    if not pending:
        return []
    bar.set_description(f"{d.name}: attack {stage}")
    return _attack_jobs(d, ds, start, model, plan, clients, seed, stage,
                        pending={_cell_key(*c) for c in pending})


def _training(d: defenses_mod.Defense, store: ResultsFile, bar: Any, ds: data_mod.Dataset,
              model: nn.Module, plan: AuditPlan, clients: int, seed: int, delta: float,
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


def _cells(plan: AuditPlan) -> list[tuple[str, int, str, int]]:
    """(stage, point, attack, example) of every cell of one defense."""
    return [(s, p, a, e) for s in plan.stages for p in plan.points for a in plan.attack_names
            for e in range(plan.examples)]


def _with_cells(report: AuditReport, store: ResultsFile, cells: list[tuple]) -> AuditReport:
    """The report with every cell, in canonical order (whatever order they finished in),
    each with its stage."""
    for cell in cells:
        report.add_cell(dict(store.get("cell", _cell_key(*cell)), stage=cell[1]))
    return report


def _config(ds: data_mod.Dataset, model: nn.Module, seed: int, profile: str, plan: AuditPlan,
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


def _identify_config(identify: IdentificationBudget | None) -> dict[str, Any]:
    """The config entry of an audit with identification (none otherwise)."""
    if identify is None:
        return {}
    if not isinstance(identify, IdentificationBudget):
        raise ValueError(f"identify must be an IdentificationBudget, got {identify!r}")
    return {"identification": {"k": identify.k, "trials": identify.trials,
                               "pool": identify.pool}}


# ---- identification at the stage's weights (the protection profile's columns)
def _identify_stage(d: defenses_mod.Defense, stage: str, store: ResultsFile,
                    report: AuditReport, ds: data_mod.Dataset, model: nn.Module,
                    plan: AuditPlan, clients: int, seed: int, train: dict[str, Any],
                    trained_net: dict[str, nn.Module], budget: IdentificationBudget | None
                    ) -> None:
    """The identification record of one (defense, stage) into the report: stored, or
    measured now at the stage's weights and stored (nothing without a ``budget``)."""
    if budget is None:
        return
    key = f"{d.describe()}|{stage}"
    record = store.get("identification", key)
    if record is None:
        start, _ = _stage_model(d, ds, model, plan, clients, seed, stage, train, trained_net)
        record = finite_json(identification(
            start, ds, d, point=protected_point(d, plan.points), budget=budget,
            lr=plan.profile.attack_lr, seed=seed, cell=stage))
        store.put("identification", key, record)
    report.add_identification(d.describe(), stage, record)
# ---- end of identification


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


def _attack_round(d: defenses_mod.Defense, ds: data_mod.Dataset, start: nn.Module,
                  plan: AuditPlan, clients: int, seed: int) -> fl.Run:
    """The attacked round: one round from the stage's weights ``start``, L local steps of
    batch B, taps at the audited points for ``plan.examples`` clients (each holding exactly
    B examples when L > 1: L local epochs)."""
    taps = [fl.Tap(p, clients=plan.examples) for p in plan.points]
    if plan.local_steps > 1:  # each attacked client holds B examples: L local epochs
        holdings = _holdings(len(ds.y_train), plan.examples, plan.batch_size, seed)
        config = _attacked_round(plan, plan.examples, seed, taps=taps, partition=holdings)
    else:
        config = _attacked_round(plan, clients, seed, taps=taps)
    return _simulate(d, ds, start, config)


def _training_run(plan: AuditPlan, clients: int, rounds: int, seed: int) -> fl.FLConfig:
    """The profile's federated training run, ``rounds`` rounds."""
    prof = plan.profile
    return fl.FLConfig.make(clients=clients, clients_per_round=prof.clients_per_round,
                            rounds=rounds, local_steps=prof.local_steps,
                            batch_size=prof.batch_size, lr=prof.lr, optimizer=prof.optimizer,
                            seed=seed, progress=False)


def _attacked_round(plan: AuditPlan, clients: int, seed: int, *, clients_per_round: int | None
                    = None, local_steps: int | None = None, batch_size: int | None = None,
                    taps: Sequence[fl.Tap] = (), partition: Any = "iid") -> fl.FLConfig:
    """One round at the attacks' learning rate, on batches of exactly B (the attacks'
    view: "shuffle" batches), by the attacked clients (default: ``plan.examples`` of them,
    L and B the plan's)."""
    return fl.FLConfig.make(
        clients=clients, rounds=1, lr=plan.profile.attack_lr, batch_sampling="shuffle",
        clients_per_round=plan.examples if clients_per_round is None else clients_per_round,
        local_steps=plan.local_steps if local_steps is None else local_steps,
        batch_size=plan.batch_size if batch_size is None else batch_size,
        taps=taps, partition=partition, seed=seed, progress=False)


def _simulate(d: defenses_mod.Defense, ds: data_mod.Dataset, model: nn.Module,
              config: fl.FLConfig) -> fl.Run:
    """The audit's one call of the simulator: a fresh copy of the defense (each run starts
    its state afresh) on ``model`` (copied by the simulator)."""
    return fl.simulate(model, dataset=ds, defense=copy.deepcopy(d), config=config)


def _attack_jobs(d: defenses_mod.Defense, ds: data_mod.Dataset, start: nn.Module,
                 model: nn.Module, plan: AuditPlan, clients: int, seed: int, stage: str,
                 pending: set[str]) -> list[tuple[str, CellJob]]:
    """The attacked round's observations (from the stage's weights ``start``), through the
    pipeline every audit shares (:func:`.pipeline.build_jobs`): one job per pending cell."""
    run = _attack_round(d, ds, start, plan, clients, seed)
    targets = [Target(observation=obs, truth=run.truth(obs), defense=d.describe(),
                      example=e, seed=seed + e)
               for p in plan.points for e, obs in enumerate(run.observations_at(p))
               if e < plan.examples]
    return build_jobs(targets, plan.attacks, model, input_shape=ds.input_shape,
                      num_classes=ds.num_classes, threshold=plan.threshold,
                      max_iterations=plan.max_iterations, restarts=plan.restarts,
                      image=ds.kind == "image", device=plan.device,
                      key=lambda i, t, a: _cell_key(d, stage, t.observation.point, a,
                                                    t.example),
                      pending=pending.__contains__)


def _stage_model(d: defenses_mod.Defense, ds: data_mod.Dataset, model: nn.Module,
                 plan: AuditPlan, clients: int, seed: int, stage: str,
                 train: dict[str, Any], trained_net: dict[str, nn.Module]
                 ) -> tuple[nn.Module, dict[str, Any]]:
    """The weights of the audited ``stage`` and their record: the starting model, or that
    model after ``STAGES[stage]`` rounds of the profile's training run under the defense
    ("trained": all ``plan.rounds``, the training run's own model; with ``plan.trained``,
    the given weights); the record holds the rounds, the test accuracy of these weights and
    the eps their training spent (0 before any round)."""
    rounds = STAGES[stage]
    rounds = (0 if plan.trained else plan.rounds) if rounds is None else rounds
    info: dict[str, Any] = {"stage": stage, "rounds": rounds}
    if rounds == 0:
        net = copy.deepcopy(model)
        spent = None if plan.trained else 0.0  # given trained weights: their eps is unknown
        return net, finite_json({**info, "accuracy": _accuracy(net, ds), "eps_claimed": spent,
                                 "eps_sound": spent})
    if rounds == plan.rounds and not plan.trained:
        if "model" not in trained_net:  # resumed: the same seed trains the same model
            _train_record(d, ds, model, plan, clients, seed, plan.delta, plan.trained,
                          trained_net)
        return trained_net["model"], {**info, **{k: train[k] for k in (
            "accuracy", "eps_claimed", "eps_sound")}}
    run = _simulate(d, ds, model, _training_run(plan, clients, rounds, seed))
    return run.model, finite_json({**info, "accuracy": run.final_accuracy,
                                   "eps_claimed": run.epsilon(plan.delta, "claimed"),
                                   "eps_sound": run.epsilon(plan.delta, "sound")})


def _accuracy(model: nn.Module, ds: data_mod.Dataset) -> float:
    """Test accuracy of ``model`` (as the simulator measures it)."""
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    return evaluate(model, params, buffers, ds.x_test, ds.y_test)[0]


def _holdings(n: int, clients: int, batch_size: int, seed: int) -> list[list[int]]:
    """Disjoint sets of ``batch_size`` training examples, one per attacked client (that they
    fit: :func:`_check_sizes`)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return [order[i * batch_size:(i + 1) * batch_size].tolist() for i in range(clients)]


def _cell_key(d: defenses_mod.Defense, stage: str, point: int, attack: str,
              example: int) -> str:
    return f"{d.describe()}|{stage}|{point}|{attack}|{example}"


def _weights_digest(model: nn.Module) -> str:
    flat = [float(p.detach().double().sum()) for p in model.state_dict().values()]
    return fingerprint({"sums": flat})


def _train_record(d: defenses_mod.Defense, ds: data_mod.Dataset, model: nn.Module,
                  plan: AuditPlan, clients: int, seed: int, delta: float,
                  trained: bool, trained_net: dict[str, nn.Module] | None = None
                  ) -> dict[str, Any]:
    """Accuracy and claimed/sound eps of the profile's training run (with ``trained``: of
    the one audited round on the given weights); its model into ``trained_net["model"]``."""
    if trained:
        config = _attacked_round(plan, clients, seed,
                                 clients_per_round=plan.profile.clients_per_round,
                                 local_steps=1, batch_size=1)
    else:
        config = _training_run(plan, clients, plan.rounds, seed)
    run = _simulate(d, ds, model, config)
    if trained_net is not None and not trained:
        trained_net["model"] = run.model
    return finite_json({
        "defense": d.describe(), "name": d.name, "level": d.level,
        "accuracy": run.final_accuracy,
        "eps_claimed": run.epsilon(delta, "claimed"),
        # the tightest certified bound the sound ledger allows (exact Gaussian, PLD or RDP)
        "eps_sound": run.epsilon(delta, "sound"),
        "eps_sound_rdp": run.epsilon(delta, "sound", method="rdp"),
        "reason": d.claimed_vs_sound if d.level != "none" else "no DP guarantee",
        "relation": run.relation, "sites": sorted(d.sites),
        "settings": {k: v for k, v in run.settings.items() if k != "defense"},
    })
