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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import attacks as attacks_mod
from .. import metrics
from .._jsonsafe import finite_json
from ..grads import torch_threads
from ..records import GroundTruth

__all__ = ["AttackSpec", "CellJob", "content_key", "relabelled", "run_cell", "score"]


@dataclass
class AttackSpec:
    """What the attacker of one cell has: model at the leak point, observed gradient, the
    shapes the protocol tells it, and the attack's budget."""

    attack: str
    model: nn.Module
    gradients: list[torch.Tensor]
    input_shape: tuple[int, ...]
    num_classes: int
    batch_size: int
    max_iterations: int
    restarts: int
    seed: int
    #: what the protocol tells the attack (fedavg: local_steps, client_lr)
    options: dict[str, Any] = field(default_factory=dict)
    #: where the attack runs (None: where the model is)
    device: str | None = None


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
    s = job.spec
    arrays = {k: torch.as_tensor(v) for k, v in s.options.items()
              if isinstance(v, (torch.Tensor, np.ndarray))}  # repr() elides large ones
    options = sorted((k, v) for k, v in s.options.items() if k not in arrays)
    h = hashlib.sha256(repr((
        s.attack, tuple(s.input_shape), s.num_classes, s.batch_size, s.max_iterations,
        s.restarts, s.seed, options, s.device, job.threshold, job.image,
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
    return attacks_mod.reconstruct(
        spec.attack, spec.model, spec.gradients, input_shape=spec.input_shape,
        num_classes=spec.num_classes, batch_size=spec.batch_size,
        max_iterations=spec.max_iterations, restarts=spec.restarts, seed=spec.seed,
        track_every=1, keep_iterates=True, device=spec.device, **spec.options)


def score(job: CellJob, rec: attacks_mod.Reconstruction, seconds: float) -> dict[str, Any]:
    """The metric columns for one cell (docs/glossary.md), from the reconstruction and the truth."""
    truth = job.truth.inputs
    metrics.score_history(rec.history, truth.detach().to("cpu", torch.float64))
    rec_x = rec.inputs[metrics.match(rec.inputs, truth)]
    mse = metrics.mse(rec_x, truth)
    thr, limit = job.threshold, job.spec.max_iterations
    return finite_json({
        "defense": job.defense, "point": job.point, "attack": job.spec.attack,
        "example": job.example, "mse": mse, "rmse": math.sqrt(mse),
        "psnr": metrics.psnr(rec_x, truth),
        "ssim": metrics.ssim(rec_x, truth) if job.image else None,
        "success": bool(metrics.success(mse, thr)),
        "tau": metrics.tau(rec.history, thr, limit),
        "label_accuracy": metrics.label_accuracy(rec.labels, job.truth.labels),
        "iterations": rec.iterations, "gradient_loss": rec.gradient_loss, "seconds": seconds,
        "truth": truth[0].tolist(), "reconstruction": rec_x[0].tolist(),
    })
