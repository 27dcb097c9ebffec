"""Random allocation ("balls in bins"): every example in exactly k of the t steps of an epoch.

The Gaussian mechanism (noise multiplier sigma, L2 sensitivity 1 per step) run on t
adaptively chosen batches, each example dealt into k of the t steps uniformly at random,
under add/remove adjacency.

Dominating pair, k = 1 (Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, AISTATS 2025,
"Balls-and-bins sampling for DP-SGD", Thm 3.1; Feldman & Shenfeld 2025, "Privacy
amplification by random allocation"): remove P = (1/t) sum_i N(e_i, sigma^2 I_t),
Q = N(0, sigma^2 I_t); add: the two swapped. The pair is realised by the mechanism itself
(the example's gradient is 1, every other one is 0), so it is tight. The privacy loss

    L(x) = log((1/t) sum_i exp((x_i - 1/2) / sigma^2)) = log(S / t) - 1 / (2 sigma^2),
    S = sum_i Y_i,  Y_i = exp(x_i / sigma^2),

is an increasing function of the sum S of t independent log-normal terms: under Q every
log Y_i ~ N(0, 1/sigma^2); under P the first one is the tilted log Y_1 ~ N(1/sigma^2,
1/sigma^2). Equivalently dP/dQ = X = S / (t mu), mu = E_Q[Y] = e^(1/(2 sigma^2)): the pair
is fixed by the Q-law of S alone, and (Blackwell; Zhu, Dong, Wang 2022 for composition) a
pair whose likelihood ratio X' has a Q-law larger in convex order dominates it, a pair
obtained by post-processing (garbling) is dominated by it, in both directions, also
composed. Construction (:func:`_epoch`):

* Mean-preserving rounding. S is summed on linear grids {j h} (a balanced tree of FFT
  convolutions, repeated squaring), every value rounded AT RANDOM to one of its two grid
  neighbours with the probabilities that keep its mean (x -> j + 1 with probability x / h
  - j). The computed T is a randomised function of the output: T h = S + a martingale
  noise, so T h / (t mu) is a mean-preserving spread of X. Rounding errors are second
  order (noise variance <= h^2 / 4 per rounding) where one-sided rounding (floor / ceil)
  drifts by one grid step per level: what made ten epochs 10-44% wide.
* UPPER: Q'-mass q_j at X' = j h / (t mu) and P'-mass q_j X'; the P-mass not represented
  (absorbed tops, N >= 2 below) at loss +inf; the add pair is the same pair swapped.
  LOWER: the pair (P(T = j), Q(T = j)) itself, a garbling of the realised pair; P(T = j)
  = E_Q[X; T = j] = m_j / (t mu) with m_j = E_Q[S; T = j], carried through the tree
  (m_{A+B} = m_A * q_B + q_A * m_B). Both go onto the PLD loss grid by connect-the-dots
  (upper) and merge-down (lower) of :mod:`accounting.pld`: O(h^2) per epoch.
* Two parts by N = #{i: Y_i > c}: the heavy tail of exp(x / sigma^2) would set one grid
  far too coarse for the bulk. c is the smallest threshold with P'(N >= 2) <= tail / 10
  (union bound: the tilted term and another, or two others); N = 0 (t terms Y 1{Y <= c},
  grid up to t mu + 12 sd sqrt(t) + 2c) and N = 1 (t x one term above c plus t - 1 small
  ones, a coarse grid: there S > c) are computed, N >= 2 is absorbed. Revealing N is a
  post-processing, so the lower pair stays a garbling.
* Leaves: the mass, E[Y; I] and E[Y^2; I] of each grid interval I from the local series
  P(|Z - m| <= d) = 2 d phi(m) K(m, d) (:func:`_kfac`), half-widths by log1p and
  conditional means relative to the interval's left end (no cancellation: CDF differences
  lose ~1e-12 per fine bin); error bounds per bin.
* Certified arithmetic: every law carries L1, L2, sup and value-weighted L1 bounds on its
  error, propagated by Young's / Hoelder's inequalities. Early partial sums occupy a few
  bins of a long grid: each is split into its bulk (all but 1e-5 of the mass, summed
  directly in extended precision, error (2w + 2) ulps of long double per entry) and its
  rest (long FFT, whose round-off scales with the rest's small norms). The upper
  allowance is the value-weighted L1 bound (remove) or the L1 bound (add), x2 (the atoms
  and the +inf mass); the lower pair is lowered (P) / raised (Q) by the sup bound, bin by
  bin.

Heavy tails (sigma below ~0.5 at small t): where c is so far above E[S] that the N = 0
grid holds more than ``tail`` of Q-mass at T = 0 (X' = 0: an add loss of +inf), the
one-sided rounding of :func:`_laws` (one epoch there is set by the tail, where its grid is
fine enough) is used instead, on ONE linear grid {j hy} of S:

* T_up = sum_i ceil_hy(Y_i) >= S and T_dn = sum_i floor_hy(Y_i) <= S pointwise, so the laws
  of L(T_up) and L(T_dn) bracket the law of L(S) stochastically (under P and under Q);
* the per-term laws are exact (log-normal CDF); the sums are t-fold convolutions (FFT,
  repeated squaring) with an absorbing top bin "S >= C" (min(a + b, C) is associative);
  upper bounds send that bin to loss +inf, lower bounds clamp it at C;
* delta(eps) = P(L = inf) + E_P[(1 - e^(eps - L))_+] is increasing in the law of L for the
  stochastic order, also after composition (the composed loss is a sum of independent
  losses). So the P-law of L(T_up) (remove) / of -L(T_dn) under Q (add) gives an UPPER
  bound on the composed delta, and L(T_dn) / -L(T_up) a LOWER one; rounding onto the
  loss grid of :mod:`accounting.pld` goes up (upper) or down (lower) and the FFT
  round-off is bounded and added to the allowance, as there.

Partial sums of c terms live on their own grid cap(c) / 2^18 (cap: mean + 12 sd + the
largest term's 1e-10 quantile); each doubling rounds once onto a grid twice as coarse
(monotone rebinning), so T_up - T_dn is about log2(t) final grid steps, not t. FFT
round-off masses (~1e-18 a bin) go to +inf (upper) or are dropped (lower).

Measured (2 busy shared cores, load ~4, delta 1e-5, from scratch; width, CPU s, before ->
after): one epoch, t = 12 / 120 / 1,000 at sigma 1: 0.06% / 0.28% / 1.46%, 1.3-2.3 s ->
0.003% / 0.003% / 0.007%, 0.2-0.5 s; t = 1,000: 0.51% -> 0.16% (sigma 0.5), 1.14% -> 0.13%
(0.6), 0.59% -> 0.01% (2); ten epochs: t = 120, sigma 0.8: 2.8% -> 0.01%; t = 1,000: 10.4%
-> 0.03% (sigma 0.8), 44% -> 0.12% (sigma 0.5, 0.6 s); t = 10,000, sigma 1: 0.08%. Over 60
settings (sigma 0.5-2, t 12-1,000, 1 and 10 epochs, delta 1e-5 and 1e-3) every new bracket
lies inside the old one. Still wide: sigma <= 0.45 at t = 12 with ten epochs (one-sided
rounding: sigma 0.5 [21.4, 26.9]).

Small deltas (:meth:`RandomAllocation.for_delta`, used by :func:`allocation_epsilon_bounds`
and by :func:`accounting.pld.pld_epsilon` where its upper end is infinite). The default
event's allowances (error bounds ~1e-9 at t = 1,000, tails 1e-10) reach delta near 1e-9;
the variant scales every tail with delta (per node delta 1e-3 / (2 t x compositions); the
N-split threshold, the caps, the cut loss range, the allowed Q(T = 0) with it) and lowers
the round-off: leaves and rebinning in extended precision (errors in its unit round-off,
one rounding to double), grids from 2^12 bins so that every partial sum's bulk (up to
8,192 bins) is convolved directly in extended precision, in blocks of sqrt(w) (relative
round-off per entry, (2 sqrt(w) + 2) extended ulps) instead of by FFT (absolute,
multiplied by t / count up the tree): e1 ~1e-12 at t = 1,000 (was ~5e-10). Measured
(delta, sigma, t, epochs: width before -> after, wall s, 2 busy cores): 1e-10, 1, 1,000, 1:
92% -> 0.49% (0.7 s); 1e-10, 0.8, 1,000: 80% -> 0.49%; 1e-10, 2, 1,000: 97% -> 0.33%;
1e-10, 1, 120, 10 epochs: 89% -> 1.1%; 1e-8, 1, 1,000, 10 epochs: 97% -> 0.59%; 1e-12, 1,
12: 34% -> 0.74%; 1e-12, 1, 120: 65% -> 4.3%; 1e-12, 2, 120: 2.4%. The floor is the
rounding of every partial sum to double (~1e-16 relative an entry, times t in L1): delta
1e-12 stays at the no-amplification bound at t = 1,000 and with ten epochs at t = 12, and
sigma 0.6 is 2.2% wide at 1e-10 (t = 1,000, 3.5 s) and 25% at 1e-12 (t = 12: one-sided
rounding). (The rebinning's own rounding was not in the error bounds before: ~1e-15 a
rebin, immaterial above delta ~1e-9; it is now, in both precisions.)

The resulting discrete PLDs go through :mod:`accounting.pld`'s composition, so E epochs
(E independent allocations) compose with every other event of a ledger.

General k. If k divides t: the uniform k-subset of the t steps is drawn as a uniform
partition of the steps into k groups of t/k and one uniform step in each group (the law
of the subset is permutation invariant, hence uniform). Revealing the partition can only
help the adversary, and given it the epoch is k random 1-of-(t/k) allocations run
concurrently, which compose like sequential ones (Vadhan & Zhang 2023, concurrent
composition of f-DP), so eps <= that of the k-fold composition of 1-of-(t/k) (the
reduction of Feldman & Shenfeld 2025, Sec. 5). If k does not divide t, with m = floor(t/k):
a uniform k-subset of a uniform (k m)-subset B of the steps is a uniform k-subset of all
t; revealing B, the t - k m steps outside it do not see the example (pure noise, a
post-processing) and the rest is the divisible case: eps <= k-fold 1-of-m (m = 1, i.e.
k > t/2: k Gaussian releases, no amplification). This upper end is of a stand-in that
dominates the scheme, not of the scheme itself.

Lower end for k > 1 (:func:`_binned_pair`): the laws, under the REALISED k-of-t pair, of a
deterministic symmetric statistic of the output, min(sum_i floor(Y_i / hy), n): a
post-processing of the scheme that ran, hence certified for it (not for the stand-in);
FFT round-off is absorbed pointwise (P lowered, Q raised by the L1 bound). Where the
log-normal machinery cannot run (sigma below ~0.06) or k = t, the lower end is the sum of
the t outputs, N(k, t sigma^2) against N(0, t sigma^2) (exact when k = t).

Per-step sigma schedules (k = 1, :func:`allocation_schedule_bounds`): mean-1 terms log Y_i
~ N(-s_i^2/2, s_i^2), s_i = 1 / sigma_i, dP/dQ = S / t, so the Blackwell / garbling
argument above holds term by term. :func:`_schedule_epoch`: each term truncated at its own
threshold c_i (a common Q z-score, P'(some Y_i > c_i) <= delta 1e-3 / epochs: that mass
to +inf on the upper side, dropped on the lower), each leaf its own law and moments
(:func:`_unit_leaf`, 2^12 bins), a balanced tree of :func:`_mp_conv` on 2^13-bin node
grids, the pairs and error allowances of :func:`_epoch_pmf`. The one-sided rounding (a tree of
floor / ceil sums, P-law from the Q-law, :func:`_schedule_pmfs`) is the fallback where
the new upper end is not certified. Measured (2 shared cores; width, wall s, before ->
after; delta 1e-5): linspace(2, 0.8, 100) 1.2%, 7.5 s -> 0.05%, 0.5 s (ten epochs 12.7%
-> 0.8%); linspace(1.5, 0.7, 1000) 10.4%, 117 s -> 0.27%, 4.2 s (ten epochs 74% ->
2.7%); U(0.8, 1.2) x 500 12.9%, 44 s -> 0.18%, 1.8 s (ten epochs 82% -> 1.3%); delta
1e-8, one / ten epochs: 265-3500% -> 2-26%; every new bracket inside the old one. Still
wide at small delta and many epochs, and over 1 s at t >= 500: the node grids are set by
the truncation c_i (the heavy tail), not by the bulk; an N-split as in :func:`_epoch`
would narrow them. Above delta 1e-6 the tree's direct bulk sums run in double
(:func:`_mp_conv`, ``ext`` False; relative error bounds, still certified): wall s (width)
extended -> double at 1e-5, one epoch: linspace(1.5, 0.7, 1000) 4.95 (0.271%) -> 3.38
(0.283%); linspace(2, 0.8, 100) 0.57 (0.054%) -> 0.36 (0.056%); U(0.8, 1.2) x 500 2.14
(0.179%) -> 1.68 (0.182%); below 1e-6 extended as before (double there: 1e-8 brackets 2-5
points wider). Not done: the 1 s target at t = 1,000 (leaves ~1.3 s, long FFTs ~1 s);
rounding the schedule onto a geometric grid (down for the upper end, up for the lower:
valid, more noise in a step is a post-processing of its output) shares no subtrees for
these schedules at a resolution that keeps the width (1e-3: ~760 distinct of 1,000).

FFT round-off (one-sided rounding, k > 1, schedules): each convolution's L1 error is
bounded by a few ulps x log2(n) sqrt(n) x the larger L2 norm of its operands
(:func:`_conv`). The top bin of every capped partial sum (overflow, a union over the tree)
goes to +inf on the upper side: its mass (~1e-10 t) is what limits small deltas (in the
mean-preserving construction: the allowance of the error bounds, ~1e-9);
:func:`allocation_epsilon_bounds` then retries with caps whose overflow is below delta (a
coarser grid) and, failing that, uses the closed-form no-amplification bound, never 0.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from scipy import fft as sfft
from scipy import special

from ._validate import check_count, check_positive
from .events import Event, register_event

__all__ = ["RandomAllocation", "ScheduleBounds", "allocation_epsilon_bounds",
           "allocation_gaussian_bounds", "allocation_schedule_bounds",
           "clear_cache"]

#: Bins of the linear grid of S (the cap C is n hy).
_BINS = 2**18
#: Partial sums of c < _FINE terms get _FINE // c times more bins (their rounding
#: dominates: the cap of a few heavy-tailed terms is far above their mean).
_FINE = 8
#: Masses of a law of S below this are FFT round-off level (see _loss_pmf).
_FLOOR = 1e-16
#: Bins of the grids of the mean-preserving sums (k = 1, :func:`_epoch`): their rounding
#: noise is second order, so fewer than the old one-sided rounding needed.
_MP_BINS = 2**16
#: Bulks of at most this many bins are convolved directly, in extended precision
_DIRECT = 1000
#: The same for small deltas (:meth:`RandomAllocation.for_delta`)
_SMALL_DIRECT = 8192
#: Standard deviations of log Y kept below the cap (per-term tail beyond: ~1e-10).
_Z_TAIL = 6.4


class _Laws(NamedTuple):
    """Laws of T_up / T_dn (index j: S = j hy; index n: S >= C) under P and Q, with the
    L1 round-off bound of each."""

    hy: float
    p_up: np.ndarray
    p_dn: np.ndarray
    q_up: np.ndarray
    q_dn: np.ndarray
    err: float


# ---------------------------------------------------------------- one term
def _term(mu: float, s: float, hy: float, n: int, up: bool) -> np.ndarray:
    """Law of ceil (``up``) or floor of Y / hy for log Y ~ N(mu, s^2), on 0..n (n: >= C)."""
    edges = np.arange(0, n + 1, dtype=float) * hy  # b_0 = 0 < b_1 < ... < b_n = C
    with np.errstate(divide="ignore"):
        z = (np.log(edges) - mu) / s
    cdf = special.ndtr(z)
    sf = special.ndtr(-z)
    use_sf = z[:-1] > 0
    mass = np.where(use_sf, sf[:-1] - sf[1:], cdf[1:] - cdf[:-1])  # P(b_j < Y <= b_j+1)
    mass = np.maximum(mass, 0.0)
    tail = float(sf[-1])  # P(Y > C)
    out = np.zeros(n + 1)
    if up:
        out[1:n] = mass[: n - 1]
        out[n] = mass[n - 1] + tail
    else:
        out[:n] = mass
        out[n] = tail
    return out


# ---------------------------------------------------------------- sums with a cap
def _fft_err(nfft: int) -> float:
    """L1 round-off of one FFT convolution of two (sub-)probability vectors of length
    nfft: a few ulps times log2(n) sqrt(n) (as in :func:`accounting.pld._compose`)."""
    return 8.0 * np.finfo(float).eps * math.log2(nfft) * math.sqrt(nfft)


def _conv(a: np.ndarray, b: np.ndarray, fa: np.ndarray | None = None,
          fb: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Law of min(A + B, C) from those of min(A, C), min(B, C) (index n is ">= C")."""
    n = a.size - 1
    nfft = sfft.next_fast_len(2 * n, real=True)
    fa = sfft.rfft(a[:n], nfft) if fa is None else fa
    fb = fa if b is a else (sfft.rfft(b[:n], nfft) if fb is None else fb)
    c = sfft.irfft(fa * fb, nfft)
    out = np.empty(n + 1)
    out[:n] = c[:n]
    out[n] = float(c[n:].sum()) + a[n] + b[n] - a[n] * b[n]
    neg = float(-np.minimum(out, 0.0).sum())
    # the round-off of an FFT convolution is bounded in L2 by a few ulps x log2(n) x
    # (|a|_2 |b|_1 + |a|_1 |b|_2 + |a*b|_2) (forward transforms, product, inverse): with
    # sub-probability vectors, <= 3 max(|a|_2, |b|_2) of the same; _fft_err takes every
    # norm as 1, so scaling it by the larger L2 norm keeps it a bound (x100 smaller for
    # spread-out laws, what lets delta reach 1e-9)
    scale = max(float(np.sqrt(np.dot(a[:n], a[:n]))), float(np.sqrt(np.dot(b[:n], b[:n]))))
    return np.maximum(out, 0.0), _fft_err(nfft) * min(1.0, scale) + 2.0 * neg


def _rebin(law: np.ndarray, h_old: float, h_new: float, n_new: int, up: bool) -> np.ndarray:
    """A law on {j h_old} (top bin: ">= cap") moved onto {j h_new}, n_new + 1 bins.

    up: every value rounded up, the top bin stays absorbing (+inf) and values at or above
    the new cap join it; down: rounded down, the old top bin is the value cap_old (clamped),
    values at or above the new cap are clamped to it. Both are monotone moves, so the
    stochastic order of the module doc is kept.
    """
    n_old = law.size - 1
    x = np.arange(n_old + 1, dtype=float) * (h_old / h_new)
    idx = np.ceil(x + 1e-9) if up else np.floor(x - 1e-9)
    idx = np.clip(idx, 0, n_new).astype(np.int64)
    if up:
        idx[-1] = n_new
    return np.bincount(idx, weights=law, minlength=n_new + 1)


def _cap(count: int, s: float, mu_tail: float = 0.0, tail: float = 1e-10) -> float:
    """Cap for a sum of ``count`` i.i.d. log-normal (0, s) terms (plus one with log-mean
    ``mu_tail`` when > 0): mean + 12 sd + the largest term's 1e-10 quantile (union bound)."""
    mean = math.exp(s * s / 2.0)
    var = mean * mean * math.expm1(s * s)
    z = float(-special.ndtri(tail / max(count, 1)))
    cap = count * mean + 12.0 * math.sqrt(count * var) + math.exp(z * s)
    if mu_tail > 0:
        cap += math.exp(mu_tail + max(_Z_TAIL, -float(special.ndtri(tail))) * s)
    return cap


def _sum_law(s: float, m: int, up: bool, bins: int,
             tail: float = 1e-10) -> tuple[np.ndarray, float, float]:
    """(law, grid step, L1 round-off) of the sum of m i.i.d. rounded log-normal (0, s)
    terms, capped (module doc). Multi-resolution: a partial sum of c terms lives on its
    own grid cap(c) / bins, so the rounding error of the whole sum is about log2(m) final
    grid steps instead of m (each doubling rounds once, on a grid twice as coarse)."""
    def size(count: int) -> int:  # finer grids for the first, cheap partial sums
        return bins * max(1, _FINE // count)

    def grid(count: int) -> float:
        return _cap(count, s, tail=tail) / size(count)

    h_b = grid(1)
    base, err_b, c_b = _term(0.0, s, h_b, size(1), up), 0.0, 1
    result: np.ndarray | None = None
    err_r, c_r, h_r = 0.0, 0, 0.0
    while m:
        if m & 1:
            if result is None:
                result, err_r, c_r, h_r = base, err_b, c_b, h_b
            else:
                c_r += c_b
                h_new = grid(c_r)
                a = _rebin(result, h_r, h_new, size(c_r), up)
                b = _rebin(base, h_b, h_new, size(c_r), up)
                result, e = _conv(a, b)
                err_r, h_r = err_r + err_b + e, h_new
        m >>= 1
        if m:
            c_b *= 2
            h_new = grid(c_b)
            base, e = _conv(*(2 * (_rebin(base, h_b, h_new, size(c_b), up),)))
            err_b, h_b = 2.0 * err_b + e, h_new
    assert result is not None
    return result, h_r, err_r


@functools.lru_cache(maxsize=32)
def _laws(sigma: float, t: int, bins: int = _BINS, tail: float = 1e-10) -> _Laws:
    """The four laws of the one-epoch, k = 1 sum S (see the module doc), cached. ``tail``:
    the per-node probability of exceeding its cap (whose union is the top bin's mass: a
    smaller one reaches smaller deltas on a coarser grid)."""
    s = 1.0 / sigma
    z = max(_Z_TAIL, -float(special.ndtri(tail)))
    cap = _cap(t - 1, s, s * s, tail) if t > 1 else math.exp(s * s + z * s)
    hy = cap / bins
    q_up1, q_dn1 = _term(0.0, s, hy, bins, True), _term(0.0, s, hy, bins, False)
    p_up1, p_dn1 = _term(s * s, s, hy, bins, True), _term(s * s, s, hy, bins, False)
    if t == 1:
        return _Laws(hy, p_up1, p_dn1, q_up1, q_dn1, 0.0)
    r_up, h_up, e_up = _sum_law(s, t - 1, True, bins, tail)
    r_dn, h_dn, e_dn = _sum_law(s, t - 1, False, bins, tail)
    r_up = _rebin(r_up, h_up, hy, bins, True)
    r_dn = _rebin(r_dn, h_dn, hy, bins, False)
    p_up, e1 = _conv(r_up, p_up1)
    q_up, e2 = _conv(r_up, q_up1)
    p_dn, e3 = _conv(r_dn, p_dn1)
    q_dn, e4 = _conv(r_dn, q_dn1)
    err = max(e_up + e1, e_up + e2, e_dn + e3, e_dn + e4)
    return _Laws(hy, p_up, p_dn, q_up, q_dn, err)


def _power(law: np.ndarray, m: int) -> tuple[np.ndarray, float]:
    """(law, L1 round-off) of min(A_1 + ... + A_m, C) for i.i.d. A_i with law ``law``
    (index n: ">= C"), by repeated squaring; m = 0: the point mass at 0."""
    out = np.zeros(law.size)
    out[0] = 1.0
    err, base, err_b, first = 0.0, law, 0.0, True
    while m:
        if m & 1:
            if first:
                out, err, first = base, err_b, False
            else:
                out, e = _conv(out, base)
                err += err_b + e
        m >>= 1
        if m:
            base, e = _conv(base, base)
            err_b = 2.0 * err_b + e
    return out, err


@functools.lru_cache(maxsize=16)
def _binned_pair(sigma: float, t: int, k: int, bins: int = _BINS) -> _Laws:
    """Laws of the statistic g(x) = min(sum_i min(floor(Y_i / hy), n), n), Y_i =
    exp(x_i / sigma^2), under the REALISED pair of k-of-t allocation (P: the example's
    gradient 1 in a uniform k-subset A of the steps, Q: the example absent), and their L1
    round-off bound (``err``; fields p_dn / q_dn, the *_up fields repeat them).

    g is a deterministic, symmetric function of the released vector (min(a + b, n) is
    associative and commutative on nonnegative integers, so the order of the sums does not
    matter), hence (law of g under P, law of g under Q) is a post-processing of a pair the
    mechanism itself realises, and its hockey-stick divergence is a certified LOWER bound on
    the mechanism's delta(eps), for every k (data processing inequality). Under P, by
    symmetry of g, the law does not depend on which k steps hold the example: k terms
    with log Y ~ N(1/sigma^2, 1/sigma^2) (tilted) and t - k with log Y ~ N(0, 1/sigma^2).
    """
    s = 1.0 / sigma
    cap = (_cap(t - k, s) if t > k else 0.0) + k * math.exp(s * s + _Z_TAIL * s)
    hy = cap / bins
    plain = _term(0.0, s, hy, bins, False)
    tilt = _term(s * s, s, hy, bins, False)
    q_law, e_q = _power(plain, t)
    rest, e_r = _power(plain, t - k)
    held, e_h = _power(tilt, k)
    if t > k:
        p_law, e_c = _conv(rest, held)
    else:
        p_law, e_c = held, 0.0
    err = max(e_q, e_r + e_h + e_c)
    return _Laws(hy, p_law, p_law, q_law, q_law, err)


def _binned_pmf(sigma: float, t: int, k: int, h: float, direction: str):
    """LOWER discrete PLD (``accounting.pld._PMF``) of the binned realised pair
    (:func:`_binned_pair`) on the loss grid {j h}.

    The computed laws are off the exact ones by at most ``err`` in L1, hence in every bin:
    P~ = max(P^ - err, 0) <= P and Q~ = Q^ + err >= Q pointwise. The hockey-stick
    divergence is increasing in P and decreasing in Q pointwise, also for product measures
    (composition), so the pair (P~, Q~) is still a certified lower bound; its losses
    log(P~/Q~) are then rounded down onto the grid (a smaller loss: a smaller delta).
    remove: (P~, Q~); add: the two laws swapped.
    """
    from . import pld

    laws = _binned_pair(sigma, t, k)
    err = laws.err
    num, den = (laws.p_dn, laws.q_dn) if direction == "remove" else (laws.q_dn, laws.p_dn)
    pt = np.maximum(num - err, 0.0)
    qt = den + err
    keep = pt > 0
    if not keep.any():
        return pld._PMF(0, np.zeros(1), 0.0)
    loss = np.log(pt[keep]) - np.log(qt[keep])
    idx = np.floor(loss / h - 1e-9).astype(np.int64)
    lo = int(idx.min())
    p = np.bincount(idx - lo, weights=pt[keep])
    return pld._trim(pld._PMF(lo, p, 0.0), False)


def _exact_ok(sigma: float, t: int) -> bool:
    """Whether the log-normal sum machinery is usable: its cap is a finite float with room
    (below sigma ~ 0.06 the variance exp(2/sigma^2) of a term overflows; the bounds there
    are the Gaussian ones of :meth:`RandomAllocation.pld_parts`)."""
    s = 1.0 / sigma
    return max(2.0 * s * s, s * s + _Z_TAIL * s) + math.log(max(t, 1)) + 20.0 < 600.0


def clear_cache() -> None:
    """Forget the cached per-sigma laws (for timings from scratch)."""
    _laws.cache_clear()
    _epoch.cache_clear()
    _binned_pair.cache_clear()


def _loss_pmf(law: np.ndarray, hy: float, sigma: float, t: int, h: float, direction: str,
              upper: bool) -> tuple[int, np.ndarray, float]:
    """(offset, masses, inf) of the discrete PLD on the grid {k h} from a law of T.

    remove: loss L(T) of the P-law; add: -L(T) of the Q-law. Upper: rounded up, S = 0
    (add) and S >= C (remove) at +inf, S >= C (add) clamped at C; lower: rounded down,
    losses of -inf (S = 0 remove, S >= C add) dropped, S >= C (remove) clamped at C.
    """
    n = law.size - 1
    j = np.arange(1, n + 1, dtype=float)  # bins 1..n (n: S >= C, value C where clamped)
    loss = np.log(j * hy / t) - 0.5 / sigma**2
    mass = law[1:].copy()
    inf = 0.0
    extra: tuple[np.ndarray, np.ndarray] | None = None
    if direction == "add":
        loss = -loss
        if upper:  # T_dn = 0, i.e. every Y_i < hy: S >= max Y_i bounds the add loss
            extra, tail = _small_sum_tail(float(law[0]), hy, sigma, t, h)
            inf += tail
        else:
            mass[-1] = 0.0  # T_up >= C: add loss -inf, dropped
    else:
        if upper:
            inf += float(law[-1])  # T_up >= C: remove loss unbounded
            mass[-1] = 0.0
        # lower: T_dn >= C clamped at C (kept); T_dn = 0 (bin 0) is loss -inf: dropped
    # FFT round-off leaves ~1e-18 in every bin: bins below _FLOOR go to +inf (upper) or
    # are dropped (lower), both valid; at most n * _FLOOR of mass moves
    small = mass < _FLOOR
    if upper:
        inf += float(mass[small].sum())
    mass[small] = 0.0
    k = np.ceil(loss / h + 1e-9) if upper else np.floor(loss / h - 1e-9)
    if extra is not None:
        k = np.concatenate([k, extra[0]])
        mass = np.concatenate([mass, extra[1]])
    keep = mass > 0
    if not keep.any():
        return 0, np.zeros(1), inf
    k = k[keep].astype(np.int64)
    lo = int(k.min())
    p = np.bincount(k - lo, weights=mass[keep])
    return lo, p, inf


def _small_sum_tail(mass0: float, hy: float, sigma: float, t: int,
                    h: float) -> tuple[tuple[np.ndarray, np.ndarray] | None, float]:
    """UPPER, add direction, the outcomes with every Y_i < hy (Q-mass ``mass0``).

    There S >= M = max_i Y_i, so the add loss 1/(2 sigma^2) - log(S/t) is at most that of
    M, whose law is F(y)^t (F: the log-normal CDF of one term). Its mass below hy is
    spread over the loss grid (rounded up) down to M = exp(-9/sigma) (F there is
    ndtr(-9) ~ 1e-19); the rest, and ``mass0`` when it is that small, goes to +inf.
    Returns ((grid indices, masses) or None, mass at +inf).
    """
    s = 1.0 / sigma
    y_stop = math.exp(-9.0 * s)
    if hy <= y_stop:
        return None, mass0
    def add_loss(y: np.ndarray | float) -> np.ndarray | float:
        return 0.5 / sigma**2 - np.log(np.asarray(y) / t)
    k0 = int(math.ceil(float(add_loss(hy)) / h + 1e-9))
    k1 = int(math.ceil(float(add_loss(y_stop)) / h)) + 1
    ks = np.arange(k0, k1 + 1)
    ys = t * np.exp(0.5 / sigma**2 - ks * h)  # loss k h  <=>  M = ys[k]
    ys[0] = min(ys[0], hy)
    log_f = t * special.log_ndtr(np.log(np.append(hy, ys)) / s)  # log F(y)^t
    cdf = np.exp(log_f)
    # bin k gets P(M in [ys[k], ys[k-1])) (loss in (k-1, k] h); bin k0 from M in [ys0, hy)
    masses = np.maximum(cdf[:-1] - cdf[1:], 0.0)
    tail = float(cdf[-1])
    total = float(masses.sum()) + tail
    if total <= 0:
        return None, mass0
    scale = mass0 / total  # the convolved bin 0 (round-off aside) is F(hy)^t: rescale
    return (ks.astype(float), masses * scale), tail * scale


# ---------------------------------------------------------------- mean-preserving laws (k = 1)
_U = float(np.finfo(float).eps)
#: unit round-off of np.longdouble (x87 extended on x86-64: 2^-64; double elsewhere)
_U_LD = float(np.finfo(np.longdouble).eps)


class _Part(NamedTuple):
    """One part of the law of T (values j h, index n: absorbed): Q-masses ``q``, first
    moments ``m`` (m_j = E_Q[S; T = j], the index n unused) and bounds on their computed
    errors: e1 / f1 in L1, e2 / f2 in L2 (so on every bin)."""

    h: float
    q: np.ndarray
    m: np.ndarray
    e1: float
    e2: float
    f1: float
    f2: float
    ei: float = 0.0
    fi: float = 0.0
    ev: float = 0.0  # L1 bound of the error of q weighted by the values j h (j < n)


def _ndiff(zl: np.ndarray, zh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(zl < Z <= zh), a bound on its rounding error), from the tail that is smaller."""
    up = zl > 0
    a = np.where(up, special.ndtr(-zl), special.ndtr(zh))
    b = np.where(up, special.ndtr(-zh), special.ndtr(zl))
    d = np.maximum(a - b, 0.0)
    return d, 4.0 * _U * (a + b)


def _kfac(m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """K(m, d) = (1 / 2d) int_{-d}^{d} exp(-m x - x^2 / 2) dx = sum_k He_2k(m) d^2k / (2k+1)!
    (Hermite generating function), to d^8: for (|m| + 4) d <= 0.05 the rest (He_10 d^10 /
    11!) is below 1e-20 relative; so P(|Z - m| <= d) = 2 d phi(m) K(m, d) with no cancellation."""
    m2, d2 = m * m, d * d
    he2 = m2 - 1.0
    he4 = (m2 - 6.0) * m2 + 3.0
    he6 = ((m2 - 15.0) * m2 + 45.0) * m2 - 15.0
    he8 = (((m2 - 28.0) * m2 + 210.0) * m2 - 420.0) * m2 + 105.0
    return 1.0 + d2 * (he2 / 6.0 + d2 * (he4 / 120.0 + d2 * (he6 / 5040.0 + d2 * he8 / 362880.0)))


def _pieces_moments(s: float, h: float, x: np.ndarray, z: np.ndarray, idx: np.ndarray,
                    out: tuple[np.ndarray, ...]) -> None:
    """Intervals ``idx`` of :func:`_leaf` with finite ends: their mass, E[Y; I], E[Y^2; I],
    the error bounds and (whole intervals) the accurate E[Y | I] / h - j, written into
    ``out`` = (mass, g, g2, err, ferr, exact_ey, exact_ey2)."""
    mass, g, g2, err, ferr, exact_ey, exact_ey2 = out
    ld = z.dtype.type  # (extended precision where z is: errors in its unit round-off)
    u_ld = _U_LD if ld is np.longdouble else _U
    zl = z[:-1]
    j = np.arange(z.size - 1, dtype=ld)
    ji = j[idx]
    s = ld(s)
    # the half-width in z without cancellation: log1p(1 / j) / 2s on whole intervals
    # [j h, (j+1) h]; clipped ones (at a or b) from the ratio of their ends
    whole = (x[idx] == ji * h) & (x[idx + 1] == (ji + 1.0) * h) & (ji >= 1)
    with np.errstate(divide="ignore"):
        half = np.where(whole, np.log1p(1.0 / np.maximum(ji, 1.0)),
                        np.log(x[idx + 1].astype(ld) / x[idx])) / (2.0 * s)
    lo = zl[idx]
    pieces = np.maximum(1, np.ceil((np.abs(lo + half) + half + 2.0 * s + 4.0) * half
                                   / 0.05)).astype(np.int64)
    owner = np.repeat(np.arange(idx.size), pieces)
    first = np.cumsum(pieces) - pieces
    k = np.arange(owner.size) - first[owner]
    dd = half[owner] / pieces[owner]
    mm = lo[owner] + (2.0 * k + 1.0) * dd
    c0, c1, c2 = _kfac(mm, dd) - 1.0, _kfac(mm - s, dd) - 1.0, _kfac(mm - 2.0 * s, dd) - 1.0
    ms = 2.0 * dd * np.exp(-0.5 * mm * mm) / np.sqrt(2.0 * np.arccos(ld(-1.0))) * (1.0 + c0)
    r1m1 = (c1 - c0) / (1.0 + c0)  # K(mid - s) / K(mid) - 1
    r2m1 = (c2 - c1) / (1.0 + c1)
    y1 = np.exp(s * mm) * (1.0 + r1m1)  # E[Y | piece]
    y2 = y1 * np.exp(s * mm) * (1.0 + r2m1)  # E[Y^2 | piece]
    mass[idx] = _seg_sum(ms, first)
    g[idx] = _seg_sum(ms * y1, first)
    g2[idx] = _seg_sum(ms * y2, first)
    err[idx] = 16.0 * u_ld * pieces * mass[idx] * (g[idx] / np.maximum(mass[idx], 1e-300)
                                                  / h + 1.0)
    ferr[idx] = 16.0 * u_ld * pieces * g[idx] * (g2[idx] / np.maximum(g[idx], 1e-300)
                                                / h + 1.0)
    # clipped intervals: the ratio of the ends costs an ulp of log, u / (s half) relative
    err[idx] += np.where(whole, 0.0, mass[idx] * 2.0 * u_ld / np.maximum(s * half, 1e-300))
    ferr[idx] += np.where(whole, 0.0, g[idx] * 2.0 * u_ld / np.maximum(s * half, 1e-300))
    # whole intervals: a piece's mid is z_j + u / s, u = s (2k + 1) dd, so E[Y | piece]
    # / h - j = j (expm1(u) + e^u (R1 - 1)), R1 = K(mid - s) / K(mid): no cancellation
    if whole.any():
        wp = whole[owner]
        jp = j[idx][owner][wp]
        u = s * (2.0 * k[wp] + 1.0) * dd[wp]
        eu = np.exp(u)
        f1 = jp * (np.expm1(u) + eu * r1m1[wp])  # E[Y | piece] / h - j
        f2 = jp * (np.expm1(u) + eu * r2m1[wp])  # E[Y^2 | piece] / (h E[Y | piece]) - j
        wm = ms[wp]
        wg = wm * y1[wp]
        sel = idx[whole]
        cnt = np.flatnonzero(whole).size
        starts = (np.cumsum(pieces[whole]) - pieces[whole])
        assert starts.size == cnt
        tot_m = _seg_sum(wm, starts)
        tot_g = _seg_sum(wg, starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            ey_w = _seg_sum(wm * f1, starts) / tot_m
            ey2_w = _seg_sum(wg * f2, starts) / tot_g
        ok = (tot_m > 1e-290) & (tot_g > 1e-290)
        exact_ey[sel[ok]] = ey_w[ok]
        exact_ey2[sel[ok]] = ey2_w[ok]
        g[sel[ok]] = mass[sel[ok]] * h * (j[sel[ok]] + ey_w[ok])
        g2[sel[ok]] = g[sel[ok]] * h * (j[sel[ok]] + ey2_w[ok])
        pw = pieces[whole][ok]
        err[sel[ok]] = 4.0 * (pw + 8.0) * u_ld * mass[sel[ok]]
        ferr[sel[ok]] = 4.0 * (pw + 8.0) * u_ld * g[sel[ok]]



def _seg_sum(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sums of the consecutive segments of ``v`` that begin at ``starts`` (each nonempty),
    in v's precision (np.bincount would round to double)."""
    return np.add.reduceat(v, starts) if v.size else v[:0]


def _zero_interval(s: float, h: float, z: np.ndarray, rest: np.ndarray,
                   out: tuple[np.ndarray, ...]) -> None:
    """The interval of :func:`_leaf` from Y = 0 (z = -inf): tails of the normal CDF
    (accurate there), with their error bounds, written into ``out``."""
    mass, g, g2, err, ferr = out[:5]
    z = z.astype(float)  # (scipy's ndtr is double only: tails, accurate there)
    zl, zh = z[:-1], z[1:]
    j = np.arange(z.size - 1, dtype=float)
    m0, e0 = _ndiff(zl[rest], zh[rest])
    a1, e_1 = _ndiff(zl[rest] - s, zh[rest] - s)
    a2, e_2 = _ndiff(zl[rest] - 2.0 * s, zh[rest] - 2.0 * s)
    mu, mu2 = math.exp(s * s / 2.0), math.exp(2.0 * s * s)
    jj = j[rest]
    mass[rest], g[rest], g2[rest] = m0, a1 * mu, a2 * mu2
    err[rest] = e0 + 2.0 * (e_1 * mu / h + jj * e0) + 8.0 * _U * (a1 * mu / h + jj * m0)
    ferr[rest] = (e_1 * mu + 2.0 * (e_2 * mu2 / h + jj * e_1 * mu)
                  + 8.0 * _U * (a2 * mu2 / h + jj * a1 * mu))


def _leaf(s: float, h: float, n: int, a: float, b: float, ext: bool = False) -> _Part:
    """Y 1{a <= Y < b}, log Y ~ N(0, s^2), rounded at random onto {j h} keeping its mean
    (Y in [j h, (j+1) h] goes to j + 1 with probability Y / h - j): Q-masses q_j, moments
    m_j = E[Y; T = j], Y > (n - 1) h absorbed (index n).

    Per interval I_j: its mass and E[Y; I_j], E[Y^2; I_j], from the local series of
    :func:`_kfac` in z = log Y / s (an interval of half-width d around mid has mass 2 d
    phi(mid) K(mid, d) and E[Y^r | .] = e^(r s mid) K(mid - r s, d) / K(mid, d)), wide
    intervals cut into pieces with (|mid| + 2 s + 4) d <= 0.05: a few ulps each, where CDF
    differences lose everything to cancellation on fine grids. The interval from 0 (z =
    -inf) uses the normal CDF (a tail: accurate). Rounding errors bounded per bin (e1: L1
    of q, f1: of m)."""
    x = np.minimum(np.maximum(np.arange(n, dtype=float) * h, a), b)
    ld = np.longdouble if ext else np.float64  # ext: in extended precision (small deltas)
    with np.errstate(divide="ignore"):
        z = np.log(x.astype(ld)) / ld(s)
    zl, zh = z[:-1], z[1:]
    j = np.arange(n - 1, dtype=ld)
    mass, g, g2 = np.zeros(n - 1, ld), np.zeros(n - 1, ld), np.zeros(n - 1, ld)
    err, ferr = np.zeros(n - 1, ld), np.zeros(n - 1, ld)
    exact_ey, exact_ey2 = np.full(n - 1, np.nan, ld), np.full(n - 1, np.nan, ld)
    # intervals below z = -37.5 hold < 1e-307 (left out: their mass goes to the error)
    fin = np.isfinite(zl) & np.isfinite(zh) & (zh > zl) & (zh > -37.5)
    out = (mass, g, g2, err, ferr, exact_ey, exact_ey2)
    if fin.any():
        _pieces_moments(s, h, x, z, np.flatnonzero(fin), out)
    rest = ~fin & (zh > zl) & ~(np.isfinite(zl) & (zh <= -37.5))
    if rest.any():
        _zero_interval(s, h, z, rest, out)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ey = np.where(mass > 1e-290, (g / mass) / h - j, 0.5)  # E[Y | I_j] / h - j, [0, 1]
        ey2 = np.where(g > 1e-290, (g2 / g) / h - j, 0.5)
    ey = np.where(np.isnan(exact_ey), np.nan_to_num(ey, nan=0.5), exact_ey)
    ey2 = np.where(np.isnan(exact_ey2), np.nan_to_num(ey2, nan=0.5), exact_ey2)
    tiny = zh <= -37.5
    zt_ = zh[tiny].astype(float)
    err[tiny] += 2.0 * special.ndtr(zt_)
    ferr[tiny] += 2.0 * special.ndtr(zt_ - s) * math.exp(s * s / 2.0)
    err += np.where(mass <= 1e-290, 2.0 * mass, 0.0)
    ferr += np.where(g <= 1e-290, 2.0 * g, 0.0)
    up = mass * np.clip(ey, 0.0, 1.0)  # the mass sent up to j + 1
    mup = g * np.clip(ey2, 0.0, 1.0)
    q = np.zeros(n + 1, ld)
    m = np.zeros(n + 1, ld)
    q[:-2] += mass - up
    q[1:-1] += up
    m[:-2] += g - mup
    m[1:-1] += mup
    if ext:
        q, m = q.astype(float), m.astype(float)
        # the one rounding to double: half an ulp of each entry, <= (mass_j + mass_j-1) u / 2
        err += _U * mass
        ferr += _U * g
    top_lo = max(a, (n - 1) * h)
    if b > top_lo:
        zt = math.log(top_lo) / s if top_lo > 0 else -math.inf
        zb = math.log(b) / s if math.isfinite(b) else math.inf
        top, top_err = _ndiff(np.array([zt]), np.array([zb]))
        q[n] = float(top[0])
    else:
        top_err = np.zeros(1)
    # err_j bounds the error of what bin j sends to j and to j + 1: a bin gathers <= two
    e1 = 2.0 * float(err.sum()) + float(top_err[0])
    f1 = 2.0 * float(ferr.sum())
    e2, f2 = 2.0 * float(np.sqrt(np.dot(err, err))), 2.0 * float(np.sqrt(np.dot(ferr, ferr)))
    ei, fi = 2.0 * float(err.max(initial=0.0)), 2.0 * float(ferr.max(initial=0.0))
    ev = 2.0 * float((err * (j + 1.0)).sum()) * h
    return _flushed(_Part(h, q, m, e1, e2, f1, f2, ei, fi, ev))


#: masses and moments below this are set to 0 (their sum joins the error bounds): their
#: squares are subnormal, which slows every dot product by orders of magnitude
_TINY = 1e-150


def _flushed(p: _Part) -> _Part:
    """``p`` with entries of q and m below _TINY zeroed, the removed amounts added to the
    error bounds (L1, L2, sup, value-weighted)."""
    n = p.q.size - 1
    small_q = p.q[:n] < _TINY
    small_m = p.m[:n] < _TINY
    if not (small_q.any() or small_m.any()):
        return p
    q, m = p.q.copy(), p.m.copy()
    dq = float(q[:n][small_q].sum())
    dm = float(m[:n][small_m].sum())
    dv = float((q[:n][small_q] * np.flatnonzero(small_q)).sum()) * p.h
    q[:n][small_q] = 0.0
    m[:n][small_m] = 0.0
    return _Part(p.h, q, m, p.e1 + dq, p.e2 + dq, p.f1 + dm, p.f2 + dm, p.ei + _TINY,
                 p.fi + _TINY, p.ev + dv)


def _mp_rebin(p: _Part, h_new: float, n_new: int, ext: bool = False) -> _Part:
    """``p`` moved onto {j h_new} (n_new + 1 bins) keeping every value's mean: the mass at
    x goes to floor(x / h_new) and the next point in proportion; x > (n_new - 1) h_new and
    the old absorbed bin are absorbed. Moments split with the masses."""
    n_old = p.q.size - 1
    x = np.arange(n_old, dtype=float) * (p.h / h_new)
    keep = x <= n_new - 1
    lo = np.floor(x[keep]).astype(np.int64)
    w = x[keep] - lo
    q, m = p.q[:n_old][keep], p.m[:n_old][keep]
    if ext:
        nq, nm = _split_ld(q, lo, w, n_new), _split_ld(m, lo, w, n_new)
    else:
        nq = (np.bincount(lo, q * (1.0 - w), n_new + 1)
              + np.bincount(lo + 1, q * w, n_new + 1))[: n_new + 1]
        nm = (np.bincount(lo, m * (1.0 - w), n_new + 1)
              + np.bincount(lo + 1, m * w, n_new + 1))[: n_new + 1]
    nq[n_new] = p.q[n_old] + float(p.q[:n_old][~keep].sum())
    nm[n_new] = 0.0
    # a bin's error gathers those of the old bins sent to it (row sums of the split)
    rows = np.bincount(lo, 1.0 - w, n_new + 1) + np.bincount(lo + 1, w, n_new + 1)
    r = max(1.0, float(rows.max()) if rows.size else 1.0)
    # a new bin's error: sum_i w_i e_i with sum_i w_i <= r, w_i <= 1 (Hoelder); plus the
    # rounding of the split itself (:func:`_split_ld`), relative per entry
    terms = math.ceil(h_new / p.h) + 1.0 if h_new >= p.h else 2.0
    # (in double: the same count of roundings, of the double's unit round-off _U / 2)
    g = 1.01 * ((2.0 * terms + 6.0) * _U_LD + _U / 2.0) if ext else 1.01 * (
        2.0 * terms + 6.0) * _U / 2.0
    # the new entries' norms from the old ones (the split keeps mass and mean, a new entry
    # gathers <= r times the largest old one; 1.01: their own rounding), not from the new
    # arrays, whose subnormal entries would slow every product; |v|_2 <= sqrt(|v|_1 |v|_inf)
    sq, sm = 1.01 * float(q.sum()), 1.01 * float(m.sum())
    mq = 1.01 * r * float(q.max(initial=0.0))
    mm = 1.01 * r * float(m.max(initial=0.0))
    d1q, d1m = g * sq, g * sm
    d2q, d2m = g * math.sqrt(sq * mq), g * math.sqrt(sm * mm)
    dv = g * 1.01 * float(np.einsum("i,i->", q, x[keep])) * h_new
    return _Part(h_new, nq, nm, p.e1 + d1q, min(p.e2 * math.sqrt(r), p.e1) + d2q, p.f1 + d1m,
                 min(p.f2 * math.sqrt(r), p.f1) + d2m,
                 min(p.ei * r, p.e2 * math.sqrt(r), p.e1) + g * mq,
                 min(p.fi * r, p.f2 * math.sqrt(r), p.f1) + g * mm,
                 p.ev + h_new * p.e1 + dv)


def _split_ld(v: np.ndarray, lo: np.ndarray, w: np.ndarray, n_new: int) -> np.ndarray:
    """sum_i v_i (1 - w_i) at lo_i and v_i w_i at lo_i + 1 (lo nondecreasing), in extended
    precision, rounded once to double. An entry gathers <= ``terms`` = ceil(h_new / h_old)
    + 1 nonnegative products from each side (w = x - floor(x) is exact, 1 - w and each
    product one rounding, the additions one each): <= 2 terms + 6 extended ulps of it,
    then half an ulp of double."""
    out = np.zeros(n_new + 2, np.longdouble)
    if v.size:
        ld = np.longdouble
        vv, ww = v.astype(ld), w.astype(ld)
        starts = np.flatnonzero(np.r_[True, lo[1:] != lo[:-1]])
        out[lo[starts]] += np.add.reduceat(vv * (1 - ww), starts)
        out[lo[starts] + 1] += np.add.reduceat(vv * ww, starts)
    return out[: n_new + 1].astype(float)


class _Norms(NamedTuple):
    q1: float
    q2: float
    qi: float
    m1: float
    m2: float
    mi: float
    v: float  # sum_j q_j j h


def _norms(p: _Part, n: int) -> _Norms:
    """L1, L2 and sup norms of q and m below the absorbed bin, and the first moment of q
    on the grid (q, m >= 0: their sums are their L1 norms)."""
    q, m = p.q[:n], p.m[:n]
    return _Norms(float(q.sum()), math.sqrt(float(np.einsum("i,i->", q, q))), float(q.max()),
                  float(m.sum()), math.sqrt(float(np.einsum("i,i->", m, m))), float(m.max()),
                  float(np.einsum("i,i->", q, np.arange(n, dtype=float))) * p.h)


def _young2(e1: float, e2: float, b1: float, b2: float) -> float:
    """Bound on |e * b|_2 from |e|_1, |e|_2 and |b|_1, |b|_2 (Young's inequality)."""
    return min(e2 * b1, e1 * b2)


def _youngi(e1: float, e2: float, ei: float, b1: float, b2: float, bi: float) -> float:
    """Bound on |e * b|_inf (Young's / Hoelder's inequality)."""
    return min(ei * b1, e2 * b2, e1 * bi)


def _split(v: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(bulk, rest): the first w entries, and v with them zeroed."""
    rest = v.copy()
    rest[:w] = 0.0
    return v[:w], rest


def _nrm(v: np.ndarray) -> tuple[float, float]:
    """(L1, L2) norms."""
    return float(np.abs(v).sum()), math.sqrt(float(np.einsum("i,i->", v, v)))


def _rho(x: tuple[float, float], y: tuple[float, float]) -> float:
    """|x|_2 |y|_1 + |x|_1 |y|_2: the round-off of an FFT product x * y is a few ulps x
    log2(length) x this in L2 (forward transforms, product, inverse)."""
    return x[1] * y[0] + x[0] * y[1]


def _conv_errors(a: _Part, b: _Part, na: _Norms, nb: _Norms,
                 r: tuple[float, ...]) -> tuple[float, ...]:
    """Error bounds (e1, e2, f1, f2, ei, fi, ev) of the convolution of ``a`` and ``b``:
    theirs propagated by Young's / Hoelder's inequalities (e * b: |e|_p |b|_1, |e|_1 |b|_p,
    ...) plus the round-off r = (L1, L2 of q; L1, L2 of m; value-weighted L1 of q)."""
    r1q, r2q, r1m, r2m, rv = r
    n = a.q.size - 1
    e1 = a.e1 * (nb.q1 + b.q[n] + b.e1) + (na.q1 + a.q[n]) * b.e1 + 2.0 * r1q  # (top too)
    e2 = _young2(a.e1, a.e2, nb.q1, nb.q2) + _young2(b.e1, b.e2, na.q1, na.q2) + a.e2 * b.e1 + r2q
    ei = (_youngi(a.e1, a.e2, a.ei, nb.q1, nb.q2, nb.qi)
          + _youngi(b.e1, b.e2, b.ei, na.q1, na.q2, na.qi) + a.ei * b.e1 + r2q)
    # m = m_A * q_B + q_A * m_B: four products, each with its own error terms
    f1 = (a.f1 * (nb.q1 + b.e1) + na.m1 * b.e1 + a.e1 * (nb.m1 + b.f1) + na.q1 * b.f1 + r1m)
    f2 = (_young2(a.f1, a.f2, nb.q1, nb.q2) + _young2(b.e1, b.e2, na.m1, na.m2)
          + _young2(a.e1, a.e2, nb.m1, nb.m2) + _young2(b.f1, b.f2, na.q1, na.q2)
          + a.f2 * b.e1 + a.e2 * b.f1 + r2m)
    fi = (_youngi(a.f1, a.f2, a.fi, nb.q1, nb.q2, nb.qi)
          + _youngi(b.e1, b.e2, b.ei, na.m1, na.m2, na.mi)
          + _youngi(a.e1, a.e2, a.ei, nb.m1, nb.m2, nb.mi)
          + _youngi(b.f1, b.f2, b.fi, na.q1, na.q2, na.qi) + a.fi * b.e1 + a.ei * b.f1 + r2m)
    ev = (a.ev * (nb.q1 + b.e1) + a.e1 * (nb.v + b.ev) + b.ev * na.q1 + b.e1 * na.v + 2.0 * rv)
    return e1, e2, f1, f2, ei, fi, ev


def _mp_conv(a: _Part, b: _Part, direct: int = _DIRECT, ext: bool = True) -> _Part:
    """The law of A + B (same grid, absorbing top) and its moments m = m_A * q_B + q_A *
    m_B, by FFT, with the error bounds propagated (Young's inequality) and the round-off
    added (L2 per FFT, times sqrt(length) in L1).

    Early partial sums sit in a few bins of a long grid (the cap allows one term up to c):
    each law is split into its bulk (the first w bins, all but 1e-5 of the mass) and the
    rest r; bulk * bulk is summed directly (a short FFT for w > _DIRECT), and a * b - bulk
    * bulk = a * r_b + r_a * bulk_b (every product with a rest factor, whose small norms
    bound the round-off) goes through the long FFT. ``ext`` False: the direct sums in double
    (relative error per entry (2 chain + 3) ulps of double: still relative, where an FFT's is
    absolute; several times faster than extended precision)."""
    n = a.q.size - 1
    same = b is a
    qa, qb, ma, mb = a.q[:n], b.q[:n], a.m[:n], b.m[:n]
    tail_a = np.cumsum(qa[::-1])[::-1]
    tail_b = tail_a if same else np.cumsum(qb[::-1])[::-1]
    lim = 1e-5 * max(float(tail_a[0]) + float(tail_b[0]), 1e-300)
    w = max(int(np.searchsorted(-tail_a, -lim)), int(np.searchsorted(-tail_b, -lim)), 1)
    nfft = sfft.next_fast_len(2 * n, real=True)
    c_l = 8.0 * _U * math.log2(nfft)
    na, nb = _norms(a, n), _norms(b, n)
    if w > n // 8 and w > direct:  # spread out: one long FFT
        fqa, fma = sfft.rfft(qa, nfft), sfft.rfft(ma, nfft)
        fqb, fmb = (fqa, fma) if same else (sfft.rfft(qb, nfft), sfft.rfft(mb, nfft))
        full = sfft.irfft(fqa * fqb, nfft)
        cq, cm = full[:n], sfft.irfft(fma * fqb + fqa * fmb, nfft)[:n]
        top = float(full[n:].sum())
        r2q = c_l * _rho((na.q1, na.q2), (nb.q1, nb.q2))
        r2m = c_l * (_rho((na.m1, na.m2), (nb.q1, nb.q2)) + _rho((na.q1, na.q2), (nb.m1, nb.m2)))
        r1q, r1m = math.sqrt(nfft) * r2q, math.sqrt(nfft) * r2m
        rv = n * a.h * r1q
    else:
        ns = sfft.next_fast_len(2 * w, real=True)
        c_s = 8.0 * _U * math.log2(ns)
        bqa, tqa = _split(qa, w)
        bma, tma = _split(ma, w)
        bqb, tqb = (bqa, tqa) if same else _split(qb, w)
        bmb, tmb = (bma, tma) if same else _split(mb, w)
        nbqa, nbqb, nbma, nbmb = _nrm(bqa), _nrm(bqb), _nrm(bma), _nrm(bmb)
        if w <= direct:  # bulk * bulk summed directly in extended precision
            sq, chain = _blocked_conv(bqa, bqb, ext)
            sm = _blocked_conv(bma, bqb, ext)[0] + _blocked_conv(bqa, bmb, ext)[0]
            sq, sm = sq.astype(float), sm.astype(float)
            # every entry is a sum of nonnegative products along chains of <= ``chain``
            # roundings: off by <= (2 chain + 2) ulps of the extended type (twice the
            # classical gamma bound), then one rounding to nearest double (half an ulp,
            # _U / 2): relative, per entry; in double (ext False): (2 chain + 3) ulps of it
            g = 1.01 * ((2 * chain + 2) * _U_LD + _U / 2.0) if ext else 1.01 * (
                (2 * chain + 3) * _U)
            s1q, s2q = g * float(sq.sum()), g * math.sqrt(float(np.dot(sq, sq)))
            s1m, s2m = g * float(sm.sum()), g * math.sqrt(float(np.dot(sm, sm)))
            over = float(sq[n:].sum())  # (w > n / 2: bulk sums at or above the top)
            sq, sm = sq[:n], sm[:n]
        else:  # short FFT (2 w <= n / 4: nothing at or above the top)
            over = 0.0
            fbqa, fbma = sfft.rfft(bqa, ns), sfft.rfft(bma, ns)
            fbqb, fbmb = (fbqa, fbma) if same else (sfft.rfft(bqb, ns), sfft.rfft(bmb, ns))
            sq = sfft.irfft(fbqa * fbqb, ns)[: min(ns, n)]
            sm = sfft.irfft(fbma * fbqb + fbqa * fbmb, ns)[: min(ns, n)]
            s2q = c_s * _rho(nbqa, nbqb)
            s2m = c_s * (_rho(nbma, nbqb) + _rho(nbqa, nbmb))
            s1q, s1m = math.sqrt(ns) * s2q, math.sqrt(ns) * s2m
        # long FFT: a * r_b + r_a * bulk_b (F(bulk) = F(all) - F(rest): exact algebra, and
        # its round-off enters only multiplied by a rest)
        fqa, fta, fma, ftma = (sfft.rfft(v, nfft) for v in (qa, tqa, ma, tma))
        if same:
            fqb, ftb, fmb, ftmb = fqa, fta, fma, ftma
        else:
            fqb, ftb, fmb, ftmb = (sfft.rfft(v, nfft) for v in (qb, tqb, mb, tmb))
        fbb, fbmb_l = fqb - ftb, fmb - ftmb
        lfull = sfft.irfft(fqa * ftb + fta * fbb, nfft)
        lq = lfull[:n]
        lm = sfft.irfft(fma * ftb + ftma * fbb + fqa * ftmb + fta * fbmb_l, nfft)[:n]
        nqa, nqb, nma, nmb = (na.q1, na.q2), (nb.q1, nb.q2), (na.m1, na.m2), (nb.m1, nb.m2)
        ntqa, ntqb, ntma, ntmb = _nrm(tqa), _nrm(tqb), _nrm(tma), _nrm(tmb)
        # bulk_b as F(b) - F(r_b): norms of b plus r_b
        nbb = (nqb[0] + ntqb[0], nqb[1] + ntqb[1])
        nbmb_l = (nmb[0] + ntmb[0], nmb[1] + ntmb[1])
        l2q = c_l * (_rho(nqa, ntqb) + _rho(ntqa, nbb))
        l2m = c_l * (_rho(nma, ntqb) + _rho(ntma, nbb) + _rho(nqa, ntmb) + _rho(ntqa, nbmb_l))
        cq, cm = lq, lm
        cq[: sq.size] += sq
        cm[: sm.size] += sm
        # mass at or above n: the long part's, and the bulk's where 2 w > n
        top = float(lfull[n:].sum()) + over
        r2q, r2m = s2q + l2q, s2m + l2m
        r1q = s1q + math.sqrt(nfft) * l2q
        r1m = s1m + math.sqrt(nfft) * l2m
        rv = 2 * w * a.h * s1q + n * a.h * math.sqrt(nfft) * l2q
    q = np.empty(n + 1)
    q[:n] = np.maximum(cq, 0.0)
    q[n] = max(top, 0.0) + a.q[n] + b.q[n] - a.q[n] * b.q[n]
    m = np.zeros(n + 1)
    m[:n] = np.maximum(cm, 0.0)
    errs = _conv_errors(a, b, na, nb, (r1q, r2q, r1m, r2m, rv))
    return _flushed(_Part(a.h, q, m, *errs))


def _blocked_conv(a: np.ndarray, b: np.ndarray, ext: bool = True) -> tuple[np.ndarray, int]:
    """(a * b in extended precision (in double where ``ext`` is False), the longest chain of
    roundings behind an entry).

    b is cut into blocks of ~sqrt(len b): each block's products are summed by np.convolve
    (<= block terms), then the blocks' partial results are added (<= blocks terms), so an
    entry's rounding error is <= (block + blocks) ulps of its exact value (nonnegative
    terms; any summation order), where one convolution gives len(b) ulps."""
    ld = np.longdouble if ext else np.float64
    a, b = a.astype(ld), b.astype(ld)
    size = max(1, math.isqrt(max(b.size, 1)))
    out = np.zeros(a.size + b.size - 1, ld)
    blocks = 0
    for start in range(0, b.size, size):
        part = np.convolve(a, b[start:start + size])
        out[start:start + part.size] += part
        blocks += 1
    return out, size + blocks + 1


def _small_leaf(s: float, c: float, bins: int, ext: bool = False) -> _Part:
    """The leaf Y 1{Y <= c} on a grid of step sd(Y) / 100 (rounding noise <= 1/40,000 of
    Var Y), within [c / 2^21, c / 64]."""
    sd = math.exp(s * s / 2.0) * math.sqrt(math.expm1(s * s))
    h = min(max(sd / 100.0, c / 2**21), c / 64.0)
    n = int(math.ceil(c / h)) + 1
    return _leaf(s, c / (n - 1), n, 0.0, c, ext)


def _mp_point(h: float, n: int) -> _Part:
    """The point mass at 0 (a sum of no terms)."""
    q = np.zeros(n + 1)
    q[0] = 1.0
    return _Part(h, q, np.zeros(n + 1), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _threshold(s: float, t: int, tail: float) -> float:
    """log c: the smallest (bisection) with P'(N >= 2) <= tail, N = #{i: Y_i > c}, P' the
    law dP = (S / (t mu)) dQ (the remove pair's P): the tilted term above c and another one,
    or two plain ones, (t - 1) p p' + (t - 1)^2 p^2 / 2 with p = Q(Y > c), p' = P(Y_1 > c)."""
    if t == 1:
        return 0.0

    def excess(lam: float) -> float:
        p = special.ndtr(-lam / s)
        pt = special.ndtr((s * s - lam) / s)
        return (t - 1) * p * pt + 0.5 * ((t - 1) * p) ** 2 - tail

    lo, hi = 0.0, s * s + 40.0 * s
    if excess(lo) <= 0:
        return lo
    return _bisect_down(excess, lo, hi)


def _bisect_down(excess: Any, lo: float, hi: float) -> float:
    """The smallest x in [lo, hi] (to 60 halvings) with ``excess(x) <= 0``, for an ``excess``
    non-increasing in x with excess(hi) <= 0: the upper end of the bracket (valid side)."""
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


class _Epoch(NamedTuple):
    """One epoch of the k = 1 pair: the law of T in two parts (N = 0: every term <= c, on
    a fine grid; N = 1: one term above c, on a coarse one), X = S / scale (scale = t mu)."""

    parts: tuple[_Part, ...]
    scale: float


@functools.lru_cache(maxsize=32)
def _epoch(sigma: float, t: int, bins: int = _MP_BINS, tail: float = 1e-10,
           direct: int = _DIRECT) -> _Epoch:
    """The Q-law of the mean-preserving rounded sum T of S = sum_i Y_i (module doc), split
    by N = #{i: Y_i > c}: N = 0 (t small terms, fine grid), N = 1 (t x one big term plus t -
    1 small ones, coarse grid); N >= 2 (P'-mass <= tail / 10) is left out (absorbed)."""
    s = 1.0 / sigma
    mu = math.exp(s * s / 2.0)
    sd = mu * math.sqrt(math.expm1(s * s))
    lam = _threshold(s, t, tail / 10.0)
    c = math.exp(lam)

    def cap0(count: int) -> float:
        return min(count * c, count * mu + 12.0 * sd * math.sqrt(count) + 2.0 * c)

    ext = direct > _DIRECT  # small-delta grids: leaves and rebinning in extended precision
    leaf = _small_leaf(s, c, bins, ext)
    # R: the sum of t - 1 small terms, by repeated squaring, each partial sum of `count`
    # terms on its own grid cap0(count) / bins
    m_left, base, c_b = t - 1, leaf, 1
    rest: _Part | None = None
    c_r = 0
    while m_left:
        if m_left & 1:
            if rest is None:
                rest, c_r = base, c_b
            else:
                c_r += c_b
                hn = cap0(c_r) / bins
                rest = _mp_conv(_mp_rebin(rest, hn, bins, ext), _mp_rebin(base, hn, bins, ext),
                                direct)
        m_left >>= 1
        if m_left:
            c_b *= 2
            b2 = _mp_rebin(base, cap0(c_b) / bins, bins, ext)
            base = _mp_conv(b2, b2, direct)
    if rest is None:
        rest = _mp_point(leaf.h, bins)
    h0 = cap0(t) / bins
    part0 = _mp_conv(_mp_rebin(rest, h0, bins, ext), _mp_rebin(leaf, h0, bins, ext), direct)
    if t == 1:
        part0 = _mp_rebin(leaf, h0, bins, ext)
    z = max(_Z_TAIL, -float(special.ndtri(tail)))
    cap1 = max(2.0 * c, cap0(max(t - 1, 1)) + math.exp(s * s + z * s))
    h1 = cap1 / bins
    big = _leaf(s, h1, bins, c, math.inf, ext)
    part1 = _mp_conv(_mp_rebin(rest, h1, bins, ext), big, direct)
    part1 = _Part(h1, part1.q * t, part1.m * t, *(t * e for e in part1[3:]))
    return _Epoch((part0, part1), t * mu)


def _mean_preserving(sigma: float, t: int, tail: float,
                     small: bool = False) -> _Epoch | None:
    """:func:`_epoch` on the coarsest grid (2^16 bins, up to 2^20 at small t: about 2^23 bin
    x levels) whose N = 0 part keeps at most 100 ``tail`` of Q-mass at T = 0 (X' = 0, an
    add loss of +inf; the threshold c of the largest term sets that grid, coarse against the
    bulk of S for heavy tails), or None where none does (sigma below ~0.4): there the
    one-sided rounding of :func:`_laws` (one epoch: the tail sets eps) is used."""
    s = 1.0 / sigma
    c = math.exp(_threshold(s, t, tail / 10.0))
    mu = math.exp(s * s / 2.0)
    sd = mu * math.sqrt(math.expm1(s * s))
    cap = min(t * c, t * mu + 12.0 * sd * math.sqrt(t) + 2.0 * c)
    levels = math.ceil(math.log2(max(t, 2))) + 3
    # small deltas (``small``): a coarser first grid with every early partial sum convolved
    # directly in extended precision (round-off relative per entry, where the FFT's is
    # absolute and multiplied by t / count up the tree): the error bounds ~10x smaller
    grids = (_MP_BINS // 16, _MP_BINS // 4, _MP_BINS) if small else (
        _MP_BINS, 4 * _MP_BINS, 16 * _MP_BINS)
    direct = _SMALL_DIRECT if small else _DIRECT
    # Q(T = 0) allowed: 100 tail a composition (1e-8 at the default tail); small-delta
    # variants (tail = delta 1e-3 / (2 t x compositions)): delta / 200 over all compositions
    limit = 10.0 * t * tail if small else 100.0 * tail
    for bins in grids:
        if bins > grids[0] and bins * levels > 2**23:
            break
        h0 = cap / bins
        # Q(T = 0) <= Q(S < h0) <= Q(every Y_i < h0): no need to build the laws to know
        log_all = t * float(special.log_ndtr(math.log(h0) / s))
        if log_all < math.log(tail * 1e-3):
            return _epoch(sigma, t, bins, tail, direct)
        if h0 > 0.05 * t * mu:  # a twentieth of E[S] or more: T = 0 holds more than tail
            continue
        ep = _epoch(sigma, t, bins, tail, direct)
        at_zero = 1.0 - sum(float(p.q[1:-1].sum()) for p in ep.parts)
        if at_zero <= limit:
            return ep
        # (a speed heuristic only) Q(T = 0) ~ E[(1 - Y / h)_+]^t: a 4x finer grid gains
        # orders of magnitude at large t, little at small t
        if at_zero > 1e-3 or (not small and t < 50 and at_zero > 10.0 * limit):
            return None
    return None


#: P-mass at each end of the losses of one epoch moved validly (see _epoch_pmf)
_TAIL_CUT = 1e-13
#: losses are moved by this much on the safe side (float error in log and in the values)
_ETA = 1e-9


def _epoch_pairs(ep: _Epoch, direction: str, upper: bool):
    """Atoms (P-mass, Q-mass, loss) of the one-epoch pair in ``direction``, and the mass at
    +inf and L1 allowance (upper), from the parts of :func:`_epoch` (module doc).

    Upper (dominating: Ũ = T h / (t mu) is a mean-preserving spread of X = dP/dQ under Q,
    Blackwell): Q-mass q_j at X' = v_j / (t mu), P-mass q_j X'; the rest of P (absorbed,
    N >= 2) at +inf. add: the two swapped (its Q-mass with no P-mass at +inf). Lower (a
    garbling of the realised pair: T and N are a randomised function of the output): P-mass
    m_j / (t mu), Q-mass q_j, lowered / raised by the bound on each bin's error."""
    ps, qs = [], []
    inf, allow = 0.0, 0.0
    for part in ep.parts:
        n = part.q.size - 1
        v = np.arange(n, dtype=float) * part.h / ep.scale
        q = part.q[:n]
        if upper:  # the atoms' and the +inf mass's errors (L1 of the P-role law)
            p = q * v
            allow += 2.0 * (part.ev / ep.scale if direction == "remove" else part.e1)
            qm = q
        else:
            if direction == "remove":
                p = np.maximum(part.m[:n] - part.fi, 0.0) / ep.scale
                qm = q + part.ei
            else:
                p = np.maximum(part.m[:n] + part.fi, 0.0) / ep.scale
                qm = np.maximum(q - part.ei, 0.0)
        keep = (p > 0) & (qm > 0)
        ps.append(p[keep])
        qs.append(qm[keep])
    p = np.concatenate(ps)
    q = np.concatenate(qs)
    if direction == "add":
        p, q = q, p
    loss = np.log(p) - np.log(q)
    if upper:
        total = float(p.sum())
        inf = max(0.0, 1.0 - total)
        loss = loss + _ETA
    else:
        loss = loss - _ETA
    return p, loss, inf, allow


def _cut_range(k: np.ndarray, p: np.ndarray, low: float,
               high: float) -> tuple[int, int, float, float]:
    """(k_lo, k_hi, P-mass below k_lo, P-mass above k_hi): the loss intervals that hold all
    but ``low`` / ``high`` of the P-mass at each end."""
    order = np.argsort(k, kind="stable")
    ks, cum = k[order], np.cumsum(p[order])
    lo = int(np.searchsorted(cum, low, side="right"))
    hi = int(np.searchsorted(cum, cum[-1] - high, side="left"))
    lo, hi = min(lo, ks.size - 1), max(min(hi, ks.size - 1), min(lo, ks.size - 1))
    k_lo, k_hi = int(ks[lo]), int(ks[hi])
    below = float(p[k < k_lo].sum())
    above = float(p[k > k_hi].sum())
    return k_lo, k_hi, below, above


def _epoch_pmf(ep: _Epoch, h: float, direction: str, upper: bool, tail: float = 1e-10):
    """Discrete PLD (``accounting.pld._PMF``) of one epoch on {k h}: the atoms of
    :func:`_epoch_pairs` bucketed into loss intervals [k h, (k+1) h) and discretised as
    :mod:`accounting.pld` does for its pairs (connect-the-dots upper, merge-down lower);
    returns (pmf, allowance).

    The extreme losses, _TAIL_CUT of P-mass at each end (FFT round-off far from the bulk,
    which would stretch the grid over millions of points), are moved validly: upper, the
    low end rounded up onto the grid and the high end to +inf; lower, both dropped (the
    composed delta loses at most that mass per composition), and at the low end up to 10
    ``tail`` (bins whose error bounds crush their loss far below the bulk: t ~ 10^5)."""
    from . import pld

    p, loss, inf, allow = _epoch_pairs(ep, direction, upper)
    k = np.floor(loss / h).astype(np.int64)
    cut = min(_TAIL_CUT, 10.0 * tail)  # (small-delta variants: scaled with their tail)
    k0, k1, below, above = _cut_range(k, p, cut if upper else max(cut, 10.0 * tail), cut)
    sel = (k >= k0) & (k <= k1)
    idx = k[sel] - k0
    width = k1 - k0 + 1
    pm = np.bincount(idx, p[sel], width)
    qm = np.bincount(idx, p[sel] * np.exp(-loss[sel]), width)
    pmf = pld._discretise(pm[None], qm[None], np.array([below if upper else 0.0]),
                          np.array([inf + above if upper else 0.0]), k0, h, upper)[0]
    return pmf, allow


# ---------------------------------------------------------------- the event
@dataclass(frozen=True, init=False)
class RandomAllocation(Event):
    """``epochs`` epochs of random allocation: each example in ``selected`` (k) of the
    ``steps_per_epoch`` (t) steps of an epoch, uniformly at random, Gaussian noise
    multiplier ``sigma`` (L2 sensitivity 1 per step), add/remove adjacency.

    ``RandomAllocation(sigma, steps, selected=1, epochs=1)``: ``steps`` is t (per epoch);
    :attr:`steps` (the Event contract) is the number of releases, t x epochs.
    """

    sigma: float
    steps_per_epoch: int
    selected: int
    epochs: int
    note: str
    relation: str
    kind: ClassVar[str] = "random_allocation"
    #: per-node tail probability of the capped sums (:func:`_laws`)
    _tail: ClassVar[float] = 1e-10
    #: small-delta grids (:meth:`for_delta`)
    _small: ClassVar[bool] = False
    #: how the batches are drawn (:mod:`accounting.relations`)
    sampling: ClassVar[str] = "random-allocation"

    def __init__(self, sigma: float, steps: int, selected: int = 1, epochs: int = 1,
                 note: str = "", relation: str = "add-remove") -> None:
        if relation not in ("add-remove", "zero-out"):
            raise ValueError(
                f"relation={relation!r}: random allocation is certified under 'add-remove' and "
                "'zero-out' (a zeroed example is still dealt into its steps and moves nothing, "
                "the same pair as removing it); for 'replace-one' account the ledger under "
                "add-remove and convert with group privacy (ledger.converted)")
        sigma = check_positive("sigma", sigma)
        if math.isinf(sigma):
            raise ValueError("sigma must be finite")
        t = check_count("steps", steps, minimum=1)
        k = check_count("selected", selected, minimum=1)
        if k > t:
            raise ValueError(f"selected (k={k}) must be <= steps (t={t}): every example is "
                             "in k distinct steps of an epoch")
        e = check_count("epochs", epochs, minimum=1)
        if t > 10**6:
            raise ValueError(f"steps (t={t}) above 10**6 per epoch is not supported")
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "steps_per_epoch", t)
        object.__setattr__(self, "selected", k)
        object.__setattr__(self, "epochs", e)
        object.__setattr__(self, "note", str(note))
        object.__setattr__(self, "relation", relation)

    # Event contract
    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def groups_of(self) -> int:
        """m = floor(t / k): the upper bound is k concurrent 1-of-m allocations (module doc)."""
        return self.steps_per_epoch // self.selected

    @property
    def reduction(self) -> str:
        """How the upper bound is obtained: "exact" (k = 1), "groups" (k x 1-of-m, m =
        floor(t/k) >= 2), "none" (m = 1: k Gaussian releases per epoch)."""
        if self.selected == 1:
            return "exact"
        return "groups" if self.groups_of >= 2 else "none"

    @property
    def count(self) -> int:
        """Compositions of one per-epoch PLD in the upper bound (epochs, or epochs x k)."""
        return self.epochs * (1 if self.selected == 1 else self.selected)

    @property
    def lower_kind(self) -> str:
        """What the lower end is: "realised" (k = 1: the realised pair, which is the
        dominating one), "binned" (k > 1: a post-processing of the realised k-of-t pair,
        :func:`_binned_pair`), "sum" (the sum of the outputs, where the log-normal
        machinery does not apply: sigma below ~0.06, or k = t). All three are certified
        lower bounds on the eps of the scheme that ran."""
        if not _exact_ok(self.sigma, self.steps_per_epoch) or self.selected == self.steps_per_epoch:
            return "sum" if self.steps_per_epoch > 1 else "realised"
        return "realised" if self.selected == 1 else "binned"

    def describe(self) -> str:
        t, k, m = self.steps_per_epoch, self.selected, self.groups_of
        sub = f" of a uniform {k * m}-step subset" if t % k else ""
        how = {"exact": "", "groups": f" (bound: {k} x 1-of-{m}{sub})",
               "none": " (bound: no amplification, k > t/2)"}[self.reduction]
        return (f"random allocation {self.selected} of {self.steps_per_epoch} steps, "
                f"Gaussian sigma={self.sigma:.6g} x {self.epochs} epoch(s){how}"
                f"{self._note()}")

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "sigma": self.sigma, "steps": self.steps_per_epoch,
                "selected": self.selected, "epochs": self.epochs, "note": self.note,
                "relation": self.relation}

    # ------------------------------------------------------------ PLD hooks
    def for_delta(self, delta: float) -> RandomAllocation:
        """The same event with its discrete PLD built for a target ``delta`` (the optional
        PLDPart protocol method of :func:`accounting.pld.pld_epsilon`): per-node tails
        delta 1e-3 / (2 t x compositions) (N >= 2, cap overflow: absorbed at +inf) and the
        small-delta grids of :func:`_mean_preserving`; the same pair, so the same bounds
        hold, only the allowances are smaller."""
        tail = max(1e-300, min(self._tail, delta * 1e-3 / (2.0 * self.steps_per_epoch
                                                            * self.count)))
        return _variant(tail, True)(self.sigma, self.steps_per_epoch, self.selected,
                                    self.epochs, self.note, self.relation)

    def pld_loss_variance(self) -> float:
        """Variance of the one-epoch privacy loss under P (sets the PLD grid step)."""
        m = self.groups_of
        if m == 1 or not _exact_ok(self.sigma, m):
            return self.selected / self.sigma**2
        ep = _mean_preserving(self.sigma, m, self._tail, self._small)
        if ep is not None:
            p, loss, _, _ = _epoch_pairs(ep, "remove", True)
            w = p / max(float(p.sum()), 1e-300)
        else:
            laws = _laws(self.sigma, m, _BINS, self._tail)
            n = laws.p_dn.size - 1
            j = np.arange(1, n + 1, dtype=float)
            loss = np.log(j * laws.hy / m) - 0.5 / self.sigma**2
            w = laws.p_dn[1:] / max(float(laws.p_dn[1:].sum()), 1e-300)
        mean = float((w * loss).sum())
        return float(self.selected * (w * (loss - mean) ** 2).sum())

    def pld_parts(self, h: float, direction: str, upper: bool) -> tuple[list, float]:
        """Discrete PLDs (``accounting.pld._PMF``, count) of this event on the loss grid
        {k h} for one direction ("remove"/"add") and side, and its round-off allowance."""
        from . import pld

        t, k, m = self.steps_per_epoch, self.selected, self.groups_of
        if not upper:
            kind = self.lower_kind
            if kind == "sum":  # the sum of the t outputs: N(k, t sigma^2) vs N(0, t sigma^2)
                s = self.sigma * math.sqrt(t) / k
                return [(_gaussian_pmf(s, h, direction, False), self.epochs)], 0.0
            if kind == "binned":  # round-off already inside the pair (see _binned_pmf)
                return [(_binned_pmf(self.sigma, t, k, h, direction), self.epochs)], 0.0
        if m == 1 or not _exact_ok(self.sigma, m):  # k Gaussian releases per epoch
            return [(_gaussian_pmf(self.sigma, h, direction, upper), self.count)], 0.0
        ep = _mean_preserving(self.sigma, m, self._tail, self._small)
        if ep is not None:
            pmf, allow = _epoch_pmf(ep, h, direction, upper, self._tail)
            return [(pmf, self.count)], self.count * allow
        # heavy tails (the grid of S below c too coarse for the bulk): one-sided rounding
        laws = _laws(self.sigma, m, _BINS, self._tail)
        if direction == "remove":
            law = laws.p_up if upper else laws.p_dn
        else:
            law = laws.q_dn if upper else laws.q_up
        lo, p, inf = _loss_pmf(law, laws.hy, self.sigma, m, h, direction, upper)
        pmf = pld._trim(pld._PMF(lo, p, inf), upper)
        return [(pmf, self.count)], self.count * laws.err


def _gaussian_pmf(s: float, h: float, direction: str, upper: bool):
    """Discrete PLD of the Gaussian pair N(1, s^2) / N(0, s^2) (connect-the-dots upper,
    merge-down lower, :mod:`accounting.pld`)."""
    from . import pld

    return pld.gaussian_step_pmf(1.0, s, h, direction, upper)


register_event(RandomAllocation)


def allocation_gaussian_bounds(sigma: float, steps: int, delta: float, *, selected: int = 1,
                               epochs: int = 1) -> tuple[float, float]:
    """Closed-form certified (lower, upper) eps of ``epochs`` epochs of k-of-t random
    allocation, valid for every sigma, t, k and delta (no discretisation, never 0 or NaN).

    upper: no amplification: conditioned on the allocation the example is in k Gaussian
    releases per epoch, and a mixture of mechanisms each dominated by one pair is dominated
    by it (joint convexity of the hockey-stick divergence), so the k E releases compose into
    one Gaussian with multiplier sigma / sqrt(k E) (Balle & Wang 2018, Thm 8).
    lower: the sum of the t outputs of an epoch, N(k, t sigma^2) against N(0, t sigma^2),
    a post-processing of the realised pair: E epochs give the Gaussian with multiplier
    sigma sqrt(t) / (k sqrt(E)).
    """
    from ._validate import check_delta
    from .composition import analytic_gaussian_epsilons

    ev = RandomAllocation(sigma, steps, selected, epochs)
    delta = check_delta("delta", delta)
    k, e = ev.selected, ev.epochs
    up = float(analytic_gaussian_epsilons(np.array([ev.sigma / math.sqrt(k * e)]), delta)[0])
    lo = float(analytic_gaussian_epsilons(
        np.array([ev.sigma * math.sqrt(ev.steps_per_epoch) / (k * math.sqrt(e))]), delta)[0])
    return lo * (1.0 - 1e-11), up


def allocation_epsilon_bounds(sigma: float, steps: int, delta: float, *, selected: int = 1,
                              epochs: int = 1, **kwargs: Any):
    """Certified (lower, estimate, upper) eps of ``epochs`` epochs of random allocation
    (:class:`RandomAllocation`), via :func:`accounting.pld_epsilon` (``kwargs``).

    The lower end is a lower bound on the eps of the k-of-t scheme that ran (for k > 1 a
    post-processing of its realised pair, :attr:`RandomAllocation.lower_kind`); the upper
    end for k > 1 is that of k concurrent 1-of-floor(t/k) allocations (module doc). Where
    the default event's bracket is over 1% wide (its allowances, ~1e-9, near delta), the
    variant built for this delta (:meth:`RandomAllocation.for_delta`) is tried too and the
    better end of each side kept. Where neither certifies an amplified upper end (delta
    1e-12 at t = 1,000: the round-off floor), the upper end is the closed-form
    no-amplification bound of :func:`allocation_gaussian_bounds`, never 0: the bracket is
    then wide, but true.
    """
    from .pld import PLDBounds, pld_epsilon

    g_lo, g_up = allocation_gaussian_bounds(sigma, steps, delta, selected=selected,
                                            epochs=epochs)
    ev = RandomAllocation(sigma, steps, selected, epochs)
    b = pld_epsilon([ev], delta, **kwargs)
    lower, upper = b.lower, b.upper
    if not (upper >= g_lo) or not (lower < upper) or upper - lower > 0.01 * upper:
        # the allowances (tails, error bounds ~1e-9) are a sizeable part of delta: the
        # variant built for this delta (:meth:`RandomAllocation.for_delta`; pld_epsilon
        # itself retries with it only where its upper end is infinite). Both brackets are
        # certified: keep the better end of each
        b = pld_epsilon([ev.for_delta(delta)], delta, **kwargs)
        if b.upper >= g_lo and b.lower < b.upper:
            if not (upper >= g_lo) or not (lower < upper):
                lower, upper = b.lower, b.upper
            else:
                lower, upper = max(lower, b.lower), min(upper, b.upper)
        if not (upper >= g_lo) or not (lower < upper):
            upper = g_up
            lower = _lower_only(sigma, steps, delta, selected, epochs, kwargs)
    upper = min(upper, g_up)
    lower = min(max(lower, g_lo), upper)
    return PLDBounds(lower, (lower + upper) / 2.0, upper)


@functools.lru_cache(maxsize=64)
def _variant(tail: float, small: bool) -> type:
    """A subclass of :class:`RandomAllocation` with these tails / grids (one per value, so
    that equal variants are of the same type)."""
    return type("RandomAllocation", (RandomAllocation,), {"_tail": tail, "_small": small,
                                                          "__module__": __name__})


def _lower_only(sigma: float, steps: int, delta: float, selected: int, epochs: int,
                kwargs: dict[str, Any]) -> float:
    """The certified lower end alone: the PLD bracket's lower end of a ledger whose upper
    side cannot fail (the event's lower pair, composed with itself, asked at ``delta``),
    via pld_delta's lower side at a few eps (bisection on the monotone delta(eps))."""
    from .pld import pld_delta

    ev = RandomAllocation(sigma, steps, selected, epochs)
    opts = {key: kwargs[key] for key in ("value_interval", "sigma_resolution", "max_distinct")
            if key in kwargs}
    _, hi = allocation_gaussian_bounds(sigma, steps, delta, selected=selected, epochs=epochs)
    lo_eps, hi_eps = 0.0, hi
    for _ in range(30):
        mid = (lo_eps + hi_eps) / 2.0
        low_delta, _ = pld_delta([ev], mid, **opts)
        if low_delta > delta:  # the true delta(mid) > delta: the true eps is above mid
            lo_eps = mid
        else:
            hi_eps = mid
        if hi_eps - lo_eps < 1e-4 * hi_eps:
            break
    return lo_eps


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


def _schedule_law(s: np.ndarray, bins: int, memo: dict) -> tuple[np.ndarray, np.ndarray,
                                                                  float, float]:
    """(ceil law, floor law, h, L1 round-off) of sum_i round(Y_i) (module doc's rounding),
    log Y_i ~ N(-s_i^2/2, s_i^2) independent, capped: a balanced tree of pairwise sums,
    each node on its own grid cap(node) / bins (leaves: _FINE times finer). Equal subtrees
    (equal runs of sigmas) are computed once (``memo``)."""
    key = s.tobytes()
    if key in memo:
        return memo[key]
    if s.size == 1:
        n = bins * _FINE
        h = _schedule_cap(s, 1e-10) / n
        up, dn = _term_pair(float(-s[0] ** 2 / 2.0), float(s[0]), h, n)
        memo[key] = (up, dn, h, 0.0)
        return memo[key]
    mid = s.size // 2
    a_up, a_dn, ha, ea = _schedule_law(s[:mid], bins, memo)
    b_up, b_dn, hb, eb = _schedule_law(s[mid:], bins, memo)
    n = bins * max(1, _FINE // s.size)
    h = _schedule_cap(s, 1e-10) / n
    up, e1 = _conv(_rebin(a_up, ha, h, n, True), _rebin(b_up, hb, h, n, True))
    dn, e2 = _conv(_rebin(a_dn, ha, h, n, False), _rebin(b_dn, hb, h, n, False))
    memo[key] = (up, dn, h, ea + eb + max(e1, e2))
    return memo[key]


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
    from . import pld

    s = 1.0 / sigmas
    t = s.size
    q_up, q_dn, hy, err = _schedule_law(s, bins, {})
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
    below _FLOOR (round-off level) go to +inf (upper) or are dropped (lower)."""
    from . import pld

    mass = np.maximum(mass, 0.0).copy()
    small = mass < _FLOOR
    if upper:
        inf += float(mass[small].sum())
    mass[small] = 0.0
    keep = mass > 0
    if not keep.any():
        return pld._PMF(0, np.zeros(1), inf)
    k = (np.ceil(loss[keep] / h + 1e-9) if upper else np.floor(loss[keep] / h - 1e-9))
    k = k.astype(np.int64)
    lo = int(k.min())
    return pld._trim(pld._PMF(lo, np.bincount(k - lo, weights=mass[keep]), inf), upper)


#: Bins of every node of the schedule's mean-preserving tree (:func:`_schedule_epoch`)
_SCHED_BINS = 2**13

#: below this delta the schedule tree's direct sums run in extended precision (above it in
#: double: ~1.5x faster, brackets ~0.01 point wider at delta 1e-5, 2-5 points at 1e-8)
_SCHED_EXT_DELTA = 1e-6


def _schedule_z(s: np.ndarray, tail: float) -> float:
    """z: the per-term thresholds c_i = exp(-s_i^2 / 2 + z s_i) (a common Q z-score of
    log Y_i) with P'(some Y_i > c_i) <= ``tail``, P' the remove pair's P (dP' = (S / t)
    dQ): union bound (1/t) sum_i P_i(Y_i > c_i) + sum_i Q(Y_i > c_i), P_i the tilted term
    log Y_i ~ N(s_i^2 / 2, s_i^2) (the example in step i). Bisection."""
    t = s.size

    def excess(z: float) -> float:
        return (float(special.ndtr(s - z).sum()) / t + t * float(special.ndtr(-z))) - tail

    lo, hi = 0.0, float(s.max()) + 40.0
    return _bisect_down(excess, lo, hi)


def _unit_leaf(s: float, c: float, n: int) -> _Part:
    """:func:`_leaf` for the mean-1 term Y' = Y / mu (log Y' ~ N(-s^2/2, s^2)), Y' 1{Y' <= c}
    on {j c / (n - 1)}: the leaf of Y on the grid scaled by mu = e^(s^2/2), its moments and
    their error bounds divided by mu (masses and their bounds unchanged)."""
    mu = math.exp(s * s / 2.0)
    h = c / (n - 1)
    p = _leaf(s, h * mu, n, 0.0, c * mu)
    return _Part(h, p.q, p.m / mu, p.e1, p.e2, p.f1 / mu, p.f2 / mu, p.ei, p.fi / mu,
                 p.ev / mu)


def _schedule_tree(s: np.ndarray, c: np.ndarray, bins: int, memo: dict,
                   ext: bool = True) -> _Part:
    """Q-law (and moments m_j = E_Q[S; T = j]) of the mean-preserving rounded sum of the
    truncated mean-1 terms Y_i 1{Y_i <= c_i}: a balanced tree of :func:`_mp_conv`, each
    node on its own grid cap / bins, cap = min(sum c_i, sum means + 12 sd + 2 max c_i)
    (above it: absorbed, its mass measured, not assumed); equal subtrees once (``memo``).
    ``ext``: the bulk's direct sums in extended precision (:func:`_mp_conv`)."""
    key = s.tobytes()
    if key in memo:
        return memo[key]
    if s.size == 1:
        out = _unit_leaf(float(s[0]), float(c[0]), bins // 2)
    else:
        mid = s.size // 2
        a = _schedule_tree(s[:mid], c[:mid], bins, memo, ext)
        b = _schedule_tree(s[mid:], c[mid:], bins, memo, ext)
        cap = min(float(c.sum()), s.size + 12.0 * math.sqrt(float(np.expm1(s * s).sum()))
                  + 2.0 * float(c.max()))
        h = cap / (bins - 1)
        out = _mp_conv(_mp_rebin(a, h, bins), _mp_rebin(b, h, bins), ext=ext)
    memo[key] = out
    return out


def _schedule_epoch(sigmas: np.ndarray, bins: int, tail: float, ext: bool = True) -> _Epoch:
    """One epoch of the schedule's pair by the mean-preserving construction (module doc;
    :func:`_epoch` for identical sigmas): S = sum_i Y_i, mean-1 terms, dP/dQ = S / t.
    Every term above its threshold c_i (:func:`_schedule_z`, P'-mass <= ``tail``) is
    absorbed: +inf on the upper side, dropped on the lower (revealing it is a
    post-processing). Terms sorted by sigma (the sum does not depend on the order; equal
    sigmas then share subtrees)."""
    s = np.sort(1.0 / np.asarray(sigmas, dtype=float))
    z = _schedule_z(s, tail)
    c = np.exp(-s * s / 2.0 + z * s)
    part = _schedule_tree(s, c, bins, {}, ext)
    return _Epoch((part,), float(s.size))


def _schedule_mp_bounds(sig: np.ndarray, delta: float, e: int, h: float) -> tuple[float, float]:
    """(lower, upper) eps of ``e`` epochs by the mean-preserving construction
    (:func:`_schedule_epoch`): the one-epoch pairs discretised as in :func:`_epoch_pmf`,
    composed by FFT, the allowances (error bounds, FFT round-off) added to delta (upper) or
    subtracted (lower: pld_epsilon's convention, delta + allowance). Upper inf where the
    allowance reaches delta."""
    from . import pld

    tail = delta * 1e-3 / e  # P'-mass of the truncated terms: +inf (upper), dropped (lower)
    ep = _schedule_epoch(sig, _SCHED_BINS, tail, ext=delta < _SCHED_EXT_DELTA)
    tol = delta * 1e-6
    upper, lower = 0.0, 0.0
    for direction in ("remove", "add"):
        pmf_u, allow_u = _epoch_pmf(ep, h, direction, True, tail)
        pmf_l, _ = _epoch_pmf(ep, h, direction, False, tail)
        allow_l = 0.0
        if e > 1:
            pmf_u, a = pld._compose([(pmf_u, e)], tol)
            allow_u = e * allow_u + a
            pmf_l, allow_l = pld._compose([(pmf_l, e)], tol)
        up = pld._eps_of(pmf_u, delta - allow_u, h) if delta > allow_u else math.inf
        upper = max(upper, up)
        lower = max(lower, pld._eps_of(pmf_l, delta + allow_l, h))
    return lower, upper


def _schedule_one_sided(sig: np.ndarray, delta: float, e: int, h: float,
                        bins: int) -> tuple[float, float]:
    """(lower, upper) eps by the one-sided (floor / ceil) rounding of :func:`_schedule_pmfs`
    (the fallback)."""
    from . import pld

    pm = _schedule_pmfs(sig, h, bins)
    tol = delta * 1e-6
    upper, lower = 0.0, 0.0
    for direction in ("remove", "add"):
        pmf_u, allow_u = pm[(direction, True)]
        pmf_l, allow_l = pm[(direction, False)]
        if e > 1:
            pmf_u, a = pld._compose([(pmf_u, e)], tol)
            allow_u = e * allow_u + a
            pmf_l, a = pld._compose([(pmf_l, e)], tol)
            allow_l = e * allow_l + a
        up = pld._eps_of(pmf_u, delta - allow_u, h) if delta > allow_u else math.inf
        upper = max(upper, up)
        lower = max(lower, pld._eps_of(pmf_l, delta + allow_l, h))
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
    from ._validate import check_array, check_delta

    sig = check_array("sigmas", sigmas, low=0.0, low_open=True, what="noise multipliers")
    if sig.size == 0:
        raise ValueError("sigmas must hold at least one step")
    if sig.size > 100_000:
        raise ValueError(f"sigmas: {sig.size} steps per epoch (at most 100,000)")
    delta = check_delta("delta", delta)
    e = check_count("epochs", epochs, minimum=1)
    bins = check_count("bins", bins, minimum=2**10)
    from .composition import analytic_gaussian_epsilons

    # closed forms, valid for every schedule: upper, no amplification (one Gaussian release
    # per epoch with the smallest sigma); lower, the constant schedule at the largest sigma
    # (adding independent noise to a step's output is post-processing of the realised
    # pair), whose sum of outputs is N(1, t sigma^2) against N(0, t sigma^2)
    up_closed = float(analytic_gaussian_epsilons(np.array([sig.min() / math.sqrt(e)]),
                                                 delta)[0])
    lo_closed = allocation_gaussian_bounds(float(sig.max()), sig.size, delta, epochs=e)[0]
    if not all(_exact_ok(float(x), sig.size) for x in sig):
        return ScheduleBounds(lo_closed, up_closed)
    s = 1.0 / sig
    var = float(np.var(np.log(np.maximum(s, 1e-300)))) + float(np.mean(s * s)) / sig.size
    h = max(1e-6, min(1e-3, math.sqrt(e * max(var, 1e-12)) / 2000.0))
    lower, upper = _schedule_mp_bounds(sig, delta, e, h)
    if not (lower <= upper < math.inf):  # not certified here: the one-sided rounding
        lo_old, up_old = _schedule_one_sided(sig, delta, e, h, bins)
        lower, upper = max(lower, lo_old), min(upper, up_old)
    upper = min(upper, up_closed)
    lower = max(lower, lo_closed)
    return ScheduleBounds(min(lower, upper), upper)
