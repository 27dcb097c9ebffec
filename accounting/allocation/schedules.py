"""Random allocation (k = 1) with a per-step sigma schedule.

:func:`allocation_schedule_bounds` bounds E epochs whose t steps have noise multipliers
sigma_1..sigma_t: mean-1 log-normal terms, each truncated at its own threshold, summed by a
tree of certified mean-preserving convolutions (:mod:`~accounting.allocation.sums`) whose
pairs go onto the PLD grid as in :mod:`~accounting.allocation.epoch`; where that upper end
is not certified, a tree of one-sided (floor / ceil) sums. Extended precision below delta
``SCHED_EXT_DELTA``, double above (relative error bounds, still certified).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from scipy import special

from .._validate import check_count
from .bounds import allocation_gaussian_bounds
from .epoch import Epoch, bisect_down, epoch_pmf
from .laws import FINE, FLOOR, conv, exact_ok, rebin_law
from .sums import Part, mp_conv, mp_leaf, mp_rebin


# ---------------------------------------------------------------- per-step sigma schedule
class ScheduleBounds(NamedTuple):
    """Certified bracket on the eps of a random allocation with a per-step sigma schedule."""

    lower: float
    upper: float


def _schedule_cap(s: np.ndarray, tail: float) -> float:
    """Cap for a sum of log-normal terms log Y_i ~ N(-s_i^2/2, s_i^2) (mean 1 each): the
    summed means + 12 sd + the largest term's ``tail`` / count quantile (union bound)."""
    var = np.expm1(s * s)
    z = float(special.ndtri(1.0 - tail / max(s.size, 1)))
    return float(s.size + 12.0 * math.sqrt(float(var.sum()))
                 + np.exp(-s * s / 2.0 + z * s).max())


def _term_pair(mu: float, s: float, hy: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(ceil law, floor law) of Y / hy, log Y ~ N(mu, s^2), on 0..n: :func:`_term` for both
    roundings from one evaluation of the normal CDF."""
    edges = np.arange(0, n + 1, dtype=float) * hy
    with np.errstate(divide="ignore"):
        z = (np.log(edges) - mu) / s
    cdf = special.ndtr(z)
    sf = special.ndtr(-z)
    mass = np.where(z[:-1] > 0, sf[:-1] - sf[1:], cdf[1:] - cdf[:-1])
    mass = np.maximum(mass, 0.0)
    tail = float(sf[-1])
    up = np.zeros(n + 1)
    up[1:n] = mass[: n - 1]
    up[n] = mass[n - 1] + tail
    dn = np.empty(n + 1)
    dn[:n] = mass
    dn[n] = tail
    return up, dn


def shared_subtrees(s: np.ndarray) -> frozenset:
    """Keys (the slice's bytes) of the balanced tree's subtrees over ``s`` that occur more
    than once: only those are memoised, so that a schedule of distinct sigmas keeps one
    path of partial sums in memory, not every node (10,000 distinct sigmas kept ~4 GB)."""
    seen: dict[bytes, int] = {}

    def walk(a: np.ndarray) -> None:
        key = a.tobytes()
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1 and a.size > 1:  # a repeat's children were counted already
            walk(a[: a.size // 2])
            walk(a[a.size // 2:])

    walk(s)
    return frozenset(k for k, c in seen.items() if c > 1)


def schedule_law(s: np.ndarray, bins: int, memo: dict,
                  shared: frozenset | None = None) -> tuple[np.ndarray, np.ndarray,
                                                            float, float]:
    """(ceil law, floor law, h, L1 round-off) of sum_i round(Y_i) (docs/accounting.md),
    log Y_i ~ N(-s_i^2/2, s_i^2) independent, capped: a balanced tree of pairwise sums,
    each node on its own grid cap(node) / bins (leaves: FINE times finer). Equal subtrees
    (equal runs of sigmas) are computed once (``memo``, :func:`shared_subtrees`)."""
    shared = shared_subtrees(s) if shared is None else shared
    key = s.tobytes()
    if key in memo:
        return memo[key]
    if s.size == 1:
        n = bins * FINE
        h = _schedule_cap(s, 1e-10) / n
        up, dn = _term_pair(float(-s[0] ** 2 / 2.0), float(s[0]), h, n)
        out = (up, dn, h, 0.0)
    else:
        mid = s.size // 2
        a_up, a_dn, ha, ea = schedule_law(s[:mid], bins, memo, shared)
        b_up, b_dn, hb, eb = schedule_law(s[mid:], bins, memo, shared)
        n = bins * max(1, FINE // s.size)
        h = _schedule_cap(s, 1e-10) / n
        up, e1 = conv(rebin_law(a_up, ha, h, n, True), rebin_law(b_up, hb, h, n, True))
        dn, e2 = conv(rebin_law(a_dn, ha, h, n, False), rebin_law(b_dn, hb, h, n, False))
        out = (up, dn, h, ea + eb + max(e1, e2))
    if key in shared:
        memo[key] = out
    return out


def _schedule_pmfs(sigmas: np.ndarray, h: float, bins: int) -> dict[tuple[str, bool], Any]:
    """The four discrete PLDs (direction, upper) of one epoch, and their allowances.

    Only the Q-laws of S are computed: the P-law follows from dP/dQ = S / t (P is the
    mixture over the example's step of the tilted products). On T_up = j (j < n) S <= j hy,
    so P(T_up = j) <= (j hy / t) Q(T_up = j): that super-measure, its excess over 1 removed
    from the bottom, stochastically dominates the P-law of T_up; P(S >= C) is bounded by a
    union bound (the example's tilted term above C/2, or the rest above C/2, whose Q-law is
    dominated by T_up's). On T_dn = j, S >= j hy: (j hy / t) Q(T_dn = j) <= P(T_dn = j),
    the deficit sent to loss -inf (dropped): a law dominated by the P-law of T_dn.
    """
    from .. import pld

    s = 1.0 / sigmas
    t = s.size
    q_up, q_dn, hy, err = schedule_law(s, bins, {})
    e_u = e_d = err
    n = q_up.size - 1
    cap = n * hy
    j = np.arange(n + 1, dtype=float)
    out: dict[tuple[str, bool], Any] = {}
    # remove, upper: P' from Q_up
    p = j * hy / t * q_up
    tilted = float(special.ndtr(-(np.log(cap / 2.0) - s * s / 2.0) / s).max())
    half = int(math.floor(n / 2))
    p[n] = min(1.0, tilted + float(q_up[half:].sum()))
    excess = float(p.sum()) - 1.0
    if excess > 0:  # remove mass from the bottom
        c = np.cumsum(p[:n])
        cut = int(np.searchsorted(c, excess))
        p[:cut] = 0.0
        if cut < n:
            p[cut] = c[cut] - excess
    loss = np.log(np.maximum(j[1:n], 1e-300) * hy / t)
    out[("remove", True)] = (_pmf_from(loss, p[1:n], float(p[n]), h, True),
                             e_u * (1.0 + cap / t))
    # remove, lower: from Q_dn; top bin clamped at C
    p = j * hy / t * q_dn
    loss = np.log(np.maximum(j[1:], 1e-300) * hy / t)
    out[("remove", False)] = (_pmf_from(loss, p[1:], 0.0, h, False), e_d * (1.0 + cap / t))
    # add (loss -L(S) under Q), upper: T_dn (S >= T_dn hy); T_dn = 0 -> +inf; top clamped
    loss = -np.log(np.maximum(j[1:], 1e-300) * hy / t)
    out[("add", True)] = (_pmf_from(loss, q_dn[1:], float(q_dn[0]), h, True), e_d)
    # add, lower: T_up (S <= T_up hy); top (S unknown above C) dropped
    loss = -np.log(np.maximum(j[1:n], 1e-300) * hy / t)
    out[("add", False)] = (_pmf_from(loss, q_up[1:n], 0.0, h, False), e_u)
    del pld
    return out


def _pmf_from(loss: np.ndarray, mass: np.ndarray, inf: float, h: float, upper: bool):
    """Masses at losses -> a discrete PLD on {k h}, rounded up (upper) or down; masses
    below FLOOR (round-off level) go to +inf (upper) or are dropped (lower)."""
    from .. import pld

    mass = np.maximum(mass, 0.0).copy()
    small = mass < FLOOR
    if upper:
        inf += float(mass[small].sum())
    mass[small] = 0.0
    keep = mass > 0
    if not keep.any():
        return pld.PMF(0, np.zeros(1), inf)
    k = (np.ceil(loss[keep] / h + 1e-9) if upper else np.floor(loss[keep] / h - 1e-9))
    k = k.astype(np.int64)
    lo = int(k.min())
    return pld.trim(pld.PMF(lo, np.bincount(k - lo, weights=mass[keep]), inf), upper)


#: Bins of every node of the schedule's mean-preserving tree (:func:`_schedule_epoch`)
_SCHED_BINS = 2**13

#: below this delta the schedule tree's direct sums run in extended precision (above it in
#: double: ~1.5x faster, brackets ~0.01 point wider at delta 1e-5, 2-5 points at 1e-8)
SCHED_EXT_DELTA = 1e-6


def _schedule_z(s: np.ndarray, tail: float) -> float:
    """z: the per-term thresholds c_i = exp(-s_i^2 / 2 + z s_i) (a common Q z-score of
    log Y_i) with P'(some Y_i > c_i) <= ``tail``, P' the remove pair's P (dP' = (S / t)
    dQ): union bound (1/t) sum_i P_i(Y_i > c_i) + sum_i Q(Y_i > c_i), P_i the tilted term
    log Y_i ~ N(s_i^2 / 2, s_i^2) (the example in step i). Bisection."""
    t = s.size

    def excess(z: float) -> float:
        return (float(special.ndtr(s - z).sum()) / t + t * float(special.ndtr(-z))) - tail

    lo, hi = 0.0, float(s.max()) + 40.0
    return bisect_down(excess, lo, hi)


def _unit_leaf(s: float, c: float, n: int) -> Part:
    """:func:`mp_leaf` for the mean-1 term Y' = Y / mu (log Y' ~ N(-s^2/2, s^2)), Y' 1{Y' <= c}
    on {j c / (n - 1)}: the leaf of Y on the grid scaled by mu = e^(s^2/2), its moments and
    their error bounds divided by mu (masses and their bounds unchanged)."""
    mu = math.exp(s * s / 2.0)
    h = c / (n - 1)
    p = mp_leaf(s, h * mu, n, 0.0, c * mu)
    return Part(h, p.q, p.m / mu, p.e1, p.e2, p.f1 / mu, p.f2 / mu, p.ei, p.fi / mu,
                 p.ev / mu)


def _schedule_tree(s: np.ndarray, c: np.ndarray, bins: int, memo: dict,
                   ext: bool = True, shared: frozenset | None = None) -> Part:
    """Q-law (and moments m_j = E_Q[S; T = j]) of the mean-preserving rounded sum of the
    truncated mean-1 terms Y_i 1{Y_i <= c_i}: a balanced tree of :func:`mp_conv`, each
    node on its own grid cap / bins, cap = min(sum c_i, sum means + 12 sd + 2 max c_i)
    (above it: absorbed, its mass measured, not assumed); equal subtrees once (``memo``).
    ``ext``: the bulk's direct sums in extended precision (:func:`mp_conv`)."""
    shared = shared_subtrees(s) if shared is None else shared
    key = s.tobytes()
    if key in memo:
        return memo[key]
    if s.size == 1:
        out = _unit_leaf(float(s[0]), float(c[0]), bins // 2)
    else:
        mid = s.size // 2
        a = _schedule_tree(s[:mid], c[:mid], bins, memo, ext, shared)
        b = _schedule_tree(s[mid:], c[mid:], bins, memo, ext, shared)
        cap = min(float(c.sum()), s.size + 12.0 * math.sqrt(float(np.expm1(s * s).sum()))
                  + 2.0 * float(c.max()))
        h = cap / (bins - 1)
        out = mp_conv(mp_rebin(a, h, bins), mp_rebin(b, h, bins), ext=ext)
    if key in shared:
        memo[key] = out
    return out


def _schedule_epoch(sigmas: np.ndarray, bins: int, tail: float, ext: bool = True) -> Epoch:
    """One epoch of the schedule's pair by the mean-preserving construction (docs/accounting.md;
    :func:`certified_epoch` for identical sigmas): S = sum_i Y_i, mean-1 terms, dP/dQ = S / t.
    Every term above its threshold c_i (:func:`_schedule_z`, P'-mass <= ``tail``) is
    absorbed: +inf on the upper side, dropped on the lower (revealing it is a
    post-processing). Terms sorted by sigma (the sum does not depend on the order; equal
    sigmas then share subtrees)."""
    s = np.sort(1.0 / np.asarray(sigmas, dtype=float))
    z = _schedule_z(s, tail)
    c = np.exp(-s * s / 2.0 + z * s)
    part = _schedule_tree(s, c, bins, {}, ext)
    return Epoch((part,), float(s.size))


def _schedule_mp_bounds(sig: np.ndarray, delta: float, e: int, h: float) -> tuple[float, float]:
    """(lower, upper) eps of ``e`` epochs by the mean-preserving construction
    (:func:`_schedule_epoch`): the one-epoch pairs discretised as in :func:`epoch_pmf`,
    composed by FFT, the allowances (error bounds, FFT round-off) added to delta (upper) or
    subtracted (lower: pld_epsilon's convention, delta + allowance). Upper inf where the
    allowance reaches delta."""
    from .. import pld

    tail = delta * 1e-3 / e  # P'-mass of the truncated terms: +inf (upper), dropped (lower)
    ep = _schedule_epoch(sig, _SCHED_BINS, tail, ext=delta < SCHED_EXT_DELTA)
    tol = delta * 1e-6
    upper, lower = 0.0, 0.0
    for direction in ("remove", "add"):
        pmf_u, allow_u = epoch_pmf(ep, h, direction, True, tail)
        pmf_l, _ = epoch_pmf(ep, h, direction, False, tail)
        allow_l = 0.0
        if e > 1:
            pmf_u, a = pld.compose([(pmf_u, e)], tol)
            allow_u = e * allow_u + a
            pmf_l, allow_l = pld.compose([(pmf_l, e)], tol)
        up = pld.eps_of(pmf_u, delta - allow_u, h) if delta > allow_u else math.inf
        upper = max(upper, up)
        lower = max(lower, pld.eps_of(pmf_l, delta + allow_l, h))
    return lower, upper


def _schedule_one_sided(sig: np.ndarray, delta: float, e: int, h: float,
                        bins: int) -> tuple[float, float]:
    """(lower, upper) eps by the one-sided (floor / ceil) rounding of :func:`_schedule_pmfs`
    (the fallback)."""
    from .. import pld

    pm = _schedule_pmfs(sig, h, bins)
    tol = delta * 1e-6
    upper, lower = 0.0, 0.0
    for direction in ("remove", "add"):
        pmf_u, allow_u = pm[(direction, True)]
        pmf_l, allow_l = pm[(direction, False)]
        if e > 1:
            pmf_u, a = pld.compose([(pmf_u, e)], tol)
            allow_u = e * allow_u + a
            pmf_l, a = pld.compose([(pmf_l, e)], tol)
            allow_l = e * allow_l + a
        up = pld.eps_of(pmf_u, delta - allow_u, h) if delta > allow_u else math.inf
        upper = max(upper, up)
        lower = max(lower, pld.eps_of(pmf_l, delta + allow_l, h))
    return lower, upper


def allocation_schedule_bounds(sigmas: object, delta: float, *, epochs: int = 1,
                               bins: int = 2**15) -> ScheduleBounds:
    """Certified (lower, upper) eps of ``epochs`` epochs of random allocation (k = 1) where
    step i of every epoch adds Gaussian noise with multiplier ``sigmas[i]`` (t = len(sigmas)).

    Pair: P = (1/t) sum_i N(e_i, diag(sigma_i^2)), Q = N(0, diag(sigma_i^2)), the pair the
    mechanism realises (the example's gradient 1 in its step, every other gradient 0), so
    the LOWER end is certified for the scheme that ran. The UPPER end rests on this pair
    dominating every adaptive run, the argument of Chua et al. (AISTATS 2025, Thm 3.1) with
    per-step noise (it treats each step as a Gaussian mechanism on the example's
    contribution and never uses that their scales are equal). The loss is log(S / t),
    S = sum_i Y_i, log Y_i ~ N(-1/(2 sigma_i^2), 1/sigma_i^2) under Q; the laws of the
    rounded sums follow the mean-preserving construction (:func:`_schedule_epoch`; the
    one-sided rounding of :func:`_schedule_pmfs`, on ``bins`` points, where its upper end is
    not certified); E epochs compose by FFT (:mod:`accounting.pld`). Costs about t FFT
    convolutions of 2^13 points: meant for schedules of up to a few thousand steps.

    A constant schedule gives the bracket of :func:`allocation_epsilon_bounds` (tested).
    """
    from .._validate import check_array, check_delta

    sig = check_array("sigmas", sigmas, low=0.0, low_open=True, what="noise multipliers")
    if sig.size == 0:
        raise ValueError("sigmas must hold at least one step")
    if sig.size > 100_000:
        raise ValueError(f"sigmas: {sig.size} steps per epoch (at most 100,000)")
    delta = check_delta("delta", delta)
    e = check_count("epochs", epochs, minimum=1)
    bins = check_count("bins", bins, minimum=2**10)
    from ..composition import analytic_gaussian_epsilons

    # closed forms, valid for every schedule: upper, no amplification (one Gaussian release
    # per epoch with the smallest sigma); lower, the constant schedule at the largest sigma
    # (adding independent noise to a step's output is post-processing of the realised
    # pair), whose sum of outputs is N(1, t sigma^2) against N(0, t sigma^2)
    up_closed = float(analytic_gaussian_epsilons(np.array([sig.min() / math.sqrt(e)]),
                                                 delta)[0])
    lo_closed = allocation_gaussian_bounds(float(sig.max()), sig.size, delta, epochs=e)[0]
    if not all(exact_ok(float(x), sig.size) for x in sig):
        return ScheduleBounds(lo_closed, up_closed)
    s = 1.0 / sig
    var = float(np.var(np.log(np.maximum(s, 1e-300)))) + float(np.mean(s * s)) / sig.size
    h = max(1e-6, min(1e-3, math.sqrt(e * max(var, 1e-12)) / 2000.0))
    lower, upper = _schedule_mp_bounds(sig, delta, e, h)
    if not (lower <= upper < math.inf):  # not certified here: the one-sided rounding
        lo_old, up_old = _schedule_one_sided(sig, delta, e, h, bins)
        lower, upper = max(lower, lo_old), min(upper, up_old)
    if sig.size > 1 and (math.isinf(upper) or upper - lower > 0.01 * upper):
        # one step far noisier in loss terms than the rest: its term kept exact
        from ..schedule_jump import jump_schedule_bounds

        lo_j, up_j = jump_schedule_bounds(sig, delta, e, schedule_law)
        lower, upper = max(lower, lo_j), min(upper, up_j)
    upper = min(upper, up_closed)
    lower = max(lower, lo_closed)
    return ScheduleBounds(min(lower, upper), upper)
