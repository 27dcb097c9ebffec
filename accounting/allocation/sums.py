"""Mean-preserving sums with certified error bounds (random allocation).

A :class:`Part` is a law on a linear grid {j h} (values rounded at random to a neighbour so
that each value's mean is kept), the first moments per bin, and bounds (L1, L2, sup,
value-weighted L1) on its error. :func:`mp_leaf` builds one term's law from the local series
of the normal CDF; :func:`mp_conv` convolves two parts (bulk directly in extended or double
precision, the rest by FFT) and :func:`mp_rebin` moves a part onto a coarser grid, each
propagating the error bounds by Young's and Hoelder's inequalities.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import fft as sfft
from scipy import special

#: Bins of the grids of the mean-preserving sums (k = 1, :func:`certified_epoch`): their rounding
#: noise is second order, so fewer than the old one-sided rounding needed.
MP_BINS = 2**16
#: Bulks of at most this many bins are convolved directly, in extended precision
DIRECT = 1000
#: The same for small deltas (:meth:`RandomAllocation.for_delta`)
SMALL_DIRECT = 8192


# ---------------------------------------------------------------- mean-preserving laws (k = 1)
_U = float(np.finfo(float).eps)
#: unit round-off of np.longdouble (x87 extended on x86-64: 2^-64; double elsewhere)
_U_LD = float(np.finfo(np.longdouble).eps)


class Part(NamedTuple):
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
    """Intervals ``idx`` of :func:`mp_leaf` with finite ends: their mass, E[Y; I], E[Y^2; I],
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
    """The interval of :func:`mp_leaf` from Y = 0 (z = -inf): tails of the normal CDF
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


def mp_leaf(s: float, h: float, n: int, a: float, b: float, ext: bool = False) -> Part:
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
    return _flushed(Part(h, q, m, e1, e2, f1, f2, ei, fi, ev))


#: masses and moments below this are set to 0 (their sum joins the error bounds): their
#: squares are subnormal, which slows every dot product by orders of magnitude
_TINY = 1e-150


def _flushed(p: Part) -> Part:
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
    return Part(p.h, q, m, p.e1 + dq, p.e2 + dq, p.f1 + dm, p.f2 + dm, p.ei + _TINY,
                 p.fi + _TINY, p.ev + dv)


def mp_rebin(p: Part, h_new: float, n_new: int, ext: bool = False) -> Part:
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
    return Part(h_new, nq, nm, p.e1 + d1q, min(p.e2 * math.sqrt(r), p.e1) + d2q, p.f1 + d1m,
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


def _norms(p: Part, n: int) -> _Norms:
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


def _conv_errors(a: Part, b: Part, na: _Norms, nb: _Norms,
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


def mp_conv(a: Part, b: Part, direct: int = DIRECT, ext: bool = True) -> Part:
    """The law of A + B (same grid, absorbing top) and its moments m = m_A * q_B + q_A *
    m_B, by FFT, with the error bounds propagated (Young's inequality) and the round-off
    added (L2 per FFT, times sqrt(length) in L1).

    Early partial sums sit in a few bins of a long grid (the cap allows one term up to c):
    each law is split into its bulk (the first w bins, all but 1e-5 of the mass) and the
    rest r; bulk * bulk is summed directly (a short FFT for w > DIRECT), and a * b - bulk
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
        bqa, tqa = _split(qa, w)
        bma, tma = _split(ma, w)
        bqb, tqb = (bqa, tqa) if same else _split(qb, w)
        bmb, tmb = (bma, tma) if same else _split(mb, w)
        sq, sm, (s1q, s2q, s1m, s2m), over = _bulk_conv(bqa, bqb, bma, bmb, n, w, direct,
                                                        ext, same)
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
    return _flushed(Part(a.h, q, m, *errs))


def _bulk_conv(bqa: np.ndarray, bqb: np.ndarray, bma: np.ndarray, bmb: np.ndarray, n: int,
               w: int, direct: int, ext: bool, same: bool) -> tuple:
    """bulk * bulk of :func:`mp_conv` (laws and moments, first ``n`` bins), its (L1, L2)
    round-off bounds of each, and the mass at or above the top: summed directly (w <=
    ``direct``) or by a short FFT."""
    ns = sfft.next_fast_len(2 * w, real=True)
    c_s = 8.0 * _U * math.log2(ns)
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
    return sq, sm, (s1q, s2q, s1m, s2m), over


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


def small_leaf(s: float, c: float, bins: int, ext: bool = False) -> Part:
    """The leaf Y 1{Y <= c} on a grid of step sd(Y) / 100 (rounding noise <= 1/40,000 of
    Var Y), within [c / 2^21, c / 64]."""
    sd = math.exp(s * s / 2.0) * math.sqrt(math.expm1(s * s))
    h = min(max(sd / 100.0, c / 2**21), c / 64.0)
    n = int(math.ceil(c / h)) + 1
    return mp_leaf(s, c / (n - 1), n, 0.0, c, ext)


def mp_point(h: float, n: int) -> Part:
    """The point mass at 0 (a sum of no terms)."""
    q = np.zeros(n + 1)
    q[0] = 1.0
    return Part(h, q, np.zeros(n + 1), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
