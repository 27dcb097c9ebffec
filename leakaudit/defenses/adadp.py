"""adadp: learning-rate adaptation by extrapolation (Koskela & Honkela 2020, "Learning rate
adaptation for differentially private learning", AISTATS), inside every client.

One local iteration at weights theta with the client's learning rate eta:

    G1 = noisy clipped mean gradient at theta on the batch
         (per-example clip C, N(0, sigma^2 C^2) on the sum, / B)
    theta_full = theta - eta G1                       (one full step)
    theta_half = theta - (eta/2) G1
    G2 = noisy clipped mean gradient at theta_half on a FRESH batch (``batch.fresh()``)
    theta_2    = theta_half - (eta/2) G2              (two half steps)
    err = || (theta_2 - theta_full)_i / max(1, |theta_2,i|) ||_2       (over all coordinates)
    eta <- min(max(tol / err, 0.9), 1.1) eta
    theta <- theta_2

tol = 1.0 with DP. eta starts at the simulator's lr on a client's first participation and is
kept across rounds (per client). The type-2 view is G1 (the gradient at theta).
``same_batch=True`` evaluates G2 on the same batch as G1.

Federated variant without noise (``private=False``, "adadp-nonprivate"): plain mean
gradients, no clip or noise, tol = 0.1, and the step is REJECTED (theta stays) when
err > tol; eta is updated by the same rule either way. No DP guarantee.

Accounting (instance level, per participation, q = B / n_c as for fed-cdp).
* default (fresh batch): G1 and G2 are two Poisson-sampled Gaussian mechanisms on
  independently sampled batches: two SGM steps (q, sigma) per iteration. The paper counts
  the same ("two gradient evaluations per iteration": the cost of 2T DP-SGD steps); claimed
  = sound.
* ``same_batch=True``: the two noisy sums are an adaptive composition of two Gaussian
  mechanisms (sensitivity C, noise sigma C each) on ONE subsample; their joint release is a
  Gaussian mechanism with multiplier sigma / sqrt(2) on that subsample, i.e. ONE SGM step
  (q, sigma / sqrt(2)). Sound records that step; claimed keeps the paper's two SGM steps
  (q, sigma), which under-reports (the subsampling amplification is applied twice to what
  is one sampled event).
* nonprivate: one ``record_no_privacy`` per client update.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch

from accounting import joint_gaussian_multiplier

from .._validate import check_bool, check_nonneg, check_positive
from . import ops
from .base import ClientContext, Defense, record_no_privacy

if TYPE_CHECKING:
    from ..grads import LocalBatch
    from ..optim import SGD, Adam

__all__ = ["AdaDP", "LRDecision", "adapt_lr"]

ETA_MIN_FACTOR, ETA_MAX_FACTOR = 0.9, 1.1


class LRDecision(NamedTuple):
    """Result of one application of the ADADP rule."""

    err: float
    eta: float
    accept: bool


def adapt_lr(theta_full: list[torch.Tensor], theta_2: list[torch.Tensor], eta: float,
             tol: float, reject: bool = False) -> LRDecision:
    """The ADADP learning-rate rule (Koskela & Honkela 2020, Alg. 1):

        err  = || (theta_2 - theta_full)_i / max(1, |theta_2,i|) ||_2
        eta' = min(max(tol / err, 0.9), 1.1) * eta

    ``accept`` is False only when ``reject`` (the non-private variant) and err > tol.
    err = 0 gives the largest factor, 1.1.
    """
    sq = sum(float(((b - a) / b.abs().clamp(min=1.0)).pow(2).sum())
             for a, b in zip(theta_full, theta_2, strict=True))
    err = math.sqrt(sq)
    factor = ETA_MAX_FACTOR if err == 0.0 else min(max(tol / err, ETA_MIN_FACTOR),
                                                   ETA_MAX_FACTOR)
    return LRDecision(err=err, eta=factor * eta, accept=not (reject and err > tol))


class AdaDP(Defense):
    """Extrapolation-based learning-rate adaptation with two noisy gradients per iteration."""

    optimizer = "sgd"

    def __init__(self, clip: float = 4.0, sigma: float = 2.0, tol: float | None = None,
                 same_batch: bool = False, private: bool = True) -> None:
        check_bool("private", private)
        check_bool("same_batch", same_batch)
        self.clip = check_positive("clip", clip)
        self.sigma = check_nonneg("sigma", sigma)
        self.tol = (1.0 if private else 0.1) if tol is None else check_positive("tol", tol)
        self.same_batch = same_batch
        self.private = private
        self.eta: dict[int, float] = {}

    @property
    def name(self) -> str:
        return "adadp" if self.private else "adadp-nonprivate"

    @property
    def level(self) -> str:
        return "instance" if self.private else "none"

    @property
    def sites(self) -> frozenset[str]:
        return frozenset({"example"}) if self.private else frozenset()

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {"tol": self.tol, "same_batch": self.same_batch}
        if self.private:
            out = {"clip": self.clip, "sigma": self.sigma, **out}
        return out

    def start(self, rounds: int) -> None:
        """Forget the per-client learning rates of a previous run."""
        self.eta = {}

    def audit_bound(self) -> float:
        return float(self.clip)

    def audit_batched(self, point: int) -> bool | None:
        return point == 2 and self.private   # over several steps its lr rule mixes trials

    def noise_multiplier(self, round_index: int) -> float:
        return self.sigma if self.private else 0.0

    # ------------------------------------------------------------------ gradients
    def _noisy(self, batch: LocalBatch, params: dict[str, torch.Tensor],
               ctx: ClientContext) -> list[torch.Tensor]:
        """Clipped per-example sum + N(0, sigma^2 C^2), divided by the expected batch size
        (not the realised one, a data-dependent normaliser; see fed-cdp)."""
        grads = batch.per_example(params)
        sums, _ = ops.clipped_sum(grads, self.clip)
        noise = ops.gaussian_like(sums, self.sigma * self.clip, ctx.generator)
        return [(s + n) / ctx.batch_size for s, n in zip(sums, noise)]

    def _gradient(self, batch: LocalBatch, params: dict[str, torch.Tensor],
                  ctx: ClientContext) -> list[torch.Tensor]:
        if self.private:
            return self._noisy(batch, params, ctx)
        if batch.size == 0:  # an empty Poisson batch: the mean over no example is taken as 0
            return [torch.zeros_like(p) for p in params.values()]
        return batch.mean(params)

    def _record(self, ctx: ClientContext) -> None:
        note = f"{self.name}: G1 and G2"
        q = ctx.batch_rate
        ctx.claimed.step(q=q, sigma=self.sigma, count=2, note=f"{note}, two SGM steps")
        if self.same_batch:
            ctx.sound.step(q=q, sigma=joint_gaussian_multiplier(self.sigma, self.sigma),
                           note=f"{note} on one batch: one SGM step, sigma/sqrt(2)")
        else:
            ctx.sound.step(q=q, sigma=self.sigma, count=2,
                           note=f"{note}, two SGM steps")

    # ------------------------------------------------------------------ the iteration
    def local_step(self, params: dict[str, torch.Tensor], batch: LocalBatch,
                   optimizer: SGD | Adam, ctx: ClientContext
                   ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        """One ADADP iteration (the simulator's optimizer is not used: ADADP is SGD with its
        own learning rate). Returns theta_2 (or theta if rejected) and G1."""
        eta = self.eta.setdefault(ctx.client, float(ctx.lr))
        g1 = self._gradient(batch, params, ctx)
        theta_full = [p - eta * g for p, g in zip(params.values(), g1)]
        theta_half = {n: p - (eta / 2.0) * g for (n, p), g in zip(params.items(), g1)}
        second = batch if self.same_batch else batch.fresh()
        g2 = self._gradient(second, theta_half, ctx)
        if self.private:
            self._record(ctx)
        theta_2 = {n: p - (eta / 2.0) * g for (n, p), g in zip(theta_half.items(), g2)}
        decision = adapt_lr(theta_full, list(theta_2.values()), eta, self.tol,
                            reject=not self.private)
        self.eta[ctx.client] = decision.eta
        return (theta_2 if decision.accept else dict(params)), g1

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        if not self.private:
            record_no_privacy(ctx, f"{self.name} client update")
        return update

    @property
    def claimed_vs_sound(self) -> str:
        if self.private and self.same_batch:
            return ("G1 and G2 use the same batch: one sampled event, so sound records one SGM "
                    "step with sigma/sqrt(2) per iteration where the paper counts two "
                    "independent SGM steps")
        return ""
