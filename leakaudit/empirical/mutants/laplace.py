"""DP-SGD with Laplace noise, as a user writes it: right (L1 clip) and wrong (L2 clip)."""

from __future__ import annotations

import torch

from .user import UserDPSGD


def laplace_noise(shape: torch.Size, scale: float, generator: torch.Generator) -> torch.Tensor:
    """Laplace(0, scale) by the inverse CDF of a uniform on (-1/2, 1/2), from ``generator``."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64) - 0.5
    u = u.clamp(min=-0.5 + 1e-16, max=0.5 - 1e-16)
    return (-scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())).float()


class L1LaplaceSGD(UserDPSGD):
    """Correct: clip each example's gradient to L1 norm C, sum, add Laplace(C / eps) to every
    coordinate (the Laplace mechanism at L1 sensitivity C: eps-DP), divide by the expected
    batch size, record ``laplace(C / eps, sensitivity=C)``."""

    name = "user-l1-laplace-sgd"

    def __init__(self, clip: float = 1.0, eps: float = 2.0) -> None:
        super().__init__(clip, sigma=0.0)
        self.eps = eps

    def params(self) -> dict[str, object]:
        return {"clip": self.clip, "eps": self.eps}

    def norms(self, grads: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)
        return flat.abs().sum(dim=1)

    def privatize_batch(self, grads: list[torch.Tensor], ctx) -> list[torch.Tensor]:
        clipped = self.clip_each(grads, self.norms(grads))
        b = self.clip / self.eps
        for ledger in (ctx.sound, ctx.claimed):
            ledger.laplace(b, sensitivity=self.clip, note=self.name)
        return [(g.sum(0) + laplace_noise(g.shape[1:], b, ctx.generator)) / ctx.batch_size
                for g in clipped]


class L2ClippedLaplace(L1LaplaceSGD):
    """The bug: each example clipped to L2 norm C (DP-SGD's clip), Laplace(C / eps) noise and
    a ledger at L1 sensitivity C. The L1 sensitivity of an L2 ball of radius C in d
    coordinates is sqrt(d) C: the true eps is up to sqrt(d) x the one recorded."""

    name = "l2-clipped-laplace"

    def norms(self, grads: list[torch.Tensor]) -> torch.Tensor:
        return UserDPSGD.norms(self, grads)
