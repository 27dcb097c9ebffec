"""One-run bounds: eps and mu lower bounds from the guesses on m canaries of ONE run.

The game (Steinke, Nasr, Jagielski, NeurIPS 2023, "Privacy auditing with one (1) training
run"): m canaries, each included independently with probability 1/2. After the run the
auditor guesses "in" for the k+ highest scores and "out" for the k- lowest and abstains on
the rest: r = k+ + k- guesses, v of them right. Two bounds:

* eps (Steinke et al., Thm 3.1 / Prop. 5.2, their Algorithm 2), for an (eps, delta)-DP run:

      P[v correct or more] <= P[Bin(r, e^eps / (1 + e^eps)) >= v]
                              + 2 m delta max_{i=1..v} P[v > Bin(r, .) >= v - i] / i

  eps_lower is the largest eps whose p-value is below the test's level (:func:`eps_one_run`);
* mu (Mahloujifar, Melis, Chaudhuri, ICML 2025), for a mu-GDP run: the whole Gaussian
  trade-off curve (:mod:`leakaudit.scoring.fdp`); reported with its eps at delta.

Guess counts (valid by construction). The tail bounds hold for a count r fixed before the
scores are read (for delta > 0 and for the f-DP bound a count chosen from the scores is not
covered). ``guesses="planned"`` (the default) fixes one count per target from ``planned_mu``
alone: the count whose bound is largest at the expected right guesses of the idealised game
at that mu (:func:`choose_guesses`; the training-run audit passes the sound ledger's mu, which
reads neither the scores nor the inclusions), at level (1 - confidence)/2 per target. Without
a finite planned mu (an infinite or unknown ledger) the pre-registered grid :data:`GUESSES` is
tried with the level split among its entries (Bonferroni). A list of (share in, share out)
pairs does the same with that list. Only ranks are read: a monotone transform of the scores
(cubed scores) gives the same bound.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps
from scipy.optimize import brentq

from . import fdp
from .bounds import gdp_epsilon

__all__ = ["p_value_one_run", "eps_one_run", "level_per_test", "choose_guesses",
           "expected_right", "idealised_mu", "idealised_bound", "one_run_bound", "GUESSES",
           "PLAN_FRACTIONS"]

#: the pre-registered guess counts, as fractions of m: (share guessed "in", share "out")
GUESSES: tuple[tuple[float, float], ...] = (
    (0.5, 0.5), (0.25, 0.25), (0.1, 0.1), (0.05, 0.05), (0.02, 0.02),
    (0.45, 0.0), (0.25, 0.0), (0.1, 0.0), (0.02, 0.0))
#: the guess shares a planned count is chosen among (each guessed "in" at the top, and either
#: as many "out" at the bottom or twice as many "in" and none "out")
PLAN_FRACTIONS: tuple[float, ...] = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.45)


def p_value_one_run(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[>= v correct of r guesses] for an (eps, delta)-DP run with m canaries (Steinke,
    Nasr, Jagielski 2023, Algorithm 2)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-eps))
    beta = float(sps.binom.sf(v - 1, r, q))
    alpha = 0.0
    if delta > 0 and v > 0:
        pmf = sps.binom.pmf(np.arange(v - 1, -1, -1), r, q)   # P[Bin = v - i], i = 1..v
        cums = np.cumsum(pmf) / np.arange(1, v + 1)
        alpha = float(cums.max())
    return min(beta + 2.0 * m * delta * alpha, 1.0)


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


def idealised_mu(mu: float) -> float:
    """The mu of the idealised game: capped at :data:`fdp.MU_MAX` (where the worlds no longer
    overlap); nan or not positive: 0."""
    return min(max(0.0, float(mu)), fdp.MU_MAX)


def expected_right(m: int, mu: float, f_in: float, f_out: float) -> tuple[int, int]:
    """(guesses, expected right guesses) of the top ``f_in`` m "in" and bottom ``f_out`` m
    "out" guesses on the idealised game: scores N(mu, 1) in, N(0, 1) out, each in w.p. 1/2.
    Any mu >= 0 (:func:`idealised_mu`)."""
    mu = idealised_mu(mu)
    k_in, k_out = int(f_in * m), int(f_out * m)
    lo, hi = -40.0, mu + 40.0          # the mixture's quantile lies inside for every mu
    v = 0.0
    if k_in:
        t = brentq(lambda t: 0.5 * (sps.norm.sf(t - mu) + sps.norm.sf(t)) - f_in, lo, hi)
        v += m * 0.5 * sps.norm.sf(t - mu)
    if k_out:
        t = brentq(lambda t: 0.5 * (sps.norm.cdf(t - mu) + sps.norm.cdf(t)) - f_out, lo, hi)
        v += m * 0.5 * sps.norm.cdf(t)
    return k_in + k_out, int(min(k_in + k_out, round(v)))


def _candidates(m: int) -> list[tuple[float, float]]:
    out = []
    for f in PLAN_FRACTIONS:
        if int(f * m) >= 1:
            out += [(f, f), (min(2 * f, 0.9), 0.0)]
    return out


def choose_guesses(m: int, mu: float, delta: float, p: float
                   ) -> dict[str, tuple[float, float]]:
    """The guess shares (in, out) that maximise the eps bound and the mu bound at level
    ``p`` on the idealised game at ``mu`` with ``m`` canaries (expected right guesses),
    among :data:`PLAN_FRACTIONS`; keys "eps" and "mu". A function of (m, mu, delta, p) only:
    chosen before any score is seen. Computed once per (m, mu, delta, p), mu taken as
    :func:`expected_right` takes it (:func:`idealised_mu`): an audit row plans its count and
    its idealised bound at the same mu."""
    eps_pick, mu_pick = _chosen(int(m), idealised_mu(mu), float(delta), float(p))
    return {"eps": eps_pick, "mu": mu_pick}


@functools.lru_cache(maxsize=256)
def _chosen(m: int, mu: float, delta: float, p: float
            ) -> tuple[tuple[float, float], tuple[float, float]]:
    best = {"eps": ((0.5, 0.5), -1.0), "mu": ((0.5, 0.5), -1.0)}
    if not mu > 0.0:
        return best["eps"][0], best["mu"][0]
    for fr in _candidates(m):
        r, v = expected_right(m, mu, *fr)
        if r == 0 or v <= r / 2:
            continue
        e = eps_one_run(m, r, v, delta, p)
        if e > best["eps"][1]:
            best["eps"] = (fr, e)
        u = fdp.mu_one_run(m, r, v, p, tol=1e-3)
        if u > best["mu"][1]:
            best["mu"] = (fr, u)
    return best["eps"][0], best["mu"][0]


def idealised_bound(m: int, mu: float | None, delta: float, confidence: float = 0.95
                    ) -> dict[str, float]:
    """What the planned one-run bound gives on the papers' idealised game (every canary's
    score N(mu, 1) in, N(0, 1) out; m canaries) at the expected right guesses: the
    reference a measured bound with m canaries is compared with (its "idealised gap")."""
    if mu is None or not math.isfinite(mu) or mu <= 0:
        return {"eps_ideal": math.nan, "mu_ideal": math.nan, "eps_ideal_gdp": math.nan}
    p = level_per_test(confidence, 1)
    pick = choose_guesses(m, mu, delta, p)
    r, v = expected_right(m, mu, *pick["eps"])
    eps = eps_one_run(m, r, v, delta, p)
    r, v = expected_right(m, mu, *pick["mu"])
    mu_l = fdp.mu_one_run(m, r, v, p)
    return {"eps_ideal": eps, "mu_ideal": mu_l, "eps_ideal_gdp": gdp_epsilon(mu_l, delta)}


def plan(m: int, delta: float, confidence: float,
         guesses: Sequence[tuple[float, float]] | str, planned_mu: float | None
         ) -> tuple[dict[str, list[tuple[float, float]]], float, str]:
    """(guess shares per target, level of each test, the rule's name), fixed before any
    score is read: :func:`choose_guesses` at ``planned_mu`` (one count per target), or a
    list of shares with Bonferroni (the given list, or :data:`GUESSES` when ``"planned"``
    has no finite positive mu)."""
    if isinstance(guesses, str):
        if guesses != "planned":
            raise ValueError(f"guesses must be 'planned' or a list of (in, out) shares, "
                             f"got {guesses!r}")
        if planned_mu is not None and math.isfinite(planned_mu) and planned_mu > 0:
            p = level_per_test(confidence, 1)
            pick = choose_guesses(m, planned_mu, delta, p)
            return ({"eps": [pick["eps"]], "mu": [pick["mu"]]}, p,
                    f"planned at mu {planned_mu:.3g}")
        guesses = GUESSES
    shares = [(float(a), float(b)) for a, b in guesses]
    if not shares:
        raise ValueError("guesses: need at least one (in, out) share")
    return ({"eps": shares, "mu": shares}, level_per_test(confidence, len(shares)),
            f"{len(shares)} pre-registered (Bonferroni)")


def one_run_bound(scores: np.ndarray, included: np.ndarray, delta: float,
                  confidence: float = 0.95,
                  guesses: Sequence[tuple[float, float]] | str = "planned",
                  planned_mu: float | None = None) -> dict[str, Any]:
    """eps_lower (Steinke et al.) and mu_lower (Mahloujifar et al.) from canary scores
    (higher = "in") and the true inclusions, with the guess counts of :func:`plan` (fixed
    before the scores are read; only their ranks are used). Never raises on finite or
    infinite scores at any separation."""
    scores = np.nan_to_num(np.asarray(scores, float), nan=0.0, posinf=1e300, neginf=-1e300)
    included = np.asarray(included, bool)
    m = scores.size
    if m < 2 or included.size != m:
        raise ValueError(f"canaries: need >= 2 scores with one inclusion each, got {m}")
    shares, p, rule = plan(m, delta, confidence, guesses, planned_mu)
    order = np.argsort(scores, kind="stable")
    best: dict[str, Any] = {"eps_lower": 0.0, "guesses": 0, "correct": 0, "m": m,
                            "mu_lower": 0.0, "mu_guesses": 0, "mu_correct": 0,
                            "guess_rule": rule}
    for target in ("eps", "mu"):
        for f_in, f_out in shares[target]:
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
    best["eps_lower_gdp"] = gdp_epsilon(best["mu_lower"], delta)
    return best
