"""The exact tier: optimiser-free reconstruction from a fully connected first layer with a
bias (Phong et al. 2018, "Privacy-preserving deep learning via additively homomorphic
encryption", Sec. 3; Fowl et al. 2022, "Robbing the Fed", Sec. 3; Geiping et al. 2020,
Prop. D.1).

For a first layer y = W x + b on the flattened input, the gradient of one example's loss is
dL/dW = delta x^T and dL/db = delta (delta = dL/dy), so every row j with delta_j != 0 gives
the input exactly: x = (dL/dW)_j / (dL/db)_j. We use the least-squares combination of all
rows, x = sum_j b_j W_j / sum_j b_j^2 (exact for B = 1, and better conditioned than one
row). No step budget: one pass, so a failure of this tier is not a failure of an optimiser.

Batches (B > 1): the batch gradient is the mean over examples, so row j gives
sum_i delta_ij x_i / sum_i delta_ij, the input of example i exactly when only example i
activates unit j (a ReLU unit silent for the others; Fowl et al.'s "binning" made this
likely by design, Dimitrov et al. 2024 "SPEAR" recover batches in general through a
low-rank decomposition). We take the ratios of all rows, group equal ones (relative distance
below ``tolerance``) and return the B largest groups: the images that several units see
alone. This is exact for every example that some unit sees alone; it is not SPEAR (no
low-rank solve), and says so: ``Reconstruction.attempts[0]["reason"]`` counts the groups
found. Labels as in iDLG (:mod:`leakaudit.attacks.labels`).

Applicability: the model's first parametrised module is an ``nn.Linear`` with a bias, taking
the flattened input (only ``nn.Flatten``/``nn.Identity`` before it). Otherwise the attack
raises ValueError ("not applicable"): the audit then lists the tier as not tried.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .attempt import Attempt, Config, Start
from .base import Attack
from .problem import GradientProblem, trainable

__all__ = ["ExactLinear", "applicable", "first_linear"]


def first_linear(model: nn.Module) -> tuple[int, int] | None:
    """(index of its weight, index of its bias) among the trainable parameters when the
    model's first parametrised module is a biased ``nn.Linear`` on the flattened input,
    else None."""
    names = [n for n, _ in trainable(model)]
    for mod_name, module in model.named_modules():
        if any(True for _ in module.children()):
            continue  # a container: its leaves come next
        if any(True for _ in module.parameters(recurse=False)):
            if isinstance(module, nn.Linear) and module.bias is not None:
                w, b = f"{mod_name}.weight", f"{mod_name}.bias"
                if not mod_name:
                    w, b = "weight", "bias"
                if w in names and b in names:
                    return names.index(w), names.index(b)
            return None
        if not isinstance(module, (nn.Flatten, nn.Identity)):
            return None  # an activation, pooling or dropout before any parameter
    return None


def applicable(model: nn.Module) -> bool:
    """Whether the exact tier applies to ``model``."""
    return first_linear(model) is not None


def ratios(weight_grad: torch.Tensor, bias_grad: torch.Tensor,
           rel: float = 1e-9) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of dL/dW divided by dL/db for the rows whose bias gradient is not negligible
    (|b_j| > rel * max |b|): (ratios (m, F), |b_j| (m,))."""
    b = bias_grad.double()
    keep = b.abs() > rel * float(b.abs().max()) if float(b.abs().max()) > 0 else b != 0
    return weight_grad.double()[keep] / b[keep, None], b[keep].abs()


class ExactLinear(Attack):
    """Input = ratio of the first biased linear layer's weight and bias gradients."""

    name = "exact"
    optimises = False
    paper = "Phong et al. 2018; Fowl et al. 2022 (linear-layer leakage), one pass"
    defaults = {"tolerance": 1e-6}

    def check_option(self, key: str, value: Any) -> Any:
        if key == "tolerance":
            if not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ValueError(f"tolerance must be in (0, 1), got {value!r}")
            return float(value)
        return super().check_option(key, value)

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        return Start(torch.zeros((cfg.batch_size, *cfg.input_shape)))

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config) -> Attempt:
        found = first_linear(problem.model)
        if found is None:
            raise ValueError("exact: not applicable (the model's first parametrised layer "
                             "is not a biased nn.Linear on the flattened input)")
        wi, bi = found
        gw, gb = problem.observed[wi], problem.observed[bi]
        features = math.prod(cfg.input_shape)
        if gw.shape[1] != features:
            raise ValueError(f"exact: not applicable (first layer takes {gw.shape[1]} "
                             f"features, the input has {features})")
        if float(gb.abs().max()) == 0.0:
            x = torch.zeros(cfg.batch_size, features, dtype=torch.float64)
            reason = "every bias gradient is zero: nothing to divide"
        elif cfg.batch_size == 1:
            b = gb.double()
            x = (b @ gw.double() / b.pow(2).sum())[None]
            reason = None
        else:
            x, reason = self._batch(gw, gb, cfg)
        x = x.reshape(cfg.batch_size, *cfg.input_shape).to(problem.dtype)
        loss = float(problem.l2(x.to(problem.device), None, create_graph=False)) \
            if problem.labels is not None else 0.0
        entry: dict[str, Any] = {"iteration": 1, "gradient_loss": loss}
        if reason:
            entry["note"] = reason
        if cfg.keep_iterates:
            entry["inputs"] = cfg.report(x)
        return Attempt(inputs=x.to(problem.device), label_logits=None, gradient_loss=loss,
                       iterations=1, history=[entry])

    @staticmethod
    def _batch(gw: torch.Tensor, gb: torch.Tensor, cfg: Config
               ) -> tuple[torch.Tensor, str | None]:
        r, weight = ratios(gw, gb)
        tol = cfg.options["tolerance"]
        scale = r.abs().amax(dim=1).clamp_min(1e-12)
        groups: list[list[int]] = []
        reps: list[torch.Tensor] = []
        for j in torch.argsort(weight, descending=True).tolist():
            for g, rep in zip(groups, reps):
                if float((r[j] - rep).abs().max()) <= tol * float(scale[j]):
                    g.append(j)
                    break
            else:
                groups.append([j])
                reps.append(r[j])
        order = sorted(range(len(groups)), key=lambda i: (-len(groups[i]), i))
        chosen = [reps[i] for i in order[:cfg.batch_size]]
        while len(chosen) < cfg.batch_size:
            chosen.append(torch.zeros_like(r[0]))
        repeated = sum(1 for g in groups if len(g) >= 2)
        note = None if repeated >= cfg.batch_size else (
            f"only {repeated} input(s) seen alone by two or more units; the rest are "
            "single-unit ratios (possibly mixtures)")
        return torch.stack(chosen), note
