"""Label counts of a batch with repeated labels, from the last layer's gradient.

Under the mean cross-entropy, the last linear layer ``z = W a + b`` of a batch of ``B``
examples receives the bias gradient

    db_c = (1/B) sum_i (p_ic - y_ic)            so   n_c = P_c - B db_c,   P_c = sum_i p_ic,

where ``n_c`` is the number of examples of class ``c`` and ``p_i`` the softmax of example
``i`` (Wainakh et al., "User-level label leakage from gradients in federated learning", PoPETs
2022, LLG+; Geiping's ``breaching`` "bias-corrected" strategy; Ma et al., "Instance-wise batch
label restoration via gradients in federated learning" (iLRG), ICLR 2023). ``db`` is observed
exactly; the only unknown is the softmax mass ``P``. LLG+ estimates it from dummy inputs the
attacker makes up; here it is read from the observed gradient itself, in the spirit of iLRG
(which recovers the last layer's inputs from the gradient before the softmax):

1. ``dW_c = (1/B) sum_i (p_ic - y_ic) a_i`` and ``db_c`` share the coefficients, so the classes
   with ``db_c < 0`` give ``abar = sum dW_c / sum db_c``, a positive combination of the batch's
   features dominated by the examples of those classes: an estimate of the mean feature
   vector (the classes with ``db_c > 0`` give the same vector, since both sums vanish over
   all classes);
2. ``P_hat = B softmax(W abar + b)`` (the softmax of the mean feature; on untrained models the
   softmax varies little between inputs);
3. ``n_hat = P_hat - B db``, at least one for every class with ``db_c < 0`` (it must be
   present), rounded to integers summing to ``B`` by the largest-remainder rule.

Measured on untrained LeNet-Sigmoid with real digits (``python -m benchmarks.leakage_curves
--labels-only``, 10 batches each): multiset accuracy 1.00 at B = 8 and 0.99 at B = 32 (the
sign rule before it: 0.81 and 0.82). The estimate degrades on well-fit models (the
softmax then depends on the input and ``db`` shrinks: 0.55 / 0.44 on the ReLU CNN after 5
rounds) and under noise on ``db``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .._validate import check_int

__all__ = ["count_labels", "counts_to_labels", "estimate_counts", "last_layer"]


def last_layer(model: nn.Module, num_classes: int
               ) -> tuple[int, int | None]:
    """Indices (among the trainable parameters) of the last linear layer's weight and bias.

    The weight is the last 2-D parameter of shape ``(num_classes, features)``; the bias is the
    1-D parameter of shape ``(num_classes,)`` right after it (None when the layer has none).
    """
    shapes = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    for i in range(len(shapes) - 1, -1, -1):
        if len(shapes[i]) == 2 and shapes[i][0] == num_classes:
            has_bias = i + 1 < len(shapes) and shapes[i + 1] == (num_classes,)
            return i, (i + 1 if has_bias else None)
    raise ValueError(
        f"the model has no 2-D parameter of shape ({num_classes}, features): cannot find the "
        "last linear layer to infer labels from; pass labels= explicitly"
    )


def estimate_counts(weight: torch.Tensor, bias: torch.Tensor, weight_grad: torch.Tensor,
                    bias_grad: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Real-valued class counts ``P_hat - B db`` (steps 1-3 of the module docstring, before
    rounding); float64, shape ``(classes,)``."""
    w, b = weight.detach().double().cpu(), bias.detach().double().cpu()
    gw, gb = weight_grad.detach().double().cpu(), bias_grad.detach().double().cpu()
    negative = gb < 0
    mass = gb[negative].sum()
    if bool(negative.any()) and float(mass) < 0:
        mean_feature = gw[negative].sum(dim=0) / mass
        softmax_mass = batch_size * torch.softmax(w @ mean_feature + b, dim=0)
    else:  # an all-zero bias gradient: nothing to read; share the batch evenly
        softmax_mass = torch.full_like(gb, batch_size / len(gb))
    return (softmax_mass - batch_size * gb).clamp_min(0.0)


def round_counts(estimate: torch.Tensor, batch_size: int,
                 present: torch.Tensor) -> torch.Tensor:
    """Integer counts summing to ``batch_size``: floors, at least one per ``present`` class
    (while the batch allows), then the largest remainders (ties to the lower class)."""
    est = estimate.double()
    counts = torch.floor(est).long()
    order = [int(c) for c in torch.argsort(-est, stable=True)]
    floor_one = [c for c in order if bool(present[c])][:batch_size]
    for c in floor_one:
        counts[c] = max(int(counts[c]), 1)
    minimum = torch.zeros_like(counts)
    minimum[floor_one] = 1
    while int(counts.sum()) > batch_size:  # drop where the count exceeds the estimate most
        excess = torch.where(counts > minimum, counts - est, torch.full_like(est, -torch.inf))
        counts[int(torch.argmax(excess))] -= 1
    while int(counts.sum()) < batch_size:
        counts[int(torch.argmax(est - counts))] += 1
    return counts


def counts_to_labels(counts: torch.Tensor) -> torch.Tensor:
    """The sorted label multiset (int64) of per-class counts."""
    return torch.repeat_interleave(torch.arange(len(counts)), counts.long().cpu())


def count_labels(model: nn.Module, gradients: Sequence[torch.Tensor], batch_size: int,
                 num_classes: int) -> torch.Tensor | None:
    """The label multiset of a batch (sorted, int64) by the bias-corrected count estimate,
    or None when the last linear layer has no bias (then the counts cannot be read)."""
    batch_size = check_int("batch_size", batch_size, 1)
    num_classes = check_int("num_classes", num_classes, 2)
    params = [p for p in model.parameters() if p.requires_grad]
    if len(gradients) != len(params):
        raise ValueError(f"gradients has {len(gradients)} tensors, the model has "
                         f"{len(params)} trainable parameters")
    w_index, b_index = last_layer(model, num_classes)
    if b_index is None:
        return None
    estimate = estimate_counts(params[w_index], params[b_index], gradients[w_index],
                               gradients[b_index], batch_size)
    present = gradients[b_index].detach().cpu() < 0
    return counts_to_labels(round_counts(estimate, batch_size, present))
