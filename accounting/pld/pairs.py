"""The dominating pairs whose privacy loss :mod:`accounting.pld.discrete` discretises.

* Poisson-subsampled Gaussian, add/remove (Zhu, Dong, Wang 2022, Thm 11): remove
  P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2); add: the two swapped
  (:func:`gaussian_intervals`, :func:`gaussian_step_pmf`, :func:`loss_limits`).
* Poisson-subsampled Gaussian, replace-one: P = (1-q) N(0, s^2) + q N(1, s^2) against
  Q = (1-q) N(0, s^2) + q N(-1, s^2), realised and dominating (Schuchardt et al. 2024,
  Thm 3.8), one PLD for both directions (:func:`replace_pmfs`, :func:`replace_loss_limits`,
  :func:`replace_variance`).
* Laplace and (eps, delta) releases as atoms (:func:`atom_intervals`,
  :func:`laplace_intervals`, :func:`approx_dp_atoms`; Kairouz, Oh, Viswanath 2015).

Each gives the P- and Q-mass of every loss interval [k h, (k+1) h) and the mass below and
above the grid. :func:`lower_shifts` picks the offset c of the lower side's lattice
{k h + c} (any c is valid; the one chosen keeps the mean loss). Why each pair is valid:
docs/accounting.md, "How the PLD bracket is built".
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from .discrete import MAX_EXP_STEP, PMF, connect_dots, discretise, merge_down

#: Standard deviations of the noise kept on each side when a step's loss range is built
#: (at least; more for tiny deltas, see _z_and_tail).
Z_SDS = 8.5


# ---------------------------------------------------------------- interval masses
def _mixture_cdf(x: np.ndarray, q: np.ndarray | None, s: np.ndarray,
                 upper: bool) -> np.ndarray:
    """(1-q) F(x/s) + q F((x-1)/s) with F = ndtr (or its survival function if ``upper``)."""
    sign = -1.0 if upper else 1.0
    if q is None:  # the plain N(0, s^2)
        return special.ndtr(sign * x / s)
    return (1 - q) * special.ndtr(sign * x / s) + q * special.ndtr(sign * (x - 1.0) / s)


def _x_of_loss(loss: np.ndarray, q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """x with log(1 - q + q exp((2x - 1)/(2 s^2))) = loss (-inf where loss <= log(1-q))."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.expm1(loss) / q
        out = s * s * np.log1p(ratio) + 0.5
        # e^loss overflows above loss ~ 709: log(1 + (e^l - 1)/q) = l - log q + O(q e^-l)
        # (was inf, which put all the mass above the grid into its last bin)
        big = s * s * (loss - np.log(q)) + 0.5
    out = np.where(np.isfinite(loss) & (loss > 700.0), big, out)
    out = np.where(ratio <= -1.0, -np.inf, out)
    return np.where(q == 1.0, s * s * loss + 0.5, out)  # q = 1: the loss is linear in x


def _masses(x: np.ndarray, q: np.ndarray | None, s: np.ndarray) -> tuple[np.ndarray, ...]:
    """Interval masses between consecutive increasing points ``x`` (last axis) under the
    mixture (1-q) N(0, s^2) + q N(1, s^2), and the masses below x[0] and above x[-1].

    Differences of the CDF below the middle and of the survival function above it, so
    that small masses in either tail keep their relative precision.
    """
    cdf = _mixture_cdf(x, q, s, False)
    sf = _mixture_cdf(x, q, s, True)
    use_sf = x[..., :-1] > (0.0 if q is None else q)
    mass = np.where(use_sf, sf[..., :-1] - sf[..., 1:], cdf[..., 1:] - cdf[..., :-1])
    return np.maximum(mass, 0.0), cdf[..., 0], sf[..., -1]


def _tails(x: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Phi(x/s), Phi(-x/s)) from ONE normal CDF evaluation: the smaller tail Phi(-|x|/s) is
    exact, the larger one is 1 minus it (>= 1/2, where that loses nothing)."""
    t = special.ndtr(-np.abs(x) / s)
    neg = x < 0
    return np.where(neg, t, 1.0 - t), np.where(neg, 1.0 - t, t)


def _masses_of(cdf: np.ndarray, sf: np.ndarray, x: np.ndarray,
               middle: float | np.ndarray) -> tuple[np.ndarray, ...]:
    """Interval masses between consecutive points ``x`` (last axis) of a law with CDF ``cdf``
    and survival function ``sf`` at x, and the masses below x[0] and above x[-1] (CDF
    differences below ``middle``, survival function differences above, as in _masses)."""
    use_sf = x[..., :-1] > middle
    mass = np.where(use_sf, sf[..., :-1] - sf[..., 1:], cdf[..., 1:] - cdf[..., :-1])
    return np.maximum(mass, 0.0), cdf[..., 0], sf[..., -1]


def _pair_masses(x: np.ndarray, q: np.ndarray, s: np.ndarray) -> tuple[tuple, tuple]:
    """:func:`_masses` under the mixture (1-q) N(0, s^2) + q N(1, s^2) and under N(0, s^2)
    at once: two normal CDF evaluations per point, shared by both laws (instead of six)."""
    c0, s0 = _tails(x, s)
    c1, s1 = _tails(x - 1.0, s)
    mix = _masses_of((1 - q) * c0 + q * c1, (1 - q) * s0 + q * s1, x, q)
    return mix, _masses_of(c0, s0, x, 0.0)


def gaussian_intervals(qs: np.ndarray, sigmas: np.ndarray, edges: np.ndarray,
                        direction: str) -> tuple[np.ndarray, ...]:
    """P- and Q-mass of each loss interval [edges[j], edges[j+1]) for every (q, sigma) row,
    and the P-mass below edges[0] and at or above edges[-1]: arrays (G, S), (G, S), (G,), (G,)
    (``edges``: one increasing row shared by all rows, or one row per (q, sigma) row).

    remove: x ~ P = (1-q) N(0,s^2) + q N(1,s^2), Q = N(0,s^2), loss l(x) increasing;
    add: x ~ P = N(0,s^2), Q = the mixture, loss -l(x) (Zhu, Dong, Wang 2022).
    """
    q = qs[:, None]
    s = sigmas[:, None]
    edges = np.atleast_2d(edges)  # one row of edges shared by every (q, sigma) row, or a row each
    if direction == "remove":
        x = _x_of_loss(edges, q, s)
        (pm, below, above), (qm, _, _) = _pair_masses(x, q, s)
        return pm, qm, below, above
    x = _x_of_loss(-edges[:, ::-1], q, s)  # increasing in x = decreasing in the loss
    (qm, _, _), (pm, above, below) = _pair_masses(x, q, s)
    return pm[:, ::-1], qm[:, ::-1], below, above


def atom_intervals(atoms: list[tuple[float, float, float]], edges: np.ndarray,
                    h: float) -> tuple[np.ndarray, ...]:
    """Interval masses of a finite-support pair given as (loss, P-mass, Q-mass) atoms."""
    pm = np.zeros(edges.size - 1)
    qm = np.zeros(edges.size - 1)
    below = above = 0.0
    for loss, p, q in atoms:
        k = int(math.floor(loss / h))
        k += 1 if (k + 1) * h <= loss else (-1 if k * h > loss else 0)  # k h <= loss < (k+1) h
        j = k - int(round(edges[0] / h))
        if j < 0:
            below += p
        elif j >= pm.size:
            above += p
        else:
            pm[j] += p
            qm[j] += q
    return pm, qm, below, above


def laplace_intervals(eps0: float, edges: np.ndarray, h: float) -> tuple[np.ndarray, ...]:
    """Exact interval masses of the Laplace pair P = Lap(0, b), Q = Lap(D, b), eps0 = D/b.

    Atoms: loss eps0 with P = 1/2 (x <= 0), loss -eps0 with P = e^-eps0 / 2 (x >= D); for
    x = u D, u in (0, 1), the loss eps0 (1 - 2u) is continuous with P-density
    eps0 e^(-eps0 u) / 2 and Q-density eps0 e^(-eps0 (1-u)) / 2.
    """
    pm, qm, below, above = atom_intervals(
        [(eps0, 0.5, 0.5 * math.exp(-eps0)), (-eps0, 0.5 * math.exp(-eps0), 0.5)], edges, h)
    la = np.clip(edges[:-1], -eps0, eps0)
    lb = np.clip(edges[1:], -eps0, eps0)
    ua = (1.0 - la / eps0) / 2.0  # the larger u (smaller loss)
    ub = (1.0 - lb / eps0) / 2.0
    pm += 0.5 * (np.exp(-eps0 * ub) - np.exp(-eps0 * ua))
    qm += 0.5 * (np.exp(-eps0 * (1.0 - ua)) - np.exp(-eps0 * (1.0 - ub)))
    return pm, qm, below, above


def approx_dp_atoms(eps0: float, delta0: float) -> list[tuple[float, float, float]]:
    """Randomised response with a delta atom: the dominating pair of (eps0, delta0)-DP."""
    hi = (1 - delta0) / (1 + math.exp(-eps0))
    lo = (1 - delta0) / (1 + math.exp(eps0))
    return [(eps0, hi, lo), (-eps0, lo, hi)]


def gaussian_step_pmf(q: float, s: float, h: float, direction: str, upper: bool) -> PMF:
    """Discrete PLD of ONE Poisson-subsampled Gaussian step (rate q, multiplier s; q = 1 the
    plain Gaussian pair) in one direction on the grid {k h}: connect-the-dots upper,
    merge-down lower (what :func:`discretise` does for every row)."""
    qs, sig = np.array([q]), np.array([s])
    llo, lhi = loss_limits(qs, sig)
    if direction == "add":
        llo, lhi = -lhi, -llo
    k0 = int(np.floor(llo[0] / h)) - 1
    k1 = int(np.ceil(lhi[0] / h)) + 1
    edges = np.arange(k0, k1 + 1, dtype=float) * h
    pm, qm, below, above = gaussian_intervals(qs, sig, edges, direction)
    return discretise(pm, qm, below, above, k0, h, upper)[0]


# ---------------------------------------------------------------- replace-one under Poisson
#: Noise sds kept on each side of the +-1 pair's range, and the tail mass a trim may move
#: (fixed, as the parts are built without the target delta: q * Phi(-11) ~ 2e-28 per step).
_REPLACE_Z = 11.0
_REPLACE_TAIL = 1e-30


def _x_of_loss_replace(loss: np.ndarray, q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """x with L(x) = loss for the +-1 pair P = (1-q) N(0, s^2) + q N(1, s^2),
    Q = (1-q) N(0, s^2) + q N(-1, s^2): L(x) = log((a + b u) / (a + b / u)) with a = 1 - q,
    b = q e^(-1/(2 s^2)), u = e^(x / s^2), increasing in x. u is the positive root of
    b u^2 + a (1 - e^l) u - b e^l = 0, taken in log space in the form without cancellation
    (b underflows below s ~ 0.03; e^l overflows past l ~ 709). Broadcasts; q < 1."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_a = np.log1p(-q)
        log_b = np.log(q) - 0.5 / s**2
        # log |e^l - 1| without overflow (expm1 overflows past l ~ 709: that put every loss
        # above it at x = inf, i.e. all of that mass at one bin near 709: an invalid upper)
        log_em1 = np.where(loss > 0, loss + np.log(-np.expm1(-np.abs(loss))),
                           np.log(-np.expm1(-np.abs(loss))))
        log_c = log_a + log_em1  # |a (e^l - 1)|
        log_d = math.log(2.0) + log_b + loss / 2.0  # 2 b e^(l/2)
        log_root = 0.5 * np.logaddexp(2.0 * log_c, 2.0 * log_d)  # sqrt(c^2 + d^2)
        pos = np.logaddexp(log_c, log_root) - math.log(2.0) - log_b
        neg = math.log(2.0) + log_b + loss - np.logaddexp(log_root, log_c)
    return s * s * np.where(loss >= 0, pos, neg)


def replace_loss_limits(qs: np.ndarray, sig: np.ndarray,
                         z: float = _REPLACE_Z) -> tuple[np.ndarray, np.ndarray]:
    """Loss of the +-1 pair at x = -(1 + z s) and x = 1 + z s (it is odd in x)."""
    u = (1.0 + z * sig) / sig**2
    with np.errstate(divide="ignore"):
        log_a, log_b = np.log1p(-qs), np.log(qs) - 0.5 / sig**2
    lhi = np.logaddexp(log_a, log_b + u) - np.logaddexp(log_a, log_b - u)
    return -lhi, lhi


def _replace_intervals(qs: np.ndarray, sigmas: np.ndarray,
                       edges: np.ndarray) -> tuple[np.ndarray, ...]:
    """P- and Q-mass of each loss interval of the +-1 pair (rows (q, s)), and the P-mass
    below and above the grid (as :func:`gaussian_intervals`). Q is the mirror image of P
    (x -> -x), so its masses are P's on the mirrored intervals."""
    q, s = qs[:, None], sigmas[:, None]
    x = _x_of_loss_replace(edges[None, :], q, s)
    pm, below, above = _masses(x, q, s)
    qm, _, _ = _masses(-x[:, ::-1], q, s)
    return pm, qm[:, ::-1], below, above


#: Rows x grid points of one block of rows discretised at once (~10 arrays of this size are
#: live: ~170 MB); a single row wider than this is a block of its own.
BLOCK_CELLS = 2**21


def row_blocks(k_lo: np.ndarray, k_hi: np.ndarray, max_rows: int = 256) -> list[np.ndarray]:
    """Rows (indices) grouped into blocks discretised together: by increasing width, a block
    closed when its span (rows x grid points from its lowest k_lo to its highest k_hi) would
    pass :data:`BLOCK_CELLS` or it holds ``max_rows`` rows. One wide row (a q = 1 Gaussian
    composed from thousands of steps) no longer widens the block of every narrow row."""
    order = np.argsort(k_hi - k_lo, kind="stable")
    blocks: list[list[int]] = []
    lo = hi = 0
    for i in order.tolist():
        if blocks:
            nlo, nhi = min(lo, int(k_lo[i])), max(hi, int(k_hi[i]))
            cur = blocks[-1]
            if len(cur) < max_rows and (len(cur) + 1) * (nhi - nlo + 1) <= BLOCK_CELLS:
                cur.append(i)
                lo, hi = nlo, nhi
                continue
        blocks.append([i])
        lo, hi = int(k_lo[i]), int(k_hi[i])
    return [np.array(b, dtype=np.int64) for b in blocks]


def replace_pmfs(qs: np.ndarray, sigmas: np.ndarray, counts: np.ndarray, h: float,
                 upper: bool, z: float = _REPLACE_Z,
                 tail: float = _REPLACE_TAIL) -> list[tuple[PMF, int]]:
    """Discrete PLDs (connect-the-dots upper, merge-down lower) of Poisson-subsampled
    Gaussian steps under replace-one, one per (q, sigma) row (0 < q < 1, sigma > 0), as
    the +-1 pair (module doc). The pair is symmetric (x -> -x swaps P and Q), so the same
    PLD serves both directions."""
    llo, lhi = replace_loss_limits(qs, sigmas, z)
    k_lo = np.floor(llo / h).astype(np.int64) - 1
    k_hi = np.ceil(lhi / h).astype(np.int64) + 1
    out: list[tuple[PMF, int]] = []
    for block in row_blocks(k_lo, k_hi):
        k0, k1 = int(k_lo[block].min()), int(k_hi[block].max())
        edges = np.arange(k0, k1 + 1, dtype=float) * h
        pm, qm, below, above = _replace_intervals(qs[block], sigmas[block], edges)
        out.extend(zip(discretise(pm, qm, below, above, k0, h, upper, tail),
                       counts[block].tolist()))
    return out


def replace_variance(qs: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """About the variance of one step's loss under the +-1 pair: 4 q^2 sinh(1/s^2) for small
    q, at most 4/s^2 (q = 1: the Gaussian pair at distance 2); sets the grid step only."""
    with np.errstate(over="ignore"):
        small = 4.0 * qs * qs * np.sinh(np.minimum(1.0 / sigmas**2, 700.0))
    return np.minimum(small, 4.0 / sigmas**2)


def loss_limits(qs: np.ndarray, sig: np.ndarray,
                 z: float = Z_SDS) -> tuple[np.ndarray, np.ndarray]:
    """Loss of the remove pair at x = -z sigma and x = 1 + z sigma (the add pair's range
    is the mirror image). At q = 1 the loss (2x - 1)/(2 sigma^2) is linear: computed as
    such (log1p(expm1(x)) loses it below x = -37 and gave -inf, then an empty grid)."""
    xhi = (2 * (1 + z * sig) - 1) / (2 * sig**2)
    xlo = (2 * (-z * sig) - 1) / (2 * sig**2)
    with np.errstate(divide="ignore", over="ignore"):
        lhi = np.log1p(qs * np.expm1(np.minimum(xhi, 700)))
        llo = np.log1p(qs * np.expm1(xlo))
    full = qs == 1.0
    lhi = np.where(full, xhi, lhi)
    with np.errstate(divide="ignore"):
        llo = np.where(full, xlo, np.maximum(llo, np.log1p(-np.minimum(qs, 1.0)) - 1.0))
    return llo, lhi


#: Lattice offsets tried per row for the LOWER discretisation (a coarse scan, then finer
#: scans around the best), and the most grid steps of the window they are compared on.
_SHIFT_SCAN = (16,) + (6,) * 8
_SHIFT_WINDOW = 32
#: Rows with less P-mass than this within 2 h of the end of their loss range keep offset 0.
_SHIFT_EDGE = 0.05


def _window_means(qs: np.ndarray, sig: np.ndarray, edges: np.ndarray, h: float,
                  direction: str) -> np.ndarray:
    """mean loss of the LOWER (merge-down) minus that of the UPPER (connect-the-dots)
    discretisation of each row on its window ``edges`` (rows, W + 1): <= 0 up to round-off
    (a dominated pair has the smaller KL divergence), the closer to 0 the less is lost."""
    pm, qm, _, _ = gaussian_intervals(qs, sig, edges, direction)
    ks = edges[:, :-1] / h
    lower = merge_down(pm, qm, ks, h)
    upper = connect_dots(pm, qm, ks, h)
    pts = np.arange(edges.shape[1], dtype=float) * h  # losses relative to each row's edges[0]
    return (lower - upper) @ pts


def lower_shifts(qs: np.ndarray, sig: np.ndarray, h: float, direction: str) -> np.ndarray:
    """Offset c in [0, h) of the grid {k h + c} of each row for the LOWER discretisation.

    Any offset gives a valid lower bound (the merge is post-processing on every grid), but
    the mass the merge has to round down depends on where the grid points fall against the
    bulk of the loss: at q << 1 most of it lies within q of log(1 - q), narrower than h, and
    the mean loss lost per step varies ~100-fold with c (at q = 0.001, sigma 0.6, h = 2e-4:
    3e-5 for c = 0, 3e-7 at the best c; over 10,000 steps that is 0.3 against 0.003 in eps).
    The mean loss lost, measured on a window of the bulk, is minimised by scanning c.
    """
    rows = qs.size
    if h > MAX_EXP_STEP:  # no mass is kept on such a grid (see discretise): nothing to gain
        return np.zeros(rows)
    # the window: W grid steps from the end of the loss range where the bulk sits (the low
    # end for remove, log(1 - q) there; the high end for add)
    llo, _ = loss_limits(qs, sig)
    _, bulk = loss_limits(qs, sig, 4.0)  # x = 1 + 4 sigma
    width = np.minimum(np.ceil((bulk - llo) / h) + 2.0, _SHIFT_WINDOW)
    if direction == "remove":
        start = np.floor(llo / h) - 1.0
    else:  # the mirror image: the bulk at the top, -log(1 - q)
        start = np.ceil(-llo / h) + 1.0 - width
    j = np.arange(int(width.max()) + 1, dtype=float)

    def gains(sel: np.ndarray, fr: np.ndarray) -> np.ndarray:
        """the window's mean loss kept by rows ``sel`` at offsets fr * h: shape fr.shape."""
        n = fr.shape[1]
        c = (fr * h).ravel()
        edges = (np.repeat(start[sel], n)[:, None] + j[None, :]) * h + c[:, None]
        return _window_means(np.repeat(qs[sel], n), np.repeat(sig[sel], n), edges, h,
                             direction).reshape(fr.shape)

    # only rows whose bulk is narrower than h need it: the P-mass of a loss within 2 h of
    # the end log(1 - q) (both directions: the q-free part, x ~ N(0, sigma^2), where
    # L - log(1 - q) ~ q exp((2x - 1) / (2 sigma^2))); elsewhere the offset is 0, as before
    with np.errstate(divide="ignore"):
        edge = special.ndtr(sig * np.log(2.0 * h / qs) + 0.5 / sig)
    sel = np.flatnonzero((edge > _SHIFT_EDGE) & (qs < 1.0))
    best = np.zeros(rows)
    span = 1.0  # fraction of h scanned around ``best``
    for n in _SHIFT_SCAN if sel.size else ():
        fr = (best[sel, None] + span * (np.arange(n) / n - (0.0 if span == 1.0 else 0.5))) % 1.0
        best[sel] = fr[np.arange(sel.size), np.argmax(gains(sel, fr), axis=1)]
        span = 2.0 * span / n
    return best * h
