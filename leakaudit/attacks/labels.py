"""Label inference from a shared gradient (iDLG, Zhao, Mopuri, Bilen 2020).

Under the mean cross-entropy, the gradient of the last linear layer's weight row of class
``c`` is ``(1/B) sum_i (p_ic - y_ic) a_i`` where ``a_i`` is the layer's input for example
``i``. With non-negative inputs (sigmoid, ReLU, pooling of those), every entry of the row of a
class absent from the batch is >= 0, and for one example the row of its class is <= 0.

* B = 1 (iDLG): the label is the argmin of the row sums, exact; ``identifiable`` says that
  exactly one row sum is negative.
* B > 1: a class is present when its row has a negative entry (Yin et al., "See through
  gradients", CVPR 2021; never a false positive without noise, and more sensitive than the
  row sum). Exactly B present classes (B <= classes, every negative row sum among them): the
  labels are distinct and identifiable. Otherwise labels repeat, a class hides (the model is
  confident about it on another example of the batch) or noise blurs the signs: the labels
  are the classes with negative row sums (most negative first), then the other present
  classes (most negative entry first), and the remaining slots repeat the most negative
  row sums in proportion to their magnitude (D'Hondt allocation: the magnitude grows with
  the count), with ``identifiable`` False. B > classes is never identifiable. When the last
  layer has a bias, the counts come from :mod:`leakaudit.attacks.label_counts` instead (the
  bias-corrected estimate: 1.00 of the multiset at B = 8, 0.99 at B = 32 where the rule
  above gets 0.81 and 0.73).

Row sums (not the bias) rank classes: with activations >= 0 they are exact like the bias,
and summing many coordinates makes them far more robust to additive noise.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .._validate import check_int
from .label_counts import count_labels
from .problem import trainable

__all__ = ["infer_labels", "last_linear_index"]


def last_linear_index(shapes: Sequence[torch.Size | tuple[int, ...]], num_classes: int) -> int:
    """Index of the last linear layer's weight: the last 2-D parameter whose first dimension
    is ``num_classes`` (works for LeNet, the Adap CNN, the MLP and most user models)."""
    for i in range(len(shapes) - 1, -1, -1):
        shape = tuple(shapes[i])
        if len(shape) == 2 and shape[0] == num_classes:
            return i
    raise ValueError(
        f"the model has no 2-D parameter of shape ({num_classes}, features): cannot find the "
        "last linear layer to infer labels from; pass labels= explicitly"
    )


def infer_labels(model: nn.Module, gradients: Sequence[torch.Tensor], batch_size: int,
                 num_classes: int) -> tuple[torch.Tensor, bool]:
    """Infer the labels of a batch from its gradient (iDLG rule and its batch extension).

    ``gradients`` are in the order of the model's trainable parameters. Returns the labels
    (int64, sorted ascending: the order within a batch is unknown) and whether the multiset
    is identifiable (exactly ``batch_size`` negative row sums, ``batch_size <= num_classes``).
    """
    batch_size = check_int("batch_size", batch_size, 1)
    num_classes = check_int("num_classes", num_classes, 2)
    params = trainable(model)
    if len(gradients) != len(params):
        raise ValueError(
            f"gradients has {len(gradients)} tensors, the model has {len(params)} trainable "
            "parameters"
        )
    index = last_linear_index([p.shape for _, p in params], num_classes)
    weight = gradients[index]
    if tuple(weight.shape) != tuple(params[index][1].shape):
        raise ValueError(
            f"gradients[{index}] has shape {tuple(weight.shape)}, the parameter "
            f"{params[index][0]!r} has {tuple(params[index][1].shape)}"
        )
    labels, identifiable = labels_from_last_layer(weight.detach().to(torch.float64).cpu(),
                                                  batch_size)
    if identifiable or batch_size == 1:
        return labels, identifiable
    counted = count_labels(model, gradients, batch_size, num_classes)  # repeated labels
    return (labels if counted is None else counted), False


def labels_from_last_layer(weight: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, bool]:
    """The labels implied by the last layer's weight gradient ``(classes, features)``."""
    rows = weight.sum(dim=1)
    order = [int(c) for c in torch.argsort(rows, stable=True)]
    negative = [c for c in order if rows[c] < 0]
    if batch_size == 1:
        return torch.tensor(order[:1], dtype=torch.int64), len(negative) == 1
    minima = weight.min(dim=1).values
    present = [int(c) for c in torch.argsort(minima, stable=True) if minima[c] < 0]
    identifiable = len(present) == batch_size and set(negative) <= set(present)
    if identifiable:
        return torch.tensor(sorted(present), dtype=torch.int64), True
    chosen = negative[:batch_size]
    chosen += [c for c in present if c not in chosen][: batch_size - len(chosen)]
    if not chosen:
        chosen = order[:1]
    pool = [c for c in chosen if rows[c] < 0] or chosen[:1]
    counts = dict.fromkeys(chosen, 1)
    while len(chosen) < batch_size:
        # D'Hondt: the next slot to the class with the largest |row sum| / (count + 1)
        best = max(pool, key=lambda c: (-float(rows[c]) / (counts[c] + 1), -c))
        counts[best] += 1
        chosen.append(best)
    return torch.tensor(sorted(chosen), dtype=torch.int64), False
