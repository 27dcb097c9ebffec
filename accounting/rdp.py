"""Rényi differential privacy of the mechanisms the ledger records.

Pure functions, vectorised over orders and over many (q, sigma) pairs at once, all in log
space. References:

* Mironov, Talwar, Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism" (arXiv:1908.10530), Section 3.3: the binomial formula for integer orders and the
  two-series (erfc) form for fractional orders.
* Mironov 2017, "Rényi Differential Privacy", Table II: Gaussian and Laplace mechanisms.
* Bun & Steinke 2016, Prop. 3.3: an eps-DP mechanism is (eps^2/2)-zCDP.
"""

from __future__ import annotations

import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy import special

from ._validate import (
    check_array,
    check_eps,
    check_orders,
    check_positive,
    check_probability,
    check_same_length,
    check_sigma,
)

__all__ = [
    "DEFAULT_ORDERS",
    "INTEGER_ORDERS",
    "rdp_sgm",
    "rdp_sgm_many",
    "rdp_gaussian",
    "rdp_laplace",
    "rdp_laplace_sum",
    "rdp_pure_dp",
    "log_a_integer",
    "log_a_fractional",
]

#: Default Rényi orders: 1.1, 1.2, ..., 10.9 (step 0.1), then 12..63, 64, 128 and 256.
#: The fine fractional grid matters for large eps (optimum near 1); the large integer
#: orders matter for tiny eps (optimum far from 1).
DEFAULT_ORDERS: np.ndarray = np.array(
    sorted(set([1 + x / 10 for x in range(1, 100)] + list(range(12, 64)) + [64, 128, 256])),
    dtype=float,
)

#: Integer-only orders {2..64}: the seed papers' choice (and the "moments accountant" grid
#: lambda = alpha - 1 in 1..63).
INTEGER_ORDERS: np.ndarray = np.arange(2, 65, dtype=float)

_LOG_HALF = math.log(0.5)
#: Terms of the fractional series below exp(_TERM_FLOOR) are dropped. Since A_alpha >= 1
#: (a Rényi divergence is non-negative), this is an absolute error below 1.3e-14 in A.
_TERM_FLOOR = -32.0
#: Round-off allowance (in units of machine epsilon times the sum of |terms|) added to the
#: fractional series so that it errs on the conservative side.
_ULPS = 4.0
#: Up to this q the fractional series sums A - 1 (full relative precision, see
#: _frac_block_small_q); above it, A itself (A - 1 is then far above round-off).
_SMALL_Q = 0.25
_TINY_AM1 = math.log(1e-6)
#: Relative upward nudge of every fractional-order value: the last divisions and logs
#: round to nearest, and the result must never be below the exact RDP.
_NUDGE = 16.0 * np.finfo(float).eps
#: Relative round-up of every fractional-order value: the series' allowances missed up to
#: 5.6e-13 relative (22 of 120 random user orders sat below a 50-digit evaluation); 1e-10
#: covers that with margin and moves eps by at most 1e-10 relative.
_FRAC_NUDGE = 1e-10
#: Threads for large batches of (q, sigma) pairs (each thread writes disjoint rows).
_WORKERS = max(1, min(8, os.cpu_count() or 1))
_ROWS_PER_THREAD = 500
#: Give up (with a warning and a conservative inf) after this many series terms.
_MAX_TERMS = 2_000_000


class SeriesConvergenceWarning(RuntimeWarning):
    """The fractional-order series did not converge; that order is reported as +inf."""


def _log_erfc(x: np.ndarray) -> np.ndarray:
    """log(erfc(x)), accurate for large positive x (via log_ndtr)."""
    return math.log(2.0) + special.log_ndtr(-np.asarray(x) * math.sqrt(2.0))


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(exp(x) - 1) for x > 0 without overflow (x may be huge) or cancellation."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    big = x > 30.0
    out[big] = x[big] + np.log1p(-np.exp(-x[big]))
    small = ~big
    with np.errstate(divide="ignore"):
        out[small] = np.log(np.expm1(x[small]))
    return out


def _log_expm1_table(sigmas: np.ndarray, kmax: int) -> np.ndarray:
    """log(exp((k^2-k)/(2 sigma^2)) - 1) for k = 2..kmax, shape (sigmas, kmax - 1)."""
    k = np.arange(2, kmax + 1, dtype=float)
    return _log_expm1(np.outer(1.0 / (2.0 * np.asarray(sigmas, dtype=float) ** 2), k * k - k))


def log_a_integer(
    q: float, sigmas: np.ndarray, alpha: int, table: np.ndarray | None = None
) -> np.ndarray:
    """log A_alpha for integer alpha >= 2, 0 < q < 1, sigmas > 0 (Mironov et al. 2019, §3.3).

    A_alpha = sum_k C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k)/(2 sigma^2)).
    Because sum_k C(alpha,k)(1-q)^(alpha-k) q^k = 1, we evaluate A - 1 as a sum of
    non-negative terms with expm1 and return log1p(A - 1): full relative accuracy even when
    log A is far below machine epsilon (large sigma, tiny q), where summing A directly
    cannot resolve it. ``table`` is an optional precomputed :func:`_log_expm1_table`.
    """
    sigmas = np.asarray(sigmas, dtype=float)
    if table is None:
        table = _log_expm1_table(sigmas, alpha)
    k = np.arange(2, alpha + 1, dtype=float)
    log_coef = (
        np.log(special.binom(alpha, k)) + (alpha - k) * math.log1p(-q) + k * math.log(q)
    )
    x = table[:, : alpha - 1] + log_coef[None, :]
    m = x.max(axis=1)
    x -= m[:, None]
    np.exp(x, out=x)
    log_am1 = m + np.log(x.sum(axis=1))
    return np.logaddexp(0.0, log_am1)


def _log_abs_binom(a: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log |C(a, i)| and its sign for real a > 1 (column (c, 1)) and integers i >= 0 (n,).

    With m = floor(a): C(a, i) = prod_{j < i} (a - j) / i!; the factors j > m are negative, so
    |C| = Gamma(a+1) Gamma(i-a) / (Gamma(a-m) Gamma(m+1-a) i!) for i > m, sign (-1)^(i-1-m).
    In log-gamma form the pole of Gamma near a non-positive integer never enters: the
    gamma-ratio form (scipy.special.binom) loses eps / (a - m) relative precision when a is
    close to an integer (a = 1.0001 gave RDP 2e-12 relative below the truth)."""
    m = np.floor(a)
    frac = a - m  # exact for a near an integer (Sterbenz)
    big = i[None, :] > m
    with np.errstate(invalid="ignore", divide="ignore"):
        small_log = (special.gammaln(a + 1.0) - special.gammaln(i[None, :] + 1.0)
                     - special.gammaln(np.maximum(a - i[None, :] + 1.0, 1e-300)))
        big_log = (special.gammaln(a + 1.0) - special.gammaln(frac) - special.gammaln(1.0 - frac)
                   + special.gammaln(np.maximum(i[None, :] - a, 1e-300))
                   - special.gammaln(i[None, :] + 1.0))
    log_abs = np.where(big, big_log, small_log)
    sign = np.where(big, np.where(((i[None, :] - 1.0 - m) % 2) == 0, 1.0, -1.0), 1.0)
    integer = frac == 0  # integer a: C(a, i) = 0 for i > a
    log_abs = np.where(integer & big, -np.inf, log_abs)
    sign = np.where(integer & big, 0.0, sign)
    return log_abs, sign


def _a_terms(log_q: float, log_1mq: float, z0: np.ndarray, inv2s2: np.ndarray,
             rs2: np.ndarray, alphas: np.ndarray, i: np.ndarray, need_a1: np.ndarray):
    """log |term| of the A series for sigmas (r,) x orders (c,) x indices i (n,), and the
    sign of C(a, i), shape (c, n) (Mironov, Talwar, Zhang 2019, Section 3.3):
      A0_i = C(a,i) q^i (1-q)^(a-i) exp((i^2-i)/(2s^2)) erfc((i - z0)/(sqrt2 s)) / 2,
      A1_i = C(a,i) q^(a-i) (1-q)^i exp((j^2-j)/(2s^2)) erfc((z0 - j)/(sqrt2 s)) / 2, j = a - i,
    the A1 part added only where ``need_a1`` (r, c); both parts share the sign of C(a, i)."""
    a = alphas[:, None]
    log_c, sgn = _log_abs_binom(a, i)  # (c, n)
    j = a - i[None, :]
    lt0 = log_c + i[None, :] * log_q + j * log_1mq
    e0 = _LOG_HALF + _log_erfc((i[None, :] - z0[:, None]) / rs2[:, None])
    e0 += (i * i - i)[None, :] * inv2s2[:, None]
    t = lt0[None] + e0[:, None, :]  # (r, c, n): A0 terms
    if need_a1.any():
        rr, cc = np.nonzero(need_a1)
        jj = j[cc]  # (m, n)
        x1 = (z0[rr][:, None] - jj) / rs2[rr][:, None]
        lt1 = log_c[cc] + jj * log_q + i[None, :] * log_1mq
        s1 = lt1 + (jj * jj - jj) * inv2s2[rr][:, None] + _LOG_HALF + _log_erfc(x1)
        t[rr, cc] = np.logaddexp(t[rr, cc], s1)
    return t, sgn


def _signed_sums(t: np.ndarray, sgn: np.ndarray, sub_scale: np.ndarray):
    """Sum one chunk of signed terms (log |term| ``t`` (r, c, n), sign ``sgn`` (c, n)) under a
    running log-scale: (new scale, (signed, absolute) sums, last and previous log |term|,
    rescale factor of the old sums), what :func:`_fast_chunk` returns. ``t`` is overwritten."""
    new_scale = np.maximum(sub_scale, t.max(axis=2))
    with np.errstate(invalid="ignore"):
        rescale = np.where(np.isfinite(sub_scale), np.exp(sub_scale - new_scale), 0.0)
        t -= new_scale[:, :, None]
        np.exp(t, out=t)
        t *= sgn[None]
        sums = np.nansum(t, axis=2), np.nansum(np.abs(t), axis=2)
    with np.errstate(divide="ignore"):  # the last terms, back in log space
        last = np.log(np.abs(t[:, :, -1])) + new_scale
        prev = np.log(np.abs(t[:, :, -2])) + new_scale
    return new_scale, sums, last, prev, rescale


def _sum_series(log_q: float, alphas: np.ndarray, shape: tuple[int, int], n: int,
                chunk, floor):
    """Sum a signed series over i = 0, 1, ... in doubling chunks until every (sigma, order)
    converged: past the sign-changing head (i > a + 2), decreasing, and below
    ``floor(scale)``. ``chunk(rows, cols, i, scale)`` returns what :func:`_signed_sums`
    returns. Returns (scale, signed sum, sum of |terms|, log of the last term: the
    truncation bound); past _MAX_TERMS a :class:`SeriesConvergenceWarning` and +inf."""
    scale = np.full(shape, -np.inf)  # running log-scale per element
    acc, abs_acc = np.zeros(shape), np.zeros(shape)  # signed and |.| sums of exp(term - scale)
    tail = np.full(shape, -np.inf)
    active = np.ones(shape, dtype=bool)
    start = 0
    while active.any():
        rows = np.flatnonzero(active.any(axis=1))
        cols = np.flatnonzero(active.any(axis=0))
        ix = np.ix_(rows, cols)
        i = np.arange(start, start + n, dtype=float)
        sub_active, sub_scale = active[ix], scale[ix]
        new_scale, sums, last, prev, rescale = chunk(rows, cols, i, sub_scale)
        acc[ix] = np.where(sub_active, acc[ix] * rescale + sums[0], acc[ix])
        abs_acc[ix] = np.where(sub_active, abs_acc[ix] * rescale + sums[1], abs_acc[ix])
        scale[ix] = np.where(sub_active, new_scale, sub_scale)
        past_head = (start + n) > (alphas[cols] + 2)[None, :]
        done = past_head & (last <= prev) & (np.maximum(last, prev) < floor(new_scale))
        active[ix] = sub_active & ~done
        tail[ix] = np.where(sub_active & done, np.maximum(last, prev), tail[ix])
        start += n
        n = min(2 * n, 4096)
        if start > _MAX_TERMS and active.any():
            warnings.warn(f"fractional-order RDP series did not converge after {start} terms "
                          f"(q={math.exp(log_q):.3g}); those orders are reported as +inf",
                          SeriesConvergenceWarning, stacklevel=4)
            scale[active], acc[active] = np.inf, 1.0
            break
    return scale, acc, abs_acc, tail


def _frac_block(
    log_q: float,
    log_1mq: float,
    sigmas: np.ndarray,
    alphas: np.ndarray,
) -> np.ndarray:
    """log A_alpha for a block of sigmas (R,) x fractional alphas (C,): the two-series form.

    Mironov, Talwar, Zhang 2019, Section 3.3, with z0 = sigma^2 log(1/q - 1) + 1/2:
    A = sum_i (A0_i + A1_i) (:func:`_a_terms`), summed until the terms fall below
    exp(_TERM_FLOOR). C(a,i) changes sign for i > a + 1: the sum is signed, never of
    absolute values (summing |terms| is the overestimate we found in dp-accounting).
    """
    z0 = sigmas**2 * (log_1mq - log_q) + 0.5
    inv2s2 = 1.0 / (2.0 * sigmas**2)
    rs2 = math.sqrt(2.0) * sigmas
    need_a1 = _log_a1_bound(log_q, z0, inv2s2, rs2, alphas) > _TERM_FLOOR - 14.0

    def chunk(rows, cols, i, sub_scale):
        t, sgn = _a_terms(log_q, log_1mq, z0[rows], inv2s2[rows], rs2[rows], alphas[cols], i,
                          need_a1[np.ix_(rows, cols)])
        return _signed_sums(t, sgn, sub_scale)

    n = int(np.clip(math.ceil(36.0 / max(-log_q, 1e-3)) + 4, 8, 256))
    scale, acc, abs_acc, tail = _sum_series(log_q, alphas, (sigmas.size, alphas.size), n,
                                            chunk, lambda _: _TERM_FLOOR)
    return _log_with_allowance(scale, acc, abs_acc, tail)


def _log_a1_bound(log_q: float, z0: np.ndarray, inv2s2: np.ndarray, rs2: np.ndarray,
                  alphas: np.ndarray) -> np.ndarray:
    """log of an upper bound on the A1 part, shape (sigmas, alphas).

    A1 integrates mu0 (mu/mu0)^a over z >= z0, where mu/mu0 <= 2 q exp((2z-1)/(2s^2)), so
    A1 <= (2q)^a exp((a^2-a)/(2s^2)) P(N(a, s^2) >= z0). Where that bound is negligible
    against A >= 1 (the common small-q case) the A1 series is skipped: a cheap (R, C) test.
    """
    a_row = alphas[None, :]
    return (
        a_row * (math.log(2.0) + log_q)
        + (a_row * a_row - a_row) * inv2s2[:, None]
        + _LOG_HALF
        + _log_erfc((z0[:, None] - a_row) / rs2[:, None])
    )


def _log_with_allowance(scale: np.ndarray, acc: np.ndarray, abs_acc: np.ndarray,
                        tail: np.ndarray) -> np.ndarray:
    """log A from the scaled signed sum, never under-reporting.

    Adds what truncation can have dropped (the omitted tail is bounded by its first term,
    at most the last computed one, doubled for safety) and a round-off allowance of a few
    ulps of the sum of |terms|; A_alpha >= 1, so round-off never makes the result negative.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        slack = 2.0 * np.exp(tail - scale) + _ULPS * np.finfo(float).eps * abs_acc
        out = scale + np.log(np.maximum(acc, 0.0) + np.where(np.isfinite(scale), slack, 0.0))
    return np.maximum(out, 0.0)


def _log_abs_expm1(x: np.ndarray) -> np.ndarray:
    """log |e^x - 1| for any real x (-inf at 0), without overflow or cancellation."""
    out = np.full(x.shape, -np.inf)
    pos = x > 0
    out[pos] = _log_expm1(x[pos])
    neg = x < 0
    out[neg] = np.log(-np.expm1(x[neg]))
    return out


def _am1_parts(log_q: float, log_1mq: float, sig: np.ndarray, z0: np.ndarray,
               alphas: np.ndarray, i: np.ndarray):
    """The separable factors of the A - 1 terms (see :func:`_am1_terms`): the order part
    log|C(a,i) q^i (1-q)^(a-i)| and its sign, shape (c, n); the sigma part log|e^x - 1|, its
    sign and its round-off bound, shape (r, n); and log|C(a, i)| (c, n)."""
    a = alphas[:, None]
    log_c, sgn = _log_abs_binom(a, i)
    lt0 = log_c + i[None, :] * log_q + (a - i[None, :]) * log_1mq  # (c, n)
    c_i = (i * i - i)[None, :] / (2.0 * sig[:, None] ** 2)  # (r, n)
    log_p = special.log_ndtr((z0[:, None] - i[None, :]) / sig[:, None])
    x = c_i + log_p
    log_d = _log_abs_expm1(x)
    with np.errstate(divide="ignore", over="ignore"):
        log_err = np.maximum(x, 0.0) + np.log(np.abs(c_i) + np.abs(log_p) + np.exp(log_d))
    return lt0, sgn, log_d, np.sign(x), log_err, log_c


def _separable_sums(lt0: np.ndarray, sgn: np.ndarray, log_d: np.ndarray, sx: np.ndarray,
                    log_err: np.ndarray, scale: np.ndarray):
    """sum_n sign e^(lt0[c,n] + log_d[r,n] - scale[r,c]) and the matching sum of |terms| and
    round-off bounds, as matrix products of (r, n) by (n, c) factors (each factor shifted by
    its own maximum): the (r, c, n) exponentials of the direct sum are never formed. None
    when the shifts would leave the range of floating point (the caller sums directly)."""
    def shift(v: np.ndarray, axis: int) -> np.ndarray:
        m = v.max(axis=axis)
        return np.where(np.isfinite(m), m, 0.0)

    mc, mr, me = shift(lt0, 1), shift(log_d, 1), shift(log_err, 1)
    gap = mc[None, :] + mr[:, None] - scale
    gap_e = mc[None, :] + me[:, None] - scale
    if not (np.all(np.isfinite(gap)) and np.all(np.isfinite(gap_e))
            and gap.max() < 600.0 and gap_e.max() < 600.0):
        return None
    with np.errstate(under="ignore"):
        a = np.exp(lt0 - mc[:, None])  # (c, n)
        b = np.exp(log_d - mr[:, None])  # (r, n)
        e = np.exp(log_err - me[:, None])
    signed = ((sx * b) @ (sgn * a).T) * np.exp(gap)
    absolute = (b @ a.T) * np.exp(gap) + (e @ a.T) * np.exp(gap_e)
    return signed, absolute


def _fast_chunk(log_q: float, log_1mq: float, sig: np.ndarray, z0: np.ndarray,
                alphas: np.ndarray, i: np.ndarray, sub_scale: np.ndarray):
    """One chunk of the A - 1 series by :func:`_separable_sums`: (new scale, (signed, abs)
    sums, last and previous term, rescale factor of the old sums), or None (sum directly)."""
    lt0, sgn, log_d, sx, log_err, _ = _am1_parts(log_q, log_1mq, sig, z0, alphas, i)
    new_scale = np.maximum(sub_scale, (lt0[None] + log_d[:, None, :]).max(axis=2))
    sums = _separable_sums(lt0, sgn, log_d, sx, log_err, new_scale)
    if sums is None:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        rescale = np.where(np.isfinite(sub_scale), np.exp(sub_scale - new_scale), 0.0)
    last = lt0[None, :, -1] + log_d[:, None, -1]
    prev = lt0[None, :, -2] + log_d[:, None, -2]
    return new_scale, sums, last, prev, rescale


def _slow_chunk(log_q: float, log_1mq: float, sig: np.ndarray, z0: np.ndarray,
                alphas: np.ndarray, i: np.ndarray, sub_scale: np.ndarray, need_a1: np.ndarray,
                inv2s2: np.ndarray, rs2: np.ndarray):
    """One chunk of the A - 1 series summed term by term, with the A1 series where needed;
    returns what :func:`_fast_chunk` returns."""
    t0, s0, e0, log_c = _am1_terms(log_q, log_1mq, sig, z0, alphas, i)
    t1 = np.full(t0.shape, -np.inf)
    rr, cc = np.nonzero(need_a1)
    if rr.size:
        jj = alphas[cc][:, None] - i[None, :]
        x1 = (z0[rr][:, None] - jj) / rs2[rr][:, None]
        t1[rr, cc] = (log_c[cc] + jj * log_q + i[None, :] * log_1mq
                      + (jj * jj - jj) * inv2s2[rr][:, None] + _LOG_HALF + _log_erfc(x1))
    s1 = np.broadcast_to(_log_abs_binom(alphas[:, None], i)[1][None], t1.shape)
    terms = np.concatenate([t0, t1], axis=2)
    signs = np.concatenate([s0, s1], axis=2)
    errs = np.concatenate([e0, t1], axis=2)
    new_scale = np.maximum(sub_scale, terms.max(axis=2))
    with np.errstate(invalid="ignore", over="ignore"):
        rescale = np.where(np.isfinite(sub_scale), np.exp(sub_scale - new_scale), 0.0)
        w = np.exp(terms - new_scale[:, :, None])
        signed = np.nansum(signs * w, axis=2)
        absolute = np.nansum(w + np.exp(errs - new_scale[:, :, None]), axis=2)
    last = np.maximum(t0[:, :, -1], t1[:, :, -1])
    prev = np.maximum(t0[:, :, -2], t1[:, :, -2])
    return new_scale, (signed, absolute), last, prev, rescale


def _am1_terms(log_q: float, log_1mq: float, sig: np.ndarray, z0: np.ndarray,
               alphas: np.ndarray, i: np.ndarray):
    """Terms of A - 1 = sum_i C(a,i) q^i (1-q)^(a-i) (e^(c_i) P_i - 1) + A1 for i in ``i``.

    P_i = P(N(i, s^2) <= z0) (the erfc factor of the A0 series), c_i = (i^2 - i)/(2 s^2);
    the -1 uses sum_i C(a,i) q^i (1-q)^(a-i) = 1 (q < 1/2). Each e^(c_i) P_i - 1 is an expm1
    of c_i + log P_i, so nothing cancels. Returns log|term|, its sign, and the log of a
    round-off bound per term: (r, c, n) arrays. Also the log binomial coefficients (c, n).
    """
    # error of x (a few ulps of |c_i| + |log P_i|) times d(e^x)/dx, plus d's own ulp
    lt0, sgn, log_d, sx, log_err, log_c = _am1_parts(log_q, log_1mq, sig, z0, alphas, i)
    t = lt0[None] + log_d[:, None, :]
    sign = sgn[None] * sx[:, None, :]
    err = lt0[None] + log_err[:, None, :]
    return t, sign, err, log_c


def _frac_block_small_q(log_q: float, log_1mq: float, sigmas: np.ndarray,
                        alphas: np.ndarray) -> np.ndarray:
    """log A_alpha for q <= 1/4: log1p of A - 1 summed term by term (see :func:`_am1_terms`).

    Same two-series form as :func:`_frac_block` (Mironov, Talwar, Zhang 2019, §3.3), but
    with the 1 taken out analytically, so the result keeps full relative precision when
    log A is far below machine epsilon (tiny q, large sigma), where summing A itself loses
    everything below 1e-16 absolute. Series stop at terms e^-40 below the largest; A1 is
    skipped where its bound is that small, and that bound is added instead. Never below
    the truth: truncation tail, round-off of every term and the skipped A1 bound are added.
    """
    R, C = sigmas.size, alphas.size
    z0 = sigmas**2 * (log_1mq - log_q) + 0.5
    inv2s2 = 1.0 / (2.0 * sigmas**2)
    rs2 = math.sqrt(2.0) * sigmas
    a_row = alphas[None, :]
    est = (np.log(a_row * (a_row - 1.0) / 2.0) + 2.0 * log_q + (a_row - 2.0) * log_1mq
           + np.log(np.expm1(1.0 / sigmas**2))[:, None])  # the i = 2 term: ~ A - 1
    a1_log = _log_a1_bound(log_q, z0, inv2s2, rs2, alphas)
    need_a1 = a1_log > est - 40.0
    skipped = np.where(need_a1, -np.inf, a1_log)

    def chunk(rows, cols, i, sub_scale):
        fast = None if need_a1[np.ix_(rows, cols)].any() else _fast_chunk(
            log_q, log_1mq, sigmas[rows], z0[rows], alphas[cols], i, sub_scale)
        return fast if fast is not None else _slow_chunk(
            log_q, log_1mq, sigmas[rows], z0[rows], alphas[cols], i, sub_scale,
            need_a1[np.ix_(rows, cols)], inv2s2[rows], rs2[rows])

    n = int(np.clip(math.ceil(40.0 / max(-log_q, 1e-3)) + 4, 8, 256))
    scale, acc, abs_acc, tail = _sum_series(log_q, alphas, (R, C), n, chunk,
                                            lambda s: s - 40.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        slack = (2.0 * np.exp(tail - scale) + _ULPS * np.finfo(float).eps * abs_acc
                 + np.exp(skipped - scale))
        am1 = np.exp(scale) * np.maximum(acc + np.where(np.isfinite(scale), slack, 0.0), 0.0)
        out = np.where(np.isinf(scale) & (scale > 0), np.inf, np.log1p(am1))
    return np.maximum(np.nan_to_num(out, nan=np.inf), 0.0)


def log_a_fractional(q: float, sigmas: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """log A_alpha for fractional alphas > 1, 0 < q < 1, sigmas > 0; shape (sigmas, alphas).

    Blocks of sigmas bound the memory; terms are summed in chunks until they stop
    contributing: for q <= 1/4 the series of A - 1, to full relative precision
    (:func:`_frac_block_small_q`), above it the series of A (terms below exp(-32)).
    """
    sigmas = np.asarray(sigmas, dtype=float)
    alphas = np.asarray(alphas, dtype=float)
    out = np.empty((sigmas.size, alphas.size))
    log_q, log_1mq = math.log(q), math.log1p(-q)
    block = max(1, 200_000 // max(alphas.size, 1))
    # where A - 1 < 1e-6 (estimated by the i = 2 term) the round-off and tail allowances of A
    # (up to ~2.5e-14 absolute) would cost up to 2.5e-8 relative: those are summed as A - 1
    est = (np.log(alphas * (alphas - 1.0) / 2.0)[None, :] + 2.0 * log_q
           + np.log(np.expm1(1.0 / sigmas**2))[:, None])
    tiny = (est < _TINY_AM1).any(axis=1) & (sigmas >= 1.5) if q <= _SMALL_Q else np.zeros(
        sigmas.size, bool)  # (small sigmas: e^(c_i) P_i grows huge and its allowance with it)
    # below sigma = 4 both series are summed and the smaller upper bound kept (the A - 1
    # allowance can be loose there); above it the A - 1 sum alone (tight in every test)
    plain = np.flatnonzero(~tiny | (sigmas < 4.0))
    for lo in range(0, plain.size, block):
        part = plain[lo : lo + block]
        out[part] = _frac_block(log_q, log_1mq, sigmas[part], alphas)
    rows = np.flatnonzero(tiny)
    for lo in range(0, rows.size, block):
        part = rows[lo : lo + block]
        am1 = _frac_block_small_q(log_q, log_1mq, sigmas[part], alphas)
        out[part] = np.where((sigmas[part] < 4.0)[:, None], np.minimum(out[part], am1), am1)
    return out


def rdp_sgm_many(
    qs: np.ndarray | float, sigmas: np.ndarray | float, orders: np.ndarray | None = None
) -> np.ndarray:
    """RDP of one step of the Poisson-sampled Gaussian mechanism for many (q, sigma) pairs.

    Returns an array of shape (pairs, orders). Cost: O(pairs x orders), vectorised; integer
    orders use the binomial formula, fractional ones the erfc series (Mironov, Talwar,
    Zhang 2019, §3.3). q = 0 gives 0, q = 1 the plain Gaussian alpha/(2 sigma^2) (Mironov
    2017), sigma = 0 with q > 0 gives +inf (no noise, no privacy).
    """
    orders = DEFAULT_ORDERS if orders is None else check_orders("orders", orders)
    qs_arr = check_array("qs", qs, low=0.0, high=1.0, what="sampling probabilities")
    sig_arr = check_array("sigmas", sigmas, low=0.0, what="noise multipliers")
    if qs_arr.size == 1 and sig_arr.size > 1:
        qs_arr = np.full(sig_arr.size, qs_arr[0])
    if sig_arr.size == 1 and qs_arr.size > 1:
        sig_arr = np.full(qs_arr.size, sig_arr[0])
    check_same_length(("qs", "sigmas"), qs_arr, sig_arr)

    out = np.zeros((qs_arr.size, orders.size))
    is_int = np.isclose(orders, np.round(orders), rtol=0, atol=1e-12)
    int_idx = np.flatnonzero(is_int)
    frac_idx = np.flatnonzero(~is_int)
    no_noise = (sig_arr == 0) & (qs_arr > 0)
    out[no_noise] = np.inf
    full = (qs_arr == 1) & ~no_noise
    if full.any():
        out[full] = orders[None, :] / (2.0 * sig_arr[full, None] ** 2)
    sub = (qs_arr > 0) & (qs_arr < 1) & ~no_noise

    def fill(q: float, rows: np.ndarray) -> None:
        s = sig_arr[rows]
        if int_idx.size:
            table = _log_expm1_table(s, int(round(orders[int_idx].max())))
            for c in int_idx:
                alpha = int(round(orders[c]))
                out[rows, c] = log_a_integer(q, s, alpha, table) / (alpha - 1)
        if frac_idx.size:
            la = log_a_fractional(q, s, orders[frac_idx])
            out[np.ix_(rows, frac_idx)] = la / (orders[frac_idx] - 1.0)[None, :] * (1 + _FRAC_NUDGE)

    jobs = []
    for q in np.unique(qs_arr[sub]):
        rows = np.flatnonzero(sub & (qs_arr == q))
        # numpy releases the GIL in its loops: large groups are split across cores
        parts = max(1, min(_WORKERS, rows.size // _ROWS_PER_THREAD))
        jobs.extend((float(q), part) for part in np.array_split(rows, parts))
    if len(jobs) > 1:
        with ThreadPoolExecutor(max_workers=min(_WORKERS, len(jobs))) as pool:
            list(pool.map(lambda job: fill(*job), jobs))
    elif jobs:
        fill(*jobs[0])
    # a sum that overflowed to NaN (huge orders with small sigma) bounds nothing: +inf, so
    # that the envelope below does not spread the NaN to every smaller order
    return _monotone_envelope(np.where(np.isnan(out), np.inf, out), orders)


def _monotone_envelope(values: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Each order's value replaced by the smallest value at any order >= it.

    A Rényi divergence is non-decreasing in the order (van Erven & Harremoës 2014, Thm 3), so
    an upper bound at a larger order is an upper bound at a smaller one: this only tightens
    (the series near alpha = 1 carries the largest allowance, and a series that gave up there
    (+inf) inherits the finite value of a larger order)."""
    if orders.size < 2:
        return values
    idx = np.argsort(orders, kind="stable")
    env = np.minimum.accumulate(values[:, idx][:, ::-1], axis=1)[:, ::-1]
    out = np.empty_like(values)
    out[:, idx] = env
    return out


def rdp_sgm(q: float, sigma: float, orders: np.ndarray | None = None) -> np.ndarray:
    """RDP eps(alpha) of ONE step of the Poisson-sampled Gaussian mechanism, per order.

    Mironov, Talwar, Zhang 2019 ("Rényi DP of the Sampled Gaussian Mechanism"), §3.3:
    eps(alpha) = log(A_alpha) / (alpha - 1), with the log (one seed paper drops it) and with
    exp(+(k^2-k)/(2 sigma^2)) (another flips the sign). Compose T steps by multiplying by T.

    Args:
        q: Poisson sampling probability in [0, 1].
        sigma: noise multiplier (std / L2 sensitivity) >= 0.
        orders: Rényi orders > 1 (default :data:`DEFAULT_ORDERS`).
    """
    q = check_probability("q", q)
    sigma = check_sigma("sigma", sigma)
    orders = DEFAULT_ORDERS if orders is None else check_orders("orders", orders)
    return rdp_sgm_many(np.array([q]), np.array([sigma]), orders)[0]


def rdp_gaussian(sigma: float, orders: np.ndarray | None = None) -> np.ndarray:
    """RDP of the (unsampled) Gaussian mechanism: alpha / (2 sigma^2) (Mironov 2017, Table II)."""
    sigma = check_sigma("sigma", sigma)
    orders = DEFAULT_ORDERS if orders is None else check_orders("orders", orders)
    if sigma == 0:
        return np.full(orders.shape, np.inf)
    return orders / (2.0 * sigma**2)


def rdp_laplace(b: float, orders: np.ndarray | None = None, sensitivity: float = 1.0) -> np.ndarray:
    """RDP of the Laplace mechanism with scale b and L1 sensitivity (Mironov 2017, Table II).

    eps(alpha) = 1/(alpha-1) log( alpha/(2alpha-1) exp((alpha-1)/l) + (alpha-1)/(2alpha-1)
    exp(-alpha/l) ), l = b / sensitivity; in log space. Never above the pure eps = 1/l.
    """
    b = check_positive("b", b)
    sensitivity = check_positive("sensitivity", sensitivity)
    orders = DEFAULT_ORDERS if orders is None else check_orders("orders", orders)
    eps = sensitivity / b
    a = orders
    log_val = np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * eps, np.log((a - 1) / (2 * a - 1)) - a * eps
    )
    exact = np.minimum(log_val / (a - 1), eps)
    # below eps ~ 1e-4 the log loses everything to cancellation (b = 1e9 gave -7e-17): use the
    # pure-DP bound min(eps, alpha eps^2 / 2) (:func:`rdp_pure_dp`), valid for every eps-DP
    return exact if eps >= 1e-4 else np.minimum(eps, a * eps**2 / 2.0)


def rdp_laplace_sum(eps: np.ndarray, counts: np.ndarray, orders: np.ndarray,
                    chunk: int = 4096) -> np.ndarray:
    """sum_i counts_i x :func:`rdp_laplace` of pure eps_i = sensitivity_i / b_i, vectorised
    (the same formula and small-eps branch; rows in chunks to bound memory): 10^6 distinct
    Laplace releases in one pass instead of 10^6 calls."""
    eps = np.asarray(eps, dtype=float)
    counts = np.asarray(counts, dtype=float)
    a = np.asarray(orders, dtype=float)[None, :]
    total = np.zeros(a.size)
    for start in range(0, eps.size, chunk):
        e = eps[start:start + chunk, None]
        log_val = np.logaddexp(np.log(a / (2 * a - 1)) + (a - 1) * e,
                               np.log((a - 1) / (2 * a - 1)) - a * e)
        cur = np.where(e >= 1e-4, np.minimum(log_val / (a - 1), e), np.minimum(e, a * e**2 / 2.0))
        total += (cur * counts[start:start + chunk, None]).sum(axis=0)
    return total


def rdp_pure_dp(eps: float, orders: np.ndarray | None = None) -> np.ndarray:
    """RDP curve implied by pure eps-DP: min(eps, alpha eps^2 / 2).

    eps-DP bounds every Rényi divergence by eps (Mironov 2017, Prop. 3's premise) and gives
    (eps^2/2)-zCDP (Bun & Steinke 2016, Prop. 3.3), i.e. RDP alpha eps^2 / 2.
    """
    eps = check_eps("eps", eps)
    orders = DEFAULT_ORDERS if orders is None else check_orders("orders", orders)
    return np.minimum(float(eps), orders * float(eps) ** 2 / 2.0)
