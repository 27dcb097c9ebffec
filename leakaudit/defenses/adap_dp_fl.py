"""adap-dp-fl: per-client adaptive clipping and decaying noise (Fu, Chen & Han 2022,
"Adap DP-FL: Differentially private federated learning with adaptive noise", TrustCom).

Per client c and round t (instance level, DP-SGD inside each client):

* clip: C_0 = a * mean_i ||g_i|| over one batch of *random-noise* inputs (uniform pixels,
  uniform labels) at the global model, so it spends no privacy; afterwards
  C_{t+1} = a * max(m~_t, min_clip) with m~_t the noisy mean of the clipped per-example
  gradient norms of the client's last local batch of round t:
  m~_t = (sum_i min(||g_i||, C_t) + N(0, (sigma_stat C_t)^2)) / B  (sensitivity C_t);
* noise: every local step adds N(0, sigma_t^2 C_t^2) to the sum of clipped per-example
  gradients (Abadi et al. 2016, Alg. 1) and divides by the expected batch size B (not the
  realised one, a data-dependent normaliser; see fed-cdp);
* decay: sigma_{t+1} = beta * sigma_t after the server's validation loss fell in each of
  the last 3 rounds (the count restarts after a decay; ``accounting.schedules.PlateauDecay``);
* budget: each client keeps an RDP ledger on the integer orders 2..64 and stops uploading,
  for good, once one more round would take its eps (at ``delta``) past ``budget``.

Accounting (instance level, per participation, q = B / n_c as for fed-cdp).
* claimed (the paper): the L noisy local steps of each round with multiplier sigma_t; the
  adaptive clip is treated as post-processing.
* sound: the same steps plus the clip statistic m~_t, which is computed from the raw
  per-example norms and is therefore its own Gaussian release (one sampled Gaussian step,
  multiplier sigma_stat, every round the client takes part in).
The budget stop uses the sound ledger by default (``budget_ledger="claimed"`` reproduces
the paper, whose clients then overspend by the uncounted statistic).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from accounting import PrivacyLedger
from accounting.schedules import PlateauDecay

from .._validate import check_int, check_nonneg, check_number, check_positive
from . import ops
from .base import ClientContext, Defense, RoundContext

if TYPE_CHECKING:
    from ..grads import LocalBatch
    from ..optim import SGD, Adam

__all__ = ["AdapDPFL", "initial_clip"]


def initial_clip(batch: LocalBatch, params: dict[str, torch.Tensor], scale: float,
                 batch_size: int, generator: torch.Generator) -> float:
    """C_0 = scale * mean per-example gradient norm on random-noise inputs (no data used).

    Inputs are uniform in [0, 1) with the batch's input shape, labels uniform over the
    classes; only ``batch.input_shape`` and ``batch.num_classes`` are read.
    """
    x = torch.rand((batch_size, *batch.input_shape), generator=generator)
    y = torch.randint(batch.num_classes, (batch_size,), generator=generator)
    norms = ops.flat_norms(batch.gradients_at(params, x, y))
    return scale * float(norms.mean())


class AdapDPFL(Defense):
    """Adaptive per-client clip from a noisy norm statistic, plateau-decayed sigma, budget."""

    name = "adap-dp-fl"
    sites = frozenset({"example", "client"})
    level = "instance"
    orders = "integer"

    def __init__(self, sigma: float = 2.0, beta: float = 0.9, patience: int = 3,
                 scale: float = 1.0, sigma_stat: float = 5.0, budget: float | None = None,
                 delta: float = 1e-5, sigma_min: float = 0.0, min_clip: float = 1e-3,
                 budget_ledger: str = "sound") -> None:
        self.sigma = check_positive("sigma", sigma)
        self.beta = check_number("beta", beta, minimum=0.0, open_min=True, maximum=1.0)
        self.patience = check_int("patience", patience, 1)
        self.scale = check_positive("scale", scale)
        self.sigma_stat = check_positive("sigma_stat", sigma_stat)
        self.budget = None if budget is None else check_positive("budget", budget)
        self.delta = check_positive("delta", delta)
        if self.delta >= 1:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        self.sigma_min = check_nonneg("sigma_min", sigma_min)
        self.min_clip = check_positive("min_clip", min_clip)
        if budget_ledger not in ("sound", "claimed"):
            raise ValueError(f"budget_ledger must be 'sound' or 'claimed', got {budget_ledger!r}")
        self.budget_ledger = budget_ledger
        self.start(0)

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {"sigma": self.sigma, "beta": self.beta,
                                  "sigma_stat": self.sigma_stat}
        if self.budget is not None:
            out["budget"] = self.budget
        return out

    # ------------------------------------------------------------------ state
    def start(self, rounds: int) -> None:
        """Fresh state for a run: decay, clips, statistics and stops."""
        self._decay = PlateauDecay(self.sigma, beta=self.beta, patience=self.patience,
                                   sigma_min=self.sigma_min)
        #: current clip C_t per client
        self.clips: dict[int, float] = {}
        #: per client, the clips used in each round it took part in (round -> C_t)
        self.clip_history: dict[int, dict[int, float]] = {}
        #: client -> the round from which it no longer uploads
        self.stopped: dict[int, int] = {}
        self._last_norms: dict[int, torch.Tensor] = {}

    def audit_batched(self, point: int) -> bool | None:
        return point == 2   # the clip statistic (point 1) is read as one number

    def audit_setup(self, params: list[torch.Tensor], bound: float) -> None:
        self.start(1)
        self.clips[0] = bound   # C_t known to a white-box auditor

    def noise_multiplier(self, round_index: int) -> float:
        history = self._decay.history
        return history[round_index] if round_index < len(history) else self._decay.sigma

    def end_round(self, round_index: int, val_loss: float) -> None:
        self._decay.update(val_loss)

    # ------------------------------------------------------------------ budget
    def round_cost(self, ledger: PrivacyLedger, q: float, sigma: float, local_steps: int,
                   kind: str) -> PrivacyLedger:
        """A copy of ``ledger`` with one more round recorded as ``kind`` would record it."""
        trial = ledger.copy()
        trial.step(q=q, sigma=sigma, count=local_steps, note=f"{self.name} local step")
        if kind == "sound":
            trial.step(q=q, sigma=self.sigma_stat, note=f"{self.name} clip statistic")
        return trial

    def uploads(self, client: int, ctx: RoundContext) -> bool:
        if client in self.stopped:
            return False
        if self.budget is None:
            return True
        ledger = (ctx.sound if self.budget_ledger == "sound" else ctx.claimed)[client]
        n_c = ctx.client_sizes[client]
        q = min(1.0, min(ctx.batch_size, n_c) / n_c)
        trial = self.round_cost(ledger, q, self.noise_multiplier(ctx.round), ctx.local_steps,
                                self.budget_ledger)
        if trial.epsilon(self.delta) > self.budget:
            self.stopped[client] = ctx.round
            return False
        return True

    # ------------------------------------------------------------------ training
    def local_step(self, params: dict[str, torch.Tensor], batch: LocalBatch,
                   optimizer: SGD | Adam, ctx: ClientContext
                   ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        if ctx.client not in self.clips:
            self.clips[ctx.client] = max(self.min_clip, initial_clip(
                batch, params, self.scale, max(1, int(round(ctx.batch_size))), ctx.generator))
        if ctx.local_step == 0:
            self.clip_history.setdefault(ctx.client, {})[ctx.round] = self.clips[ctx.client]
        return super().local_step(params, batch, optimizer, ctx)

    def privatize_batch(self, grads: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        clip = self.clips[ctx.client]
        sigma_t = self.noise_multiplier(ctx.round)
        sums, clipped_norms = ops.clipped_sum(grads, clip)
        noise = ops.gaussian_like(sums, sigma_t * clip, ctx.generator)
        note = f"{self.name} local step"
        ctx.claimed.step(q=ctx.batch_rate, sigma=sigma_t, note=note)
        ctx.sound.step(q=ctx.batch_rate, sigma=sigma_t, note=note)
        self._last_norms[ctx.client] = clipped_norms
        return [(s + n) / ctx.batch_size for s, n in zip(sums, noise)]

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        """Release the noisy clip statistic of the round and set the client's next clip."""
        clip = self.clips[ctx.client]
        norms = self._last_norms.pop(ctx.client)
        total = norms.sum().reshape(1)
        (noise,) = ops.gaussian_like([total], self.sigma_stat * clip, ctx.generator)
        ctx.sound.step(q=ctx.batch_rate, sigma=self.sigma_stat,
                       note=f"{self.name} clip statistic")
        noisy_mean = float(total + noise) / ctx.batch_size
        self.clips[ctx.client] = self.scale * max(noisy_mean, self.min_clip)
        return update

    @property
    def claimed_vs_sound(self) -> str:
        return ("the adaptive clip comes from a noisy mean of the clients' raw per-example "
                "norms, a release the paper treats as post-processing: sound counts it as its "
                f"own Gaussian step (multiplier {self.sigma_stat:g}) each round")

