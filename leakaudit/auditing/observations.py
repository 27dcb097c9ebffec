"""Audit observations captured anywhere: an Opacus run, a Flower federation, a user's loop.

:func:`audit_observations` runs the gradient-leakage attacks on each observation (what an
attacker saw at a leak point) and scores each reconstruction against the ground truth kept
apart (a parallel sequence, read only by the scorer), on the audit's engines. The result is
an :class:`~leakaudit.auditing.report.AuditReport`, as for :func:`leakaudit.audit`. Each
(observation, attack) is one cell of :mod:`.cells`: the attacker's view (:class:`AttackSpec`)
and, apart, the truth (:class:`CellJob`), run on an engine of :mod:`.engines`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from .. import attacks as attacks_mod
from .._validate import check_int, check_number, keywords_after_first
from ..records import GroundTruth, Observation, ResultsFile, fingerprint
from .engines import ENGINES, check_ray_address, import_ray, make_engine
from .pipeline import Target, build_jobs, records, run_jobs
from .report import AuditReport

__all__ = ["audit_observations"]


@keywords_after_first("attacks")
def audit_observations(
    observations: Sequence[Observation],
    *,
    attacks: Sequence[str] = ("idlg",),
    model: nn.Module,
    truths: Sequence[GroundTruth],
    input_shape: Sequence[int],
    num_classes: int,
    threshold: float = 0.01,
    progress: bool = True,
    engine: str = "process",
    workers: int | None = None,
    ray_address: str | None = None,
    max_iterations: int = 40,
    restarts: int = 1,
    seed: int = 0,
    delta: float = 1e-5,
    defenses: Mapping[str, Mapping[str, Any]] | None = None,
    results: str | None = None,
) -> AuditReport:
    """Attack every observation with every attack; score against the truths; report. Every
    argument after ``observations`` is keyword-only (``attacks`` given second, by position,
    still works and warns).

    Args:
        observations: what the attacker saw (:class:`leakaudit.fl.Observation`: the tensors in
            the order of ``model``'s trainable parameters, the weights at that moment, lr,
            local steps, batch size, point, and ``defense``, the report's row label).
        attacks: attack names (``leakaudit.attacks.available()``).
        model: the architecture the observations come from; each attack gets a copy holding
            the observation's weights (by name, or in parameter order when the names differ).
        truths: ``truths[i]`` is the ground truth behind ``observations[i]``; only the scorer
            reads it (never passed to an attack).
        input_shape, num_classes: of one example; the attacker's knowledge.
        threshold: MSE at or below which an attack succeeds.
        engine, workers, ray_address: where the attack cells run (see :func:`leakaudit.audit`).
        max_iterations, restarts, seed: the attacks' budget and seeds (cell i: ``seed + i``).
        delta: the report's delta. defenses: per defense label, the report's defense record
            (``accuracy``, ``eps_claimed``, ``eps_sound``, ``reason``, ``level``); labels
            without one get no accuracy or eps.
        results: a JSON-lines results file (:class:`.results.ResultsFile`): each finished
            cell is written at once, and a rerun on the same observations skips those done.
    """
    observations, truths = list(observations), list(truths)
    attacks = tuple(attacks)
    _check_arguments(observations, truths, attacks, attacks_mod.available(), threshold,
                     engine, ray_address)
    input_shape = tuple(int(s) for s in input_shape)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    for i, (obs, truth) in enumerate(zip(observations, truths)):
        _check_observation(i, obs, truth, params, input_shape)
    workers = check_int("workers", min(4, os.cpu_count() or 1) if workers is None
                        else workers, 1)
    max_iterations = check_int("max_iterations", max_iterations, 1)
    restarts = check_int("restarts", restarts, 1)
    seed = check_int("seed", seed, 0)
    num_classes = check_int("num_classes", num_classes, 2)
    if engine == "ray":
        import_ray()  # fail before any work if Ray is missing
        check_ray_address(ray_address)  # or nothing answers at the address

    config = {"source": "observations", "observations": _digest(observations),
              "model": repr(model), "attacks": list(attacks), "threshold": threshold,
              "delta": delta, "max_iterations": max_iterations, "restarts": restarts,
              "seed": seed}
    store = ResultsFile(results, config)
    report = AuditReport(config=config, threshold=threshold, delta=delta)
    for label, record in (defenses or {}).items():
        report.add_defense(label, label, dict(record))
    image = len(input_shape) == 3
    jobs = build_jobs(_targets(observations, truths, seed), attacks, model,
                      input_shape=input_shape, num_classes=num_classes, threshold=threshold,
                      max_iterations=max_iterations, restarts=restarts, image=image,
                      key=lambda i, t, a: f"{i}|{a}")
    pending = [(key, job) for key, job in jobs if not store.has("cell", key)]
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), disable=not progress,
               desc="audit observations: attack")
    runner = make_engine(engine, workers, ray_address) if pending else None
    try:
        if runner is not None:
            run_jobs(pending, runner, store, on_done=lambda: bar.update(1))
    finally:
        if runner is not None:
            runner.close()
        bar.close()
    for rec in records(store, [key for key, _ in jobs]):
        report.add_cell(rec)
    return report


def _digest(observations: list) -> str:
    """A fingerprint of what was observed (so that a results file is not reused for other
    observations)."""
    return fingerprint({"n": len(observations), "sums": [
        [o.point, o.round, o.client, o.defense, o.lr, o.batch_size,
         [float(t.detach().double().sum()) for t in o.tensors]] for o in observations]})


def _check_arguments(observations: list, truths: list, attacks: tuple, known: list[str],
                     threshold: float, engine: str, ray_address: str | None) -> None:
    if not observations:
        raise ValueError("observations must be a non-empty sequence of Observation")
    if len(truths) != len(observations):
        raise ValueError(f"truths must hold one GroundTruth per observation: "
                         f"{len(truths)} truths for {len(observations)} observations")
    unknown = [a for a in attacks if a not in known]
    if not attacks or unknown:
        raise ValueError(f"attacks must be among {known}, got {list(attacks)}")
    check_number("threshold", threshold, minimum=0.0, open_min=True)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    if ray_address is not None and engine != "ray":
        raise ValueError(f"ray_address is only used with engine='ray', got engine={engine!r}")


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

