"""none: plain FedAvg, no defense (McMahan et al. 2017). Every update is released raw."""

from __future__ import annotations

import torch

from .base import ClientContext, Defense, record_no_privacy


class NoDefense(Defense):
    """No clipping, no noise: the baseline every attack should break."""

    name = "none"
    sites = frozenset()
    level = "none"
    batched_trials = False   # deterministic: one run per trial

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        record_no_privacy(ctx, "raw client update")
        return update
