"""DP-SGD as a user writes it (correct): clip each example to C, sum, add N(0, sigma^2 C^2),
divide by the expected batch size, record one Gaussian step per batch."""

from __future__ import annotations

import torch

from ...defenses import Defense


class UserDPSGD(Defense):
    """Abadi et al. 2016, Alg. 1, one step; noise drawn with torch.randn (not through ops)."""

    name = "user-dp-sgd"
    sites = frozenset({"example"})
    level = "instance"

    def __init__(self, clip: float = 1.0, sigma: float = 2.0) -> None:
        self.clip, self.sigma = clip, sigma

    def audit_bound(self) -> float:
        return self.clip

    def params(self) -> dict[str, object]:
        return {"clip": self.clip, "sigma": self.sigma}

    def account(self, ctx, sigma: float | None = None, q: float | None = None) -> None:
        for ledger in (ctx.sound, ctx.claimed):
            ledger.step(q=ctx.batch_rate if q is None else q,
                        sigma=self.sigma if sigma is None else sigma, note=self.name)

    def norms(self, grads: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)
        return flat.norm(dim=1)

    def clip_each(self, grads: list[torch.Tensor], norms: torch.Tensor) -> list[torch.Tensor]:
        factor = (self.clip / norms.clamp(min=1e-12)).clamp(max=1.0)
        return [g * factor.view(-1, *([1] * (g.dim() - 1))) for g in grads]

    def noise(self, shape: torch.Size, std: float, ctx) -> torch.Tensor:
        return torch.randn(shape, generator=ctx.generator) * std

    def privatize_batch(self, grads: list[torch.Tensor], ctx) -> list[torch.Tensor]:
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        return [(g.sum(0) + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / ctx.batch_size for g in clipped]
