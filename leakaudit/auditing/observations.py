"""Audit observations captured anywhere: an Opacus run, a Flower federation, a user's loop.

:func:`audit_observations` runs the gradient-leakage attacks on each observation (what an
attacker saw at a leak point) and scores each reconstruction against the ground truth kept
apart (a parallel sequence, read only by the scorer), on the audit's engines. The result is
an :class:`~leakaudit.auditing.report.AuditReport`, as for :func:`leakaudit.audit`. Each
(observation, attack) is one cell of :mod:`.cells`: the attacker's view (:class:`AttackSpec`)
and, apart, the truth (:class:`CellJob`), run on an engine of :mod:`.engines`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from .._validate import Moved, check_int, check_keys, check_probability, legacy_call
from ..records import GroundTruth, Observation, ResultsFile, fingerprint
from .cells import AttackBudget
from .engines import EngineConfig, fold_engine
from .pipeline import Target, build_jobs, resolve_attacks, run_jobs
from .pipeline import records as stored
from .report import AuditReport

__all__ = ["audit_observations"]


def _fold_budget(budget: AttackBudget | None, old: dict[str, Any]) -> AttackBudget:
    return (budget or AttackBudget()).replace(**old)


@legacy_call("attacks",
             budget=Moved(names=("threshold", "max_iterations", "restarts"),
                          fold=_fold_budget, how="AttackBudget.make"),
             engine=Moved(names=("workers", "ray_address"), fold=fold_engine,
                          how="EngineConfig.make"))
def audit_observations(
    observations: Sequence[Observation],
    *,
    attacks: Sequence[Any] = ("idlg",),
    model: nn.Module,
    truths: Sequence[GroundTruth],
    input_shape: Sequence[int],
    num_classes: int,
    budget: AttackBudget | None = None,
    engine: str | EngineConfig = "process",
    seed: int = 0,
    delta: float = 1e-5,
    defenses: Mapping[str, Mapping[str, Any]] | None = None,
    results: str | None = None,
    progress: bool = True,
) -> AuditReport:
    """Attack every observation with every attack; score against the truths; report. Every
    argument after ``observations`` is keyword-only (``attacks`` given second, by position,
    still works and warns; so do ``threshold=``, ``max_iterations=``, ``restarts=``,
    ``workers=`` and ``ray_address=``, folded into ``budget`` and ``engine``).

    Args:
        observations: what the attacker saw (:class:`leakaudit.fl.Observation`: the tensors in
            the order of ``model``'s trainable parameters, the weights at that moment, lr,
            local steps, batch size, point, and ``defense``, the report's row label).
        attacks: attack names (``leakaudit.attacks.available()``) or Attack objects.
        model: the architecture the observations come from; each attack gets a copy holding
            the observation's weights (by name, or in parameter order when the names differ).
        truths: ``truths[i]`` is the ground truth behind ``observations[i]``; only the scorer
            reads it (never passed to an attack).
        input_shape, num_classes: of one example; the attacker's knowledge.
        budget: the attacks' budget and the success threshold (:class:`AttackBudget`:
            ``max_iterations`` 40, ``restarts`` 1, ``threshold`` 0.01 by default).
        engine: where the attack cells run (a name or an :class:`EngineConfig`; see
            :func:`leakaudit.audit`).
        seed: the attacks' seeds (cell i: ``seed + i``).
        delta: the report's delta. defenses: per defense label, the report's defense record
            (``accuracy``, ``eps_claimed``, ``eps_sound``, ``reason``, ``level``); labels
            without one get no accuracy or eps.
        results: a JSON-lines results file (:class:`.results.ResultsFile`): each finished
            cell is written at once, and a rerun on the same observations skips those done.
        progress: a progress bar.
    """
    observations, truths = list(observations), list(truths)
    chosen = resolve_attacks(attacks)
    budget = budget or AttackBudget()
    if not isinstance(budget, AttackBudget):
        raise ValueError(f"budget must be an AttackBudget (AttackBudget.make(...)), got "
                         f"{budget!r}")
    runs_on = EngineConfig.of(engine)
    _check_arguments(observations, truths)
    input_shape = tuple(int(s) for s in input_shape)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    for i, (obs, truth) in enumerate(zip(observations, truths)):
        _check_observation(i, obs, truth, params, input_shape)
    seed = check_int("seed", seed, 0)
    delta = check_probability("delta", delta)
    num_classes = check_int("num_classes", num_classes, 2)
    labels = sorted({obs.defense or "observed" for obs in observations})
    records = check_keys("defenses", defenses, labels, what="label")

    config = {"source": "observations", "observations": _digest(observations),
              "model": repr(model), "attacks": [a.name for a in chosen],
              "threshold": budget.threshold, "delta": delta,
              "max_iterations": budget.max_iterations, "restarts": budget.restarts,
              "seed": seed}
    store = ResultsFile(results, config)
    report = AuditReport(config=config, threshold=budget.threshold, delta=delta)
    for label, record in records.items():
        report.add_defense(label, label, dict(record))
    image = len(input_shape) == 3
    jobs = build_jobs(_targets(observations, truths, seed), chosen, model,
                      input_shape=input_shape, num_classes=num_classes,
                      threshold=budget.threshold, max_iterations=budget.max_iterations,
                      restarts=budget.restarts, image=image,
                      key=lambda i, t, a: f"{i}|{a}")
    _run_pending(jobs, store, runs_on, progress)
    for rec in stored(store, [key for key, _ in jobs]):
        report.add_cell(rec)
    return report


def _run_pending(jobs: list, store: ResultsFile, runs_on: EngineConfig, progress: bool) -> None:
    """Run the jobs the results file does not hold yet, each result stored as it ends."""
    pending = [(key, job) for key, job in jobs if not store.has("cell", key)]
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), disable=not progress,
               desc="audit observations: attack")
    runner = runs_on.start() if pending else None
    try:
        if runner is not None:
            run_jobs(pending, runner, store, on_done=lambda: bar.update(1))
    finally:
        if runner is not None:
            runner.close()
        bar.close()


def _digest(observations: list) -> str:
    """A fingerprint of what was observed (so that a results file is not reused for other
    observations)."""
    return fingerprint({"n": len(observations), "sums": [
        [o.point, o.round, o.client, o.defense, o.lr, o.batch_size,
         [float(t.detach().double().sum()) for t in o.tensors]] for o in observations]})


def _check_arguments(observations: list, truths: list) -> None:
    if not observations:
        raise ValueError("observations must be a non-empty sequence of Observation")
    if len(truths) != len(observations):
        raise ValueError(f"truths must hold one GroundTruth per observation: "
                         f"{len(truths)} truths for {len(observations)} observations")


def _check_observation(i: int, obs: Any, truth: Any, params: list[tuple[str, torch.Tensor]],
                       input_shape: tuple[int, ...]) -> None:
    """Shapes of one observation against the model and its truth (ValueError naming i)."""
    for attr in ("point", "tensors", "weights", "lr", "local_steps", "batch_size"):
        if not hasattr(obs, attr):
            raise ValueError(f"observations[{i}] is not an Observation (no {attr!r}): "
                             f"{type(obs).__name__}")
    if not hasattr(truth, "inputs") or not hasattr(truth, "labels"):
        raise ValueError(f"truths[{i}] is not a GroundTruth: {type(truth).__name__}")
    want = [tuple(p.shape) for _, p in params]
    got = [tuple(t.shape) for t in obs.tensors]
    if got != want:
        raise ValueError(f"observations[{i}] has tensors of shapes {got}, but the model's "
                         f"trainable parameters have shapes {want} (observations of mixed "
                         f"shapes, or from another model)")
    wshapes = [tuple(v.shape) for v in obs.weights.values()]
    names = {n for n, _ in params}
    if not names <= set(obs.weights) and wshapes != want:
        raise ValueError(f"observations[{i}].weights neither name the model's parameters "
                         f"{sorted(names)} nor match their shapes in order")
    if obs.point != 2 and not (obs.lr > 0 and obs.local_steps >= 1):
        raise ValueError(f"observations[{i}] is an update (point {obs.point}) with lr="
                         f"{obs.lr} and local_steps={obs.local_steps}: both must be > 0")
    x = truth.inputs
    if tuple(x.shape[1:]) != input_shape:
        raise ValueError(f"truths[{i}].inputs has examples of shape {tuple(x.shape[1:])}, "
                         f"input_shape is {input_shape}")
    behind = obs.examples_behind
    if x.shape[0] != behind or x.shape[0] < 1:
        raise ValueError(f"truths[{i}] holds {x.shape[0]} examples but observations[{i}] "
                         f"has {behind} examples behind it (batch_size={obs.batch_size}, "
                         f"examples={obs.examples}; needs >= 1)")


def _targets(observations: list, truths: list, seed: int) -> list[Target]:
    """The observations to attack; ``example`` numbers the observations of one (defense,
    point); the attacks on observation i are seeded ``seed + i``."""
    seen: dict[tuple[str, int], int] = {}
    out = []
    for i, (obs, truth) in enumerate(zip(observations, truths)):
        label = obs.defense or "observed"
        example = seen.get((label, obs.point), 0)
        seen[(label, obs.point)] = example + 1
        out.append(Target(observation=obs, truth=truth, defense=label, example=example,
                          seed=seed + i))
    return out
