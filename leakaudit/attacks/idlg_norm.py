"""iDLG on unit-normalised gradients: the squared L2 distance between g_dummy / ||g_dummy||
and g / ||g|| (= 2 (1 - cos), the cosine of Geiping et al. 2020 minimised by iDLG's L-BFGS).

Why: a defense that clips (fed-cdp, fed-alpha-cdp, adaclip, fed-sdp) rescales the shared
gradient, and iDLG's plain L2 then asks for a dummy whose gradient has the clipped norm,
which no image has: measured on untrained LeNet-Sigmoid (digits, B = 1, fed-cdp with clip 4
and sigma 0) iDLG gets ~5 dB where this attack rebuilds the image (~43 dB). Labels, start,
loop and clamping as in :mod:`leakaudit.attacks.idlg`.
"""

from __future__ import annotations

import torch

from .attempt import Config
from .idlg import IDLG
from .problem import GradientProblem

__all__ = ["NormalizedIDLG"]


class NormalizedIDLG(IDLG):
    """iDLG matching directions only (invariant to the clipping's rescaling)."""

    name = "idlg-norm"
    paper = "Zhao et al. 2020 (iDLG) with the scale-free match of Geiping et al. 2020"

    def objective(self, problem: GradientProblem, x: torch.Tensor,
                  label_logits: torch.Tensor | None, cfg: Config,
                  create_graph: bool = True) -> torch.Tensor:
        grads = problem.dummy_gradients(x, label_logits, create_graph)
        dummy = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt().clamp_min(1e-30)
        observed = torch.stack([o.pow(2).sum() for o in problem.observed]).sum().sqrt()
        return torch.stack([(g / dummy - o / observed.clamp_min(1e-30)).pow(2).sum()
                            for g, o in zip(grads, problem.observed)]).sum()
