"""quantile-clip: DP-FedAvg whose clip follows a private estimate of the gamma-quantile of the
client update norms (Andrew, Thakkar, McMahan, Ramaswamy 2021, "Differentially private
learning with adaptive clipping", NeurIPS; tensorflow-privacy ``QuantileAdaptiveClipSumQuery``).

Per round t with clip C_t, each participating client i (m of them):

* clips its update to L2 norm C_t and contributes the bit b_i = 1[||update_i|| <= C_t];
* the update gets N(0, (sigma_Delta C_t)^2) per coordinate, the bit N(0, sigma_b^2);
* the server forms the noisy unclipped fraction b~ = (sum_i (b_i + N(0, sigma_b^2))) / m and
  updates the clip geometrically, C_{t+1} = C_t exp(-eta_C (b~ - gamma)) (the paper's
  geometric update; gamma the target quantile, 0.5 = the median; eta_C = 0.2 recommended).
  C_t rises while more than a gamma share of the updates is unclipped and falls otherwise,
  so it converges to the gamma-quantile of the norms. The update uses only the noisy counts
  (post-processing).

Privacy (the paper's theorem on DP-FedAvg with adaptive clipping, restated by
tensorflow-federated's ``build_dp_query``): centring the bit, b_i - 1/2, gives it
sensitivity 1/2, so releasing the clipped update with multiplier sigma_Delta and the count
with std sigma_b is one Gaussian release with multiplier z,
z^-2 = sigma_Delta^-2 + (2 sigma_b)^-2. The user gives z (``noise_multiplier``) and sigma_b;
the update noise is then sigma_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2, which needs
z < 2 sigma_b. (The centring shifts the released count by a public constant; nothing else.)

Departure from the paper, as in fed-sdp-server: noise is added by the server to each client's
update and bit as it arrives (site "server", the type-0 leak point sees the sanitised
update) rather than once on the sums. Each client's (update, bit) pair is then itself the
combined Gaussian release of multiplier z; the aggregate carries sqrt(m) times the paper's
noise. Both noises of one client come from ONE ``_ops.gaussian_like`` call (one release).
Aggregation stays the simulator's FedAvg weighted by data size, as for fed-sdp.

Accounting (client level).
* sound: per round and per client one Poisson-sampled Gaussian step with q = K/N and
  multiplier z, in every client's ledger (sampling amplification, as fed-sdp).
* claimed: what a DP-FedAvg accountant that forgets the count would report: the same steps
  with the update's multiplier sigma_Delta > z. The paper itself counts the count (its
  theorem above); the claimed ledger models an accountant that reuses a fixed-clip
  DP-FedAvg analysis, which under-reports eps.
"""

from __future__ import annotations

import math

import torch

from .._validate import check_positive, check_probability
from . import _ops
from .base import ClientContext, Defense, RoundContext

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
        self._reports = 0

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
        self._noisy_count, self._reports = 0.0, 0

    def sanitize_update(self, update: list[torch.Tensor],
                        ctx: ClientContext) -> list[torch.Tensor]:
        norm = float(_ops.update_norm(update))
        factor = min(1.0, self.clip / (norm + 1e-12))
        bit = torch.tensor(1.0 if norm <= self.clip else 0.0, dtype=update[0].dtype)
        noise = _ops.gaussian_like([*update, bit], 1.0, ctx.generator)  # one combined release
        self._noisy_count += float(bit + self.sigma_b * noise[-1])
        self._reports += 1
        std = self.sigma_delta * self.clip
        return [u * factor + std * n for u, n in zip(update, noise[:-1])]

    def claimed_round(self, ctx: RoundContext) -> None:
        for c in range(ctx.clients):
            ctx.sound[c].step(q=ctx.client_rate, sigma=self.z,
                              note=f"{self.name}: update + noisy count, combined z")
            ctx.claimed[c].step(q=ctx.client_rate, sigma=self.sigma_delta,
                                note=f"{self.name} claimed: update noise only")

    def end_round(self, round_index: int, val_loss: float) -> None:
        """Geometric clip update from this round's noisy count (post-processing)."""
        if self._reports:
            fraction = self._noisy_count / self._reports
            self.clip = geometric_clip_update(self.clip, fraction, self.target_quantile,
                                              self.clip_lr)
        self.clip_history.append(self.clip)
        self._noisy_count, self._reports = 0.0, 0

    @property
    def claimed_vs_sound(self) -> str:
        return ("claimed counts only the update noise sigma_Delta, as a DP-FedAvg accountant "
                "that forgets the count; the noisy unclipped count is a release too, so sound "
                "uses z with z^-2 = sigma_Delta^-2 + (2 sigma_b)^-2 (Andrew et al. 2021)")
