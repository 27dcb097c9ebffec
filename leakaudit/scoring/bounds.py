"""The score-to-bound engine: scores of canary-out and canary-in runs in, privacy lower bounds
out (as jax_privacy's ``CanaryScoreAuditor``), for every audit of the project (the empirical
audit, the one-run audit's multi-run mode, record/replay).

Pure functions (numpy/scipy, no torch): a selection split (:func:`split`), the choice of a
candidate score and its threshold on it (:func:`select`), the held-out test of the chosen rule
(:func:`test_rule`, Clopper-Pearson), trade-off curve points (:func:`curve_rules`,
:func:`curve_points`), and the whole game in one call (:func:`bounds_from_candidates`,
:func:`bounds_from_scores`). A test that tells "canary in" from "canary out"
with false-positive rate FPR and false-negative rate FNR bounds the privacy of any
(eps, delta)-DP mechanism from below (Kairouz, Oh, Viswanath 2015, Thm 2.1:
FPR + e^eps FNR >= 1 - delta and FNR + e^eps FPR >= 1 - delta), and of any mu-GDP one
(Dong, Roth, Su 2019, Def. 2.6: FNR >= Phi(Phi^-1(1 - FPR) - mu)).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import special, stats

from accounting.composition import analytic_gaussian_epsilons

__all__ = ["clopper_pearson_upper", "clopper_pearson_lower", "eps_lower_bound",
           "gdp_mu_lower", "gdp_epsilon", "Threshold", "choose_threshold", "error_counts",
           "score_rule", "best_rule", "predicted_count", "bounds_from_scores", "curve_rules",
           "MAX_CUTS", "Winner", "Tested", "select", "test_rule", "curve_points", "split",
           "bounds_from_candidates", "finite"]

#: at most this many candidate cuts per direction are scored (all of both tails kept)
MAX_CUTS = 4000


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper bound on a rate from k events in n trials.

    Clopper & Pearson 1934: the p with P(Bin(n, p) <= k) = alpha, i.e. the (1 - alpha)
    quantile of Beta(k + 1, n - k); 1 when k = n.
    """
    if k >= n:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson lower bound: the alpha quantile of Beta(k, n-k+1)."""
    if k <= 0:
        return 0.0
    return float(stats.beta.ppf(alpha, k, n - k + 1))


def eps_lower_bound(fpr_ub: float, fnr_ub: float, delta: float) -> float:
    """eps >= max(ln((1 - delta - FNR)/FPR), ln((1 - delta - FPR)/FNR)), at least 0.

    Kairouz, Oh & Viswanath 2015, Thm 2.1 (the hypothesis-testing region of (eps, delta)-DP),
    applied to upper bounds on both error rates (both directions of the test).
    """
    best = 0.0
    for num, den in ((1.0 - delta - fnr_ub, fpr_ub), (1.0 - delta - fpr_ub, fnr_ub)):
        if num > 0.0:
            best = max(best, math.inf if den <= 0.0 else math.log(num / den))
    return best


def gdp_mu_lower(fpr_ub: float, fnr_ub: float) -> float:
    """mu >= Phi^-1(1 - FPR) - Phi^-1(FNR), at least 0 (Dong, Roth, Su 2019, Def. 2.6).

    Taken per direction as given (a test oriented the wrong way gives a negative value, which
    is no evidence and is clamped to 0, never turned into |mu|).
    """
    if fpr_ub <= 0.0 or fnr_ub <= 0.0:
        return math.inf
    return max(0.0, float(special.ndtri(1.0 - fpr_ub) - special.ndtri(fnr_ub)))


def gdp_epsilon(mu: float, delta: float) -> float:
    """eps(delta) of mu-GDP: the eps with delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

    Dong, Roth, Su 2019, Cor. 2.13; identical to the exact Gaussian mechanism of Balle & Wang
    2018 with noise multiplier 1/mu (``accounting.composition``).
    """
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    return float(analytic_gaussian_epsilons(np.array([1.0 / mu]), delta)[0])


class Threshold(NamedTuple):
    """A test "canary in" when ``sign * statistic > value`` (sign +1 or -1)."""

    value: float
    sign: int


def finite(values: np.ndarray) -> np.ndarray:
    """A statistic with NaN read as 0 and +-inf clamped to +-1e300 (a deterministic release
    can make a log-likelihood ratio infinite); apply the same map to every split."""
    return np.nan_to_num(np.asarray(values, float), nan=0.0, posinf=1e300, neginf=-1e300)


def error_counts(out: np.ndarray, into: np.ndarray, rule: Threshold) -> tuple[int, int]:
    """(false positives among canary-out runs, false negatives among canary-in runs)."""
    out, into = finite(out), finite(into)
    fp = int(np.count_nonzero(rule.sign * out > rule.sign * rule.value))
    fn = int(np.count_nonzero(~(rule.sign * into > rule.sign * rule.value)))
    return fp, fn


#: runs per side up to which every Clopper-Pearson upper bound of an (n, alpha) is computed
#: at once and kept (:func:`_objective` asks for hundreds of counts per candidate statistic)
CP_TABLE_MAX = 20_000


def _cp_upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """The Clopper-Pearson upper bound at alpha/2 of each count ``k`` of n runs."""
    return np.where(k >= n, 1.0, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1)))


@functools.lru_cache(maxsize=16)
def _cp_table(n: int, alpha: float) -> np.ndarray:
    """:func:`_cp_upper` of each count k = 0..n of n runs."""
    table = _cp_upper(np.arange(n + 1, dtype=float), n, alpha)
    table.setflags(write=False)  # kept and shared by every caller
    return table


def _objective(fp: np.ndarray, fn: np.ndarray, n_out: int, n_in: int, alpha: float,
               delta: float, target: str) -> np.ndarray:
    """Vectorised bound at each candidate threshold, with Clopper-Pearson at alpha/2 each."""
    def upper(k: np.ndarray, n: int) -> np.ndarray:
        if n <= CP_TABLE_MAX:   # counts of n runs: 0..n
            return _cp_table(int(n), float(alpha))[np.asarray(k).astype(np.int64)]
        uk, where = np.unique(k, return_inverse=True)   # each distinct count once
        return _cp_upper(uk, n, alpha)[where].reshape(np.shape(k))
    fpr, fnr = upper(fp, n_out), upper(fn, n_in)
    if target == "mu":
        return special.ndtri(1.0 - np.clip(fpr, 1e-300, 1.0)) \
            - special.ndtri(np.clip(fnr, 1e-300, 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fnr, 1e-300) / fpr)
        b = np.log(np.maximum(1.0 - delta - fpr, 1e-300) / fnr)
    return np.maximum(a, b)


#: standard deviations of pessimism in the predicted held-out counts, per target. For eps
#: the bound is decided in a tail and one sd trades its mean against its spread best; for mu
#: the bound of a Gaussian is the same at every cut, so the penalty must outweigh the tail
#: noise of the selection split (3 sd keeps the cut in the middle). Simulated on N(0,1) vs
#: N(1,1), 2,000 selection and 10,000 held-out runs per side: eps 2.09 +- 0.19 (z = 1),
#: mu 0.926 +- 0.023 (z = 3).
PESSIMISM = {"eps": 1.0, "mu": 3.0}


#: the pooled-quantile tails in which no cut is tried for the mu target (:func:`best_rule`)
MU_TAIL = 0.1


def predicted_count(k: np.ndarray, m: int, n: int, z: float = 1.0) -> np.ndarray:
    """A pessimistic prediction of the count on ``n`` fresh runs of an event seen ``k`` times
    in ``m`` selection runs: the predictive mean n p + z predictive sd, p = (k + 1/2)/(m + 1)
    (Jeffreys), variance n p (1 - p)(1 + n/m) (binomial noise of the fresh runs plus the
    uncertainty of p: the beta-binomial to first order), floored, at most n.

    A threshold chosen on the selection split is judged by the bound it will give on the
    held-out runs; the pessimistic count steers away from cuts in the far tail, where a few
    lucky selection runs decide and the held-out count varies most."""
    k = np.asarray(k, float)
    p = (k + 0.5) / (m + 1.0)
    sd = np.sqrt(n * p * (1.0 - p) * (1.0 + n / m))
    return np.minimum(np.floor(n * p + z * sd), float(n))


def best_rule(out: np.ndarray, into: np.ndarray, alpha: float, delta: float,
              target: str = "eps", n_eval: tuple[int, int] | None = None
              ) -> tuple[Threshold, float]:
    """The threshold and direction with the largest predicted bound on ``n_eval`` held-out
    runs per side, and that predicted bound.

    Candidates: every midpoint between consecutive distinct values (both tails in full, a grid
    between, :data:`MAX_CUTS`), in both directions. Each is scored by the bound (Clopper-Pearson
    at alpha/2 per rate, ``target`` "eps" or "mu") at the pessimistic predicted held-out counts
    of :func:`predicted_count` (:data:`PESSIMISM` sd). Only ranks count: no distribution is
    assumed (a normal fit extrapolated into the tail overrates skewed statistics such as a
    log-likelihood ratio, and the largest of many such scores is then chosen for its luck)."""
    out, into = np.sort(finite(out)), np.sort(finite(into))
    n0, n1 = n_eval or (out.size, into.size)
    values = np.unique(np.concatenate([out, into]))
    cuts = np.concatenate([[values[0] - 1.0], (values[:-1] + values[1:]) / 2.0])
    if cuts.size > MAX_CUTS:   # both tails in full (a few runs decide there), a grid between
        k = MAX_CUTS // 4
        cuts = np.unique(np.concatenate([cuts[:k], cuts[-k:], cuts[
            np.linspace(k, cuts.size - k - 1, MAX_CUTS - 2 * k).astype(int)]]))
    if target == "mu" and values.size > 4:
        # mu: only cuts between the MU_TAIL quantiles of the pooled runs. For a Gaussian the
        # bound is the same at every cut, and a tail cut that looked lucky on the selection
        # split loses most of it to the Clopper-Pearson width on the held-out runs (seen:
        # mu 0.74 at true 1); a perfect separation still has a central cut.
        pooled = np.concatenate([out, into])
        lo, hi = np.quantile(pooled, [MU_TAIL, 1.0 - MU_TAIL])
        central = cuts[(cuts >= lo) & (cuts <= hi)]
        cuts = central if central.size else cuts
    best, best_score = Threshold(float(cuts[0]), 1), -np.inf
    for sign in (1, -1):
        o, i = (out, into) if sign == 1 else (-out[::-1], -into[::-1])
        c = cuts if sign == 1 else -cuts[::-1]
        fp = o.size - np.searchsorted(o, c, side="right")        # out runs above the cut
        fn = np.searchsorted(i, c, side="right")                  # in runs at or below
        z = PESSIMISM[target]
        score = _objective(predicted_count(fp, o.size, n0, z), predicted_count(fn, i.size, n1, z),
                           n0, n1, alpha, delta, target)
        score = np.nan_to_num(score, nan=-np.inf)
        j = int(np.argmax(score))
        if score[j] > best_score:
            best_score = float(score[j])
            best = Threshold(float(c[j] * sign), sign)
    return best, best_score


def score_rule(out: np.ndarray, into: np.ndarray, rule: Threshold, alpha: float,
               delta: float, target: str) -> float:
    """The bound (eps or mu, Clopper-Pearson at alpha/2 per rate) of ``rule`` on these runs
    (may be negative for mu: no evidence)."""
    fp, fn = error_counts(out, into, rule)
    return float(_objective(np.array([fp]), np.array([fn]), out.size, into.size, alpha,
                            delta, target)[0])


def choose_threshold(out: np.ndarray, into: np.ndarray, alpha: float, delta: float,
                     target: str = "eps", n_eval: tuple[int, int] | None = None) -> Threshold:
    """The threshold and direction to test on held-out runs, chosen on a selection split
    (:func:`best_rule`)."""
    return best_rule(out, into, alpha, delta, target, n_eval)[0]


class Winner(NamedTuple):
    """The candidate chosen for one target on the selection split: its key, its rule and
    the bound predicted for it on the held-out runs."""

    key: Hashable
    rule: Threshold
    score: float


class Tested(NamedTuple):
    """A rule tested on held-out runs: the bound (eps or mu) and the Clopper-Pearson upper
    bounds on its error rates."""

    bound: float
    fpr: float
    fnr: float


def select(candidates: Mapping[Hashable, tuple[np.ndarray, np.ndarray]], alpha: float,
           delta: float, n_eval: tuple[int, int], targets: Sequence[str] = ("eps", "mu"),
           margin: float = 0.0, by: str | None = None
           ) -> tuple[dict[str, Winner], dict[Hashable, float]]:
    """Per target, the candidate (key -> selection scores (out, into)) and threshold with
    the largest predicted bound on ``n_eval`` held-out runs per side (:func:`best_rule`), and
    every candidate's predicted eps bound. Only the winner is tested afterwards, on runs the
    choice never saw, so choosing among many candidates costs no confidence.

    ``by``: the target whose predicted bound chooses the candidate for every target (each
    target then gets its own threshold on it); None: each target's own. The mu prediction
    is decided by central cuts and varies little between selection splits; the eps one is
    decided in a tail by a few runs, so among many candidates of equal power the largest eps
    prediction is luck (the winner's curse) and often a weak statistic's. ``margin``:
    candidates are taken in their given order (a pre-registered preference) and a later one
    replaces the one in hand only when its predicted bound is larger by ``margin``
    (relative, and at least ``margin`` / 2 absolute)."""
    rules: dict[tuple[Hashable, str], tuple[Threshold, float]] = {}
    scores: dict[Hashable, float] = {}
    wanted = tuple(dict.fromkeys([*targets, *([by] if by else [])]))
    for key, (out, into) in candidates.items():
        for target in wanted:
            rules[key, target] = best_rule(out, into, alpha, delta, target, n_eval)
        if "eps" in wanted:
            scores[key] = round(rules[key, "eps"][1], 4)
    if not candidates:
        raise ValueError("candidates: need at least one (out, into) pair of scores")
    best: dict[str, Winner] = {}
    for target in targets:
        judge = by or target
        pick: Hashable | None = None
        for key in candidates:
            score = rules[key, judge][1]
            if pick is None or score > rules[pick, judge][1] + margin * max(
                    0.5, abs(rules[pick, judge][1])):
                pick = key
        rule, score = rules[pick, target]
        best[target] = Winner(pick, rule, score)
    return best, scores


def test_rule(out: np.ndarray, into: np.ndarray, rule: Threshold, alpha: float, delta: float,
              target: str) -> Tested:
    """The bound of ``rule`` on held-out runs at level ``alpha`` (alpha/2 per error rate):
    eps (Kairouz et al. 2015, Thm 2.1) or mu (Dong et al. 2019, Def. 2.6)."""
    fp, fn = error_counts(out, into, rule)
    fpr = clopper_pearson_upper(fp, np.asarray(out).size, alpha / 2)
    fnr = clopper_pearson_upper(fn, np.asarray(into).size, alpha / 2)
    bound = eps_lower_bound(fpr, fnr, delta) if target == "eps" else gdp_mu_lower(fpr, fnr)
    return Tested(bound, fpr, fnr)


def curve_points(rules: Sequence[Threshold], out: np.ndarray, into: np.ndarray, alpha: float
                 ) -> list[tuple[float, float]]:
    """(FPR, FNR) upper bounds of each rule on held-out runs, ``alpha`` shared among the
    rules (Bonferroni, alpha/2 per rate): points a trade-off curve must lie below."""
    a = alpha / max(1, len(rules)) / 2
    points = []
    for r in rules:
        fp, fn = error_counts(out, into, r)
        points.append((clopper_pearson_upper(fp, np.asarray(out).size, a),
                       clopper_pearson_upper(fn, np.asarray(into).size, a)))
    return points


def split(out: np.ndarray, into: np.ndarray, select_fraction: float, seed: int
          ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((selection out, selection into), (held-out out, held-out into)): a random
    ``select_fraction`` of each side (at least one run) chooses, the rest tests."""
    rng = np.random.default_rng(seed)
    out, into = rng.permutation(finite(out)), rng.permutation(finite(into))
    k0, k1 = (max(1, int(round(select_fraction * a.size))) for a in (out, into))
    return (out[:k0], into[:k1]), (out[k0:], into[k1:])


def bounds_from_candidates(candidates: Mapping[Hashable, tuple[np.ndarray, np.ndarray]], *,
                           confidence: float = 0.95, delta: float = 1e-5,
                           select_fraction: float = 0.5, seed: int = 0,
                           shares: Mapping[str, float] | None = None) -> dict[str, Any]:
    """eps and mu lower bounds from several candidate scores of the same runs (key ->
    (canary-out scores, canary-in scores), row i of every candidate from run i).

    One random ``select_fraction`` of the runs (the same for every candidate) chooses the
    candidate, the threshold and its direction per target (:func:`select`); the rest gives
    Clopper-Pearson bounds at ``shares[target] * (1 - confidence)`` (default half each),
    split between the two rates. Each direction's GDP bound is clamped at 0: a test that
    points the wrong way on the held-out runs, or scores with no signal, is no evidence
    (jax_privacy's ``epsilon_from_gdp`` reported eps 3.5 on null scores before its PR #270,
    from |mu|). Returns ``eps_lower``, ``mu_lower``, ``{target}_direction`` and
    ``{target}_candidate`` (the key that won)."""
    if not candidates:
        raise ValueError("candidates: need at least one (out, into) pair of scores")
    sizes = {(np.asarray(o).size, np.asarray(i).size) for o, i in candidates.values()}
    if len(sizes) != 1:
        raise ValueError(f"candidates: every candidate scores the same runs, got sizes {sizes}")
    n_out, n_in = sizes.pop()
    if n_out < 4 or n_in < 4:
        raise ValueError("out and into need at least 4 scores each")
    total = 1.0 - confidence
    share = dict(shares or {"eps": 0.5, "mu": 0.5})
    parts = {k: split(o, i, select_fraction, seed) for k, (o, i) in candidates.items()}
    held = next(iter(parts.values()))[1]
    n_eval = (held[0].size, held[1].size)
    got: dict[str, Any] = {}
    for target in ("eps", "mu"):
        alpha = share[target] * total
        winners, _ = select({k: p[0] for k, p in parts.items()}, alpha, delta, n_eval,
                            (target,))
        w = winners[target]
        tested = test_rule(*parts[w.key][1], w.rule, alpha, delta, target)
        got[f"{target}_lower"] = tested.bound
        got[f"{target}_direction"] = w.rule.sign
        got[f"{target}_candidate"] = w.key
    return got


def bounds_from_scores(out: np.ndarray, into: np.ndarray, *, confidence: float = 0.95,
                       delta: float = 1e-5, select_fraction: float = 0.5, seed: int = 0
                       ) -> dict[str, float]:
    """eps and mu lower bounds from scores of canary-out and canary-in runs: the game of
    :func:`bounds_from_candidates` with one candidate (a random ``select_fraction`` of each
    side chooses the threshold and its direction, the rest gives Clopper-Pearson bounds at
    (1 - confidence)/2 per target). Identical distributions give 0 with probability >=
    confidence; reversed scores (canary-in lower) give the same bound as the mirrored ones.
    """
    got = bounds_from_candidates({"score": (out, into)}, confidence=confidence, delta=delta,
                                 select_fraction=select_fraction, seed=seed)
    return {k: v for k, v in got.items() if not k.endswith("_candidate")}


def curve_rules(out: np.ndarray, sign: int,
                fprs: tuple[float, ...] = (0.3, 0.1, 0.03, 0.01, 0.003)) -> list[Threshold]:
    """Thresholds at several false-positive levels of the selection runs (direction ``sign``),
    to test a trade-off curve at several points (the caller corrects for how many)."""
    o = sign * finite(out)
    return [Threshold(float(sign * np.quantile(o, 1.0 - f)), sign) for f in fprs
            if f * o.size >= 1.0]
