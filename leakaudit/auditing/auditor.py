"""The one-call audit: train under each defense, tap the leak points, attack, score, report.

Data flows one way (docs/attacks.md, "The audit"):
  data -> simulator (+ defense) -> leak point -> attack -> metrics -> report.

The settings are objects built and checked once (:class:`AuditPlan`: what is attacked and
with what budget, at which ``stages``; :class:`~.engines.EngineConfig`: where); below the
API the resolved settings travel as one object (:class:`.trainings.Setting`: plan, data,
model, clients, seed), which makes each federated run; the defenses are resolved by
:func:`leakaudit.fl.resolve_defenses`, as everywhere (a bare name with the profile's
defense parameters, ``AuditProfile.defense_params``, as its base).

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

The trainings (the profile's run under each defense, and a shorter run per stage of fewer
rounds) and the attack cells are *units* of an engine (:mod:`leakaudit.engines`): "serial"
(this process), "process" (a local process pool) or "ray" (Ray tasks, on a local Ray or a
cluster). The trainings run first, all at once on the engine; each stores its record and the
weights a stage attacks, so a resumed audit never trains again. Whatever the engine, results
come back to this process, which alone writes the results file, as each unit finishes; a
rerun with the same file skips what is done. Every simulation of the audit runs on one torch
thread (a unit's, and the attacked round's here), so the same seed gives the same table on
every engine and every machine. One progress bar counts every unit, and a line at the end
says how many ran, their CPU time and how many were reused
(:class:`leakaudit.workload.Workload`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import nn

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
from ..records import ResultsFile, fingerprint
from ..workload import Workload
from .cells import AttackBudget, CellJob
from .engines import ENGINES, EngineConfig, fold_engine
from .identification import IdentificationBudget, identification, protected_point
from .pipeline import resolve_attacks, run_jobs
from .report import AuditReport
from .trainings import Setting, Training

__all__ = ["audit", "AuditPlan", "PROFILES", "DEFAULT_DEFENSES", "AuditProfile", "ENGINES",
           "DEFAULT_STAGES", "MeasuredEps", "MOVED", "fold_plan", "PAPER_PARAMS", "POINTS",
           "STAGES"]

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
    #: where the attacks run ("cpu", "cuda", ...; "auto": the GPU of the worker that runs the
    #: cell if it has one, else its CPU; None: the CPU, where the model is built)
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
            stages=chosen_stages, device=None if where is None
            else "auto" if device == "auto" else str(where),
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


def _with_exact_tier(plan: AuditPlan, model: nn.Module, attacks: Sequence[Any] | None,
                     input_shape: tuple[int, ...] = (1, 28, 28)) -> AuditPlan:
    """The default attacks gain the optimiser-free tiers where the model allows them: exact
    (a biased linear first layer) and analytic ("rgap": a chain of linear/convolutional
    layers with invertible activations, B = 1): a "resilient" verdict then does not rest on
    a step budget alone. Attacks the caller chose are left as they are."""
    if attacks is not None or plan.attack_names != tuple(DEFAULT_ATTACKS):
        return plan
    extra = tuple(name for name, module in (("exact", attacks_mod.exact),
                                            ("rgap", attacks_mod.rgap))
                  if (module.applicable(model) if name == "exact"
                      else plan.batch_size == 1 and module.applicable(model, input_shape)))
    return plan.replace(attacks=(*plan.attacks, *extra)) if extra else plan


def fold_plan(plan: AuditPlan | None, old: dict[str, Any]) -> AuditPlan:
    """``plan`` (None: ``AuditPlan.make()``) with the old keywords ``old`` set (audit()'s
    deprecated form), checked as :meth:`AuditPlan.replace` checks them."""
    return (plan or AuditPlan.make()).replace(**old)


#: audit()'s keywords before its settings became objects (still accepted, with a warning):
#: the plan's settings and the engine's
MOVED = {
    "plan": Moved(names=("profile", "points", "examples", "rounds", "max_iterations",
                         "restarts", "threshold", "delta", "trained", "batch_size",
                         "local_steps", "stage", "stages", "device"),
                  fold=fold_plan, how="AuditPlan.make"),
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
            model has a biased linear first layer, and the analytic tier, "rgap", where it
            is a chain of linear/convolutional layers with invertible activations, B = 1).
        plan: what is attacked and how (:class:`AuditPlan`: profile sizes, points, examples,
            rounds, attack budget and success threshold, B and L of the attacked clients,
            stages, e.g. ``AuditPlan.make(stages=("initial", "trained"))``: a report row per
            (defense, stage) with the attacked weights' accuracy and eps spent; device, delta,
            whether ``model`` is already trained); default ``AuditPlan.make()`` (the "quick"
            profile, the "initial" stage).
        engine: where the units run (trainings and attack cells): "process" (default; a
            local pool of spawned processes: call audit() under
            ``if __name__ == "__main__":`` in a script), "serial" (this process) or "ray"
            (one Ray task per unit; ``pip install
            leakaudit[ray]``), or an :class:`EngineConfig` with the workers and the Ray
            address (None: a local Ray, or the cluster ``RAY_ADDRESS`` names). The trainings
            and the attack cells run there, and the same seed gives the same results
            whatever the engine and the number of workers.
        seed: the one seed (data split, model, training, attacks).
        results: path of the JSON-lines results file (resume); None keeps results in memory.
        progress: a progress bar.
        measure: a measured lower bound on eps of each defense's releases at the audited
            points (:class:`MeasuredEps`; ``leakaudit.audit(empirical=True)`` passes the
            empirical audit's): the defense table gains a "measured eps >=" column.
        identify: the prior-aware attack's budget per defense and stage (None: not run).
    """
    plan = _given_plan(plan, attacks)
    runs_on = EngineConfig.of(engine)
    check_int("seed", seed, 0)
    defs = fl.resolve_defenses(defenses, defense_params, base=plan.profile.defense_params)
    ds = data_mod.resolve(dataset, seed=seed)
    model = models_mod.resolve(model, ds, seed=seed)
    plan = _with_exact_tier(plan, model, attacks, tuple(ds.input_shape))
    clients = max(plan.profile.clients, plan.examples)
    _check_sizes(plan, ds, clients)
    setting = Setting(plan, ds, model, clients, seed)
    return _Audit.start(defs, setting, results, measure, identify).run(runs_on, progress)


def _given_plan(plan: AuditPlan | None, attacks: Sequence[Any] | None) -> AuditPlan:
    """The caller's plan (default ``AuditPlan.make()``) with the ``attacks`` given."""
    plan = plan or AuditPlan.make()
    if not isinstance(plan, AuditPlan):
        raise ValueError(f"plan must be an AuditPlan (AuditPlan.make(...)), got {plan!r}")
    return plan if attacks is None else plan.replace(attacks=attacks)


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


@dataclass(frozen=True)
class _Unit:
    """A training of the audit: its record's kind ("training": the profile's run, whose
    record is the defense's row; "stage": the run to a stage's weights), its key, the
    stages that attack its weights, and the unit itself."""

    kind: str
    key: str
    defense: defenses_mod.Defense
    stages: tuple[str, ...]
    training: Training

    @property
    def id(self) -> str:
        return f"{self.kind}|{self.key}"


def _stage_rounds(plan: AuditPlan, stage: str) -> int:
    """The training rounds before the attacked weights of ``stage`` (0: the given model)."""
    rounds = STAGES[stage]
    return (0 if plan.trained else plan.rounds) if rounds is None else rounds


def _training_units(d: defenses_mod.Defense, setting: Setting) -> list[_Unit]:
    """The trainings of defense ``d``: the profile's run (its weights serve the stages of
    that many rounds) and one run per stage of fewer rounds."""
    plan = setting.plan
    rounds = {s: _stage_rounds(plan, s) for s in plan.stages}
    full = tuple(s for s, r in rounds.items() if r == plan.rounds and not plan.trained)
    units = [_Unit("training", d.describe(), d, full, setting.training(d))]
    for s, r in rounds.items():
        if r and s not in full:
            units.append(_Unit("stage", f"{d.describe()}|{s}", d, (s,),
                               setting.training(d, r)))
    return units


def _training_pending(unit: _Unit, store: ResultsFile, cells: list[tuple]) -> bool:
    """Whether ``unit`` must run: its record is missing, or a stage with pending cells
    attacks its weights and they are not stored."""
    if not store.has(unit.kind, unit.key):
        return True
    return not store.has("weights", unit.id) and any(
        c[0] is unit.defense and c[1] in unit.stages and not store.has("cell", _cell_key(*c))
        for c in cells)


def _train(units: list[_Unit], setting: Setting, store: ResultsFile, work: Workload) -> None:
    """Run the pending trainings on the engine; each stores its weights and, unless stored,
    its record as it finishes."""
    by_id = {u.id: u for u in units}
    if units:
        work.describe(f"train ({len(units)} runs)")
    for done in work.run([(u.id, u.training) for u in units]):
        unit, rec = by_id[done.key], dict(done.record)
        weights = rec.pop("weights")
        if unit.stages:  # a stage attacks them: kept, so that a resumed audit need not train
            store.put("weights", unit.id, weights)
        if not store.has(unit.kind, unit.key):
            store.put(unit.kind, unit.key, _training_record(unit, setting.plan, rec))
        work.advance()


def _training_record(unit: _Unit, plan: AuditPlan, rec: dict[str, Any]) -> dict[str, Any]:
    """A training's record: the defense's row ("training") or a stage's ("stage")."""
    d = unit.defense
    if unit.kind == "stage":
        stage = unit.stages[0]
        return {"stage": stage, "rounds": _stage_rounds(plan, stage),
                **{k: rec[k] for k in ("accuracy", "eps_claimed", "eps_sound")}}
    return {"defense": d.describe(), "name": d.name, "level": d.level,
            **{k: rec[k] for k in ("accuracy", "eps_claimed", "eps_sound", "eps_sound_rdp")},
            "reason": d.claimed_vs_sound if d.level != "none" else "no DP guarantee",
            "relation": rec["relation"], "sites": sorted(d.sites), "settings": rec["settings"]}


def _stage_start(d: defenses_mod.Defense, stage: str, setting: Setting,
                 store: ResultsFile) -> nn.Module:
    """The weights a stage attacks: the given model (0 rounds) or its stored training's."""
    rounds = _stage_rounds(setting.plan, stage)
    if rounds == 0:
        return copy.deepcopy(setting.model)
    key = f"{d.describe()}|{stage}"
    unit = "training|" + d.describe() if rounds == setting.plan.rounds else "stage|" + key
    return setting.weights(store.get("weights", unit))


def _cells(plan: AuditPlan) -> list[tuple[str, int, str, int]]:
    """(stage, point, attack, example) of every cell of one defense."""
    return [(s, p, a, e) for s in plan.stages for p in plan.points for a in plan.attack_names
            for e in range(plan.examples)]


def _config(setting: Setting) -> dict[str, Any]:
    """What the report records about the audit (and the results file's fingerprint)."""
    plan = setting.plan
    return {"dataset": setting.dataset.name, "model": repr(setting.model),
            "weights": _weights_digest(setting.model), "seed": setting.seed,
            "profile": plan.profile_name, "examples": plan.examples, "rounds": plan.rounds,
            "max_iterations": plan.max_iterations, "restarts": plan.restarts,
            "threshold": plan.threshold, "delta": plan.delta, "trained": plan.trained,
            "clients": setting.clients, "batch_size": plan.batch_size,
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


@dataclass
class _Audit:
    """One audit under way, its settings checked: the ``defenses``, what every run shares
    (``setting``: plan, data, model, clients, seed), the results file ``store``, the
    ``report`` being filled, the eps measurer and the identification budget (None: not
    run); ``cells`` (defense, stage, point, attack, example) in canonical order, and the
    records of cells by content (:func:`.pipeline.run_jobs` runs each content once)."""

    defenses: list[defenses_mod.Defense]
    setting: Setting
    store: ResultsFile
    report: AuditReport
    measure: MeasuredEps | None
    identify: IdentificationBudget | None
    cells: list[tuple] = field(default_factory=list)
    by_content: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def start(cls, defenses: list[defenses_mod.Defense], setting: Setting,
              results: str | None, measure: MeasuredEps | None,
              identify: IdentificationBudget | None) -> _Audit:
        """The audit's config (checking ``measure`` and ``identify``), its results file
        (resumed when it holds the same config) and an empty report."""
        plan = setting.plan
        config = _config(setting) | _empirical_config(measure) | _identify_config(identify)
        return cls(defenses, setting, ResultsFile(results, config),
                   AuditReport(config=config, threshold=plan.threshold, delta=plan.delta),
                   measure, identify,
                   cells=[(d, *c) for d in defenses for c in _cells(plan)])

    def run(self, engine: EngineConfig, progress: bool) -> AuditReport:
        """Train what is pending, then per defense its row and per stage its cells, on
        ``engine`` under one progress bar started at what is done (the rate and the ETA are
        this run's); the report with every cell in canonical order."""
        store = self.store
        units = [u for d in self.defenses for u in _training_units(d, self.setting)]
        pending = [u for u in units if _training_pending(u, store, self.cells)]
        todo = sum(not store.has("cell", _cell_key(*c)) for c in self.cells) + len(pending)
        total = len(self.cells) + len(units)
        with Workload(engine, total=total, done=total - todo, desc="audit",
                      progress=progress) as work:
            _train(pending, self.setting, store, work)
            for d in self.defenses:
                self._defense(d, work)
        for cell in self.cells:
            self.report.add_cell(dict(store.get("cell", _cell_key(*cell)), stage=cell[1]))
        return self.report

    def _defense(self, d: defenses_mod.Defense, work: Workload) -> None:
        """Defense ``d``'s row (measured eps included) and each of its stages."""
        work.describe(f"{d.name}: measure eps" if self.measure is not None else d.name)
        self.report.add_defense(d.describe(), d.name, self._measured(d))
        for stage in self.setting.plan.stages:
            jobs = self._stage(d, stage)
            self._identification(d, stage)
            work.describe(f"{d.name}: attack {stage}")
            run_jobs(jobs, work, self.store, on_done=work.advance, memo=self.by_content)

    def _measured(self, d: defenses_mod.Defense) -> dict[str, Any]:
        """``d``'s training record with "eps_measured": the largest measured lower bound on
        eps over the points where it releases (stored, so a resumed audit does not
        remeasure)."""
        train = self.store.get("training", d.describe())
        if self.measure is None or "eps_measured" in train:
            return train
        plan = self.setting.plan
        train = dict(train, eps_measured=self.measure(d, plan.points, delta=plan.delta,
                                                      seed=self.setting.seed))
        self.store.put("training", d.describe(), train)
        return train

    def _stage(self, d: defenses_mod.Defense, stage: str) -> list[tuple[str, CellJob]]:
        """One stage of one defense: its record into the report (stored, or made now from
        the training's and stored) and the jobs of its pending cells (none when resumed)."""
        setting, store = self.setting, self.store
        pending = {_cell_key(*c) for c in self.cells if c[0] is d and c[1] == stage
                   and not store.has("cell", _cell_key(*c))}
        key = f"{d.describe()}|{stage}"
        rounds = _stage_rounds(setting.plan, stage)
        if not store.has("stage", key):  # a stage of its own training stored it already
            train = store.get("training", d.describe())
            info = {k: train[k] for k in ("accuracy", "eps_claimed", "eps_sound")}
            if rounds == 0:
                spent = None if setting.plan.trained else 0.0  # given weights: eps unknown
                info = {"accuracy": setting.accuracy(setting.model), "eps_claimed": spent,
                        "eps_sound": spent}
            store.put("stage", key, finite_json({"stage": stage, "rounds": rounds, **info}))
        self.report.add_stage(d.describe(), stage, store.get("stage", key))
        if not pending:
            return []
        return setting.attack_jobs(d, _stage_start(d, stage, setting, store),
                                   key=lambda t: f"{key}|{t.observation.point}",
                                   pending=pending)

    def _identification(self, d: defenses_mod.Defense, stage: str) -> None:
        """The identification record of one (defense, stage) into the report: stored, or
        measured now at the stage's weights and stored (nothing without a budget)."""
        if self.identify is None:
            return
        key = f"{d.describe()}|{stage}"
        record = self.store.get("identification", key)
        if record is None:
            setting = self.setting
            record = finite_json(identification(
                _stage_start(d, stage, setting, self.store), setting.dataset, d,
                point=protected_point(d, setting.plan.points), budget=self.identify,
                lr=setting.plan.profile.attack_lr, seed=setting.seed, cell=stage))
            self.store.put("identification", key, record)
        self.report.add_identification(d.describe(), stage, record)


def _cell_key(d: defenses_mod.Defense, stage: str, point: int, attack: str,
              example: int) -> str:
    return f"{d.describe()}|{stage}|{point}|{attack}|{example}"


def _weights_digest(model: nn.Module) -> str:
    flat = [float(p.detach().double().sum()) for p in model.state_dict().values()]
    return fingerprint({"sums": flat})
