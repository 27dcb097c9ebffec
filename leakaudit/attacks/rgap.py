"""The analytic tier: recursive layer-by-layer inversion of one example's gradient (Zhu &
Blaschko 2021, ICLR, "R-GAP: Recursive Gradient Attack on Privacy", Sec. 3).

For a layer z = W a + b (fully connected, or a convolution, which is linear in its input a
too) the gradient of one example's loss is dL/dW = delta a^T (a convolution: the sum over
output positions p of delta_p times the input patch at p) and dL/db = sum delta, with
delta = dL/dz. From the top:

* the output layer (fully connected, biased): delta = dL/db, so a = (dL/dW)^T delta /
  ||delta||^2 exactly (the exact tier's ratio, :mod:`leakaudit.attacks.exact`);
* an activation a = sigma(z) below it is inverted, z = sigma^-1(a), and the next delta is
  (W^T delta_above) * sigma'(z);
* a fully connected layer below: a = (dL/dW)^T delta / ||delta||^2 again;
* a convolution: its input a solves the linear system (R-GAP eq. 8) of its forward
  equations conv(a) = z - b (weighted by sigma'(z), the error of z = sigma^-1(a) being that
  of a over sigma'(z)) stacked with its weight-gradient
  equations sum_p delta_p patch_p(a) = dL/dW (divided by ||delta||), solved by least
  squares in float64.

The recursion ends at the model's input. No optimiser and no step budget: a failure here is
not a failure of an optimiser. Batch size 1 only (the batch gradient mixes examples; R-GAP's
rank argument is for one example): other batches raise ValueError ("not applicable"), as
does a model that is not a plain chain of ``nn.Linear`` / ``nn.Conv2d`` layers with
invertible ``nn.Sigmoid``, ``nn.Tanh``, ``nn.LeakyReLU`` or ``nn.Identity`` activations,
``nn.Flatten`` between them, a biased linear output layer and convolution inputs of at most
``MAX_UNKNOWNS`` values (the audit's LeNet, sigmoid MLPs; not ReLU models, whose silent units
hide their inputs, nor ``adap_cnn``, whose max-pooling does too). A leak-point-1 update of
one local step is the gradient times -lr (the protocol divides it out), float32 rounding of
the update included. Labels: iDLG's rule (:mod:`leakaudit.attacks.labels`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .attempt import Attempt, Config, Start
from .base import Attack
from .problem import GradientProblem, trainable

__all__ = ["RecursiveGAP", "Step", "applicable", "chain", "invert_activation"]

#: invertible activations (ReLU is not: its silent units hide their inputs, and the system
#: R-GAP solves is then under-determined; measured on ``relu_cnn``: 12.7 dB in 100 s of CPU)
ACTIVATIONS = (nn.Sigmoid, nn.Tanh, nn.LeakyReLU, nn.Identity)
#: the largest convolution input the dense float64 normal equations are built for
MAX_UNKNOWNS = 4096
#: inverse activations are evaluated on a clamped to this distance from their range's ends
EDGE = 1e-12


@dataclass
class Step:
    """One parametrised layer of the chain, its activation and where its gradients are."""

    layer: nn.Linear | nn.Conv2d
    activation: nn.Module | None
    weight: int
    bias: int | None
    #: the shapes of the layer's input and output (no batch dimension), filled by :func:`chain`
    in_shape: tuple[int, ...] = ()
    out_shape: tuple[int, ...] = ()


def chain(model: nn.Module, input_shape: tuple[int, ...]) -> list[Step] | None:
    """The model as a chain of linear/convolutional layers with their activations, or None
    when it is not one (see the module docstring)."""
    names = [n for n, _ in trainable(model)]
    steps: list[Step] = []
    leaves = [(n, m) for n, m in model.named_modules() if not any(True for _ in m.children())]
    for name, module in leaves:
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            prefix = f"{name}." if name else ""
            if f"{prefix}weight" not in names:
                return None
            bias = names.index(f"{prefix}bias") if module.bias is not None else None
            steps.append(Step(module, None, names.index(f"{prefix}weight"), bias))
        elif isinstance(module, ACTIVATIONS) and steps and steps[-1].activation is None:
            steps[-1].activation = module
        elif not isinstance(module, (nn.Flatten, nn.Identity)):
            return None
    if not steps or not isinstance(steps[-1].layer, nn.Linear) or steps[-1].bias is None:
        return None
    if steps[-1].activation is not None and not isinstance(steps[-1].activation, nn.Identity):
        return None
    if any(isinstance(s.layer, nn.Conv2d) and (s.layer.groups != 1 or s.layer.dilation != (1, 1)
           or not isinstance(s.layer.padding, tuple)) for s in steps):
        return None
    shape = tuple(input_shape)
    for s in steps:
        if isinstance(s.layer, nn.Linear):
            shape = (math.prod(shape),)
            out: tuple[int, ...] = (s.layer.out_features,)
        else:
            with torch.no_grad():
                probe = torch.zeros((1, *shape), dtype=s.layer.weight.dtype,
                                    device=s.layer.weight.device)
                out = tuple(s.layer(probe).shape[1:])
        s.in_shape, s.out_shape = shape, out
        if isinstance(s.layer, nn.Conv2d) and math.prod(shape) > MAX_UNKNOWNS:
            return None
        shape = out
    return steps


def applicable(model: nn.Module, input_shape: tuple[int, ...] = (1, 28, 28)) -> bool:
    """Whether the analytic tier applies to ``model`` (a chain as in the module docstring)."""
    try:
        return chain(model, input_shape) is not None
    except (RuntimeError, ValueError):
        return False


def invert_activation(act: nn.Module | None, a: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, sigma'(z)) for the activation's output ``a``: z = sigma^-1(a), ``a`` clamped
    ``EDGE`` inside the range of a sigmoid or tanh."""
    if act is None or isinstance(act, nn.Identity):
        return a, torch.ones_like(a)
    if isinstance(act, nn.Sigmoid):
        h = a.clamp(EDGE, 1 - EDGE)
        return torch.log(h) - torch.log1p(-h), h * (1 - h)
    if isinstance(act, nn.Tanh):
        h = a.clamp(-1 + EDGE, 1 - EDGE)
        return torch.atanh(h), 1 - h * h
    if isinstance(act, nn.LeakyReLU) and act.negative_slope > 0:
        slope = act.negative_slope
        return torch.where(a > 0, a, a / slope), torch.where(a > 0, 1.0, slope).to(a)
    raise ValueError(f"rgap: activation {type(act).__name__} is not invertible")


def gradient_operator(conv: nn.Conv2d, in_shape: tuple[int, ...], delta: torch.Tensor
                      ) -> torch.Tensor:
    """G with dL/dW[:, c] = G a_c for every input channel c (the same G for all: the weight
    gradient sums delta_p times the patch of channel c at p), (out * k * k, H * W) float64."""
    h, w = in_shape[1:]
    basis = torch.eye(h * w, dtype=torch.float64).reshape(h * w, 1, h, w)
    patches = F.unfold(basis, conv.kernel_size, padding=conv.padding, stride=conv.stride)
    cols = torch.einsum("op,bkp->bok", delta.reshape(delta.shape[0], -1), patches)
    return cols.reshape(h * w, -1).T


def forward_operator(conv: nn.Conv2d, in_shape: tuple[int, ...], chunk: int = 512
                     ) -> torch.Tensor:
    """F^T: the transpose of a -> conv(a) (no bias), (inputs, outputs) float64."""
    n = math.prod(in_shape)
    w = conv.weight.detach().cpu().double()
    out = []
    for lo in range(0, n, chunk):
        m = min(chunk, n - lo)
        basis = torch.zeros(m, n, dtype=torch.float64)
        basis[:, lo:lo + m] = torch.eye(m, dtype=torch.float64)
        a = basis.reshape(m, *in_shape)
        out.append(F.conv2d(a, w, None, conv.stride, conv.padding).reshape(m, -1))
    return torch.cat(out)


def solve_conv(step: Step, delta: torch.Tensor, gw: torch.Tensor,
               z: torch.Tensor | None, weight: torch.Tensor | None) -> torch.Tensor:
    """The convolution's input from its weight gradient and, where known, its output's
    pre-activation ``z`` (rows weighted by ``weight`` = sigma'(z)): R-GAP's eq. 8, the
    least-squares solution through its normal equations in float64 (the gradient rows are
    block diagonal over the input channels, so only the forward rows cost a dense product)."""
    conv = step.layer
    chans, hw = step.in_shape[0], math.prod(step.in_shape[1:])
    scale = float(delta.norm()) or 1.0
    g = gradient_operator(conv, step.in_shape, delta) / scale
    gw_c = gw.double().transpose(0, 1).reshape(chans, -1) / scale  # (C, out * k * k)
    normal = torch.block_diag(*([g.T @ g] * chans))
    rhs = (gw_c @ g).reshape(-1)
    if z is not None and weight is not None:
        b = conv.bias.detach().cpu().double()[:, None, None] if conv.bias is not None else 0.0
        target = (z.double() - b).reshape(-1)
        wt = weight.double().reshape(-1)
        wt = wt / float(wt.max()) if float(wt.max()) > 0 else wt
        ft = forward_operator(conv, step.in_shape)
        weighted = ft * wt.pow(2)
        normal = normal + weighted @ ft.T
        rhs = rhs + weighted @ target
    a, info = torch.linalg.solve_ex(normal, rhs)
    if int(info) != 0 or not bool(torch.isfinite(a).all()):
        a = torch.linalg.lstsq(normal, rhs[:, None]).solution[:, 0]
    assert a.numel() == chans * hw
    return a.reshape(step.in_shape)


def backward_delta(step: Step, a: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """dL/da for the layer's input a: W^T delta (a convolution's transpose), float64."""
    layer = step.layer
    w = layer.weight.detach().cpu().double()
    if isinstance(layer, nn.Linear):
        return (delta.reshape(1, -1) @ w).reshape(a.shape)
    return torch.nn.grad.conv2d_input((1, *a.shape), w, delta[None], layer.stride,
                                      layer.padding)[0]


def invert(steps: list[Step], grads: list[torch.Tensor]) -> torch.Tensor:
    """The input of one example from its gradient (float64), from the top layer down."""
    top = steps[-1]
    assert top.bias is not None
    delta = grads[top.bias].double()
    a: torch.Tensor | None = None
    z = weight = None
    for i in range(len(steps) - 1, -1, -1):
        s = steps[i]
        gw = grads[s.weight].double()
        if isinstance(s.layer, nn.Linear):
            d = delta.reshape(-1)
            a = (d @ gw.reshape(len(d), -1)) / max(float(d.pow(2).sum()), 1e-300)
            a = a.reshape(s.in_shape)
        else:
            a = solve_conv(s, delta, gw, z, weight)
        if i == 0:
            break
        below = steps[i - 1]
        z, weight = invert_activation(below.activation, a.reshape(below.out_shape))
        delta = backward_delta(s, a, delta).reshape(below.out_shape) * weight
    assert a is not None
    return a


class RecursiveGAP(Attack):
    """R-GAP: the input rebuilt layer by layer from one example's gradient, no optimiser."""

    name = "rgap"
    optimises = False
    paper = "Zhu & Blaschko, R-GAP: Recursive Gradient Attack on Privacy, ICLR 2021"
    defaults: dict[str, Any] = {}

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        return Start(torch.zeros((cfg.batch_size, *cfg.input_shape)))

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config) -> Attempt:
        if cfg.batch_size != 1:
            raise ValueError(f"rgap: not applicable (batch_size {cfg.batch_size}; the "
                             "recursive inversion needs one example's gradient)")
        steps = chain(problem.model, cfg.input_shape)
        if steps is None:
            raise ValueError("rgap: not applicable (the model is not a chain of Linear/"
                             "Conv2d layers with invertible activations and a biased "
                             "linear output layer)")
        with torch.no_grad():
            x = invert(steps, [o.cpu() for o in problem.observed])
        x = x.reshape(1, *cfg.input_shape).to(problem.device, problem.dtype)
        raw = float(problem.l2(x, None, create_graph=False))
        # relative to ||observed||^2 and in the objective's unit, as the optimisers report
        loss = raw / problem.l2_unit
        entry: dict[str, Any] = {"iteration": 1, "gradient_loss": loss}
        if cfg.keep_iterates:
            entry["inputs"] = cfg.report(x)
        return Attempt(inputs=x, label_logits=None, gradient_loss=loss, iterations=1,
                       history=[entry])
