"""Broken noise."""

from __future__ import annotations

import torch

from .user import UserDPSGD


class NoiseOnSomeTensors(UserDPSGD):
    """Noise on the weights only (the biases, every other tensor, go out clipped but bare)."""

    name = "noise-on-some-tensors"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        return [(g.sum(0) + (self.noise(g.shape[1:], self.sigma * self.clip, ctx)
                             if g.dim() > 2 else 0.0)) / ctx.batch_size for g in clipped]


class NoiseStdFromTheData(UserDPSGD):
    """std = sigma x the largest clipped per-example norm ("the sensitivity of this batch")."""

    name = "noise-std-from-the-data"

    def privatize_batch(self, grads, ctx):
        norms = self.norms(grads)
        clipped = self.clip_each(grads, norms)
        std = self.sigma * float(norms.clamp(max=self.clip).max())
        self.account(ctx)
        return [(g.sum(0) + self.noise(g.shape[1:], std, ctx)) / ctx.batch_size
                for g in clipped]


class NoiseDrawnOnce(UserDPSGD):
    """Draws the noise on the first call and keeps it ("to save time")."""

    name = "noise-drawn-once"

    def __init__(self, clip: float = 1.0, sigma: float = 2.0) -> None:
        super().__init__(clip, sigma)
        self._cached: list[torch.Tensor] | None = None

    def privatize_batch(self, grads, ctx):
        if self._cached is None:
            self._cached = [self.noise(g.shape[1:], self.sigma * self.clip, ctx) for g in grads]
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        return [(g.sum(0) + n) / ctx.batch_size for g, n in zip(clipped, self._cached)]


class RealisedNormaliser(UserDPSGD):
    """Divides by the realised batch size (grads[0].shape[0]), not the expected one."""

    name = "realised-normaliser"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        return [(g.sum(0) + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / g.shape[0] for g in clipped]


class CentredNoise(UserDPSGD):
    """Noise centred per tensor ("zero-mean noise, exactly"): each tensor's sum carries no
    noise at all, so that linear functional of the release is the clipped sum itself (true
    eps infinite). Coordinates look N(0, sigma^2 C^2 (1 - 1/n)): a per-coordinate view misses
    it."""

    name = "centred-noise"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        out = []
        for g in clipped:
            z = self.noise(g.shape[1:], self.sigma * self.clip, ctx)
            out.append((g.sum(0) + z - z.mean()) / ctx.batch_size)
        return out


class BroadcastNoise(UserDPSGD):
    """Noise of shape (rows,) broadcast over each tensor's other dimensions (a shape slip
    that runs): every row shares one draw, so the difference of two coordinates of a row
    carries no noise (true eps infinite); each coordinate alone is N(0, sigma^2 C^2)."""

    name = "broadcast-noise"

    def privatize_batch(self, grads, ctx):
        clipped = self.clip_each(grads, self.norms(grads))
        self.account(ctx)
        out = []
        for g in clipped:
            shape = g.shape[1:]
            z = self.noise(shape[:1], self.sigma * self.clip, ctx).view(
                -1, *([1] * (len(shape) - 1)))
            out.append((g.sum(0) + z.expand(shape)) / ctx.batch_size)
        return out
