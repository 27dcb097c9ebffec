"""One epoch of 1-of-t random allocation by mean-preserving sums, and its PLD pairs.

:func:`certified_epoch` splits the sum S by the number N of terms above a threshold c
(N = 0, N = 1 computed, N >= 2 absorbed), sums each part by a balanced tree of
:func:`~accounting.allocation.sums.mp_conv`, and :func:`mean_preserving` picks the coarsest
grid that keeps the bulk (None where heavy tails need the one-sided laws instead).
:func:`epoch_pairs` gives the UPPER pair (Blackwell-dominating, allowances added) or the
LOWER pair (a garbling of the realised pair, lowered / raised by the sup error bound);
:func:`epoch_pmf` puts either on the PLD loss grid.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np
from scipy import special

from .laws import Z_TAIL
from .sums import (
    DIRECT,
    MP_BINS,
    SMALL_DIRECT,
    Part,
    mp_conv,
    mp_leaf,
    mp_point,
    mp_rebin,
    small_leaf,
)


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
    return bisect_down(excess, lo, hi)


def bisect_down(excess: Any, lo: float, hi: float) -> float:
    """The smallest x in [lo, hi] (to 60 halvings) with ``excess(x) <= 0``, for an ``excess``
    non-increasing in x with excess(hi) <= 0: the upper end of the bracket (valid side)."""
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


class Epoch(NamedTuple):
    """One epoch of the k = 1 pair: the law of T in two parts (N = 0: every term <= c, on
    a fine grid; N = 1: one term above c, on a coarse one), X = S / scale (scale = t mu)."""

    parts: tuple[Part, ...]
    scale: float


@functools.lru_cache(maxsize=32)
def certified_epoch(sigma: float, t: int, bins: int = MP_BINS, tail: float = 1e-10,
           direct: int = DIRECT) -> Epoch:
    """The Q-law of the mean-preserving rounded sum T of S = sum_i Y_i (docs/accounting.md), split
    by N = #{i: Y_i > c}: N = 0 (t small terms, fine grid), N = 1 (t x one big term plus t -
    1 small ones, coarse grid); N >= 2 (P'-mass <= tail / 10) is left out (absorbed)."""
    s = 1.0 / sigma
    mu = math.exp(s * s / 2.0)
    sd = mu * math.sqrt(math.expm1(s * s))
    lam = _threshold(s, t, tail / 10.0)
    c = math.exp(lam)

    def cap0(count: int) -> float:
        return min(count * c, count * mu + 12.0 * sd * math.sqrt(count) + 2.0 * c)

    ext = direct > DIRECT  # small-delta grids: leaves and rebinning in extended precision
    leaf = small_leaf(s, c, bins, ext)
    # R: the sum of t - 1 small terms, by repeated squaring, each partial sum of `count`
    # terms on its own grid cap0(count) / bins
    m_left, base, c_b = t - 1, leaf, 1
    rest: Part | None = None
    c_r = 0
    while m_left:
        if m_left & 1:
            if rest is None:
                rest, c_r = base, c_b
            else:
                c_r += c_b
                hn = cap0(c_r) / bins
                rest = mp_conv(mp_rebin(rest, hn, bins, ext), mp_rebin(base, hn, bins, ext),
                                direct)
        m_left >>= 1
        if m_left:
            c_b *= 2
            b2 = mp_rebin(base, cap0(c_b) / bins, bins, ext)
            base = mp_conv(b2, b2, direct)
    if rest is None:
        rest = mp_point(leaf.h, bins)
    h0 = cap0(t) / bins
    part0 = mp_conv(mp_rebin(rest, h0, bins, ext), mp_rebin(leaf, h0, bins, ext), direct)
    if t == 1:
        part0 = mp_rebin(leaf, h0, bins, ext)
    z = max(Z_TAIL, -float(special.ndtri(tail)))
    cap1 = max(2.0 * c, cap0(max(t - 1, 1)) + math.exp(s * s + z * s))
    h1 = cap1 / bins
    big = mp_leaf(s, h1, bins, c, math.inf, ext)
    part1 = mp_conv(mp_rebin(rest, h1, bins, ext), big, direct)
    part1 = Part(h1, part1.q * t, part1.m * t, *(t * e for e in part1[3:]))
    return Epoch((part0, part1), t * mu)


def mean_preserving(sigma: float, t: int, tail: float,
                     small: bool = False) -> Epoch | None:
    """:func:`certified_epoch` on the coarsest grid (2^16 bins, up to 2^20 at small t: about
    2^23 bin x levels) whose N = 0 part keeps at most 100 ``tail`` of Q-mass at T = 0 (X' = 0, an
    add loss of +inf; the threshold c of the largest term sets that grid, coarse against the
    bulk of S for heavy tails), or None where none does (sigma below ~0.4): there the
    one-sided rounding of :func:`rounded_laws` (one epoch: the tail sets eps) is used."""
    s = 1.0 / sigma
    c = math.exp(_threshold(s, t, tail / 10.0))
    mu = math.exp(s * s / 2.0)
    sd = mu * math.sqrt(math.expm1(s * s))
    cap = min(t * c, t * mu + 12.0 * sd * math.sqrt(t) + 2.0 * c)
    levels = math.ceil(math.log2(max(t, 2))) + 3
    # small deltas (``small``): a coarser first grid with every early partial sum convolved
    # directly in extended precision (round-off relative per entry, where the FFT's is
    # absolute and multiplied by t / count up the tree): the error bounds ~10x smaller
    grids = (MP_BINS // 16, MP_BINS // 4, MP_BINS) if small else (
        MP_BINS, 4 * MP_BINS, 16 * MP_BINS)
    direct = SMALL_DIRECT if small else DIRECT
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
            return certified_epoch(sigma, t, bins, tail, direct)
        if h0 > 0.05 * t * mu:  # a twentieth of E[S] or more: T = 0 holds more than tail
            continue
        ep = certified_epoch(sigma, t, bins, tail, direct)
        at_zero = 1.0 - sum(float(p.q[1:-1].sum()) for p in ep.parts)
        if at_zero <= limit:
            return ep
        # (a speed heuristic only) Q(T = 0) ~ E[(1 - Y / h)_+]^t: a 4x finer grid gains
        # orders of magnitude at large t, little at small t
        if at_zero > 1e-3 or (not small and t < 50 and at_zero > 10.0 * limit):
            return None
    return None


#: P-mass at each end of the losses of one epoch moved validly (see epoch_pmf)
_TAIL_CUT = 1e-13
#: losses are moved by this much on the safe side (float error in log and in the values)
_ETA = 1e-9


def epoch_pairs(ep: Epoch, direction: str, upper: bool):
    """Atoms (P-mass, Q-mass, loss) of the one-epoch pair in ``direction``, and the mass at
    +inf and L1 allowance (upper), from the parts of :func:`certified_epoch` (docs/accounting.md).

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


def epoch_pmf(ep: Epoch, h: float, direction: str, upper: bool, tail: float = 1e-10):
    """Discrete PLD (``accounting.pld.PMF``) of one epoch on {k h}: the atoms of
    :func:`epoch_pairs` bucketed into loss intervals [k h, (k+1) h) and discretised as
    :mod:`accounting.pld` does for its pairs (connect-the-dots upper, merge-down lower);
    returns (pmf, allowance).

    The extreme losses, _TAIL_CUT of P-mass at each end (FFT round-off far from the bulk,
    which would stretch the grid over millions of points), are moved validly: upper, the
    low end rounded up onto the grid and the high end to +inf; lower, both dropped (the
    composed delta loses at most that mass per composition), and at the low end up to 10
    ``tail`` (bins whose error bounds crush their loss far below the bulk: t ~ 10^5)."""
    from .. import pld

    p, loss, inf, allow = epoch_pairs(ep, direction, upper)
    k = np.floor(loss / h).astype(np.int64)
    cut = min(_TAIL_CUT, 10.0 * tail)  # (small-delta variants: scaled with their tail)
    k0, k1, below, above = _cut_range(k, p, cut if upper else max(cut, 10.0 * tail), cut)
    sel = (k >= k0) & (k <= k1)
    idx = k[sel] - k0
    width = k1 - k0 + 1
    pm = np.bincount(idx, p[sel], width)
    qm = np.bincount(idx, p[sel] * np.exp(-loss[sel]), width)
    pmf = pld.discretise(pm[None], qm[None], np.array([below if upper else 0.0]),
                          np.array([inf + above if upper else 0.0]), k0, h, upper)[0]
    return pmf, allow
