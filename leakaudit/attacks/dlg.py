"""DLG: Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019.

Optimised: a dummy batch ``x ~ N(0, 1)`` of shape (B, *input_shape) and dummy label logits
``~ N(0, 1)`` of shape (B, classes), jointly; the dummy's loss is the cross-entropy against
the softmax of the logits (soft labels). Objective: sum over parameters of the squared L2
distance between the dummy's gradient and the observed one. Optimiser: L-BFGS (torch
defaults), strong-Wolfe line search unless ``line_search=None`` (the reference). Reported
labels: argmax of the learned logits. Given ``labels=``, only the input is optimised.

Clamping: the dummy is optimised unconstrained; images are reported clamped to [0, 1],
tabular rows unclamped.
"""

from __future__ import annotations

import torch

from .attempt import Config, Start
from .base import Attack

__all__ = ["DLG"]


class DLG(Attack):
    """Deep Leakage from Gradients: input and soft labels learned jointly."""

    name = "dlg"
    paper = "Zhu, Liu, Han, Deep Leakage from Gradients, NeurIPS 2019"
    learns_labels = True

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        x = torch.randn((cfg.batch_size, *cfg.input_shape), generator=gen)
        logits = torch.randn((cfg.batch_size, cfg.num_classes), generator=gen)
        return Start(x, logits)
