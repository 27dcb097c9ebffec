"""cos-adaptive-laplace: client-level Laplace noise with a per-round budget scaled by an
adjustment coefficient (cosine similarity, data-size ratio, a loss/accuracy/round score).

Source. Our defense table (docs/defenses.md) has only a one-line description: "per-round privacy
budget scaled by an adjustment coefficient from the cosine similarity between the previous
global model and the local model, the client/data-size ratios and a score of loss, accuracy
and round; L1-clipped update plus Laplace(Delta/eps') noise". We did not find the paper, so
the equations below are a documented reconstruction.

Stated by the source:
* eps'_t = eps_round * coef_t (a per-round budget scaled by an adjustment coefficient);
* coef_t is built from cos(w_global_prev, w_local), the client/data-size ratio and a score
  of loss, accuracy and round;
* the update is clipped in L1 norm to Delta and Laplace(Delta / eps'_t) noise is added.

Ours (reconstructed):
* coef = c_min + (c_max - c_min) * (w_cos s_cos + w_size s_size + w_score s_score), with
  weights w >= 0 summing to 1, so coef lies in [c_min, c_max];
* s_cos = (1 + cos(a, b)) / 2 on the flattened models: a = w_global of the round (the
  "previous global model" the client started from), b = w_local = a + update;
* s_size = n_c / max_c n_c (client sizes are public metadata);
* s_score = (s_loss + s_acc + s_round) / 3 from the server's validation losses L_0 .. L_{t-1}
  of earlier rounds (``end_round``): s_loss = clip(1 - L_{t-1} / L_0, 0, 1) (relative
  improvement), s_acc = exp(-L_{t-1}) (the geometric-mean probability of the true class, an
  accuracy proxy: 1/classes at a uniform model), s_round = t / (T - 1); each is 0 before
  the losses it needs exist. Larger coef = larger eps' = less noise as training converges.
* ``similarity="public"``: s_cos from the last two GLOBAL models instead (w_{t-1}, w_t, both
  public); 0.5 (cos = 0) in round 0 where there is no previous global model.
* neighbouring relation: zero-out, one client's update against the zero vector (the client
  still takes part), so the L1 sensitivity of the clipped update is Delta (replacement:
  2 Delta). Not add/remove of a client from the population: every participant adds its own
  Laplace noise and the simulator's FedAvg divides by the realised total weight, so the
  number of noise terms in the aggregate tells whether a client took part.

Accounting (client level).
* claimed: one pure eps'_t-DP Laplace release per participation (scale b = Delta / eps'_t,
  L1 sensitivity Delta), composed per client (basic composition: ``method="basic"``; the
  ledger's RDP of the Laplace mechanism is tighter).
* sound, default ``similarity="local"``: the noise scale b = Delta / eps'_t depends on the
  client's private local model through s_cos. A Laplace mechanism whose scale depends on the
  data is not eps-DP for any finite eps: for neighbours with scales b1 != b2 the log density
  ratio |x - mu2| / b2 - |x - mu1| / b1 + log(b2 / b1) grows like |x| |1/b2 - 1/b1| in the
  tails. The sound ledger records eps = inf with that reason.
* sound, ``similarity="public"``: coef depends only on public quantities (released global
  models, client sizes, the server's own validation loss: post-processing), so each release
  is pure eps'_t-DP and sound = claimed. The eps'_t are chosen adaptively from earlier
  releases; they never exceed eps_round * c_max, a data-free bound per participation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from .._validate import check_positive
from . import ops
from .base import ClientContext, Defense

if TYPE_CHECKING:
    from ..grads import LocalBatch
    from ..optim import SGD, Adam


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two flat vectors (0 when either is zero)."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return 0.0
    return max(-1.0, min(1.0, float(torch.dot(a.double(), b.double())) / (na * nb)))


def adjustment_coefficient(s_cos: float, s_size: float, s_score: float, *, c_min: float,
                           c_max: float, weights: tuple[float, float, float]) -> float:
    """coef = c_min + (c_max - c_min) * (w_cos s_cos + w_size s_size + w_score s_score)."""
    w_cos, w_size, w_score = weights
    mix = w_cos * s_cos + w_size * s_size + w_score * s_score
    return c_min + (c_max - c_min) * min(1.0, max(0.0, mix))


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


class CosAdaptiveLaplace(Defense):
    """L1-clip the client update to ``clip`` and add Laplace(clip / eps') per coordinate."""

    name = "cos-adaptive-laplace"
    sites = frozenset({"client"})
    level = "client"
    #: each participant's upload carries its own Laplace noise and FedAvg takes the mean over
    #: the realised participants, so the number of noise terms tells whether a client took
    #: part: the guarantee is for the client's DATA given its participation (its update
    #: against the zero update), not for its presence in the population
    relation = "zero-out"
    batched_trials = True

    def __init__(self, eps_round: float = 1000.0, clip: float = 300.0, c_min: float = 0.5,
                 c_max: float = 1.5, weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
                 similarity: str = "local") -> None:
        self.eps_round = check_positive("eps_round", eps_round)
        self.clip = check_positive("clip", clip)
        self.c_min = check_positive("c_min", c_min)
        self.c_max = check_positive("c_max", c_max)
        if self.c_max < self.c_min:
            raise ValueError(f"c_max must be >= c_min={self.c_min}, got {c_max!r}")
        try:
            w = tuple(float(x) for x in weights)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"weights must be three numbers, got {weights!r}") from exc
        if len(w) != 3 or any(math.isnan(x) or x < 0 or math.isinf(x) for x in w) \
                or not math.isclose(sum(w), 1.0, abs_tol=1e-9):
            raise ValueError(f"weights must be three finite numbers >= 0 summing to 1, "
                             f"got {weights!r}")
        if similarity not in ("local", "public"):
            raise ValueError(f"similarity must be 'local' or 'public', got {similarity!r}")
        self.weights: tuple[float, float, float] = w
        self.similarity = similarity
        self._round = -1
        self._global: torch.Tensor | None = None
        self._prev_global: torch.Tensor | None = None
        self._val_losses: list[float] = []

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {"eps_round": self.eps_round, "clip": self.clip}
        if (self.c_min, self.c_max) != (0.5, 1.5):
            out.update(c_min=self.c_min, c_max=self.c_max)
        if not all(math.isclose(w, 1 / 3) for w in self.weights):
            out["weights"] = tuple(round(w, 4) for w in self.weights)
        out["similarity"] = self.similarity
        return out

    # ---------------------------------------------------------------- public state
    def start(self, rounds: int) -> None:
        self._round, self._global, self._prev_global = -1, None, None
        self._val_losses = []

    def audit_bound(self) -> float:
        return float(self.clip)

    def audit_setup(self, params: list[torch.Tensor], bound: float) -> None:
        self.start(1)
        self.observe_global(0, params)

    def observe_global(self, round_index: int, tensors: list[torch.Tensor]) -> None:
        """The global model of round ``round_index`` (first time a round is seen)."""
        if round_index != self._round:
            self._prev_global = self._global
            self._global = _flat(tensors).clone()
            self._round = round_index

    def local_step(self, params: dict[str, torch.Tensor], batch: LocalBatch,
                   optimizer: SGD | Adam, ctx: ClientContext
                   ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        # the first local step of a round starts from the untouched global model
        self.observe_global(ctx.round, list(params.values()))
        return super().local_step(params, batch, optimizer, ctx)

    def end_round(self, round_index: int, val_loss: float) -> None:
        self._val_losses.append(float(val_loss))

    # ---------------------------------------------------------------- the coefficient
    def scores(self, update: list[torch.Tensor], ctx: ClientContext) -> tuple[float, float, float]:
        """(s_cos, s_size, s_score) for this client's update, each in [0, 1]."""
        if self._global is None:
            raise RuntimeError("cos-adaptive-laplace needs the round's global model "
                               "(observe_global) before privatize_update")
        if self.similarity == "local":
            s_cos = (1.0 + cosine(self._global, self._global + _flat(update))) / 2.0
        elif self._prev_global is None:
            s_cos = 0.5
        else:
            s_cos = (1.0 + cosine(self._prev_global, self._global)) / 2.0
        sizes = ctx.round_ctx.client_sizes
        s_size = ctx.n_examples / max(sizes) if sizes else 1.0
        losses = [v for v in self._val_losses if math.isfinite(v)]
        s_loss = min(1.0, max(0.0, 1.0 - losses[-1] / losses[0])) \
            if len(losses) >= 2 and losses[0] > 0 else 0.0
        s_acc = math.exp(-losses[-1]) if losses else 0.0
        s_round = ctx.round / (ctx.round_ctx.rounds - 1) if ctx.round_ctx.rounds > 1 else 0.0
        return s_cos, s_size, (s_loss + s_acc + min(1.0, s_round)) / 3.0

    def coefficient(self, update: list[torch.Tensor], ctx: ClientContext) -> float:
        return adjustment_coefficient(*self.scores(update, ctx), c_min=self.c_min,
                                      c_max=self.c_max, weights=self.weights)

    # ---------------------------------------------------------------- the release
    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        eps_t = self.eps_round * self.coefficient(update, ctx)
        b = self.clip / eps_t
        l1 = float(ops.l1_norm(update))
        factor = min(1.0, self.clip / (l1 + 1e-12))
        clipped = [u * factor for u in update]
        noise = ops.laplace_like(clipped, b, ctx.generator)
        note = f"{self.name}: eps'={eps_t:.6g}, L1 sensitivity {self.clip:g} (add/remove)"
        ctx.claimed.laplace(b, sensitivity=self.clip, note=note)
        if self.similarity == "public":
            ctx.sound.laplace(b, sensitivity=self.clip, note=note)
        else:
            ctx.sound.dp_step(math.inf, note=f"{self.name}: Laplace scale depends on the "
                              "private local model through cos(w_global, w_local)")
        return [c + n for c, n in zip(clipped, noise)]

    @property
    def claimed_vs_sound(self) -> str:
        if self.similarity == "public":
            return ""
        return ("claimed counts each release as pure eps'-DP, but eps' (the noise scale) is "
                "set from the private local model via cos(w_global, w_local); a Laplace "
                "mechanism with a data-dependent scale has no finite eps")
