"""One-run audit: a lower bound on eps from ONE training run with many canaries.

Steinke, Nasr, Jagielski (NeurIPS 2023), "Privacy auditing with one (1) training run": m
canaries, each included independently with probability 1/2 (S_i = +-1). After the run the
auditor scores every canary, guesses "in" for the k+ highest scores and "out" for the k-
lowest, abstains on the rest: r = k+ + k- guesses, v of them correct. If the run is
(eps, delta)-DP for each canary (Thm 3.1 / Prop. 5.2, their Algorithm 2):

    P[v correct or more] <= P[Bin(r, e^eps / (1 + e^eps)) >= v]
                            + 2 m delta max_{i=1..v} P[v > Bin(r, .) >= v - i] / i

so eps_lower is the largest eps whose p-value is below 1 - confidence
(:func:`eps_one_run`). Several guess counts are tried; each pays its share of the
confidence (Bonferroni over :data:`GUESSES`).

Pitfalls (read before trusting a number):

* the canaries must be exchangeable: drawn i.i.d. (here random directions of one norm)
  and included i.i.d. with probability 1/2; an auditor that picks which canaries to score
  after seeing the run breaks the theorem;
* a one-run bound is never to be mixed with a multi-run one (:func:`privacy_audit`): they
  bound different things (one run with m canaries vs repeated runs of one release), and
  their confidences do not combine; the options of one never apply to the other;
* it is weak by construction: with m canaries it cannot exceed about ln(m) and it is far
  below the true eps of a strong guarantee (the paper's Fig. 1); a small bound is no
  evidence of privacy;
* the canaries here are white-box GRADIENT canaries added to client 0's per-example
  gradients, each Poisson-sampled into every local batch at the rate B / n_c that the
  defense's ledger assumes for its examples (the sampling accounted must be the one run):
  eps_claimed and eps_sound are those of client 0's ledgers for the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from accounting import tightest_epsilon

from ..defenses import Defense
from ..defenses import get as get_defense
from . import game
from .report import PrivacyReport

__all__ = ["p_value_one_run", "eps_one_run", "one_run_bound", "privacy_audit_training",
           "GUESSES", "MULTI_RUN_OPTIONS"]

#: guess counts tried, as fractions of m: (share guessed "in", share guessed "out")
GUESSES: tuple[tuple[float, float], ...] = (
    (0.5, 0.5), (0.25, 0.25), (0.1, 0.1), (0.05, 0.05), (0.02, 0.02),
    (0.45, 0.0), (0.25, 0.0), (0.1, 0.0), (0.02, 0.0))
#: options of the multi-run audit (``privacy_audit``) refused here
MULTI_RUN_OPTIONS = ("trials", "statistic", "select_fraction", "background",
                     "background_scale", "shapes", "point", "vectorise", "chunk")


def p_value_one_run(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[>= v correct of r guesses] for an (eps, delta)-DP run with m canaries (Steinke,
    Nasr, Jagielski 2023, Algorithm 2)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-eps))
    beta = float(sps.binom.sf(v - 1, r, q))
    alpha, total = 0.0, 0.0
    if delta > 0 and v > 0:
        pmf = sps.binom.pmf(np.arange(v - 1, -1, -1), r, q)   # P[Bin = v - i], i = 1..v
        cums = np.cumsum(pmf) / np.arange(1, v + 1)
        alpha = float(cums.max())
    total = beta + 2.0 * m * delta * alpha
    return min(total, 1.0)


def eps_one_run(m: int, r: int, v: int, delta: float, p: float) -> float:
    """The largest eps with p-value below ``p`` (bisection, as the paper), 0 if none."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if p_value_one_run(m, r, v, 0.0, delta) >= p:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value_one_run(m, r, v, hi, delta) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e3:
            return math.inf
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if p_value_one_run(m, r, v, mid, delta) < p:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_bound(scores: np.ndarray, included: np.ndarray, delta: float,
                  confidence: float = 0.95,
                  guesses: Sequence[tuple[float, float]] = GUESSES) -> dict[str, Any]:
    """eps_lower from canary scores (higher = "in") and the true inclusions; the best over
    ``guesses`` (fractions of m guessed in / out), Bonferroni over them."""
    scores, included = np.asarray(scores, float), np.asarray(included, bool)
    m = scores.size
    if m < 2 or included.size != m:
        raise ValueError(f"canaries: need >= 2 scores with one inclusion each, got {m}")
    order = np.argsort(scores, kind="stable")
    p = (1.0 - confidence) / len(guesses)
    best: dict[str, Any] = {"eps_lower": 0.0, "guesses": 0, "correct": 0, "m": m}
    for f_in, f_out in guesses:
        k_in, k_out = int(f_in * m), int(f_out * m)
        if k_in + k_out == 0 or k_in + k_out > m:
            continue
        v = int(included[order[m - k_in:]].sum()) if k_in else 0
        v += int((~included[order[:k_out]]).sum()) if k_out else 0
        eps = eps_one_run(m, k_in + k_out, v, delta, p)
        if eps > best["eps_lower"]:
            best = {"eps_lower": eps, "guesses": k_in + k_out, "correct": v, "m": m}
    return best


class _CanaryBatch:
    """A local batch with the canaries sampled into this step appended as examples."""

    def __init__(self, batch: Any, canary: list[torch.Tensor]) -> None:
        self._batch, self._canary = batch, canary
        self.num_classes = batch.num_classes

    @property
    def size(self) -> int:
        return int(self._batch.size) + int(self._canary[0].shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self._batch.input_shape

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        real = self._batch.per_example(params)
        if self._batch.size == 0:
            real = [r[:0] for r in real]
        return [torch.cat([r, c.to(r.dtype)]) for r, c in zip(real, self._canary)]

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        b, k = int(self._batch.size), int(self._canary[0].shape[0])
        if b + k == 0:
            return [torch.zeros_like(v) for v in params.values()]
        real = self._batch.mean(params) if b else [torch.zeros_like(v) for v in params.values()]
        return [(r * b + c.sum(0).to(r.dtype)) / (b + k) for r, c in zip(real, self._canary)]

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        return self._batch.gradients_at(params, x, y)

    def fresh(self) -> _CanaryBatch:
        return _CanaryBatch(self._batch.fresh(), self._canary)


class _Canaries(Defense):
    """The audited defense with m gradient canaries inserted into client 0's local steps.

    Every hook is the inner defense's; ``local_step`` hands it a batch with this step's
    canaries appended and scores each canary by the gradient it applied (white box)."""

    def __init__(self, inner: Defense, m: int, magnitude: float, generator: torch.Generator
                 ) -> None:
        self.inner, self.m, self.magnitude, self.generator = inner, m, magnitude, generator
        self.name, self.sites, self.level = inner.name, inner.sites, inner.level
        self.weighted_aggregation, self.optimizer = inner.weighted_aggregation, inner.optimizer
        self.orders = inner.orders
        self.included = torch.rand(m, generator=generator) < 0.5
        self.directions: torch.Tensor | None = None
        self.scores = torch.zeros(m, dtype=torch.float64)
        self.steps = 0

    def _directions(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.directions is None:
            d = sum(v.numel() for v in params.values())
            u = torch.randn(self.m, d, generator=self.generator)
            self.directions = u / u.norm(dim=1, keepdim=True)
        return self.directions

    def local_step(self, params, batch, optimizer, ctx):  # type: ignore[override]
        if ctx.client != 0:
            return self.inner.local_step(params, batch, optimizer, ctx)
        u = self._directions(params)
        step = self.included & (torch.rand(self.m, generator=self.generator) < ctx.batch_rate)
        flat = u[step] * self.magnitude
        canary, start = [], 0
        for v in params.values():
            canary.append(flat[:, start:start + v.numel()].reshape(-1, *v.shape))
            start += v.numel()
        new, g = self.inner.local_step(params, _CanaryBatch(batch, canary), optimizer, ctx)
        applied = torch.cat([t.reshape(-1) for t in g]).to(u.dtype)
        self.scores += (u @ applied).double()
        self.steps += 1
        return new, g

    def uploads(self, client, ctx):  # type: ignore[override]
        return self.inner.uploads(client, ctx)

    def privatize_batch(self, grads, ctx):  # type: ignore[override]
        return self.inner.privatize_batch(grads, ctx)

    def privatize_update(self, update, ctx):  # type: ignore[override]
        return self.inner.privatize_update(update, ctx)

    def sanitize_update(self, update, ctx):  # type: ignore[override]
        return self.inner.sanitize_update(update, ctx)

    def start(self, rounds: int) -> None:
        self.inner.start(rounds)

    def claimed_round(self, ctx) -> None:  # type: ignore[override]
        self.inner.claimed_round(ctx)

    def end_round(self, round_index: int, val_loss: float) -> None:
        self.inner.end_round(round_index, val_loss)

    def noise_multiplier(self, round_index: int) -> float:
        return self.inner.noise_multiplier(round_index)

    @property
    def claimed_vs_sound(self) -> str:  # type: ignore[override]
        return self.inner.claimed_vs_sound

    def describe(self) -> str:
        return self.inner.describe()


def privacy_audit_training(defense: str | Defense, *, dataset: Any = "digits",
                           canaries: int = 1000, rounds: int = 5, delta: float = 1e-5,
                           confidence: float = 0.95, seed: int = 0,
                           defense_params: dict[str, Any] | None = None,
                           **simulate_options: Any) -> PrivacyReport:
    """eps_lower of a whole training run (one run, ``canaries`` white-box gradient canaries)
    next to the run's eps_claimed and eps_sound (client 0, at ``delta``).

    The run is :func:`leakaudit.fl.simulate` itself (``dataset``, ``rounds`` and any other
    of its options, e.g. ``clients``, ``local_steps``, ``batch_size``); the canaries enter
    client 0's local steps through the defense's own ``local_step``. See the module
    docstring for the bound (Steinke, Nasr, Jagielski 2023, with its delta term) and the
    pitfalls. Not done here: the f-DP one-run bound of Mahloujifar, Melis, Chaudhuri (ICML
    2025), canary clients for client-level defenses.

    Raises ValueError (before any work) for canaries < 2, an option of the multi-run
    audit (``trials``, ``statistic``, ...), or a defense that releases nothing it protects
    at the per-example gradient (a client-level defense acting at the client or server).
    """
    from .. import fl  # the simulator: only this entry point needs it
    from .._validate import check_int, check_probability

    check_int("canaries", canaries, 2)
    check_int("rounds", rounds, 1)
    check_probability("delta", delta)
    check_probability("confidence", confidence)
    for key in simulate_options:
        if key in MULTI_RUN_OPTIONS:
            raise ValueError(f"{key} is an option of the multi-run audit (privacy_audit); a "
                             "one-run audit does not take it (the two never mix)")
    inner = get_defense(defense, **(defense_params or {})) if isinstance(defense, str) \
        else defense
    if not isinstance(inner, Defense):
        raise ValueError(f"defense must be a name or a Defense, got {defense!r}")
    if not game.releases_at(inner, 2):
        raise ValueError(f"defense {inner.name!r} releases nothing it protects at the "
                         f"per-example gradient (sites {sorted(inner.sites)}): gradient "
                         "canaries cannot audit it")
    generator = torch.Generator().manual_seed(int(seed) + 7919)
    magnitude = game.LARGE * game.canary_bound(inner)
    wrapped = _Canaries(inner, canaries, magnitude, generator)
    run = fl.simulate(None, dataset, wrapped, rounds=rounds, seed=seed, progress=False,
                      **simulate_options)
    if wrapped.steps == 0:
        raise ValueError("rounds: client 0 took no local step, no canary was released")
    found = one_run_bound(wrapped.scores.numpy(), wrapped.included.numpy(), delta,
                          confidence)
    eps_claimed = tightest_epsilon(run.claimed[0], delta)
    eps_sound = tightest_epsilon(run.sound[0], delta)
    row = {"defense": inner.name, "params": inner.describe(), "point": 2, "trials": 1,
           "canary": f"{canaries} gradient canaries (one run)",
           "statistic": "one-run (Steinke et al. 2023)",
           "eps_claimed": eps_claimed, "eps_sound": eps_sound,
           "eps_lower": found["eps_lower"], "mu_sound": math.nan, "mu_lower": math.nan,
           "eps_lower_gdp": math.nan,
           "claim_violated": bool(found["eps_lower"] > eps_claimed),
           "sound_violated": bool(found["eps_lower"] > eps_sound),
           "violated_by": "one-run eps" if found["eps_lower"] > eps_claimed else "",
           "reason": "", "guesses": found["guesses"], "correct": found["correct"],
           "canaries": canaries, "rounds": rounds, "steps": wrapped.steps,
           "seed": seed, "confidence": confidence, "delta": delta}
    report = PrivacyReport(config={"kind": "privacy_audit_training", "canaries": canaries,
                                   "rounds": rounds, "delta": delta,
                                   "confidence": confidence, "seed": seed})
    report.add(row)
    return report
