"""dpfl-agn: DP-SGD inside clients with Adam and threshold-triggered noise decay (DPFL-AGN,
"differentially private federated learning with adaptive Gaussian noise").

Each local iteration: clip every per-example gradient to L2 norm Theta, sum, add
N(0, sigma_t^2 Theta^2) per coordinate, divide by the expected batch size B (never the
realised one: a data-dependent normaliser, see fed-cdp), and hand the noisy
gradient to standard Adam (Kingma & Ba 2015, Alg. 1; ``leakaudit.optim.Adam``). The published
pseudo-code mixes beta1 and beta2 and drops the power t in the bias corrections 1 - beta^t:
an erratum we do not repeat.

Noise decay: after each round the server compares its validation loss with the previous
round's; when it improved by less than mu (mu = 0.001),
sigma <- max(sigma_min, rho * sigma) for the next round
(:class:`accounting.schedules.ThresholdDecay`). The paper also calls the factor 0.001, which
would erase the noise after one decay; rho stays a parameter, default 0.9.

``clip="median"``: Theta is the median of the batch's UNCLIPPED per-example gradient norms
(the paper's choice), recomputed every iteration.

Accounting (instance level, per participation, q = B / n_c, fixed-size batches accounted as
Poisson like fed-cdp).
* fixed Theta: one sampled Gaussian step with multiplier sigma_t per local iteration of a
  round the client takes part in; claimed = sound.
* median Theta: claimed (the paper) counts the same sampled Gaussian steps. Sound: the
  sensitivity of the clipped sum is Theta, but Theta is itself a function of the batch (one
  example can move the median, and it sets the noise scale): the noise is calibrated to a
  data-dependent bound, the median is released through the noise scale, and nothing bounds
  the change one example can cause. No finite guarantee: each step is recorded as
  ``dp_step(inf)`` with that reason (unbounded unless the median were privatised).
"""

from __future__ import annotations

import math

import torch

from accounting.schedules import ThresholdDecay

from .._validate import check_nonneg, check_number, check_positive
from . import ops
from .base import ClientContext, Defense


class DPFLAGN(Defense):
    """Per-example clip Theta, Gaussian noise sigma_t * Theta, Adam; sigma decays on plateaus."""

    name = "dpfl-agn"
    sites = frozenset({"example"})
    level = "instance"
    optimizer = "adam"
    batched_trials = True

    def __init__(self, clip: float | str = 4.0, sigma: float = 2.0, rho: float = 0.9,
                 mu: float = 0.001, sigma_min: float = 1.0) -> None:
        if isinstance(clip, str):
            if clip != "median":
                raise ValueError(f"clip must be a number > 0 or 'median', got {clip!r}")
            self.clip: float | str = clip
        else:
            self.clip = check_positive("clip", clip)
        self.sigma = check_positive("sigma", sigma)
        self.rho = check_number("rho", rho, minimum=0.0, open_min=True, maximum=1.0)
        self.mu = check_nonneg("mu", mu)
        self.sigma_min = check_nonneg("sigma_min", sigma_min)
        if self.sigma_min > self.sigma:
            raise ValueError(f"sigma_min must be <= sigma, got {sigma_min!r} > {sigma!r}")
        self._decay = self._new_decay()

    def _new_decay(self) -> ThresholdDecay:
        return ThresholdDecay(self.sigma, rho=self.rho, mu=self.mu, sigma_min=self.sigma_min)

    def params(self) -> dict[str, object]:
        return {"clip": self.clip, "sigma": self.sigma, "rho": self.rho, "mu": self.mu,
                "sigma_min": self.sigma_min}

    def audit_bound(self) -> float:
        return 1.0 if isinstance(self.clip, str) else float(self.clip)

    def start(self, rounds: int) -> None:
        """A fresh decay (sigma back to sigma_0) for a new run."""
        self._decay = self._new_decay()

    def end_round(self, round_index: int, val_loss: float) -> None:
        """sigma <- max(sigma_min, rho sigma) when val_loss improved by less than mu."""
        self._decay.update(val_loss)

    def noise_multiplier(self, round_index: int) -> float:
        """sigma_t of round ``round_index`` (rounds not yet ended: the current sigma)."""
        history = self._decay.history
        return float(history[round_index]) if round_index < len(history) \
            else float(self._decay.sigma)

    def privatize_batch(self, grads: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        sigma_t = self.noise_multiplier(ctx.round)
        if self.clip == "median":
            theta = float(torch.quantile(ops.flat_norms(grads), 0.5))
            ctx.sound.dp_step(math.inf, note=f"{self.name}: clip = median of unclipped "
                              "per-example norms (data-dependent sensitivity, not private)")
        else:
            theta = float(self.clip)
            ctx.sound.step(q=ctx.batch_rate, sigma=sigma_t, note=f"{self.name} local step")
        ctx.claimed.step(q=ctx.batch_rate, sigma=sigma_t, note=f"{self.name} local step")
        sums, _ = ops.clipped_sum(grads, theta)
        noise = ops.gaussian_like(sums, sigma_t * theta, ctx.generator)
        return [(s + n) / ctx.batch_size for s, n in zip(sums, noise)]

    @property
    def claimed_vs_sound(self) -> str:
        if self.clip == "median":
            return ("the clip is the median of the batch's unclipped per-example norms: the "
                    "noise is calibrated to a data-dependent bound that one example can move, "
                    "so sound records no finite guarantee; claimed counts the SGM steps")
        return ""
