"""prune: zero the smallest-magnitude share of the client update (Zhu et al. 2019, DLG's
gradient-pruning defense). No DP guarantee."""

from __future__ import annotations

import torch

from .._validate import check_fraction
from .base import ClientContext, Defense, record_no_privacy
from .ops import prune_smallest


class Prune(Defense):
    """Zero exactly round(rate * n) smallest-magnitude coordinates of the update."""

    name = "prune"
    sites = frozenset({"client"})
    level = "none"
    batched_trials = False   # deterministic: one run per trial

    def __init__(self, rate: float = 0.1) -> None:
        self.rate = check_fraction("rate", rate)

    def params(self) -> dict[str, object]:
        return {"rate": self.rate}

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        record_no_privacy(ctx, "pruned client update")
        return prune_smallest(update, self.rate)
