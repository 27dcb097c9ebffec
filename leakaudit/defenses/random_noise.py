"""random-noise: add N(0, v) to every coordinate of the client update (Zhu et al. 2019 test
variances 1e-3 and 1e-2). No clipping, so no DP guarantee: the sensitivity is unbounded."""

from __future__ import annotations

import math

import torch

from .._validate import check_nonneg
from . import ops
from .base import ClientContext, Defense, record_no_privacy


class RandomNoise(Defense):
    """Gaussian noise of variance ``variance`` on the update, without clipping."""

    name = "random-noise"
    sites = frozenset({"client"})
    level = "none"
    batched_trials = True

    def __init__(self, variance: float = 0.01) -> None:
        self.variance = check_nonneg("variance", variance)

    def params(self) -> dict[str, object]:
        return {"variance": self.variance}

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        record_no_privacy(ctx, "noisy but unclipped client update")
        noise = ops.gaussian_like(update, math.sqrt(self.variance), ctx.generator)
        return [u + n for u, n in zip(update, noise)]
