"""Argument checks of an attack call: everything is checked before any work starts
(ValueError naming the argument), and a warning for ReLU-type models."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from .._validate import check_int
from .attempt import Config
from .problem import trainable

__all__ = ["RELU_TYPES", "ReLUWarning", "check_call", "check_track", "warn_relu"]

#: activations whose second derivative vanishes (piecewise linear) or nearly so: gradient
#: matching still works on such models, only worse (so: warn, do not refuse)
RELU_TYPES: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU,
    nn.SiLU, nn.Mish, nn.Hardswish, nn.Hardtanh, nn.Hardsigmoid,
)  # fmt: skip


class ReLUWarning(UserWarning):
    """The model has ReLU-type activations: gradient inversion is harder, not impossible."""


def check_call(options: Callable[[dict[str, Any]], dict[str, Any]], model: nn.Module,
               gradients: Sequence[torch.Tensor], input_shape: Sequence[int],
               num_classes: int, batch_size: int, max_iterations: int, restarts: int,
               seed: int, labels: Any, track_every: int, given: dict[str, Any],
               keep_iterates: bool = False
               ) -> tuple[Config, list[torch.Tensor], torch.Tensor | None]:
    """Check one call (``options`` merges and checks the attack's options); return its
    config, the observed gradients and the known labels."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    num_classes = check_int("num_classes", num_classes, 2)
    batch_size = check_int("batch_size", batch_size, 1)
    max_iterations = check_int("max_iterations", max_iterations, 1)
    restarts = check_int("restarts", restarts, 1)
    seed = check_int("seed", seed, 0)
    track_every = check_int("track_every", track_every, 1)
    opts = options(dict(given))
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) \
            or not input_shape:
        raise ValueError(f"input_shape must be a non-empty sequence of sizes, got "
                         f"{input_shape!r}")
    shape = tuple(check_int("input_shape", s, 1) for s in input_shape)
    params = trainable(model)
    if not params:
        raise ValueError("model has no trainable parameters")
    grads = _checked_gradients(gradients, params)
    _check_forward(model, shape, batch_size, num_classes, params[0][1])
    known = None
    if labels is not None:
        known = torch.as_tensor(labels)
        if known.dtype.is_floating_point or known.dtype == torch.bool or known.ndim != 1 \
                or len(known) != batch_size:
            raise ValueError(f"labels must be {batch_size} integer labels, got {labels!r}")
        if int(known.min()) < 0 or int(known.max()) >= num_classes:
            raise ValueError(f"labels must lie in [0, {num_classes}), got {known.tolist()}")
        known = known.to(torch.int64)
    cfg = Config(input_shape=shape, num_classes=num_classes, batch_size=batch_size,
                 max_iterations=max_iterations, restarts=restarts, seed=seed,
                 track_every=track_every, options=opts,
                 keep_iterates=keep_iterates)
    return cfg, grads, known


def check_track(track: Any, batch_size: int, input_shape: Sequence[int]) -> torch.Tensor | None:
    """The ground truth given to score an attack's history: (B, *input_shape), finite."""
    if track is None:
        return None
    batch_size = check_int("batch_size", batch_size, 1)
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence):
        raise ValueError(f"input_shape must be a non-empty sequence of sizes, got "
                         f"{input_shape!r}")
    shape = tuple(check_int("input_shape", s, 1) for s in input_shape)
    truth = torch.as_tensor(track).detach().to("cpu", torch.float64)
    if tuple(truth.shape) != (batch_size, *shape):
        raise ValueError(f"track must have shape {(batch_size, *shape)}, got "
                         f"{tuple(truth.shape)}")
    if not torch.isfinite(truth).all():
        raise ValueError("track has NaN/inf values")
    return truth


def _checked_gradients(gradients: Sequence[torch.Tensor],
                       params: list[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    if isinstance(gradients, torch.Tensor) or not isinstance(gradients, Sequence):
        raise ValueError("gradients must be a list of tensors in the order of the model's "
                         f"trainable parameters, got {type(gradients).__name__}")
    if len(gradients) != len(params):
        raise ValueError(f"gradients has {len(gradients)} tensors, the model has "
                         f"{len(params)} trainable parameters")
    out = []
    for i, (g, (name, p)) in enumerate(zip(gradients, params)):
        if not isinstance(g, torch.Tensor) or not g.dtype.is_floating_point:
            raise ValueError(f"gradients[{i}] must be a floating-point tensor, got "
                             f"{type(g).__name__}")
        if tuple(g.shape) != tuple(p.shape):
            raise ValueError(f"gradients[{i}] has shape {tuple(g.shape)}, the parameter "
                             f"{name!r} has {tuple(p.shape)}")
        if not torch.isfinite(g).all():
            raise ValueError(f"gradients[{i}] ({name!r}) has NaN/inf values")
        out.append(g.detach())
    return out


def _check_forward(model: nn.Module, shape: tuple[int, ...], batch_size: int,
                   num_classes: int, like: torch.Tensor) -> None:
    tensors = {n: t.detach().clone() for n, t in model.named_buffers()}
    tensors.update({n: p.detach() for n, p in model.named_parameters()})
    x = torch.zeros((batch_size, *shape), dtype=like.dtype, device=like.device)
    try:
        with torch.no_grad():
            out = functional_call(model, tensors, (x,))
    except Exception as exc:  # noqa: BLE001 - any failure here is a shape mismatch to report
        raise ValueError(f"input_shape {shape} is inconsistent with the model: {exc}") from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != batch_size:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"input_shape {shape}: the model outputs {got} for a batch of "
                         f"{batch_size}, expected ({batch_size}, num_classes)")
    if out.shape[1] != num_classes:
        raise ValueError(f"num_classes is {num_classes} but the model outputs "
                         f"{out.shape[1]} logits")


def warn_relu(model: nn.Module) -> None:
    found = sorted({type(m).__name__ for m in model.modules() if isinstance(m, RELU_TYPES)})
    if found:
        warnings.warn(
            f"the model has ReLU-type activations ({', '.join(found)}): their second "
            "derivative vanishes, so gradient matching is harder than on the sigmoid models "
            "DLG/iDLG/CPL were designed for; attacking anyway", ReLUWarning, stacklevel=5)


