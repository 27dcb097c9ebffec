"""Broken clipping."""

from __future__ import annotations

import torch

from .user import UserDPSGD


class MissingClipOnALayer(UserDPSGD):
    """The clip norm and factor cover every tensor but the last; the last goes in raw."""

    name = "missing-clip-on-a-layer"

    def privatize_batch(self, grads, ctx):
        head = self.clip_each(grads[:-1], self.norms(grads[:-1]))
        self.account(ctx)
        return [(g.sum(0) + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / ctx.batch_size for g in [*head, grads[-1]]]


class ClipBeforeReshape(UserDPSGD):
    """Per-example norms of torch.cat of the flattened tensors reshaped to (B, -1): each row
    mixes coordinates of several examples, so one example is clipped piece by piece."""

    name = "clip-before-reshape"

    def privatize_batch(self, grads, ctx):
        b = grads[0].shape[0]
        flat = torch.cat([g.reshape(-1) for g in grads]).reshape(b, -1)   # the bug
        factor = (self.clip / flat.norm(dim=1).clamp(min=1e-12)).clamp(max=1.0)
        clipped = (flat * factor.view(-1, 1)).reshape(-1)
        out, start = [], 0
        for g in grads:
            out.append(clipped[start:start + g.numel()].view_as(g))
            start += g.numel()
        self.account(ctx)
        return [(g.sum(0) + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / ctx.batch_size for g in out]


class ClipTheMean(UserDPSGD):
    """Clips the batch's mean gradient instead of each example's."""

    name = "clip-the-mean"

    def privatize_batch(self, grads, ctx):
        mean = [g.mean(0, keepdim=True) for g in grads]
        clipped = self.clip_each(mean, self.norms(mean))
        self.account(ctx)
        return [g[0] + self.noise(g.shape[1:], self.sigma * self.clip, ctx) / ctx.batch_size
                for g in clipped]


class NoiseBeforeClipping(UserDPSGD):
    """Adds the noise to each example's gradient, then clips (the noise is clipped away)."""

    name = "noise-before-clipping"

    def privatize_batch(self, grads, ctx):
        noisy = [g + self.noise(g.shape, self.sigma * self.clip, ctx) for g in grads]
        clipped = self.clip_each(noisy, self.norms(noisy))
        self.account(ctx)
        return [g.sum(0) / ctx.batch_size for g in clipped]


class ClipTheSum(UserDPSGD):
    """Clips the batch's summed gradient to C (the aggregate), not each example; noise
    sigma C as DP-SGD. With a background that sums to -C along the canary and a canary far
    above the clip, the sum goes from -C to +C: sensitivity 2C, the ledger counts C. Against
    a small random background it moves by about C, as the ledger assumes."""

    name = "clip-the-sum"

    def privatize_batch(self, grads, ctx):
        total = [g.sum(0, keepdim=True) for g in grads]
        clipped = self.clip_each(total, self.norms(total))
        self.account(ctx)
        return [(g[0] + self.noise(g.shape[1:], self.sigma * self.clip, ctx)) / ctx.batch_size
                for g in clipped]


class ClipTheBatch(UserDPSGD):
    """One clip factor for the whole batch, C over the batch's largest per-example norm
    ("scale the batch so no example exceeds C"): a large canary shrinks every other
    example's contribution, so with a background against it the release moves by about 2C."""

    name = "clip-the-batch"

    def privatize_batch(self, grads, ctx):
        factor = min(1.0, self.clip / max(float(self.norms(grads).max()), 1e-12))
        self.account(ctx)
        return [(g.sum(0) * factor + self.noise(g.shape[1:], self.sigma * self.clip, ctx))
                / ctx.batch_size for g in grads]
