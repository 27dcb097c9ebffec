"""Per-example and batch gradients: the bottom layer, which knows nothing of DP, FL or attacks.

One loss for everyone: :func:`cross_entropy` is what clients train on (the simulator), what a
shared gradient is the gradient of (``batch_gradient``) and what the attacks' dummy gradient
matches (``leakaudit.attacks.problem``); the attacks are only exact because the three agree.
Per-example gradients use ``torch.func`` (``functional_call`` + ``vmap(grad)``), never a Python
loop over examples. Also here: the two numeric contexts every torch-heavy loop uses
(:func:`flush_denormals`, :func:`torch_threads`). Imports no sibling module.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

__all__ = ["LocalBatch", "NonFiniteGradientError", "batch_gradient", "cross_entropy",
           "finite", "flush_denormals", "per_example_gradients", "rounded_away",
           "torch_threads"]


class NonFiniteGradientError(FloatingPointError):
    """A gradient or update had NaN/inf; training stops, naming the client and round."""


def cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                  reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of a batch (mean by default); ``target`` holds class indices or class
    probabilities (DLG's soft dummy labels). The one loss of the package."""
    return F.cross_entropy(logits, target, reduction=reduction)


def _example_loss(model: nn.Module) -> Callable[..., torch.Tensor]:
    def loss(params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, (params, buffers), (x.unsqueeze(0),))
        return cross_entropy(out, y.unsqueeze(0))

    return loss


def _mean_loss(model: nn.Module) -> Callable[..., torch.Tensor]:
    def loss(params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return cross_entropy(functional_call(model, (params, buffers), (x,)), y)

    return loss


def per_example_gradients(model: nn.Module, params: dict[str, torch.Tensor],
                          buffers: dict[str, torch.Tensor], x: torch.Tensor,
                          y: torch.Tensor) -> list[torch.Tensor]:
    """Per-example gradients of the cross-entropy, (B, *shape) per parameter, via vmap(grad)."""
    g = vmap(grad(_example_loss(model)), in_dims=(None, None, 0, 0))(params, buffers, x, y)
    return [g[k] for k in params]


def mean_gradient(model: nn.Module, params: dict[str, torch.Tensor],
                  buffers: dict[str, torch.Tensor], x: torch.Tensor,
                  y: torch.Tensor) -> list[torch.Tensor]:
    """Gradient of the mean cross-entropy of (x, y) at ``params``, in ``params`` order."""
    g = grad(_mean_loss(model))(params, buffers, x, y)
    return [g[k] for k in params]


def batch_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Gradient of the mean cross-entropy of (x, y) w.r.t. the model's trainable parameters,
    in ``model.named_parameters()`` order (what a client would share)."""
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    return mean_gradient(model, params, buffers, x, y)


def rounded_away(weights: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor],
                 lr: float) -> float:
    """The fraction of entries whose update lr * g is below half a unit in the last place of
    its weight w (|lr g| < ulp(w) / 2 in w's dtype): w - lr g then rounds back to w and the
    update carries nothing of that entry (IEEE 754 round to nearest; ulp(w) = spacing of w,
    ``numpy.spacing``). At leak point 1 with one local step, the attacker's g = -dW / lr is
    zero there whatever the example was: a floor on what any attack on the update sees."""
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if len(weights) != len(gradients) or not weights:
        raise ValueError("weights and gradients must be non-empty lists of the same length")
    lost = total = 0
    for w, g in zip(weights, gradients):
        if w.shape != g.shape:
            raise ValueError(f"gradients: shape {tuple(g.shape)} differs from its weight's "
                             f"{tuple(w.shape)}")
        w = w.detach()
        spacing = torch.nextafter(w.abs(), torch.tensor(math.inf, dtype=w.dtype)) - w.abs()
        step = (lr * g.detach().double()).abs()
        lost += int((step < spacing.double() / 2).sum())
        total += w.numel()
    return lost / total


def finite(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether every entry of every tensor is finite."""
    return all(bool(torch.isfinite(t).all()) for t in tensors)


class LocalBatch:
    """One local iteration's batch as a defense may use it: gradients at any weights.

    A defense never reads the examples; it asks for per-example gradients or the mean-loss
    gradient at weights of its choice, for gradients of inputs it makes itself (random noise:
    data-independent), or for a freshly sampled batch of the same client (``fresh``).
    NaN/inf in any gradient raises :class:`NonFiniteGradientError` naming client and round.
    """

    def __init__(self, model: nn.Module, buffers: dict[str, torch.Tensor], x: torch.Tensor,
                 y: torch.Tensor, *, num_classes: int, draw: Any = None,
                 where: str = "") -> None:
        self._model, self._buffers = model, buffers
        self.x, self.y = x, y
        self.num_classes = int(num_classes)
        self._draw = draw
        self._where = where

    @property
    def size(self) -> int:
        return int(self.x.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def _checked(self, g: list[torch.Tensor], what: str) -> list[torch.Tensor]:
        if not finite(g):
            raise NonFiniteGradientError(f"NaN/inf in a {what} of {self._where}")
        return g

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """(B, *shape) per parameter; an empty batch gives one all-zero row."""
        if self.size == 0:
            return [torch.zeros((1, *v.shape), dtype=v.dtype) for v in params.values()]
        return self._checked(per_example_gradients(self._model, params, self._buffers,
                                                   self.x, self.y), "per-example gradient")

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Gradient of the mean cross-entropy of the batch."""
        return self._checked(mean_gradient(self._model, params, self._buffers, self.x, self.y),
                             "gradient")

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        """Per-example gradients of inputs the caller made (not the client's data)."""
        return self._checked(per_example_gradients(self._model, params, self._buffers, x, y),
                             "per-example gradient of caller-made inputs")

    def fresh(self) -> LocalBatch:
        """Another batch of the same client, sampled independently by the same rule."""
        if self._draw is None:
            raise RuntimeError("this batch cannot draw another one")
        return self._draw()


# ------------------------------------------------------------------ numeric contexts
_FLUSH_STATE = {"depth": 0, "was_on": False}


def _flush_is_on() -> bool:
    return torch.tensor([1e-40], dtype=torch.float32).mul(1.0).item() == 0.0


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush subnormal floats to zero while training or attacking.

    Saturated sigmoids produce subnormal gradients that make CPU arithmetic ~4x slower;
    values below ~1e-38 are numerically irrelevant here. Nested uses are counted, and the
    caller's own mode is restored when the outermost one ends.
    """
    if _FLUSH_STATE["depth"] == 0:
        _FLUSH_STATE["was_on"] = _flush_is_on()
        torch.set_flush_denormal(True)
    _FLUSH_STATE["depth"] += 1
    try:
        yield
    finally:
        _FLUSH_STATE["depth"] -= 1
        if _FLUSH_STATE["depth"] == 0:
            torch.set_flush_denormal(_FLUSH_STATE["was_on"])


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` intra-op threads for the duration (None: leave torch's setting), then
    restore the caller's number."""
    old = torch.get_num_threads()
    if n is None or n == old:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
