"""Audit a whole training run: a lower bound on eps (and mu) from ONE run with many canaries,
or, for small runs, from several runs with one canary each.

One run (Steinke, Nasr, Jagielski, NeurIPS 2023, "Privacy auditing with one (1) training
run"): m canaries, each included independently with probability 1/2 (S_i = +-1). After the
run the auditor scores every canary, guesses "in" for the k+ highest scores and "out" for
the k- lowest, abstains on the rest: r = k+ + k- guesses, v of them correct. Two bounds:

* eps (Steinke et al., Thm 3.1 / Prop. 5.2, their Algorithm 2), for an (eps, delta)-DP run:

      P[v correct or more] <= P[Bin(r, e^eps / (1 + e^eps)) >= v]
                              + 2 m delta max_{i=1..v} P[v > Bin(r, .) >= v - i] / i

  eps_lower is the largest eps whose p-value is below the test's level (:func:`eps_one_run`);
* mu (Mahloujifar, Melis, Chaudhuri, ICML 2025, "Auditing f-differential privacy in one
  run"), for a mu-GDP run: the whole Gaussian trade-off curve instead of one (eps, delta)
  point (:mod:`leakaudit.empirical.fdp`); mu_lower is the largest mu-GDP rejected, reported
  with eps_lower_gdp, its eps at delta (valid only if the run is mu-GDP). Tighter than the
  eps bound for Gaussian noise (the paper's point; tested on the idealised game).

Guess counts. ``guesses="adaptive"`` (the training-run audit's default): ONE guess count per
target, chosen from the scores alone, never from the inclusions: an equal-weight mixture of
two Gaussians with one scale is fitted to the unlabelled scores (EM), and the count (among
:data:`ADAPTIVE_FRACTIONS`, guessed "in" at the top and as many "out" at the bottom, or
"in" only) whose bound at the fitted model's expected number of right guesses is largest is
used. The guesses are then a function of the run's output only, which is all both theorems
ask of the auditor (Steinke et al., Alg. 1: any guesser T = A(output); Mahloujifar et al.,
the same game), so no Bonferroni is paid: the confidence is split only in half between eps
and mu. A list of (share in, share out) pairs (e.g. :data:`GUESSES`, the pre-registered
grid of earlier versions) is tried instead with the half-level split among its entries
(Bonferroni). :func:`idealised_bound` gives what the same rule attains on the papers'
idealised game (each canary its own Gaussian mechanism at the ledger's mu) with the same
canary count: the gap between a measured bound and it is what the score loses, the rest of
the gap to the ledger is the bound's own (its cap near ln m).

Dirac canaries (``canary="dirac"``, Steinke et al. Sec. 7, jax_privacy's white-box
gradient canaries): canary i is the gradient 100 C e_{j_i} in its own coordinate j_i (the
coordinates a random subset fixed by the seed; m <= the number of parameters), inserted
into client 0's per-example gradients exactly as the gradient canaries are, on a worst-case
dataset: client 0's own examples contribute zero gradients (DP holds for every dataset, so
the auditor may choose it; the other clients train on their data). Scored by the sum over
client 0's steps of the applied gradient's coordinate j_i: no canary interferes with
another and no data gradient adds variance, so with full-batch steps (batch_size >= the
client's examples: q = 1) each score is the idealised game's Gaussian with the ledger's mu.

Canaries: white-box GRADIENT canaries for defenses that privatise per-example gradients
(site "example", or no site at all): random unit directions times 100 C added to client 0's
per-example gradients, each Poisson-sampled into every local batch at the rate B / n_c that
the ledger assumes, through the defense's own ``local_step``; scored by the projection of
the applied gradients; eps_claimed / eps_sound are client 0's ledgers. Canary CLIENTS for
defenses that protect a client's whole update (sites "client" / "server" only): m extra
clients in the population, sampled into rounds by the run's own client sampling; an included
canary's update is its direction times 100 C, an excluded one's update is zero (their local
steps run the defense's own ``local_step`` on zero gradients), and both go through the
defense's own client-level hooks (``privatize_update``, ``sanitize_update``,
``sanitize_sum``); scored by the projection of the released model change w_T - w_0 on each
direction; eps_claimed / eps_sound are a canary client's (client-level) ledgers. The
excluded canaries follow the relation of the run's sound ledgers: absent from the population
under add/remove (the fixed denominator of DP-FedAvg then set for the whole population, a
public constant), present with a zero update under "zero-out" and "replace-one" (the relation
of DP-FedAvg under fixed-size client sampling).

Multi-run (``runs=R``): R independent runs (seeds drawn from ``seed``), ONE canary (the same
direction in every run) included in a random half of them; each run's score goes to
:func:`leakaudit.empirical.stats.bounds_from_scores` (selection split, Clopper-Pearson).

Pitfalls (read before trusting a number):

* the canaries must be exchangeable: drawn i.i.d. (random directions of one norm) and
  included i.i.d. with probability 1/2; an auditor that picks which canaries to score after
  seeing the run breaks the theorem;
* a one-run bound is never to be mixed with a multi-run one (nor with
  :func:`privacy_audit`'s): they bound different games (one run with m canaries vs repeated
  runs of one canary) and their confidences do not combine; the options of one never apply
  to the other (``canaries`` > 1 with ``runs``, or ``trials``/``statistic``/...: ValueError);
* one-run bounds are weak by construction: with m canaries they cannot exceed about ln(m)
  (eps) and they stay far below the true eps of a strong guarantee; a small bound is no
  evidence of privacy;
* the score must use only what the run releases (the applied gradients, the final model),
  never who was sampled when: the amplified ledgers assume that is hidden.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from accounting import PrivacyLedger, tightest_epsilon

from ..defenses import Defense
from ..defenses import get as get_defense
from ..defenses.base import ClientContext, DefenseWrapper
from ..neighbours import canary_out
from . import fdp, game, stats
from .report import PrivacyReport

__all__ = ["p_value_one_run", "eps_one_run", "one_run_bound", "privacy_audit_training",
           "canary_kind", "GUESSES", "MULTI_RUN_OPTIONS", "MIN_RUNS", "KINDS",
           "ADAPTIVE_FRACTIONS", "fit_shift", "choose_guesses", "idealised_bound"]

#: guess counts tried, as fractions of m: (share guessed "in", share guessed "out")
GUESSES: tuple[tuple[float, float], ...] = (
    (0.5, 0.5), (0.25, 0.25), (0.1, 0.1), (0.05, 0.05), (0.02, 0.02),
    (0.45, 0.0), (0.25, 0.0), (0.1, 0.0), (0.02, 0.0))
#: options of the repeated-release audit (``privacy_audit``) refused here
MULTI_RUN_OPTIONS = ("trials", "statistic", "select_fraction", "background",
                     "background_scale", "shapes", "point", "vectorise", "chunk")
#: the fewest runs of the multi-run mode: 4 canary-in and 4 canary-out runs
#: (``stats.bounds_from_scores`` needs 4 per side)
MIN_RUNS = 8
#: canary kinds: per-example gradients (random directions or one coordinate each), clients
KINDS = ("gradient", "dirac", "client")
#: the guess shares the adaptive rule chooses among (each guessed "in" at the top, and
#: either as many "out" at the bottom or none)
ADAPTIVE_FRACTIONS: tuple[float, ...] = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.45)


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


def level_per_test(confidence: float, guesses: int) -> float:
    """The level of each test: (1 - confidence) split in half between eps and mu, and each
    half among the ``guesses`` guess counts (Bonferroni)."""
    return (1.0 - confidence) / 2.0 / guesses


def fit_shift(scores: np.ndarray, iterations: int = 50) -> float:
    """mu of the equal-weight mixture 1/2 N(a, s^2) + 1/2 N(a + mu s, s^2) fitted to the
    UNLABELLED ``scores`` by EM (weights fixed at 1/2, one scale; Dempster, Laird, Rubin
    1977); 0 for constant scores. Uses no inclusion: the guesses chosen from it stay a
    function of the run's output."""
    x = np.asarray(scores, float)
    sd = float(x.std())
    if x.size < 2 or sd == 0.0 or not np.isfinite(sd):
        return 0.0
    lo, hi = np.quantile(x, [0.25, 0.75])
    s = sd
    for _ in range(iterations):
        z_hi, z_lo = -0.5 * ((x - hi) / s) ** 2, -0.5 * ((x - lo) / s) ** 2
        w = 1.0 / (1.0 + np.exp(np.clip(z_lo - z_hi, -700, 700)))   # P[high component | x]
        if w.sum() <= 0 or (1 - w).sum() <= 0:
            break
        hi, lo = float((w * x).sum() / w.sum()), float(((1 - w) * x).sum() / (1 - w).sum())
        var = float((w * (x - hi) ** 2 + (1 - w) * (x - lo) ** 2).mean())
        s = max(math.sqrt(var), 1e-12 * sd)
    return max(0.0, (hi - lo) / s)


def _expected_right(m: int, mu: float, f_in: float, f_out: float) -> tuple[int, int]:
    """(guesses, expected right guesses) of the top ``f_in`` m "in" and bottom ``f_out`` m
    "out" guesses on the idealised game: scores N(mu, 1) in, N(0, 1) out, each in w.p. 1/2."""
    from scipy.optimize import brentq

    k_in, k_out = int(f_in * m), int(f_out * m)
    v = 0.0
    if k_in:
        t = brentq(lambda t: 0.5 * (sps.norm.sf(t - mu) + sps.norm.sf(t)) - f_in, -40, 40)
        v += m * 0.5 * sps.norm.sf(t - mu)
    if k_out:
        t = brentq(lambda t: 0.5 * (sps.norm.cdf(t - mu) + sps.norm.cdf(t)) - f_out, -40, 40)
        v += m * 0.5 * sps.norm.cdf(t)
    return k_in + k_out, int(min(k_in + k_out, round(v)))


def _candidates(m: int) -> list[tuple[float, float]]:
    out = []
    for f in ADAPTIVE_FRACTIONS:
        if int(f * m) >= 1:
            out += [(f, f), (min(2 * f, 0.9), 0.0)]
    return out


def choose_guesses(m: int, mu: float, delta: float, p: float
                   ) -> dict[str, tuple[float, float]]:
    """The guess shares (in, out) that maximise the eps bound and the mu bound at level
    ``p`` on the idealised game at ``mu`` with ``m`` canaries (expected right guesses),
    among :data:`ADAPTIVE_FRACTIONS`; keys "eps" and "mu"."""
    best = {"eps": ((0.5, 0.5), -1.0), "mu": ((0.5, 0.5), -1.0)}
    if mu <= 0.0:
        return {k: v[0] for k, v in best.items()}
    for fr in _candidates(m):
        r, v = _expected_right(m, mu, *fr)
        if r == 0 or v <= r / 2:
            continue
        e = eps_one_run(m, r, v, delta, p)
        if e > best["eps"][1]:
            best["eps"] = (fr, e)
        u = fdp.mu_one_run(m, r, v, p, tol=1e-3)
        if u > best["mu"][1]:
            best["mu"] = (fr, u)
    return {k: v[0] for k, v in best.items()}


def idealised_bound(m: int, mu: float, delta: float, confidence: float = 0.95
                    ) -> dict[str, float]:
    """What the adaptive one-run bound gives on the papers' idealised game (every canary's
    score N(mu, 1) in, N(0, 1) out; m canaries) at the expected right guesses: the
    reference a measured bound with m canaries is compared with (its "idealised gap")."""
    if mu is None or not math.isfinite(mu) or mu <= 0:
        return {"eps_ideal": math.nan, "mu_ideal": math.nan, "eps_ideal_gdp": math.nan}
    p = level_per_test(confidence, 1)
    pick = choose_guesses(m, mu, delta, p)
    r, v = _expected_right(m, mu, *pick["eps"])
    eps = eps_one_run(m, r, v, delta, p)
    r, v = _expected_right(m, mu, *pick["mu"])
    mu_l = fdp.mu_one_run(m, r, v, p)
    return {"eps_ideal": eps, "mu_ideal": mu_l, "eps_ideal_gdp": stats.gdp_epsilon(mu_l, delta)}


def one_run_bound(scores: np.ndarray, included: np.ndarray, delta: float,
                  confidence: float = 0.95,
                  guesses: Sequence[tuple[float, float]] | str = GUESSES) -> dict[str, Any]:
    """eps_lower (Steinke et al.) and mu_lower (Mahloujifar et al.) from canary scores
    (higher = "in") and the true inclusions. ``guesses``: a list of (share of m guessed in,
    share guessed out), each bound the best over it at the level :func:`level_per_test`
    (Bonferroni over both targets and the list); or "adaptive": one count per target
    chosen from the unlabelled scores (:func:`fit_shift`, :func:`choose_guesses`), at
    level (1 - confidence) / 2 each (the module docstring says why that is sound)."""
    scores, included = np.asarray(scores, float), np.asarray(included, bool)
    m = scores.size
    if m < 2 or included.size != m:
        raise ValueError(f"canaries: need >= 2 scores with one inclusion each, got {m}")
    if isinstance(guesses, str):
        if guesses != "adaptive":
            raise ValueError(f"guesses must be 'adaptive' or a list of (in, out) shares, "
                             f"got {guesses!r}")
        p = level_per_test(confidence, 1)
        fitted = fit_shift(scores)
        pick = choose_guesses(m, fitted, delta, p)
        plan = {"eps": [pick["eps"]], "mu": [pick["mu"]]}
    else:
        p = level_per_test(confidence, len(guesses))
        plan = {"eps": list(guesses), "mu": list(guesses)}
        fitted = math.nan
    order = np.argsort(scores, kind="stable")
    best: dict[str, Any] = {"eps_lower": 0.0, "guesses": 0, "correct": 0, "m": m,
                            "mu_lower": 0.0, "mu_guesses": 0, "mu_correct": 0,
                            "fitted_mu": fitted}
    for target in ("eps", "mu"):
        for f_in, f_out in plan[target]:
            k_in, k_out = int(f_in * m), int(f_out * m)
            if k_in + k_out == 0 or k_in + k_out > m:
                continue
            v = int(included[order[m - k_in:]].sum()) if k_in else 0
            v += int((~included[order[:k_out]]).sum()) if k_out else 0
            if target == "eps":
                eps = eps_one_run(m, k_in + k_out, v, delta, p)
                if eps > best["eps_lower"]:
                    best.update(eps_lower=eps, guesses=k_in + k_out, correct=v)
            else:
                mu = fdp.mu_one_run(m, k_in + k_out, v, p)
                if mu > best["mu_lower"]:
                    best.update(mu_lower=mu, mu_guesses=k_in + k_out, mu_correct=v)
    best["eps_lower_gdp"] = stats.gdp_epsilon(best["mu_lower"], delta)
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


class _ZeroBatch:
    """A canary client's local batch: its data contributes zero gradients (its update is the
    canary, set in ``privatize_update``); the defense's own ``local_step`` still runs."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch
        self.num_classes = batch.num_classes

    @property
    def size(self) -> int:
        return int(self._batch.size)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self._batch.input_shape

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [torch.zeros((max(1, self.size), *v.shape), dtype=v.dtype)
                for v in params.values()]

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [torch.zeros_like(v) for v in params.values()]

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        return self._batch.gradients_at(params, x, y)

    def fresh(self) -> _ZeroBatch:
        return _ZeroBatch(self._batch.fresh())


class Canaries(DefenseWrapper):
    """The audited defense with ``m`` canaries (``kind`` "gradient", "dirac" or "client").

    Every hook but ``local_step`` and ``privatize_update`` is the inner defense's
    (:class:`~leakaudit.defenses.base.DefenseWrapper`). Gradient canaries: ``local_step`` of client
    ``first`` hands the inner one a batch with this step's canaries appended and scores each
    canary by the gradient applied (white box). Canary clients ``first, first + 1, ...``
    (holding canaries ``members``):
    their local steps run the inner ``local_step`` on zero gradients (:class:`_ZeroBatch`),
    and ``privatize_update`` replaces their update by the
    canary (included) or zero (excluded) before the inner client-level hooks."""

    def __init__(self, inner: Defense, m: int, magnitude: float, included: torch.Tensor,
                 direction_seed: int, generator: torch.Generator, kind: str, first: int,
                 members: Sequence[int] = ()) -> None:
        super().__init__(inner)
        self.m, self.magnitude, self.generator = m, magnitude, generator
        self.kind, self.first, self.direction_seed = kind, first, direction_seed
        self.members = list(members)   # the canary of each canary client, in client order
        self.included = included.bool()
        self.directions: torch.Tensor | None = None
        self.scores = torch.zeros(m, dtype=torch.float64)
        self.steps = 0

    def _directions(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """m random unit directions in parameter space (the same for one ``direction_seed``)."""
        if self.directions is None:
            d = sum(v.numel() for v in params.values())
            g = torch.Generator().manual_seed(self.direction_seed)
            u = torch.randn(self.m, d, generator=g)
            self.directions = u / u.norm(dim=1, keepdim=True)
        return self.directions

    def _canary_client(self, client: int) -> int | None:
        j = client - self.first
        return self.members[j] if self.kind == "client" and 0 <= j < len(self.members) \
            else None

    def local_step(self, params: dict[str, torch.Tensor], batch: Any, optimizer: Any,
                   ctx: ClientContext) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        if self.kind == "client":
            if self._canary_client(ctx.client) is not None:   # its update is the canary
                batch = _ZeroBatch(batch)
            return self.inner.local_step(params, batch, optimizer, ctx)
        if ctx.client != self.first:
            return self.inner.local_step(params, batch, optimizer, ctx)
        if self.kind == "dirac":
            return self._dirac_step(params, batch, optimizer, ctx)
        u = self._directions(params)
        step = self.included & (torch.rand(self.m, generator=self.generator) < ctx.batch_rate)
        canary = _split(u[step] * self.magnitude, params)
        new, g = self.inner.local_step(params, _CanaryBatch(batch, canary), optimizer, ctx)
        applied = torch.cat([t.reshape(-1) for t in g]).to(u.dtype)
        self.scores += (u @ applied).double()
        self.steps += 1
        return new, g

    def coordinates(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The m distinct coordinates of the Dirac canaries (fixed by ``direction_seed``)."""
        d = sum(v.numel() for v in params.values())
        if self.m > d:
            raise ValueError(f"canaries: {self.m} Dirac canaries need as many parameters, "
                             f"the model has {d}")
        g = torch.Generator().manual_seed(self.direction_seed)
        return torch.randperm(d, generator=g)[: self.m]

    def _dirac_step(self, params: dict[str, torch.Tensor], batch: Any, optimizer: Any,
                    ctx: ClientContext
                    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        """Client ``first``'s step on a zero-gradient dataset with this step's Dirac canaries
        (100 C in one coordinate each) as extra examples; score: the applied coordinate."""
        idx = self.coordinates(params)
        d = sum(v.numel() for v in params.values())
        step = self.included & (torch.rand(self.m, generator=self.generator) < ctx.batch_rate)
        rows = torch.nonzero(step).reshape(-1)
        flat = torch.zeros(rows.numel(), d)
        flat[torch.arange(rows.numel()), idx[rows]] = self.magnitude
        canary = _split(flat, params)
        del flat
        new, g = self.inner.local_step(params, _CanaryBatch(_ZeroBatch(batch), canary),
                                       optimizer, ctx)
        applied = torch.cat([t.reshape(-1) for t in g])
        self.scores += applied[idx].double()
        self.steps += 1
        return new, g

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        j = self._canary_client(ctx.client)
        if j is not None:
            self.steps += 1
            shaped = {str(i): t for i, t in enumerate(update)}
            if bool(self.included[j]):
                u = self._directions(shaped)[j:j + 1] * self.magnitude
                update = [c[0].to(t.dtype) for c, t in zip(_split(u, shaped), update)]
            else:
                update = [torch.zeros_like(t) for t in update]
        return self.inner.privatize_update(update, ctx)


def _split(flat: torch.Tensor, like: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """(k, D) rows cut into (k, *shape) per parameter tensor of ``like``."""
    out, start = [], 0
    for v in like.values():
        out.append(flat[:, start:start + v.numel()].reshape(-1, *v.shape))
        start += v.numel()
    return out


def canary_kind(defense: Defense, kind: str | None = None) -> str:
    """The canaries that audit ``defense``: "gradient" where it privatises per-example
    gradients or has no site at all, "client" where it protects whole client updates
    (sites "client" / "server" only); "dirac" (one coordinate each, on a zero-gradient
    dataset) only when asked, where "gradient" fits; ``kind`` asks for one (ValueError
    where the defense releases nothing it protects there)."""
    sites = set(defense.sites)
    fits = {"gradient": not sites or "example" in sites, "client": "example" not in sites}
    fits["dirac"] = fits["gradient"]
    if kind is None:
        return "gradient" if fits["gradient"] else "client"
    if kind not in KINDS:
        raise ValueError(f"canary must be one of {KINDS}, got {kind!r}")
    if not fits[kind]:
        where = "at the per-example gradient" if kind != "client" else \
            "in a whole client update (it privatises per-example gradients)"
        raise ValueError(f"canary: defense {defense.name!r} releases nothing it protects "
                         f"{where} (sites {sorted(sites)}): {kind} canaries cannot audit it")
    return kind


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad]
                     ).double()


def _population(ds: Any, options: dict[str, Any], extra: int, seed: int
                ) -> tuple[dict[str, Any], int]:
    """The simulator's options with ``extra`` canary clients after the run's own clients, and
    the number of those: the real clients keep the partition the run would give them (the
    simulator's own split), each canary client holds a copy of the median client's indices
    (never read: its update is the canary, and its size gives it a typical weight)."""
    from ..fl.config import FLConfig
    from ..fl.simulate import split

    opts = dict(options)
    keys = ("clients", "partition", "partition_kwargs", "val_fraction")
    cfg = FLConfig.make(seed=seed, **{k: opts[k] for k in keys if k in opts})
    _, parts = split(ds, cfg, np.random.default_rng(cfg.seed))
    median = parts[int(np.argsort([len(p) for p in parts])[len(parts) // 2])]
    opts["clients"] = len(parts) + extra
    opts["partition"] = [p.tolist() for p in parts] + [median.tolist()] * extra
    opts.pop("partition_kwargs", None)
    return opts, len(parts)


def _relation(defense: Defense, options: dict[str, Any]) -> str:
    """The neighbouring relation of the run's sound client ledgers (the simulator's rule)."""
    from ..defenses.base import client_sampling_of
    from ..fl.simulate import sound_relation

    return sound_relation(defense, client_sampling_of(options.get("client_fraction")))


def _simulate(inner: Defense, kind: str, m: int, included: torch.Tensor, ds: Any,
              rounds: int, seed: int, direction_seed: int, options: dict[str, Any]
              ) -> tuple[np.ndarray, PrivacyLedger, PrivacyLedger, int, str]:
    """One training run with ``m`` canaries: (scores, claimed ledger, sound ledger of the
    audited unit, canary releases, what an excluded canary is)."""
    from .. import fl, models

    opts = dict(options)
    opts.pop("progress", None)
    model = models.resolve(opts.pop("model", None), ds, seed=seed)
    first, members, excluded = 0, list(range(m)), "not sampled into any batch"
    if kind == "client":
        excluded = "a zero update"
        if canary_out(_relation(inner, opts)) == "absent":   # an excluded canary client
            members = [j for j in range(m) if bool(included[j])]
            excluded = "absent"
        opts, real = _population(ds, opts, len(members), seed)
        first = real
        if inner.fixed_denominator and opts.get("client_fraction") is not None:
            # the fixed denominator is a public constant: never the realised population's
            opts.setdefault("expected_weight", opts["client_fraction"] * (real + m))
    if kind == "dirac":
        d = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if m > d:
            raise ValueError(f"canaries: {m} Dirac canaries need as many parameters, the "
                             f"model has {d}")
    defense = copy.deepcopy(inner)
    magnitude = game.LARGE * game.canary_bound(defense)
    wrapped = Canaries(defense, m, magnitude, included, direction_seed,
                        torch.Generator().manual_seed(int(seed) + 7919), kind, first, members)
    w0 = _flat(model)
    config = fl.FLConfig.make(rounds=rounds, seed=seed, progress=False, **opts)
    run = fl.simulate(model, dataset=ds, defense=wrapped, config=config)
    if kind == "client":
        change = _flat(run.model) - w0
        scores = (wrapped._directions({"w": change}).double() @ change).numpy()
    else:
        if wrapped.steps == 0:
            raise ValueError("rounds: client 0 took no local step, no canary was released")
        scores = wrapped.scores.numpy()
    unit = first if kind != "client" or members else 0   # no canary client: any client
    return scores, run.claimed[unit], run.sound[unit], wrapped.steps, excluded


def _epsilons(claimed: PrivacyLedger, sound: PrivacyLedger, delta: float
              ) -> dict[str, float]:
    mu_c, mu_s = fdp.ledger_mu(claimed), fdp.ledger_mu(sound)
    return {"eps_claimed": tightest_epsilon(claimed, delta),
            "eps_sound": tightest_epsilon(sound, delta),
            "mu_claimed": math.nan if mu_c is None else mu_c,
            "mu_sound": math.nan if mu_s is None else mu_s}


def _verdict(row: dict[str, Any]) -> None:
    """claim_violated / sound_violated / violated_by from eps_lower and mu_lower (mu only
    against a ledger that is mu-GDP)."""
    by = ""
    for which in ("claimed", "sound"):
        eps_v = row["eps_lower"] > row[f"eps_{which}"]
        mu = row[f"mu_{which}"]
        mu_v = not math.isnan(mu) and row["mu_lower"] > mu
        key = "claim_violated" if which == "claimed" else "sound_violated"
        row[key] = bool(eps_v or mu_v)
        if eps_v or mu_v:
            by = "eps" if eps_v else "mu"
    row["violated_by"] = by


def privacy_audit_training(defense: str | Defense, *, dataset: Any = "digits",
                           canaries: int | None = None, runs: int | None = None,
                           canary: str | None = None, rounds: int = 5, delta: float = 1e-5,
                           confidence: float = 0.95, seed: int = 0,
                           defense_params: dict[str, Any] | None = None,
                           guesses: Sequence[tuple[float, float]] | str = "adaptive",
                           **simulate_options: Any) -> PrivacyReport:
    """eps_lower and mu_lower of a whole training run next to its eps_claimed and eps_sound
    (at ``delta``), in one row.

    One run (default, ``canaries`` = m, 1000 if not given) or ``runs`` = R runs with one
    canary each (multi-run mode); see the module docstring for the bounds, the canaries
    (``canary``: "gradient", "dirac" or "client", by default what the defense protects) and the
    pitfalls; ``guesses``: "adaptive" (one count per bound, chosen from the unlabelled
    scores) or a list of (in, out) shares (Bonferroni), see :func:`one_run_bound`. The
    one-run row also carries the idealised gap: ``eps_ideal`` / ``mu_ideal`` /
    ``eps_ideal_gdp``, what the same rule gives on the idealised game with the same canary
    count at ``ideal_mu`` (the sound ledger's mu, or the mu-GDP with its eps at delta).
    The run is :func:`leakaudit.fl.simulate` itself (``dataset``, ``rounds`` and
    any other of its options, e.g. ``clients``, ``client_fraction``, ``local_steps``,
    ``batch_size``; with canary clients, the population is ``clients`` plus the canary
    clients and the client sampling applies to all).

    Raises ValueError (before any work) for canaries < 2, runs < :data:`MIN_RUNS`,
    ``canaries`` > 1 together with ``runs``, an option of the repeated-release audit
    (``trials``, ``statistic``, ...), or a defense that releases nothing it protects where
    the canaries are asked for.
    """
    from .. import data
    from .._validate import check_int, check_probability

    if runs is not None and canaries is not None and canaries != 1:
        raise ValueError(f"canaries={canaries!r} with runs={runs!r}: the one-run (many "
                         "canaries) and multi-run (one canary per run) modes never mix")
    for key in simulate_options:
        if key in MULTI_RUN_OPTIONS:
            raise ValueError(f"{key} is an option of the repeated-release audit "
                             "(privacy_audit); a training-run audit does not take it (the "
                             "two never mix)")
    if runs is None:
        m = check_int("canaries", 1000 if canaries is None else canaries, 2)
    else:
        runs = check_int("runs", runs, MIN_RUNS)
        m = 1
    check_int("rounds", rounds, 1)
    check_int("seed", seed, 0)
    check_probability("delta", delta)
    check_probability("confidence", confidence)
    inner = get_defense(defense, **(defense_params or {})) if isinstance(defense, str) \
        else defense
    if not isinstance(inner, Defense):
        raise ValueError(f"defense must be a name or a Defense, got {defense!r}")
    kind = canary_kind(inner, canary)
    game.canary_bound(inner)
    ds = data.resolve(dataset, seed=seed)
    base = {"defense": inner.name, "params": inner.describe(), "point": 0 if kind ==
            "client" else 2, "rounds": rounds, "seed": seed, "confidence": confidence,
            "delta": delta, "kind": kind, "level": inner.level, "reason": ""}
    if isinstance(guesses, str) and guesses != "adaptive":
        raise ValueError(f"guesses must be 'adaptive' or a list of (in, out) shares, "
                         f"got {guesses!r}")
    if runs is None:
        row = _one_run(inner, kind, m, ds, rounds, seed, delta, confidence, simulate_options,
                       guesses)
    else:
        row = _multi_run(inner, kind, runs, ds, rounds, seed, delta, confidence,
                         simulate_options)
    row = {**base, **row}
    _verdict(row)
    report = PrivacyReport(config={"kind": "privacy_audit_training", "mode": row["mode"],
                                   "canaries": m, "runs": runs, "rounds": rounds,
                                   "delta": delta, "confidence": confidence, "seed": seed})
    report.add(row)
    return report


def _ideal_mu(eps: dict[str, float], delta: float) -> float:
    """The mu of the idealised game a run is compared with: the sound ledger's mu where it
    is mu-GDP, else the mu whose eps at delta is eps_sound (nan if infinite)."""
    if not math.isnan(eps["mu_sound"]):
        return eps["mu_sound"]
    target = eps["eps_sound"]
    if not math.isfinite(target) or target <= 0:
        return math.nan
    lo, hi = 0.0, 1.0
    while stats.gdp_epsilon(hi, delta) < target:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stats.gdp_epsilon(mid, delta) < target else (lo, mid)
    return lo


def _one_run(inner: Defense, kind: str, m: int, ds: Any, rounds: int, seed: int,
             delta: float, confidence: float, options: dict[str, Any],
             guesses: Sequence[tuple[float, float]] | str = "adaptive") -> dict[str, Any]:
    included = torch.rand(m, generator=torch.Generator().manual_seed(int(seed) + 104729)) < 0.5
    scores, claimed, sound, steps, excluded = _simulate(inner, kind, m, included, ds, rounds,
                                                        seed, int(seed) + 7919, options)
    found = one_run_bound(scores, included.numpy(), delta, confidence, guesses)
    eps = _epsilons(claimed, sound, delta)
    ideal_mu = _ideal_mu(eps, delta)
    return {"mode": "one-run", "trials": 1,
            "canary": f"{m} {kind} canaries (one run)",
            "statistic": "one-run: Steinke et al. 2023 (eps), Mahloujifar et al. 2025 (mu)",
            "eps_lower": found["eps_lower"], "mu_lower": found["mu_lower"],
            "eps_lower_gdp": found["eps_lower_gdp"], "guesses": found["guesses"],
            "correct": found["correct"], "mu_guesses": found["mu_guesses"],
            "mu_correct": found["mu_correct"], "canaries": m,
            "included": int(included.sum()), "steps": steps,
            "excluded": excluded, "guess_rule": "adaptive" if isinstance(guesses, str)
            else f"{len(guesses)} pre-registered (Bonferroni)",
            "fitted_mu": found["fitted_mu"], "ideal_mu": ideal_mu,
            **idealised_bound(m, ideal_mu, delta, confidence),
            "relation": sound.relation, **eps}


def _multi_run(inner: Defense, kind: str, runs: int, ds: Any, rounds: int, seed: int,
               delta: float, confidence: float, options: dict[str, Any]) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    seeds = rng.choice(2**31 - 1, size=runs, replace=False)
    into = np.zeros(runs, bool)
    into[rng.permutation(runs)[: runs // 2]] = True
    scores = np.zeros(runs)
    seen: dict[str, dict[str, Any]] = {}
    for j in range(runs):
        s, claimed, sound, _, excluded = _simulate(
            inner, kind, 1, torch.tensor([bool(into[j])]), ds, rounds, int(seeds[j]),
            int(seed) + 7919, options)
        scores[j] = s[0]
        if not into[j]:       # the ledgers of the canary's unit: where it takes part
            continue
        key = repr([[e.to_dict() for e in led.events] for led in (claimed, sound)])
        if key not in seen:   # each distinct pair of ledgers is read once
            seen[key] = {**_epsilons(claimed, sound, delta), "relation": sound.relation}
    # the worst (largest) of each over the runs; mu only where every run's ledger is mu-GDP
    worst = {k: max(e[k] for e in seen.values()) for k in ("eps_claimed", "eps_sound",
                                                           "mu_claimed", "mu_sound")}
    for k in ("mu_claimed", "mu_sound"):
        if any(math.isnan(e[k]) for e in seen.values()):
            worst[k] = math.nan
    worst["relation"] = "; ".join(sorted({e["relation"] for e in seen.values()}))
    got = stats.bounds_from_scores(scores[~into], scores[into], confidence=confidence,
                                   delta=delta, seed=seed)
    return {"mode": "multi-run", "trials": runs, "canary": f"1 {kind} canary in "
            f"{runs // 2} of {runs} runs", "statistic": "multi-run: projection "
            "(bounds_from_scores)", "eps_lower": got["eps_lower"],
            "mu_lower": got["mu_lower"],
            "eps_lower_gdp": stats.gdp_epsilon(got["mu_lower"], delta), "canaries": 1,
            "excluded": excluded,
            "runs": runs, **worst}
