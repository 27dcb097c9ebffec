"""The gradient-matching problem: the dummy side of every gradient-inversion attack.

The model's weights at the leak point are copied, never modified; the dummy's gradient is that
of the mean cross-entropy over the dummy batch (:func:`leakaudit.grads.cross_entropy`, the
same loss the simulator trains on and ``leakaudit.grads.batch_gradient`` differentiates),
through ``torch.func.functional_call`` and ``torch.autograd.grad(create_graph=True)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ..grads import cross_entropy

__all__ = ["GradientProblem", "l2_unit", "layer_cosine_distance", "trainable"]


def trainable(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The model's trainable parameters in ``named_parameters()`` order (as the gradients)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


class GradientProblem:
    """The dummy-gradient side of gradient matching, on a private copy of the weights."""

    def __init__(self, model: nn.Module, gradients: Sequence[torch.Tensor],
                 labels: torch.Tensor | None) -> None:
        named = trainable(model)
        self.model = model
        self.names = [n for n, _ in named]
        self.params = [p.detach().clone().requires_grad_(True) for _, p in named]
        self.constants = {n: p.detach().clone() for n, p in model.named_parameters()
                          if not p.requires_grad}
        self.constants.update({n: b.detach().clone() for n, b in model.named_buffers()})
        self.dtype = self.params[0].dtype
        self.device = self.params[0].device
        self.observed = [g.detach().to(self.device, self.dtype).clone() for g in gradients]
        self.labels = labels
        #: sum over tensors of ||observed||^2: the scale of the L2 gradient distance
        self.observed_sq = float(sum(float(o.double().pow(2).sum()) for o in self.observed))
        #: what the L2 objective is divided by (:func:`l2_unit`)
        self.l2_unit = l2_unit(self.observed_sq)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tensors = dict(zip(self.names, self.params))
        tensors.update(self.constants)
        return functional_call(self.model, tensors, (x,))

    def target(self, label_logits: torch.Tensor | None) -> torch.Tensor:
        """Hard labels, or the softmax of DLG's dummy label logits."""
        if label_logits is not None:
            return F.softmax(label_logits, dim=-1)
        assert self.labels is not None
        return self.labels

    def dummy_gradients(self, x: torch.Tensor, label_logits: torch.Tensor | None,
                        create_graph: bool = True) -> list[torch.Tensor]:
        """Gradient of the mean cross-entropy of the dummy batch w.r.t. the parameters."""
        with torch.enable_grad():
            loss = cross_entropy(self.forward(x), self.target(label_logits))
            grads = torch.autograd.grad(loss, self.params, create_graph=create_graph,
                                        allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, self.params)]

    def l2(self, x: torch.Tensor, label_logits: torch.Tensor | None = None,
           create_graph: bool = True) -> torch.Tensor:
        """sum over parameters of ||dummy gradient - observed gradient||^2."""
        grads = self.dummy_gradients(x, label_logits, create_graph)
        return torch.stack([(g - o).pow(2).sum() for g, o in zip(grads, self.observed)]).sum()

    def cosine(self, x: torch.Tensor, label_logits: torch.Tensor | None = None,
               create_graph: bool = True) -> torch.Tensor:
        """1 - cosine similarity between the concatenated dummy and observed gradients."""
        grads = self.dummy_gradients(x, label_logits, create_graph)
        dot = torch.stack([(g * o).sum() for g, o in zip(grads, self.observed)]).sum()
        gg = torch.stack([g.pow(2).sum() for g in grads]).sum()
        oo = torch.stack([o.pow(2).sum() for o in self.observed]).sum()
        return 1.0 - dot / (gg.sqrt() * oo.sqrt()).clamp_min(1e-30)

    def layer_cosine(self, x: torch.Tensor, label_logits: torch.Tensor | None = None,
                     create_graph: bool = True) -> torch.Tensor:
        """Per-tensor scale-free match: the mean over parameter tensors of 1 - cosine
        similarity (:func:`layer_cosine_distance`)."""
        grads = self.dummy_gradients(x, label_logits, create_graph)
        return layer_cosine_distance(grads, self.observed)


def l2_unit(observed_sq: float) -> float:
    """The largest power of two <= ``observed_sq`` when that is below 1, else 1.

    Dividing the squared gradient distance by it makes the objective of order one at
    trained weights (||g||^2 ~ 1e-10 there, below L-BFGS's absolute tolerances on the loss
    change and on the gradient), while a power of two leaves every float32 result
    bit-for-bit unchanged where ||g||^2 >= 1 (the factor is 1) and scales the others
    exactly."""
    if not math.isfinite(observed_sq) or observed_sq >= 1.0 or observed_sq <= 0.0:
        return 1.0
    return max(2.0 ** math.floor(math.log2(observed_sq)), 2.0 ** -120)


def layer_cosine_distance(dummy: Sequence[torch.Tensor],
                          observed: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean over parameter tensors ``t`` of ``1 - <d_t, o_t> / (|d_t| |o_t|)``.

    Invariant to any positive rescaling of each observed tensor separately, hence to
    per-layer clipping (Fed-alphaCDP, Wei & Liu 2021, clips each layer to its own norm):
    a global cosine (Geiping et al. 2020, eq. 4) weighs the layers by the norms the clip
    chose, this one weighs every tensor alike. Tensors whose observed norm is zero carry no
    direction and are left out (all zero: the loss is 1)."""
    terms = []
    for d, o in zip(dummy, observed):
        on = o.pow(2).sum().sqrt()
        if float(on) == 0.0:
            continue
        dn = d.pow(2).sum().sqrt()
        terms.append(1.0 - (d * o).sum() / (dn * on).clamp_min(1e-30))
    if not terms:
        return torch.ones((), dtype=observed[0].dtype, device=observed[0].device)
    return torch.stack(terms).mean()
