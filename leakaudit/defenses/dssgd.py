"""dssgd: distributed selective SGD (Shokri & Shmatikov 2015, "Privacy-preserving deep
learning", CCS), the "random with threshold" upload rule, optionally with Laplace noise.

Each participant shares a fraction theta_u (``share``) of its parameter changes: of the
coordinates with |u_i| > tau, a uniformly random subset of exactly k = round(share * m)
(m = number of coordinates above tau), drawn with the round's generator; the rest are zero.
Shared values are truncated to [-gamma, gamma] (the paper's bound(., gamma), optional here
without noise). ``tau=None`` drops the threshold: k = round(share * d) coordinates drawn
uniformly from all d, independently of the data.

DP variant (``laplace_eps`` = eps per upload): add Laplace(b) to each of the k shared, truncated
values, b = 2 gamma c / eps with c = max(1, round(share * d)) the most coordinates an upload can
share; 2 gamma is the paper's per-value sensitivity (values in [-gamma, gamma], replacement
neighbours). The paper's own DP upload (its Alg. 2) selects coordinates with the sparse vector
technique (noisy threshold, budget eps1 = 8/9 eps as we recall it) and perturbs the values
with the rest; we implement the exact threshold rule of its non-private "random with
threshold" criterion instead (no SVT) and account what that really releases.

Accounting (client level when ``laplace_eps`` is set; no guarantee otherwise).
* no noise: the update leaves the client in the clear (sparsified): no DP guarantee.
* claimed (noise): what the paper counts for the released values, one pure eps-DP release
  per upload, Laplace(b) with L1 sensitivity 2 gamma c; composed per client (basic
  composition: ``method="basic"``; the ledger's Laplace RDP is tighter).
* sound (noise, tau set): WHICH coordinates exceed tau is computed from the true update and
  released exactly (the zero pattern of the upload); the value noise does not cover it, so
  there is no finite eps (the paper's SVT would privatise it; we do not implement it).
* sound (noise, tau=None): the selection is data-independent, so the release is the
  Laplace mechanism on c truncated values: L1 sensitivity 2 gamma c under replacement of the
  client's data (gamma c under add/remove; we use replacement, as the paper does), scale b,
  eps = 2 gamma c / b = laplace_eps per upload: sound = claimed. Relation: replace-one (the
  client's data replaced, the client still uploads); not add/remove of a client, whose
  presence the number of noisy uploads in the realised FedAvg mean reveals.
"""

from __future__ import annotations

import math

import torch

from .._validate import check_nonneg, check_positive
from . import ops
from .base import ClientContext, Defense, record_no_privacy


class DSSGD(Defense):
    """Share a random ``share`` of the update's coordinates above ``tau`` (optional noise)."""

    name = "dssgd"
    sites = frozenset({"client"})
    #: the Laplace noise is per upload and the aggregate a mean over the realised
    #: participants, so the guarantee is for a client's data given that it takes part
    #: (replacement of its data, as the paper), not for its presence in the population
    relation = "replace-one"
    batched_trials = False   # a random choice of coordinates per upload: one run per trial

    def __init__(self, share: float = 0.1, tau: float | None = 0.0,
                 gamma: float | None = None, laplace_eps: float | None = None) -> None:
        self.share = check_positive("share", share)
        if self.share > 1.0:
            raise ValueError(f"share must be in (0, 1], got {share!r}")
        self.tau = None if tau is None else check_nonneg("tau", tau)
        self.gamma = None if gamma is None else check_positive("gamma", gamma)
        self.laplace_eps = None if laplace_eps is None else check_positive("laplace_eps",
                                                                           laplace_eps)
        if self.laplace_eps is not None and self.gamma is None:
            raise ValueError("gamma (the truncation bound) is required with laplace_eps: "
                             "without it the Laplace noise has no sensitivity to match")

    @property
    def level(self) -> str:
        return "none" if self.laplace_eps is None else "client"

    def params(self) -> dict[str, object]:
        return {"share": self.share, "tau": self.tau, "gamma": self.gamma,
                "laplace_eps": self.laplace_eps}

    def audit_bound(self) -> float:
        return 1.0 if self.gamma is None else float(self.gamma)

    def max_shared(self, d: int) -> int:
        """c: the most coordinates one upload of a d-coordinate update can share."""
        return max(1, int(round(self.share * d)))

    def laplace_scale(self, d: int) -> float:
        """b = 2 gamma c / eps of the DP variant."""
        assert self.gamma is not None and self.laplace_eps is not None
        return 2.0 * self.gamma * self.max_shared(d) / self.laplace_eps

    def select(self, flat: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Indices shared: round(share * m) uniformly random among the m candidates."""
        if self.tau is None:
            candidates = torch.arange(flat.numel())
        else:
            candidates = torch.nonzero(flat.abs() > self.tau).reshape(-1)
        k = int(round(self.share * candidates.numel()))
        order = torch.randperm(candidates.numel(), generator=generator)
        return candidates[order[:k]]

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        flat = torch.cat([u.reshape(-1) for u in update])
        d = flat.numel()
        chosen = self.select(flat, ctx.generator)
        values = flat[chosen]
        if self.gamma is not None:
            values = values.clamp(-self.gamma, self.gamma)
        if self.laplace_eps is None:
            record_no_privacy(ctx, "dssgd: selected coordinates shared in the clear")
        else:
            b = self.laplace_scale(d)
            sens = 2.0 * self.gamma * self.max_shared(d)
            values = values + ops.laplace_like([values], b, ctx.generator)[0]
            note = f"dssgd: Laplace on <= {self.max_shared(d)} values in [-gamma, gamma]"
            ctx.claimed.laplace(b, sensitivity=sens, note=note)
            if self.tau is None:
                ctx.sound.laplace(b, sensitivity=sens, note=note)
            else:
                ctx.sound.dp_step(math.inf, note="dssgd: which coordinates exceed tau is "
                                  "released without noise")
        out = torch.zeros_like(flat)
        out[chosen] = values
        result, start = [], 0
        for u in update:
            result.append(out[start:start + u.numel()].view_as(u))
            start += u.numel()
        return result

    @property
    def claimed_vs_sound(self) -> str:
        if self.laplace_eps is None or self.tau is None:
            return ""
        return ("claimed counts only the Laplace noise on the shared values; which "
                "coordinates exceed tau is chosen from the true update and released exactly "
                "(no SVT), so sound eps is unbounded")
