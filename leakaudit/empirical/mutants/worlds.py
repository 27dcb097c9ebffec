"""Bugs that show only in some worlds: a dataset (zero or split gradients), a call (a batch
above its declared size, a later round, a fresh instance) or a statistic (a lattice) that
the game must choose to see them."""

from __future__ import annotations

import torch

from .user import UserDPSGD


class NoiseWhereNonzero(UserDPSGD):
    """Noise drawn only where the summed gradient is nonzero ("no need to noise zeros"): an
    all-zero batch releases exact zeros (true eps infinite)."""

    name = "noise-where-nonzero"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        out = []
        for g in clipped:
            total = g.sum(0)
            z = self.noise(total.shape, self.sigma * self.clip, ctx)
            out.append((total + z * (total != 0)) / ctx.batch_size)
        return out


class MedianClip(UserDPSGD):
    """The clip threshold is the batch's median per-example norm, and the noise is scaled by
    it ("adaptive clipping" without paying for the statistic): one example moves the median,
    hence the noise scale (true eps infinite)."""

    name = "median-clip"

    def privatize_batch(self, grads, ctx):
        norms = self.norms(grads)
        clip = float(norms.median())
        factor = (clip / norms.clamp(min=1e-12)).clamp(max=1.0)
        self.account(ctx)
        return [(g * factor.view(-1, *([1] * (g.dim() - 1)))).sum(0).add(
            self.noise(g.shape[1:], self.sigma * clip, ctx)).div(ctx.batch_size)
            for g in grads]


class SeededOnce(UserDPSGD):
    """A generator seeded once in ``__init__`` ("reproducible runs"): the noise is a fixed
    function of the code, the same in every fresh instance (true eps infinite)."""

    name = "seeded-once"

    def __init__(self, clip: float = 1.0, sigma: float = 2.0) -> None:
        super().__init__(clip, sigma)
        self.generator = torch.Generator().manual_seed(1234)

    def noise(self, shape: torch.Size, std: float, ctx) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator) * std


class LatticeNoise(UserDPSGD):
    """Noise rounded to a coarse lattice (spacing sigma C / 2) before it is added ("fewer
    bits to send"): the release minus the noise-free sum lies on the lattice, so a canary
    off the lattice is seen without error on a zero-gradient batch (true eps infinite)."""

    name = "lattice-noise"

    def noise(self, shape: torch.Size, std: float, ctx) -> torch.Tensor:
        step = std / 2.0
        return torch.round(torch.randn(shape, generator=ctx.generator) * std / step) * step


class ClipFirstRows(UserDPSGD):
    """Clips only the first ``ctx.batch_size`` rows ("the batch has batch_size examples"): a
    Poisson batch above its expected size sends its last rows unclipped."""

    name = "clip-first-rows"

    def privatize_batch(self, grads, ctx):
        b = ctx.batch_size
        head = self.clip_each([g[:b] for g in grads], self.norms([g[:b] for g in grads]))
        self.account(ctx)
        return [(torch.cat([h, g[b:]]).sum(0) + self.noise(g.shape[1:], self.sigma * self.clip,
                                                           ctx)) / ctx.batch_size
                for h, g in zip(head, grads)]


class DecayingNoise(UserDPSGD):
    """The noise halves every round while the ledger records the first round's sigma (a
    schedule the accountant never sees): round 0 is right, round 1 is not."""

    name = "decaying-noise"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        std = self.sigma * self.clip * 0.5 ** ctx.round
        return [(g.sum(0) + self.noise(g.shape[1:], std, ctx)) / ctx.batch_size
                for g in clipped]


class UnderstatedRate(UserDPSGD):
    """Accounts Poisson sampling at q = 0.25 while the batch holds every example."""

    name = "understated-rate"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx, q=0.25)
        return [(g.sum(0) + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / ctx.batch_size for g in clipped]
