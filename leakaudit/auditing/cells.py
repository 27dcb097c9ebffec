"""One attack cell: attack one observation, then score the reconstruction.

A cell is a :class:`CellJob`: what the attacker sees (the model at the leak point, the
observed gradient, shapes and the attack's budget) and, apart, the :class:`GroundTruth`. The
attack runs on the first part only; the truth is read afterwards, by the scorer
(:func:`score`). Cells are pure functions of their job, so any engine may run them.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import attacks as attacks_mod
from .. import metrics
from .._jsonsafe import finite_json
from .._validate import check_int, check_number
from ..attacks.attempt import Config
from ..grads import torch_threads
from ..records import GroundTruth

__all__ = ["AttackBudget", "AttackSpec", "CellJob", "content_key", "relabelled", "run_cell",
           "score"]


@dataclass(frozen=True)
class AttackBudget:
    """The attack budget of an audit and its success threshold: ``max_iterations``
    optimiser steps per attempt, ``restarts`` attempts (the best by gradient loss wins), and
    the MSE at or below which a reconstruction counts as a success. Build it with
    :meth:`make` (checked)."""

    max_iterations: int = 40
    restarts: int = 1
    threshold: float = 0.01

    @classmethod
    def make(cls, *, max_iterations: int = 40, restarts: int = 1,
             threshold: float = 0.01) -> AttackBudget:
        """Check every argument (ValueError naming it), then build the budget."""
        return cls(max_iterations=check_int("max_iterations", max_iterations, 1),
                   restarts=check_int("restarts", restarts, 1),
                   threshold=check_number("threshold", threshold, minimum=0.0,
                                          open_min=True))

    def replace(self, **changes: Any) -> AttackBudget:
        """A copy with ``changes``, checked again."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ValueError(f"{unknown[0]} is not a setting of AttackBudget")
        return AttackBudget.make(**{**asdict(self), **changes})


@dataclass
class AttackSpec:
    """What the attacker of one cell has: the attack itself (an object, so that an attack
    registered at run time reaches worker processes too), the model at the leak point, the
    observed gradient, and the call's settings (:class:`leakaudit.attacks.attempt.Config`:
    the shapes the protocol tells it, the budget, the seed, the protocol's options)."""

    attack: attacks_mod.Attack
    model: nn.Module
    gradients: list[torch.Tensor]
    config: Config
    #: where the attack runs (None: where the model is)
    device: str | None = None

    @classmethod
    def make(cls, attack: str | attacks_mod.Attack, model: nn.Module,
             gradients: list[torch.Tensor], *, input_shape: tuple[int, ...],
             num_classes: int, batch_size: int, max_iterations: int, restarts: int,
             seed: int, options: dict[str, Any] | None = None,
             device: str | None = None) -> AttackSpec:
        """The spec of one cell; ``attack``: a registered name or an Attack. The attack keeps
        every iterate (``keep_iterates``, ``track_every=1``) for the scorer."""
        obj = attacks_mod.get(attack) if isinstance(attack, str) else attack
        config = Config(input_shape=tuple(int(s) for s in input_shape),
                        num_classes=int(num_classes), batch_size=int(batch_size),
                        max_iterations=int(max_iterations), restarts=int(restarts),
                        seed=int(seed), track_every=1, options=dict(options or {}),
                        keep_iterates=True)
        return cls(attack=obj, model=model, gradients=gradients, config=config,
                   device=device)

    @property
    def name(self) -> str:
        """The attack's name (the report's column)."""
        return self.attack.name


@dataclass
class CellJob:
    """One cell: its identity, the attacker's view, and the truth (for the scorer only)."""

    defense: str
    point: int
    example: int
    spec: AttackSpec
    truth: GroundTruth
    threshold: float
    image: bool

    def run(self) -> dict[str, Any]:
        """The cell's record (:func:`run_cell`): a unit of the engines."""
        return run_cell(self)


def run_cell(job: CellJob) -> dict[str, Any]:
    """Attack, then score (a pure function: runs in a worker).

    Always on one torch thread: float results depend on how a reduction is split between
    threads, and one thread is what a worker process or a Ray task has (one per core); so
    every engine, and any number of workers, gives the same results.
    """
    with torch_threads(1):
        t0 = time.perf_counter()
        rec = attack(job.spec)
        seconds = time.perf_counter() - t0
        return score(job, rec, seconds)


def content_key(job: CellJob) -> str:
    """A digest of everything :func:`run_cell` reads from ``job`` except the cell's name
    (defense, point, example): two jobs with the same key give the same record up to those
    names (and the seconds), bit for bit, as a cell is a pure function of its job. Leak
    points often coincide (e.g. 0 and 1 when the defense does not act between them; 2
    under every defense that acts after the local step)."""
    s, c = job.spec, job.spec.config
    arrays = {k: torch.as_tensor(v) for k, v in c.options.items()
              if isinstance(v, (torch.Tensor, np.ndarray))}  # repr() elides large ones
    options = sorted((k, v) for k, v in c.options.items() if k not in arrays)
    h = hashlib.sha256(repr((
        s.name, type(s.attack).__qualname__, tuple(c.input_shape), c.num_classes,
        c.batch_size, c.max_iterations, c.restarts, c.seed, c.track_every, c.keep_iterates,
        options, s.device, job.threshold, job.image,
        type(s.model).__qualname__, repr(s.model))).encode())
    named = [*s.model.state_dict().items(),
             *((f"gradient{i}", g) for i, g in enumerate(s.gradients)),
             *((f"option.{k}", v) for k, v in sorted(arrays.items())),
             ("truth.inputs", job.truth.inputs), ("truth.labels", job.truth.labels)]
    for name, t in named:
        t = t.detach().cpu().contiguous()
        h.update(repr((name, str(t.dtype), tuple(t.shape))).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def relabelled(record: dict[str, Any], job: CellJob) -> dict[str, Any]:
    """The record of a job with the same :func:`content_key`, named as ``job``'s cell."""
    return dict(record, defense=job.defense, point=job.point, example=job.example)


def attack(spec: AttackSpec) -> attacks_mod.Reconstruction:
    """Run the attack on what the attacker sees (keeping its iterates for the scorer)."""
    c = spec.config
    return attacks_mod.run_attack(
        spec.attack, spec.model, spec.gradients, input_shape=c.input_shape,
        num_classes=c.num_classes, batch_size=c.batch_size, max_iterations=c.max_iterations,
        restarts=c.restarts, seed=c.seed, labels=None, options=dict(c.options),
        track_every=c.track_every, keep_iterates=c.keep_iterates, device=spec.device)


def score(job: CellJob, rec: attacks_mod.Reconstruction, seconds: float) -> dict[str, Any]:
    """The metric columns for one cell (docs/glossary.md), from the reconstruction and the truth."""
    truth = job.truth.inputs
    metrics.score_history(rec.history, truth.detach().to("cpu", torch.float64))
    rec_x = rec.inputs[metrics.match(rec.inputs, truth)]
    mse = metrics.mse(rec_x, truth)
    thr, limit = job.threshold, job.spec.config.max_iterations
    return finite_json({
        "defense": job.defense, "point": job.point, "attack": job.spec.name,
        "example": job.example, "mse": mse, "rmse": math.sqrt(mse),
        "psnr": metrics.psnr(rec_x, truth),
        "ssim": metrics.ssim(rec_x, truth) if job.image else None,
        "success": bool(metrics.success(mse, thr)),
        "tau": metrics.tau(rec.history, thr, limit),
        "label_accuracy": metrics.label_accuracy(rec.labels, job.truth.labels),
        "iterations": rec.iterations, "gradient_loss": rec.gradient_loss, "seconds": seconds,
        "truth": truth[0].tolist(), "reconstruction": rec_x[0].tolist(),
    })
