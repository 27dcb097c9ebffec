"""Inverting Gradients: Geiping, Bauermeister, Droege, Moeller, "Inverting Gradients - How
easy is it to break privacy in federated learning?", NeurIPS 2020.

Labels: inferred as in iDLG. Optimised: the dummy batch only, ``x ~ N(0, 1)`` then boxed.
Objective: 1 - cosine similarity between the concatenated dummy and observed gradients (all
layers) plus ``tv_weight`` (0.1) times the total variation of the images (mean absolute
difference of neighbouring pixels; no TV for tabular rows). Optimiser: Adam, learning rate
``lr`` (0.1), fed the sign of the gradient, divided by 10 at 3/8, 5/8 and 7/8 of
``max_iterations`` (Adam steps here, one evaluation each). Restarts are scored by this
objective, which is also the reported ``gradient_loss``.

Clamping: images are kept in the box [0, 1] after every step (the paper's boxed constraint);
tabular rows are unconstrained. The paper runs 24,000 steps; a few hundred give blurry
images. Needed for batches beyond ~8, where L-BFGS matching stalls.

Options beyond the paper: ``per_tensor`` (False; registered as ``"ig-layer"`` with True): the
mean over parameter tensors of 1 - cosine (:func:`~leakaudit.attacks.problem.
layer_cosine_distance`), invariant to per-layer clipping; ``schedule`` ("steps": the paper's
x0.1 at 3/8, 5/8, 7/8; "cosine": cosine decay to 0 after a 1/16 linear warm-up); ``prior``
(None, or a public mean image of ``input_shape``, e.g. the mean of a public data set: every
start is that image plus ``N(0, 0.1^2)`` noise instead of ``N(0, 1)``, and the TV weight
still applies). The budget (``max_iterations``, ``restarts``) is the caller's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._validate import check_number
from .attempt import Attempt, AttemptRun, Config, Start
from .base import Attack
from .problem import GradientProblem

__all__ = ["InvertingGradients", "LayerInvertingGradients", "SCHEDULES", "lr_schedule",
           "total_variation"]

SCHEDULES = ("steps", "cosine")


class InvertingGradients(Attack):
    """Cosine gradient matching + total variation, signed Adam, boxed pixels."""

    name = "ig"
    paper = "Geiping et al., Inverting Gradients, NeurIPS 2020"
    defaults = {"tv_weight": 0.1, "lr": 0.1, "per_tensor": False, "schedule": "steps",
                "prior": None}

    def check_option(self, key: str, value: Any) -> Any:
        if key == "per_tensor":
            if not isinstance(value, bool):
                raise ValueError(f"per_tensor must be True or False, got {value!r}")
            return value
        if key == "schedule":
            if value not in SCHEDULES:
                raise ValueError(f"schedule must be one of {SCHEDULES}, got {value!r}")
            return value
        if key == "prior":
            if value is not None and not (isinstance(value, torch.Tensor)
                                          and bool(torch.isfinite(value).all())):
                raise ValueError("prior must be None or a finite tensor (a public mean image)")
            return value
        if key == "tv_weight":
            return check_number("tv_weight", value, minimum=0.0)
        if key == "lr":
            value = check_number("lr", value, minimum=0.0)
            if value == 0.0:
                raise ValueError("lr must be > 0")
            return value
        return super().check_option(key, value)

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        noise = torch.randn((cfg.batch_size, *cfg.input_shape), generator=gen)
        prior = cfg.options.get("prior")
        if prior is None:
            return Start(noise)
        if tuple(prior.shape) != tuple(cfg.input_shape):
            raise ValueError(f"prior must have the input shape {tuple(cfg.input_shape)}, "
                             f"got {tuple(prior.shape)}")
        return Start(prior.detach().to(noise.dtype).expand_as(noise) + 0.1 * noise)

    def objective(self, problem: GradientProblem, x: torch.Tensor,
                  label_logits: torch.Tensor | None, cfg: Config,
                  create_graph: bool = True) -> torch.Tensor:
        if cfg.options.get("per_tensor"):
            loss = problem.layer_cosine(x, label_logits, create_graph)
        else:
            loss = problem.cosine(x, label_logits, create_graph)
        if cfg.is_image and cfg.options["tv_weight"] > 0:
            loss = loss + cfg.options["tv_weight"] * total_variation(x)
        return loss

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config) -> Attempt:
        x = start.inputs.clone()
        if cfg.is_image:
            x.clamp_(0.0, 1.0)
        x.requires_grad_(True)
        opt = torch.optim.Adam([x], lr=cfg.options["lr"])
        n = cfg.max_iterations
        schedule = lr_schedule(opt, n, cfg.options.get("schedule", "steps"))

        def evaluate() -> float:
            return float(self.objective(problem, x.detach(), None, cfg, create_graph=False))

        run = AttemptRun(cfg, x, None, evaluate)
        if run.failed:
            return run.result()
        while run.iterations < n:
            before = x.detach().clone()
            opt.zero_grad()
            loss = self.objective(problem, x, None, cfg)
            (grad,) = torch.autograd.grad(loss, [x])
            x.grad = grad.sign()
            opt.step()
            schedule.step()
            if cfg.is_image:
                with torch.no_grad():
                    x.clamp_(0.0, 1.0)
            if not run.after_step(float(loss.detach()), before, None):
                break
        return run.result()


def lr_schedule(opt: torch.optim.Optimizer, steps: int,
                kind: str) -> torch.optim.lr_scheduler.LRScheduler:
    """"steps": x0.1 at 3/8, 5/8 and 7/8 of ``steps`` (Geiping et al. 2020); "cosine": a
    linear warm-up over the first 1/16, then cosine decay to 0."""
    if kind == "steps":
        milestones = sorted({int(steps * f) for f in (3 / 8, 5 / 8, 7 / 8)} - {0})
        return torch.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma=0.1)
    warm = max(1, steps // 16)

    def factor(i: int) -> float:
        if i < warm:
            return (i + 1) / warm
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (i - warm) / max(1, steps - warm))))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference between vertically and horizontally adjacent pixels."""
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
    return dx + dy


class LayerInvertingGradients(InvertingGradients):
    """Inverting Gradients with the per-tensor cosine (against per-layer clipping)."""

    name = "ig-layer"
    paper = "Geiping et al. 2020 with a per-tensor scale-free cosine"
    defaults = {**InvertingGradients.defaults, "per_tensor": True}
