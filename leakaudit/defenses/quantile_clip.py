"""quantile-clip: DP-FedAvg whose clip follows a private estimate of the gamma-quantile of the
client update norms (Andrew, Thakkar, McMahan, Ramaswamy 2021, "Differentially private
learning with adaptive clipping", NeurIPS; tensorflow-privacy ``QuantileAdaptiveClipSumQuery``).

Per round t with clip C_t, each sampled client i (m of them, a count the server knows):

* clips its update to L2 norm C_t and contributes the CENTRED bit c_i = 1[||u_i|| <= C_t] - 1/2;
* the server forms the noisy sums sum_i w_i clip(u_i) + N(0, (sigma_Delta C_t)^2 I) and
  sum_i c_i + N(0, sigma_b^2), the noise split into m shares of variance 1/m each (one
  share per client as its update and bit arrive, site "server"; the whole noise when m = 0,
  ``sanitize_sum``);
* the noisy unclipped fraction is b~ = (noisy sum of c_i) / D + 1/2 with D the FIXED
  denominator (the expected number of participants, q N or K: tensorflow-privacy's
  ``expected_num_records``), and C_{t+1} = C_t exp(-eta_C (b~ - gamma)) (the paper's
  geometric update; gamma the target quantile, 0.5 = the median; eta_C = 0.2 recommended).
  The update uses only the noisy count (post-processing).

Privacy (Andrew et al. 2021, Thm 1; tensorflow-federated's ``build_dp_query``): with centred
bits and a fixed denominator the count's sum has sensitivity 1/2 under add/remove of a
client, so the clipped sum (multiplier sigma_Delta, sensitivity C) and the count (std
sigma_b) are one Gaussian release with multiplier z, z^-2 = sigma_Delta^-2 + (2 sigma_b)^-2.
The user gives z (``noise_multiplier``) and sigma_b; the update noise is then
sigma_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2, which needs z < 2 sigma_b. (A raw 0/1 bit
divided by the realised number of reports, the earlier code, has neither property: the
count then reveals the number of participants.) Aggregation: the simulator's
``fixed_denominator`` DP-FedAvg (weights <= 1, the sum divided by D), as fed-sdp.

Accounting (client level, the published aggregate and clip).
* sound: per round and per client, Poisson client sampling: a Poisson-sampled Gaussian step
  (q, z); fixed-size sampling: no amplification, replace-one (update 2C, centred bit 1), i.e.
  multiplier z/2 at q = 1 (``client_level_step``).
* claimed: what a DP-FedAvg accountant that forgets the count would report: Poisson steps
  with q = K/N and the update's multiplier sigma_Delta > z.
"""

from __future__ import annotations

import math

import torch

from .._validate import check_positive, check_probability
from . import ops
from .base import ClientContext, Defense, RoundContext, client_level_step

__all__ = ["QuantileClip", "update_noise_multiplier", "geometric_clip_update"]


def update_noise_multiplier(noise_multiplier: float, sigma_b: float) -> float:
    """sigma_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2, the multiplier left for the update when
    the count with std sigma_b shares the budget of one Gaussian release of multiplier z."""
    if not noise_multiplier < 2.0 * sigma_b:
        raise ValueError(f"noise_multiplier must be < 2 * sigma_b = {2.0 * sigma_b!r} (the "
                         f"count alone would already cost more), got {noise_multiplier!r}")
    return (noise_multiplier ** -2 - (2.0 * sigma_b) ** -2) ** -0.5


def geometric_clip_update(clip: float, noisy_fraction: float, target_quantile: float,
                          clip_lr: float) -> float:
    """C_{t+1} = C_t exp(-eta_C (b~ - gamma)), b~ the noisy unclipped fraction."""
    return clip * math.exp(-clip_lr * (noisy_fraction - target_quantile))


class QuantileClip(Defense):
    """DP-FedAvg (server-side noise per update) with a clip adapted to the gamma-quantile."""

    name = "quantile-clip"
    sites = frozenset({"server"})
    level = "client"
    fixed_denominator = True
    batched_trials = False   # the noisy count is read as one number

    def __init__(self, clip: float = 1.0, noise_multiplier: float = 1.0, sigma_b: float = 2.0,
                 target_quantile: float = 0.5, clip_lr: float = 0.2) -> None:
        self.initial_clip = check_positive("clip", clip)
        self.z = check_positive("noise_multiplier", noise_multiplier)
        self.sigma_b = check_positive("sigma_b", sigma_b)
        self.target_quantile = check_probability("target_quantile", target_quantile)
        self.clip_lr = check_positive("clip_lr", clip_lr)
        self.sigma_delta = update_noise_multiplier(self.z, self.sigma_b)
        self.clip = self.initial_clip
        #: the clip of every round so far (the last entry is the next round's)
        self.clip_history: list[float] = [self.clip]
        self._noisy_count = 0.0
        self._denominator = 0.0

    def params(self) -> dict[str, object]:
        return {"clip": self.initial_clip, "noise_multiplier": self.z, "sigma_b": self.sigma_b,
                "target_quantile": self.target_quantile, "clip_lr": self.clip_lr}

    def noise_multiplier(self, round_index: int) -> float:
        """The combined multiplier z of one round's release (update and count)."""
        return self.z

    def audit_bound(self) -> float:
        return float(self.initial_clip)

    def start(self, rounds: int) -> None:
        self.clip = self.initial_clip
        self.clip_history = [self.clip]
        self._noisy_count, self._denominator = 0.0, 0.0

    def sanitize_update(self, update: list[torch.Tensor],
                        ctx: ClientContext) -> list[torch.Tensor]:
        norm = float(ops.update_norm(update))
        factor = min(1.0, self.clip / (norm + 1e-12))
        centred = torch.tensor(0.5 if norm <= self.clip else -0.5, dtype=update[0].dtype)
        share = 1.0 / math.sqrt(max(1, ctx.round_ctx.reporting))
        noise = ops.gaussian_like([*update, centred], share, ctx.generator)  # one release
        self._noisy_count = self._noisy_count + centred + self.sigma_b * noise[-1]
        self._denominator = ctx.round_ctx.expected_weight
        std = self.sigma_delta * self.clip
        return [u * factor + std * n for u, n in zip(update, noise[:-1])]

    def sanitize_sum(self, total: list[torch.Tensor], uploads: int, ctx: RoundContext,
                     generator: torch.Generator) -> list[torch.Tensor]:
        """A round without reports still releases both noises (whole, not shared)."""
        self._denominator = ctx.expected_weight
        if uploads:
            return total
        noise = ops.gaussian_like([*total, torch.zeros(())], 1.0, generator)
        self._noisy_count = self._noisy_count + self.sigma_b * noise[-1]
        std = self.sigma_delta * self.clip
        return [t + std * n for t, n in zip(total, noise[:-1])]

    def noisy_fraction(self) -> float | torch.Tensor:
        """b~ = (noisy sum of the centred bits) / D + 1/2 of the round so far."""
        return self._noisy_count / self._denominator + 0.5

    def claimed_round(self, ctx: RoundContext) -> None:
        for c in range(ctx.clients):
            client_level_step(ctx.sound[c], ctx, self.z,
                              f"{self.name}: update + centred noisy count, combined z")
            ctx.claimed[c].step(q=ctx.client_rate, sigma=self.sigma_delta,
                                note=f"{self.name} claimed: update noise only")

    def end_round(self, round_index: int, val_loss: float) -> None:
        """Geometric clip update from this round's noisy count (post-processing)."""
        if self._denominator > 0:
            self.clip = geometric_clip_update(self.clip, float(self.noisy_fraction()),
                                              self.target_quantile, self.clip_lr)
        self.clip_history.append(self.clip)
        self._noisy_count, self._denominator = 0.0, 0.0

    @property
    def claimed_vs_sound(self) -> str:
        return ("claimed counts only the update noise sigma_Delta, as a DP-FedAvg accountant "
                "that forgets the count; the noisy unclipped count is a release too, so sound "
                "uses z with z^-2 = sigma_Delta^-2 + (2 sigma_b)^-2 (Andrew et al. 2021; "
                "centred bits, fixed denominator); with fixed-size client sampling sound "
                "claims no amplification (replace-one, z/2)")
