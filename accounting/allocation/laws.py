"""One-sided rounding laws of the sum S of t log-normal terms (random allocation).

T_up = sum_i ceil(Y_i) >= S >= T_dn = sum_i floor(Y_i) on one linear grid, so the laws of
L(T_up) and L(T_dn) bracket the law of L(S) stochastically under P and Q; per-term laws are
exact, sums are FFT convolutions (repeated squaring) with an absorbing top bin, their
round-off bounded (:func:`conv`). :func:`rounded_laws` (k = 1, heavy tails) and
:func:`binned_pair` (the k-of-t lower end, a post-processing of the realised pair) build
them; :func:`loss_pmf` and :func:`binned_pmf` put them on the PLD loss grid, up (upper) or
down (lower).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from scipy import fft as sfft
from scipy import special

#: Bins of the linear grid of S (the cap C is n hy).
BINS = 2**18
#: Partial sums of c < FINE terms get FINE // c times more bins (their rounding
#: dominates: the cap of a few heavy-tailed terms is far above their mean).
FINE = 8
#: Masses of a law of S below this are FFT round-off level (see loss_pmf).
FLOOR = 1e-16
#: Standard deviations of log Y kept below the cap (per-term tail beyond: ~1e-10).
Z_TAIL = 6.4


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
    nfft: a few ulps times log2(n) sqrt(n) (as in :func:`accounting.pld.compose`)."""
    return 8.0 * np.finfo(float).eps * math.log2(nfft) * math.sqrt(nfft)


def conv(a: np.ndarray, b: np.ndarray, fa: np.ndarray | None = None,
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


def rebin_law(law: np.ndarray, h_old: float, h_new: float, n_new: int, up: bool) -> np.ndarray:
    """A law on {j h_old} (top bin: ">= cap") moved onto {j h_new}, n_new + 1 bins.

    up: every value rounded up, the top bin stays absorbing (+inf) and values at or above
    the new cap join it; down: rounded down, the old top bin is the value cap_old (clamped),
    values at or above the new cap are clamped to it. Both are monotone moves, so the
    stochastic order (docs/accounting.md) is kept.
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
        cap += math.exp(mu_tail + max(Z_TAIL, -float(special.ndtri(tail))) * s)
    return cap


def _sum_law(s: float, m: int, up: bool, bins: int,
             tail: float = 1e-10) -> tuple[np.ndarray, float, float]:
    """(law, grid step, L1 round-off) of the sum of m i.i.d. rounded log-normal (0, s)
    terms, capped (docs/accounting.md). Multi-resolution: a partial sum of c terms lives on its
    own grid cap(c) / bins, so the rounding error of the whole sum is about log2(m) final
    grid steps instead of m (each doubling rounds once, on a grid twice as coarse)."""
    def size(count: int) -> int:  # finer grids for the first, cheap partial sums
        return bins * max(1, FINE // count)

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
                a = rebin_law(result, h_r, h_new, size(c_r), up)
                b = rebin_law(base, h_b, h_new, size(c_r), up)
                result, e = conv(a, b)
                err_r, h_r = err_r + err_b + e, h_new
        m >>= 1
        if m:
            c_b *= 2
            h_new = grid(c_b)
            base, e = conv(*(2 * (rebin_law(base, h_b, h_new, size(c_b), up),)))
            err_b, h_b = 2.0 * err_b + e, h_new
    assert result is not None
    return result, h_r, err_r


@functools.lru_cache(maxsize=32)
def rounded_laws(sigma: float, t: int, bins: int = BINS, tail: float = 1e-10) -> _Laws:
    """The four laws of the one-epoch, k = 1 sum S (see docs/accounting.md), cached. ``tail``:
    the per-node probability of exceeding its cap (whose union is the top bin's mass: a
    smaller one reaches smaller deltas on a coarser grid)."""
    s = 1.0 / sigma
    z = max(Z_TAIL, -float(special.ndtri(tail)))
    cap = _cap(t - 1, s, s * s, tail) if t > 1 else math.exp(s * s + z * s)
    hy = cap / bins
    q_up1, q_dn1 = _term(0.0, s, hy, bins, True), _term(0.0, s, hy, bins, False)
    p_up1, p_dn1 = _term(s * s, s, hy, bins, True), _term(s * s, s, hy, bins, False)
    if t == 1:
        return _Laws(hy, p_up1, p_dn1, q_up1, q_dn1, 0.0)
    r_up, h_up, e_up = _sum_law(s, t - 1, True, bins, tail)
    r_dn, h_dn, e_dn = _sum_law(s, t - 1, False, bins, tail)
    r_up = rebin_law(r_up, h_up, hy, bins, True)
    r_dn = rebin_law(r_dn, h_dn, hy, bins, False)
    p_up, e1 = conv(r_up, p_up1)
    q_up, e2 = conv(r_up, q_up1)
    p_dn, e3 = conv(r_dn, p_dn1)
    q_dn, e4 = conv(r_dn, q_dn1)
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
                out, e = conv(out, base)
                err += err_b + e
        m >>= 1
        if m:
            base, e = conv(base, base)
            err_b = 2.0 * err_b + e
    return out, err


@functools.lru_cache(maxsize=16)
def binned_pair(sigma: float, t: int, k: int, bins: int = BINS) -> _Laws:
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
    cap = (_cap(t - k, s) if t > k else 0.0) + k * math.exp(s * s + Z_TAIL * s)
    hy = cap / bins
    plain = _term(0.0, s, hy, bins, False)
    tilt = _term(s * s, s, hy, bins, False)
    q_law, e_q = _power(plain, t)
    rest, e_r = _power(plain, t - k)
    held, e_h = _power(tilt, k)
    if t > k:
        p_law, e_c = conv(rest, held)
    else:
        p_law, e_c = held, 0.0
    err = max(e_q, e_r + e_h + e_c)
    return _Laws(hy, p_law, p_law, q_law, q_law, err)


def binned_pmf(sigma: float, t: int, k: int, h: float, direction: str):
    """LOWER discrete PLD (``accounting.pld.PMF``) of the binned realised pair
    (:func:`binned_pair`) on the loss grid {j h}.

    The computed laws are off the exact ones by at most ``err`` in L1, hence in every bin:
    P~ = max(P^ - err, 0) <= P and Q~ = Q^ + err >= Q pointwise. The hockey-stick
    divergence is increasing in P and decreasing in Q pointwise, also for product measures
    (composition), so the pair (P~, Q~) is still a certified lower bound; its losses
    log(P~/Q~) are then rounded down onto the grid (a smaller loss: a smaller delta).
    remove: (P~, Q~); add: the two laws swapped.
    """
    from .. import pld

    laws = binned_pair(sigma, t, k)
    err = laws.err
    num, den = (laws.p_dn, laws.q_dn) if direction == "remove" else (laws.q_dn, laws.p_dn)
    pt = np.maximum(num - err, 0.0)
    qt = den + err
    keep = pt > 0
    if not keep.any():
        return pld.PMF(0, np.zeros(1), 0.0)
    loss = np.log(pt[keep]) - np.log(qt[keep])
    idx = np.floor(loss / h - 1e-9).astype(np.int64)
    lo = int(idx.min())
    p = np.bincount(idx - lo, weights=pt[keep])
    return pld.trim(pld.PMF(lo, p, 0.0), False)


def exact_ok(sigma: float, t: int) -> bool:
    """Whether the log-normal sum machinery is usable: its cap is a finite float with room
    (below sigma ~ 0.06 the variance exp(2/sigma^2) of a term overflows; the bounds there
    are the Gaussian ones of :meth:`RandomAllocation.pld_parts`)."""
    s = 1.0 / sigma
    return max(2.0 * s * s, s * s + Z_TAIL * s) + math.log(max(t, 1)) + 20.0 < 600.0


def loss_pmf(law: np.ndarray, hy: float, sigma: float, t: int, h: float, direction: str,
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
    # FFT round-off leaves ~1e-18 in every bin: bins below FLOOR go to +inf (upper) or
    # are dropped (lower), both valid; at most n * FLOOR of mass moves
    small = mass < FLOOR
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
