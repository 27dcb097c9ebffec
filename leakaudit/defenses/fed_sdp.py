"""fed-sdp: client-level DP by clipping each client update and adding Gaussian noise.

McMahan et al. 2018 ("Learning differentially private recurrent language models"), the
Fed-SDP threat model of Wei et al. 2021: clip the update to L2 norm C and add
N(0, sigma^2 C^2) per coordinate, either at the server before aggregation ("server": the
type-0 leak point sees the sanitised update, the client's own update leaves raw) or at the
client before sending ("client": types 0 and 1 see it).

Accounting (client level): per round and per client one Poisson-sampled Gaussian step with
q = K/N and multiplier sigma (fixed-size client sampling accounted as Poisson, the usual
convention). Claimed and sound agree.
"""

from __future__ import annotations

import torch

from .._validate import check_nonneg, check_positive
from . import _ops
from .base import ClientContext, Defense, RoundContext


class FedSDP(Defense):
    """Clip each client update to ``clip`` and add N(0, (sigma * clip)^2) noise."""

    level = "client"
    batched_trials = True

    def __init__(self, clip: float = 4.0, sigma: float = 6.0, where: str = "server") -> None:
        if where not in ("server", "client"):
            raise ValueError(f"where must be 'server' or 'client', got {where!r}")
        self.clip = check_positive("clip", clip)
        self.sigma = check_nonneg("sigma", sigma)
        self.where = where

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"fed-sdp-{self.where}"

    @property
    def sites(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({self.where})

    def params(self) -> dict[str, object]:
        return {"clip": self.clip, "sigma": self.sigma}

    def audit_bound(self) -> float:
        return float(self.clip)

    def noise_multiplier(self, round_index: int) -> float:
        return self.sigma

    def _sanitise(self, update: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        norm = float(_ops.update_norm(update))
        factor = min(1.0, self.clip / (norm + 1e-12))
        noise = _ops.gaussian_like(update, self.sigma * self.clip, ctx.generator)
        return [u * factor + n for u, n in zip(update, noise)]

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        return self._sanitise(update, ctx) if self.where == "client" else update

    def sanitize_update(self, update: list[torch.Tensor],
                        ctx: ClientContext) -> list[torch.Tensor]:
        return self._sanitise(update, ctx) if self.where == "server" else update

    def claimed_round(self, ctx: RoundContext) -> None:
        note = f"{self.name}: client-level, q=K/N"
        for c in range(ctx.clients):
            ctx.claimed[c].step(q=ctx.client_rate, sigma=self.sigma, note=note)
            ctx.sound[c].step(q=ctx.client_rate, sigma=self.sigma, note=note)
