"""Local optimizers of the simulator: SGD and standard Adam on a dict of tensors.

Functional (weights in, new weights out) so that defenses and leak-point taps can hold the
weights of every step. Adam is Kingma & Ba 2015, Alg. 1, with the bias corrections
1 - beta1^t and 1 - beta2^t: the same update as ``torch.optim.Adam`` (tested against it).
DPFL-AGN's published pseudo-code mixes beta1 and beta2 and drops the power t in the bias
correction; that erratum is not reproduced here.
"""

from __future__ import annotations

import math

import torch

from ._validate import check_positive

__all__ = ["SGD", "Adam", "make_optimizer", "OPTIMIZERS"]

OPTIMIZERS = ("sgd", "adam")


class SGD:
    """w <- w - lr * g."""

    def __init__(self, lr: float) -> None:
        self.lr = _check_lr(lr)

    def step(self, params: dict[str, torch.Tensor],
             grads: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Apply one step; ``grads`` are in ``params`` order."""
        return {n: p - self.lr * g for (n, p), g in zip(params.items(), grads, strict=True)}


class Adam:
    """Standard Adam; one instance keeps the moment estimates of one local training run."""

    def __init__(self, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.lr = _check_lr(lr)
        b1, b2 = betas
        for name, b in (("betas[0]", b1), ("betas[1]", b2)):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {b!r}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        self.betas = (float(b1), float(b2))
        self.eps = float(eps)
        self.t = 0
        self._m: dict[str, torch.Tensor] = {}
        self._v: dict[str, torch.Tensor] = {}

    def step(self, params: dict[str, torch.Tensor],
             grads: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) g^2;
        w <- w - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)."""
        b1, b2 = self.betas
        self.t += 1
        c1, c2 = 1.0 - b1**self.t, 1.0 - b2**self.t
        out = {}
        for (n, p), g in zip(params.items(), grads, strict=True):
            m = self._m.get(n, torch.zeros_like(p)).mul(b1).add(g, alpha=1.0 - b1)
            v = self._v.get(n, torch.zeros_like(p)).mul(b2).addcmul(g, g, value=1.0 - b2)
            self._m[n], self._v[n] = m, v
            denom = (v.sqrt() / math.sqrt(c2)).add(self.eps)
            out[n] = p - (self.lr / c1) * m / denom
        return out


def make_optimizer(name: str, lr: float) -> SGD | Adam:
    """A fresh optimizer by name ("sgd" or "adam")."""
    if name == "sgd":
        return SGD(lr)
    if name == "adam":
        return Adam(lr)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def _check_lr(lr: float) -> float:
    return check_positive("lr", lr)
