"""Correct arithmetic, wrong ledger."""

from __future__ import annotations

from .user import UserDPSGD


class SigmaNotTheOneDrawn(UserDPSGD):
    """The ledger records the configured sigma (2); the noise uses another (1): a schedule
    or a copied config that the accountant never sees."""

    name = "sigma-not-the-one-drawn"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx, sigma=self.sigma)
        drawn = self.sigma / 2.0
        return [(g.sum(0) + self.noise(g.shape[1:], drawn * self.clip, ctx)) / ctx.batch_size
                for g in clipped]


class UnaccountedSampler(UserDPSGD):
    """Accounts Poisson sampling at q = 0.1 (a batch of B out of 10 B examples) while the
    batch it privatises holds every example: amplification claimed, no sampling run."""

    name = "unaccounted-sampler"

    def __init__(self, clip: float = 1.0, sigma: float = 1.0) -> None:
        super().__init__(clip, sigma)

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx, q=0.1)
        return [(g.sum(0) + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / ctx.batch_size for g in clipped]
