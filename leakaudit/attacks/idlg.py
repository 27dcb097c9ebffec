"""iDLG: Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", arXiv:2001.02610, 2020.

Labels: inferred from the last linear layer's weight gradient before optimising
(:func:`leakaudit.attacks.infer_labels`: exact for one example with non-negative activations
before that layer; the batch extension says when the multiset is not identifiable). Optimised:
the dummy batch only, ``x ~ N(0, 1)``, against the fixed hard labels. Objective: squared L2
gradient distance; L-BFGS (torch defaults), strong-Wolfe line search unless
``line_search=None``; stops when the gradient loss is <= ``early_stop`` (1e-9) times ||g||^2 (the
reference stops at an absolute 1e-6, checked every 10 steps, which at trained weights,
||g||^2 ~ 1e-10, holds at any confident dummy; we check the relative rule every step).

Clamping: the dummy is optimised unconstrained; images are reported clamped to [0, 1],
tabular rows unclamped.
"""

from __future__ import annotations

import torch

from .attempt import Config, Start
from .base import Attack

__all__ = ["IDLG"]


class IDLG(Attack):
    """iDLG: labels inferred from the gradient, then the input alone is matched."""

    name = "idlg"
    paper = "Zhao, Mopuri, Bilen, iDLG: Improved Deep Leakage from Gradients, 2020"

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        return Start(torch.randn((cfg.batch_size, *cfg.input_shape), generator=gen))
