"""adaclip: coordinate-wise adaptive clipping for DP-SGD inside every client (Pichapati,
Suresh, Yu, Reddi, Kumar 2019, "AdaCliP: Adaptive clipping for private SGD", Algorithm 1).

Each client keeps a per-coordinate mean estimate m_t and a variance estimate s_t of its
gradients, and the scale b_t derived from s_t. One local iteration (all operations
coordinate-wise, B the batch size, C the clip of the transformed gradient):

  (1) w_i = (g_i - m_t) / b_t                          transform each per-example gradient
  (2) w^_i = w_i * min(1, C / ||w_i||_2)                clip (the paper: C = 1)
  (3) w~ = (sum_i w^_i + N(0, sigma^2 C^2 I)) / B       the Gaussian release
  (4) g~ = b_t * w~ + m_t                              back to gradient space (applied)
  (5) m_{t+1} = beta1 m_t + (1 - beta1) g~
  (6) v_t = (g~ - m_t)^2 - b_t^2 sigma^2 C^2 / B^2     minus the known noise variance
  (7) v_t <- min(max(v_t, h1), h2)
  (8) s_{t+1} = beta2 s_t + (1 - beta2) v_t
  (9) b_{t+1} = sqrt( sqrt(s_{t+1}) * sum_j sqrt(s_{t+1, j}) )

(9) is the paper's optimal scale: the noise added to g~ has total variance
sigma^2 C^2 sum_j b_j^2 / B^2, and the transformed gradient stays (in expectation) inside the
clip when sum_j s_j / b_j^2 <= 1; minimising sum_j b_j^2 under that constraint gives
b_j^2 = sqrt(s_j) sum_k sqrt(s_k), i.e. b proportional to s^(1/4) (b^2 proportional to
sqrt(s)), with total noise (sum_j sqrt(s_j))^2 <= d sum_j s_j (plain clipping). The line
numbers (1)-(9) are ours: the paper's text could not be retrieved here, so the steps are
reconstructed from its Algorithm 1 as commonly restated, (9) re-derived from the stated
optimisation. Initialisation (ours): m_0 = 0 and a uniform s_0 = init_clip^2 / d, for which
(9) gives b_0 = init_clip in every coordinate, so the first step is plain DP-SGD with clip
C * init_clip. m, s and b are per client and kept across rounds (each client's estimates are
post-processing of its own earlier releases); ``start`` resets them.

The type-2 leak point sees g~; types 1 and 0 see it through the update.

Accounting (instance level). m_t and b_t are functions of the client's earlier noisy
releases only (post-processing), so the transform is data-independent at step t and the
clipped sum has L2 sensitivity C: one Poisson-sampled Gaussian step with q = B / n_c and
multiplier sigma per local iteration, in each round the client takes part in (conditioned on
participation, as fed-cdp's sound ledger). The estimators (5)-(9) release nothing more.
Claimed and sound agree.
"""

from __future__ import annotations

import torch

from .._validate import check_fraction, check_nonneg, check_positive
from . import ops
from .base import ClientContext, Defense

__all__ = ["AdaClip", "optimal_scale", "update_estimates"]

Tensors = list[torch.Tensor]


def optimal_scale(s: Tensors) -> Tensors:
    """(9): b_j = sqrt(sqrt(s_j) * sum_k sqrt(s_k)), over all parameters together."""
    total = sum(float(x.sqrt().sum()) for x in s)
    return [(x.sqrt() * total).sqrt() for x in s]


def update_estimates(g_tilde: Tensors, m: Tensors, s: Tensors, b: Tensors, noise_var: float,
                     beta1: float, beta2: float, h1: float, h2: float
                     ) -> tuple[Tensors, Tensors, Tensors]:
    """(5)-(9): the new mean, variance and scale estimates from the released g~.

    ``noise_var`` is the variance of the noise of w~, (sigma C / B)^2, so that of g~ is
    b^2 * noise_var per coordinate.
    """
    m_new = [beta1 * mi + (1.0 - beta1) * gi for mi, gi in zip(m, g_tilde)]
    v = [((gi - mi) ** 2 - bi ** 2 * noise_var).clamp(min=h1, max=h2)
         for gi, mi, bi in zip(g_tilde, m, b)]
    s_new = [beta2 * si + (1.0 - beta2) * vi for si, vi in zip(s, v)]
    return m_new, s_new, optimal_scale(s_new)


class AdaClip(Defense):
    """Per-example coordinate-wise transform (g - m) / b, clip to ``clip``, Gaussian noise."""

    name = "adaclip"
    sites = frozenset({"example"})
    level = "instance"

    def __init__(self, clip: float = 1.0, sigma: float = 1.0, init_clip: float = 4.0,
                 beta1: float = 0.9, beta2: float = 0.999, h1: float = 1e-12,
                 h2: float = 1.0) -> None:
        self.clip = check_positive("clip", clip)
        self.sigma = check_nonneg("sigma", sigma)
        self.init_clip = check_positive("init_clip", init_clip)
        self.beta1 = check_fraction("beta1", beta1)
        self.beta2 = check_fraction("beta2", beta2)
        self.h1 = check_positive("h1", h1)
        self.h2 = check_positive("h2", h2)
        if not self.h1 < self.h2:
            raise ValueError(f"h1 must be < h2, got h1={h1!r}, h2={h2!r}")
        #: per client: (m, s, b), each a list of tensors shaped like the parameters
        self.state: dict[int, tuple[Tensors, Tensors, Tensors]] = {}

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {"clip": self.clip, "sigma": self.sigma,
                                  "init_clip": self.init_clip}
        defaults = {"beta1": 0.9, "beta2": 0.999, "h1": 1e-12, "h2": 1.0}
        out.update({k: getattr(self, k) for k, v in defaults.items() if getattr(self, k) != v})
        return out

    def noise_multiplier(self, round_index: int) -> float:
        return self.sigma

    def audit_batched(self, point: int) -> bool | None:
        return point == 2   # over several steps its scale b sums over coordinates

    def audit_bound(self) -> float:
        return self.clip * self.init_clip   # clipped in (g - m) / b with b_0 = init_clip

    def start(self, rounds: int) -> None:
        self.state = {}

    def initial_state(self, shapes: Tensors) -> tuple[Tensors, Tensors, Tensors]:
        """m_0 = 0, s_0 = init_clip^2 / d (uniform), b_0 from (9) (= init_clip everywhere)."""
        d = sum(t.numel() for t in shapes)
        m = [torch.zeros_like(t) for t in shapes]
        s = [torch.full_like(t, self.init_clip ** 2 / d) for t in shapes]
        return m, s, optimal_scale(s)

    def privatize_batch(self, grads: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        batch = ctx.batch_size  # expected size: the realised one would be a release
        if ctx.client not in self.state:
            self.state[ctx.client] = self.initial_state([g[0] for g in grads])
        m, s, b = self.state[ctx.client]
        w = [(g - mi) / bi for g, mi, bi in zip(grads, m, b)]                   # (1)
        sums, _ = ops.clipped_sum(w, self.clip)                                 # (2)
        noise = ops.gaussian_like(sums, self.sigma * self.clip, ctx.generator)  # (3)
        note = "adaclip local step"
        ctx.sound.step(q=ctx.batch_rate, sigma=self.sigma, note=note)
        ctx.claimed.step(q=ctx.batch_rate, sigma=self.sigma, note=note)
        g_tilde = [bi * (sm + n) / batch + mi                                    # (4)
                   for sm, n, bi, mi in zip(sums, noise, b, m)]
        noise_var = (self.sigma * self.clip / batch) ** 2
        self.state[ctx.client] = update_estimates(g_tilde, m, s, b, noise_var, self.beta1,
                                                  self.beta2, self.h1, self.h2)  # (5)-(9)
        return g_tilde
