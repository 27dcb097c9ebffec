"""A privacy loss distribution on the grid {k h} and what is done with it.

:class:`PMF` holds the probability masses of the loss at k h (k from ``lo``) and the
P-mass at +inf. :func:`discretise` puts a pair's interval masses onto the grid, UPPER by
connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022: the discrete pair
dominates the true one) and LOWER by merge-down (post-processing: the discrete pair is
dominated); both keep a bias of O(h^2) per step. :func:`trim` moves tail mass validly per
side; :func:`compose` composes parts in the Fourier domain, the mass the transform length
folds bounded by Chernoff and returned as an allowance (:class:`GridTooLarge` where no grid
within the memory budget can hold the composition); :func:`eps_of` and :func:`delta_of`
read delta(eps) = P(L = inf) + E_P[(1 - e^(eps - L))_+] off a PMF (Sommer, Meiser,
Mohammadi 2019). The derivations: docs/accounting.md, "How the PLD bracket is built".
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import special

#: Tail mass (per side, per convolution) that is truncated (moved validly, see module doc).
TAIL = 1e-16
#: A frequency whose partial product of transforms is below this is dropped (see _spectrum).
_NEGLIGIBLE = 1e-22
#: At most this many bins in a composed PLD (a 2^23-point real FFT: ~200 MB of work
#: arrays); beyond it the grid step is coarsened (still valid, only looser).
MAX_COMPOSED = 2**23


class PMF(NamedTuple):
    """A discrete PLD: P-mass ``p[i]`` at loss (offset + i) h + shift, plus ``inf`` at +inf
    (``shift`` in [0, h): the lattice of a step may be offset; offsets add in a sum)."""

    offset: int
    p: np.ndarray
    inf: float
    shift: float = 0.0


# ---------------------------------------------------------------- discretisation
def connect_dots(pm: np.ndarray, qm: np.ndarray, ks: np.ndarray, h: float) -> np.ndarray:
    """UPPER: split each interval's P-mass between its ends, keeping E_P[e^-L] (Doroshenko
    et al. 2022). Returns masses at the S + 1 grid points ks[0] h .. (ks[-1] + 1) h."""
    # scaled by e^(k h) (no overflow at losses of hundreds): (Q e^(kh) - e^-h P) / (1 - e^-h)
    down = np.clip((_scaled_q(qm, pm, ks, h, True) - math.exp(-h) * pm) / -math.expm1(-h), 0.0, pm)
    out = np.zeros(pm.shape[:-1] + (pm.shape[-1] + 1,))
    out[..., :-1] += down
    out[..., 1:] += pm - down
    return out


def _scaled_q(qm: np.ndarray, pm: np.ndarray, ks: np.ndarray, h: float,
              upper: bool) -> np.ndarray:
    """Q_k e^(k h), computed as exp(log Q_k + k h): finite for any loss.

    Every loss in interval k lies in [k h, (k+1) h), so e^-h P_k <= Q_k e^(k h) <= P_k holds
    exactly; the computed value falls below e^-h P_k only by underflow (Q = P e^-1000 is 0 in
    floating point and would read as an infinite loss). There it is replaced by the end of
    that range that keeps the side valid: e^-h P_k (loss (k+1) h) for the upper bound, P_k
    (loss k h) for the lower bound, where the value is off by more than a factor 2 (round-off
    of a CDF difference is left as it is, as before)."""
    with np.errstate(divide="ignore", over="ignore"):
        a = np.exp(np.log(np.maximum(qm, 0.0)) + ks * h)
    floor = math.exp(-h) * pm
    if upper:
        return np.maximum(a, floor)
    # lower side: only a clear underflow (off by more than 2x, not round-off) is replaced
    return np.where(a < 0.5 * floor, pm, a)


#: the largest grid step whose e^(+-h) is a finite float (the lower side's merge needs it)
MAX_EXP_STEP = 700.0


def merge_down(pm: np.ndarray, qm: np.ndarray, ks: np.ndarray, h: float) -> np.ndarray:
    """LOWER: merge mass across each grid point so that every atom's loss is >= the point,
    then round it down (post-processing, then a smaller loss: a dominated pair).

    Interval k sends a fraction t_k of its mass down to k h and 1 - t_k up to (k+1) h. The
    atom at k h is fed (1 - t_{k-1}) of interval k-1 (losses below k h) and t_k of interval
    k (above); its merged loss is >= k h iff t_k (-Dlo_k) >= (1 - t_{k-1}) Dup_{k-1}, with
    Dlo_k = Q_k - e^{-k h} P_k <= 0 and Dup_k = Q_k - e^{-(k+1) h} P_k >= 0. The smallest such
    t_k keeps the bias O(h^2); a floor keeps the next atom feasible. Computed with
    Dlo_k, Dup_k scaled by e^(k h) (the ratios pick up e^(+-h)), so that losses of hundreds
    (Laplace with a tiny scale) neither overflow nor give NaN.
    """
    a = _scaled_q(qm, pm, ks, h, False)
    dlo = np.minimum(a - pm, 0.0)  # e^(kh) Dlo_k
    dup = np.maximum(a - math.exp(-h) * pm, 0.0)  # e^(kh) Dup_k
    eh, emh = math.exp(h), math.exp(-h)
    rows, size = pm.shape
    if rows <= 8:  # few rows: the same recursion on Python floats (numpy calls cost more)
        t = np.array([_merge_down_row(dlo[r].tolist(), dup[r].tolist(), eh, emh)
                      for r in range(rows)]).reshape(rows, size)
    else:
        t = _merge_down_columns(dlo, dup, eh, emh).T
    out = np.zeros((rows, size + 1))
    out[:, :-1] += t * pm
    out[:, 1:] += (1.0 - t) * pm
    return out


def _merge_down_columns(dlo: np.ndarray, dup: np.ndarray, eh: float,
                        emh: float) -> np.ndarray:
    """:func:`merge_down`'s recursion for many rows at once, one column at a time (the
    ratios and floors that do not depend on the carry are computed for all columns first).
    Returns t transposed: shape (size, rows)."""
    rows, size = dlo.shape
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.ascontiguousarray((eh / np.abs(dlo)).T)  # need_k = carry * ratio_k
        nxt = np.zeros_like(dlo)
        nxt[:, :-1] = -dlo[:, 1:] * emh
        floor = np.ascontiguousarray(np.where(dup > 0, 1.0 - nxt / dup, 0.0).T)
    dup_t = np.ascontiguousarray(dup.T)
    t = np.empty((size, rows))
    carry = np.zeros(rows)  # e^((k-1)h) (1 - t_{k-1}) Dup_{k-1}
    with np.errstate(invalid="ignore"):
        for k in range(size):
            tk = np.fmax(carry * ratio[k], floor[k])  # 0 * inf = nan (no carry): the floor
            np.minimum(tk, 1.0, out=tk)  # need = inf (carry onto an empty interval): 1
            np.maximum(tk, 0.0, out=tk)
            t[k] = tk
            carry = (1.0 - tk) * dup_t[k]
    return t


def _merge_down_row(dlo: list[float], dup: list[float], eh: float, emh: float) -> list[float]:
    """One row of :func:`merge_down`'s recursion (scaled Dlo, Dup), on Python floats: t_k is
    the larger of the carry's need and the floor, clipped to [0, 1] (1 where not finite)."""
    out = [1.0] * len(dlo)
    inf = math.inf
    nxts = [-x * emh for x in dlo[1:]]  # -Dlo_{k+1} e^-h (0 after the last interval)
    nxts.append(0.0)
    carry = 0.0
    for k, (dl, up, nxt) in enumerate(zip(dlo, dup, nxts)):
        if carry > 0:
            d = -dl
            need = carry * eh / d if d > 0 else inf
        else:
            need = 0.0
        floor = 1.0 - nxt / up if up > 0 else 0.0
        tk = need if need > floor else floor
        if tk != tk or tk == inf or tk == -inf:  # comparisons, not min/max calls: the
            tk = 1.0  # loop runs once per interval of the release
        elif tk < 0.0:
            tk = 0.0
        elif tk > 1.0:
            tk = 1.0
        out[k] = tk
        carry = (1.0 - tk) * up
    return out


def discretise(pm: np.ndarray, qm: np.ndarray, below: np.ndarray, above: np.ndarray,
                k0: int, h: float, upper: bool, tail: float = TAIL,
                shift: float | np.ndarray = 0.0) -> list[PMF]:
    """Rows of interval masses -> one discrete PLD per row (upper or lower version); the
    intervals are [k h + shift, (k+1) h + shift), k = k0, k0 + 1, ..."""
    ks = np.arange(k0, k0 + pm.shape[1], dtype=float) + np.asarray(shift)[..., None] / h
    if upper:
        grid = connect_dots(pm, qm, ks, h)
        grid[:, 0] += below  # losses below the grid rounded up onto it
        return [trim(PMF(k0, row, float(inf), float(c)), upper, tail)
                for row, inf, c in zip(grid, above, np.broadcast_to(shift, above.shape))]
    if h > MAX_EXP_STEP:  # a grid step past exp's range (sigma ~1e-12): no mass kept, a
        # lower bound of 0 (the empty sub-probability is dominated by any pair) instead of
        # an OverflowError; the upper side answers on its own
        return [PMF(k0, np.zeros(pm.shape[1]), 0.0, float(c))
                for c in np.broadcast_to(shift, pm.shape[:1])]
    grid = merge_down(pm, qm, ks, h)  # tails dropped: sub-probability, still a lower bound
    return [trim(PMF(k0, row, 0.0, float(c)), upper, tail)
            for row, c in zip(grid, np.broadcast_to(shift, grid.shape[:1]))]


def trim(pmf: PMF, upper: bool, tail: float = TAIL) -> PMF:
    """Cut negligible tails validly: upper: low tail rounded up, high tail to +inf;
    lower: both dropped."""
    p = np.maximum(pmf.p, 0.0)
    c = np.cumsum(p)
    if c.size == 0 or c[-1] <= 0:
        return PMF(0, np.zeros(1), pmf.inf, pmf.shift)
    lo = int(np.searchsorted(c, tail, side="right"))
    r = np.cumsum(p[::-1])
    hi = p.size - int(np.searchsorted(r, tail, side="right"))
    lo, hi = min(lo, p.size - 1), max(hi, min(lo, p.size - 1) + 1)
    kept = p[lo:hi].copy()
    inf = pmf.inf
    if upper:
        kept[0] += c[lo - 1] if lo > 0 else 0.0
        inf += float(p[hi:].sum())
    return PMF(pmf.offset + lo, kept, inf, pmf.shift)


# ---------------------------------------------------------------- composition
def _padded(pmfs: list[PMF], rows: np.ndarray) -> np.ndarray:
    """The PMFs ``rows`` as one zero-padded (rows, width) block."""
    width = max(pmfs[g].p.size for g in rows)
    block = np.zeros((rows.size, width))
    for r, g in enumerate(rows):
        block[r, : pmfs[g].p.size] = pmfs[g].p
    return block


def _log_mgf(pmfs: list[PMF], means: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """log E[e^(lambda (K - m))] of each PMF's bin index K (centred at its mean m): shape
    (len(pmfs), len(lambdas)). Matrix products over blocks of bins, each scaled by its largest
    mass and centred so that |lambda (k - middle)| <= 300: every block's sum is at least
    e^-300 (no term that matters under- or overflows), the blocks then summed in log space."""
    out = np.empty((len(pmfs), lambdas.size))
    span = max(1, int(600.0 / max(float(np.abs(lambdas).max()), 1e-300)))
    for rows in np.array_split(np.arange(len(pmfs)), max(1, len(pmfs) // 64)):
        block = _padded(pmfs, rows)
        width = block.shape[1]
        parts = []
        for b0 in range(0, width, span):
            seg = block[:, b0 : b0 + span]
            mid = (seg.shape[1] - 1) / 2.0
            top = seg.max(axis=1, keepdims=True)
            scaled = seg / np.where(top > 0, top, 1.0)
            kernel = np.exp(np.outer(np.arange(seg.shape[1]) - mid, lambdas))
            with np.errstate(divide="ignore"):
                parts.append(np.log(scaled @ kernel) + np.log(top) + (b0 + mid) * lambdas)
        out[rows] = special.logsumexp(np.stack(parts), axis=0) - np.outer(means[rows], lambdas)
    return out


def _window(pmfs: list[PMF], counts: np.ndarray, tol: float) -> tuple[int, int, float]:
    """[lo, hi] (bin indices of the composed sum of the zero-based PMFs) holding all but a
    Chernoff-bounded mass ``err`` <= tol (Chernoff 1952: P(S >= a) <= E[e^(l S)] e^(-l a)),
    or the whole support (err = 0) when that is no wider."""
    means = np.array([float((np.arange(p.p.size) * p.p).sum() / max(p.p.sum(), 1e-300))
                      for p in pmfs])
    var = np.array([float(((np.arange(p.p.size) - m) ** 2 * p.p).sum() / max(p.p.sum(), 1e-300))
                    for p, m in zip(pmfs, means)])
    mu = float((counts * means).sum())
    sd = math.sqrt(max(float((counts * var).sum()), 1e-12))
    full = int(sum(int(c) * (p.p.size - 1) for p, c in zip(pmfs, counts)))  # whole support
    grid = np.geomspace(max(1.0 / max(full, 1), 1e-3 / sd), 40.0 / sd, 14)
    lambdas = np.concatenate([-grid, grid])
    total = counts @ _log_mgf(pmfs, means, lambdas)  # log E[e^(l (S - mu))]
    z = 8.0
    with np.errstate(over="ignore"):
        while z * sd < full:
            lo_dev, hi_dev = -z * sd, z * sd
            up = np.exp(np.min(np.where(lambdas > 0, total - lambdas * hi_dev, np.inf)))
            down = np.exp(np.min(np.where(lambdas < 0, total - lambdas * lo_dev, np.inf)))
            err = float(min(up, 1.0) + min(down, 1.0))
            lo, hi = max(int(math.floor(mu + lo_dev)), 0), min(int(math.ceil(mu + hi_dev)), full)
            if err <= tol:
                return lo, hi, err
            z *= 1.25
    return 0, full, 0.0  # the whole support: nothing folds


def _int_powers(f: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Row r of ``f`` raised to the integer power counts[r], by repeated squaring."""
    out = np.ones_like(f)
    base = f.copy()
    c = counts.copy()
    while (c > 0).any():  # in place on the rows concerned (no copies of whole rows)
        np.multiply(out, base, out=out, where=(c & 1).astype(bool)[:, None])
        c >>= 1
        np.multiply(base, base, out=base, where=(c > 0)[:, None])
    return out


def _spectrum(pmfs: list[PMF], counts: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """prod_g rfft(p_g, n)^(c_g), and a bound on the L1 change from frequencies dropped.

    Every |rfft(p)| <= 1, so once a partial product is below _NEGLIGIBLE at a frequency the
    full one is too: that frequency is set to 0, which moves the inverse transform by at
    most 2 |value| in L1 (added to the allowance). The composed law is smooth, so after the
    groups with most variance only a few dozen frequencies survive, and the remaining
    groups are transformed at those frequencies only (a direct DFT, one matrix product).
    """
    from scipy import fft as sfft

    spread = np.array([c * (p.p.size if p.p.size > 1 else 0) for p, c in zip(pmfs, counts)])
    order = np.argsort(-spread)
    spectrum = np.zeros(n // 2 + 1, dtype=complex)
    active, dropped = np.arange(spectrum.size), 0.0
    spectrum[:] = 1.0
    start = 0
    width = max(p.p.size for p in pmfs)
    # full transforms while many frequencies survive (cheaper than a direct DFT then)
    while start < order.size and width * active.size > 0.25 * n * math.log2(n):
        rows = order[start : start + 16]
        start += rows.size
        f = sfft.rfft(_padded(pmfs, rows), n, axis=1)[:, active]
        spectrum[active] *= _int_powers(f, counts[rows].astype(np.int64)).prod(axis=0)
        active, dropped = _prune(spectrum, active, dropped)
    rest = order[start:]
    if rest.size and active.size:
        width = max(pmfs[g].p.size for g in rest)
        dft_all = np.exp(-2j * np.pi * np.outer(np.arange(width, dtype=float), active) / n)
        cols = np.arange(active.size)  # columns of dft_all still active
        for chunk in np.array_split(rest, max(1, rest.size // 64)):
            block = _padded(pmfs, chunk)
            dft = block @ dft_all[: block.shape[1], cols]
            spectrum[active] *= _int_powers(dft, counts[chunk].astype(np.int64)).prod(axis=0)
            keep_before = active
            active, dropped = _prune(spectrum, active, dropped)
            cols = cols[np.isin(keep_before, active, assume_unique=True)]
    return spectrum, dropped


def _prune(spectrum: np.ndarray, active: np.ndarray, dropped: float) -> tuple[np.ndarray, float]:
    """Zero the active frequencies whose magnitude is negligible; account for them."""
    mag = np.abs(spectrum[active])
    small = mag < _NEGLIGIBLE
    dropped += 2.0 * float(mag[small].sum())
    spectrum[active[small]] = 0.0
    return active[~small], dropped


def compose(parts: list[tuple[PMF, int]], tol: float) -> tuple[PMF, float]:
    """Compose ``count`` copies of every PMF at once in the Fourier domain.

    The product of the DFTs (each raised to its count by repeated squaring) is the DFT of
    the composed PMF folded modulo the transform length N.
    The window of N bins is chosen so that the mass outside it is Chernoff-bounded by
    ``err``; folding moves at most that mass, so delta changes by at most ``err`` (it goes
    into the allowance, with the round-off of the transforms).
    """
    from scipy import fft as sfft

    pmfs = [p for p, _ in parts]
    counts = np.array([c for _, c in parts], dtype=float)
    inf = 1.0 - float(np.prod([(1.0 - p.inf) ** c for p, c in zip(pmfs, counts)]))
    shift = int(sum(p.offset * int(c) for p, c in zip(pmfs, counts)))
    frac = math.fsum(p.shift * int(c) for p, c in zip(pmfs, counts))  # lattice offsets add
    lo, hi, err = _window(pmfs, counts, tol)
    if hi - lo + 1 > MAX_COMPOSED:
        raise GridTooLarge(hi - lo + 1)
    n = sfft.next_fast_len(max(hi - lo + 1, max(p.p.size for p in pmfs)), real=True)
    spectrum, dropped = _spectrum(pmfs, counts, n)
    folded = sfft.irfft(spectrum, n)
    p = np.roll(folded, -(lo % n))  # p[i] is the mass of composed index lo + i
    # round-off of the transforms: a few ulps times log2(n) sqrt(n) (the l2 norm of a
    # probability vector is <= 1), plus twice the negative mass the round-off produced
    roundoff = (8.0 * np.finfo(float).eps * math.log2(n) * math.sqrt(n)
                + 2.0 * float(np.abs(np.minimum(p, 0.0)).sum()))
    return PMF(shift + lo, np.maximum(p, 0.0), inf, frac), err + dropped + roundoff


# ---------------------------------------------------------------- hockey stick
def delta_of(pmf: PMF, eps: float, h: float) -> float:
    """delta(eps) = P(inf) + sum_l p(l) (1 - e^(eps - l))_+ of a discrete PLD."""
    loss = (pmf.offset + np.arange(pmf.p.size)) * h + pmf.shift
    sel = loss > eps
    val = pmf.p[sel] * -np.expm1(eps - loss[sel])
    return float(min(1.0, pmf.inf + np.maximum(val, 0.0).sum()))


def _discounted_suffix_sums(p: np.ndarray, h: float) -> np.ndarray:
    """c_j = sum_{i >= j} p_i e^(-(i - j) h), in blocks short enough that no exp overflows."""
    out = np.empty_like(p)
    m = max(1, int(500.0 / h))
    carry = 0.0  # c at the first index after the block
    for end in range(p.size, 0, -m):
        start = max(0, end - m)
        k = np.arange(end - start, dtype=float) * h
        tail = np.cumsum((p[start:end] * np.exp(-k))[::-1])[::-1]
        out[start:end] = np.exp(k) * tail + np.exp(k - (end - start) * h) * carry
        carry = out[start]
    return out


def eps_of(pmf: PMF, delta: float, h: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= delta (exact for the discrete PLD).

    With a_j = sum_{i >= j} p_i and c_j = sum_{i >= j} p_i e^(l_j - l_i) (the recursion
    c_j = p_j + e^-h c_{j+1}: no overflow for any loss), delta(l_j) = inf + a_{j+1} -
    e^-h c_{j+1}, and on (l_{j-1}, l_j] delta(eps) = inf + a_j - e^(eps - l_j) c_j.
    """
    if pmf.inf >= delta:
        return math.inf
    loss = (pmf.offset + np.arange(pmf.p.size)) * h + pmf.shift
    keep = loss > 0
    loss, p = loss[keep], np.maximum(pmf.p[keep], 0.0)
    if p.size == 0:
        return 0.0
    a = np.cumsum(p[::-1])[::-1]
    c = _discounted_suffix_sums(p, h)
    a_next = np.append(a[1:], 0.0)
    c_next = np.append(c[1:], 0.0)
    at_grid = pmf.inf + a_next - math.exp(-h) * c_next  # delta(l_j)
    if pmf.inf + a[0] - math.exp(-loss[0]) * c[0] <= delta:  # delta(0)
        return 0.0
    j = int(np.argmax(at_grid <= delta))
    if at_grid[j] > delta:  # pragma: no cover - at_grid[-1] = inf < delta
        return float(loss[-1])
    val = (pmf.inf + a[j] - delta) / c[j]  # = e^(eps - l_j)
    lo = float(loss[j - 1]) if j > 0 else 0.0
    if val <= 0:
        return float(loss[j])
    return float(min(max(loss[j] + math.log(val), lo), loss[j]))


class GridTooLarge(Exception):
    """The composed PLD would need more than MAX_COMPOSED bins at this grid step."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.width = width
