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
"""

from __future__ import annotations

from typing import Any

import torch

from .._validate import check_number
from .attempt import Attempt, AttemptRun, Config, Start
from .base import Attack
from .problem import GradientProblem

__all__ = ["InvertingGradients", "total_variation"]


class InvertingGradients(Attack):
    """Cosine gradient matching + total variation, signed Adam, boxed pixels."""

    name = "ig"
    paper = "Geiping et al., Inverting Gradients, NeurIPS 2020"
    defaults = {"tv_weight": 0.1, "lr": 0.1}

    def check_option(self, key: str, value: Any) -> Any:
        if key == "tv_weight":
            return check_number("tv_weight", value, minimum=0.0)
        if key == "lr":
            value = check_number("lr", value, minimum=0.0)
            if value == 0.0:
                raise ValueError("lr must be > 0")
            return value
        return super().check_option(key, value)

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        return Start(torch.randn((cfg.batch_size, *cfg.input_shape), generator=gen))

    def objective(self, problem: GradientProblem, x: torch.Tensor,
                  label_logits: torch.Tensor | None, cfg: Config,
                  create_graph: bool = True) -> torch.Tensor:
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
        milestones = sorted({int(n * f) for f in (3 / 8, 5 / 8, 7 / 8)} - {0})
        schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma=0.1)

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


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference between vertically and horizontally adjacent pixels."""
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
    return dx + dy
