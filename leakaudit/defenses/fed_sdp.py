"""fed-sdp: client-level DP-FedAvg (McMahan et al. 2018, "Learning differentially private
recurrent language models", Alg. 1; the Fed-SDP threat model of Wei et al. 2021).

Each sampled client's update is clipped to L2 norm C. The aggregate the server publishes is
(sum_k w_k clip(u_k) + N(0, sigma^2 C^2 I)) / D, with weights w_k <= 1 and a FIXED
denominator D (the expected total weight: q N under Poisson client sampling, K under
fixed-size sampling; the simulator's ``fixed_denominator`` aggregation), so neither the
noise's variance nor the scale depends on who took part.

The noise is split among the m clients sampled in the round (m is known to the server and
told to the clients before they send): each adds N(0, sigma^2 C^2 / m), so the sum carries
exactly N(0, sigma^2 C^2) whatever m; a round in which nobody takes part still releases
N(0, sigma^2 C^2) / D (``sanitize_sum``). "server": the server adds each share to the update
as it arrives (the type-0 leak point sees the update with its share); "client": the client
adds it before sending (types 1 and 0 see it). The per-client views carry only a 1/sqrt(m)
share of the noise: the guarantee is for the published aggregate (central DP, the server
trusted), as in McMahan et al.

Accounting (client level, the aggregate, per round and per client).
* sound, Poisson client sampling (``client_fraction`` = q): a Poisson-sampled Gaussian step
  (q, sigma), add/remove of a client (sensitivity C of the weighted sum, w_k <= 1).
* sound, fixed-size sampling (K of N): no amplification (the server knows who took part),
  replace-one (sensitivity 2C): a Gaussian step with multiplier sigma/2, q = 1, every round.
* claimed: the usual convention, a Poisson-sampled Gaussian step with q = K/N (or q).
"""

from __future__ import annotations

import math

import torch

from .._validate import check_nonneg, check_positive
from . import ops
from .base import ClientContext, Defense, RoundContext, client_level_step


class FedSDP(Defense):
    """Clip each client update to ``clip`` and add N(0, (sigma * clip)^2) noise."""

    level = "client"
    fixed_denominator = True
    batched_trials = True

    def __init__(self, clip: float = 4.0, sigma: float = 6.0, where: str = "server") -> None:
        if where not in ("server", "client"):
            raise ValueError(f"where must be 'server' or 'client', got {where!r}")
        self.clip = check_positive("clip", clip)
        self.sigma = check_nonneg("sigma", sigma)
        self.where = where

    @property
    def name(self) -> str:
        return f"fed-sdp-{self.where}"

    @property
    def sites(self) -> frozenset[str]:
        return frozenset({self.where})

    def params(self) -> dict[str, object]:
        return {"clip": self.clip, "sigma": self.sigma}

    def audit_bound(self) -> float:
        return float(self.clip)

    def noise_multiplier(self, round_index: int) -> float:
        return self.sigma

    def _sanitise(self, update: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        """Clip to C and add this client's share N(0, sigma^2 C^2 / m) of the round's noise."""
        norm = float(ops.update_norm(update))
        factor = min(1.0, self.clip / (norm + 1e-12))
        share = self.sigma * self.clip / math.sqrt(max(1, ctx.round_ctx.reporting))
        noise = ops.gaussian_like(update, share, ctx.generator)
        return [u * factor + n for u, n in zip(update, noise)]

    def sanitize_sum(self, total: list[torch.Tensor], uploads: int, ctx: RoundContext,
                     generator: torch.Generator) -> list[torch.Tensor]:
        """A round without participants still releases N(0, sigma^2 C^2) (the shares of the
        participants carry it otherwise)."""
        if uploads:
            return total
        noise = ops.gaussian_like(total, self.sigma * self.clip, generator)
        return [t + n for t, n in zip(total, noise)]

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        return self._sanitise(update, ctx) if self.where == "client" else update

    def sanitize_update(self, update: list[torch.Tensor],
                        ctx: ClientContext) -> list[torch.Tensor]:
        return self._sanitise(update, ctx) if self.where == "server" else update

    def claimed_round(self, ctx: RoundContext) -> None:
        note = f"{self.name}: client-level"
        for c in range(ctx.clients):
            ctx.claimed[c].step(q=ctx.client_rate, sigma=self.sigma, note=f"{note}, q=K/N")
            client_level_step(ctx.sound[c], ctx, self.sigma, note)

    @property
    def claimed_vs_sound(self) -> str:
        return ("with fixed-size client sampling claimed amplifies by q=K/N; the server knows "
                "who took part, so sound claims no amplification (replace-one, sigma/2)")
