"""Privacy loss distributions (PLD) with certified upper AND lower bounds on eps.

A privacy loss distribution is the law of L = log(P(x)/Q(x)) for x ~ P, where (P, Q) is a
dominating pair of the mechanism; for a composition the losses add, so the composed PLD is
the convolution of the per-step ones, and delta(eps) = P(L = inf) + E[(1 - e^(eps - L))_+]
(Sommer, Meiser, Mohammadi 2019; Koskela, Jälkö, Honkela 2020 compose by FFT).

Dominating pairs (add/remove adjacency, both directions, the larger delta wins):

* Poisson-subsampled Gaussian (Zhu, Dong, Wang 2022, Thm 11): remove
  P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2); add: the same two swapped.
* Laplace (scale b, sensitivity D): P = Lap(0, b), Q = Lap(D, b) (symmetric).
* (eps, delta) release: the randomised-response pair with an atom of mass delta at +inf
  (Kairouz, Oh, Viswanath 2015).

Discretisation on the grid {k h}, from each loss interval [k h, (k+1) h)'s P- and Q-mass:

* UPPER: connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022): the mass of
  an interval is split between its two ends so that E_P[e^(-L)] is kept. Splitting an
  outcome is the inverse of post-processing, so the discrete pair dominates the true one.
* LOWER: the mirror image, by post-processing. Mass just above a grid point is *merged*
  with mass just below it (a fraction t_k of interval k goes down, the rest up) so that
  each atom's merged loss is at least its grid point, then rounded down onto it. Merging is
  post-processing (the pair is dominated), rounding down only lowers delta.

Both have a bias of O(h^2) per step instead of the O(h) of rounding every loss up or down
("privacy buckets"): that is what keeps the lower bound usable over 10,000 steps, where
plain rounding down drifts by T h / 2 (dp-accounting's optimistic PLD gives 0.10 where the
truth is 0.60 for q = 0.01, sigma = 6, 10,000 steps). The O(h^2) needs mass on both sides
of a grid point: at q << 1 most of a step's loss lies within ~q of log(1 - q), narrower
than h, and the merge rounds that bulk down by up to ~h/6 per step (q = 0.001, sigma 0.6:
a lower end of 2.27 where eps is ~2.73 over 10,000 steps). So the lower side of each group
is discretised on an offset lattice {k h + c} (any c is as valid: the merge is
post-processing on every grid; the offsets add up in a composition), c chosen by scanning
the mean loss the merge loses on the bulk (a dominated pair's KL divergence can only be
smaller: the closer, the tighter), which brings that loss to ~1 % of it. Tails below the
grid are rounded up (upper) or dropped (lower); P-mass above it becomes the +inf atom
(upper) or is dropped (lower): all valid. Steps are grouped by distinct (q, sigma)
(:mod:`accounting._grid`), composed at once in the Fourier domain (each spectrum raised to
its count), the mass the transform length folds bounded by Chernoff and counted in the
allowance. With many distinct
sigmas, sigmas are rounded onto a geometric grid: DOWN for the upper bound, UP for the lower.

Relations and samplings (:mod:`accounting.relations`): every Gaussian step enters as the
Poisson add/remove pair that accounts it, the upper-bound pair on the upper side and a pair
valid as a lower bound for its relation on the lower side (fixed-size and shuffled steps are
left out of the lower end: their accounting is only an upper bound).

Poisson steps (0 < q < 1) under replace-one: both ends are the +-1 pair (in units of the clip
norm C, s = sigma)

    P = (1-q) N(0, s^2) + q N(1, s^2),   Q = (1-q) N(0, s^2) + q N(-1, s^2).

It is realised (every other record's gradient 0, the replaced one's +C, its replacement's
-C, one coordinate), so its lower-discretised eps is a valid LOWER end. It also dominates
the mechanism for any gradients g, g' in the unit ball in any dimension: the step's outputs
on the two data sets are (1-q) N(c, s^2 I) + q N(c + g, .) and the same with g' (the other
records' batch mixes over c; joint convexity), and Schuchardt, Stoian, Kosmala, Guennemann,
NeurIPS 2024, "Unified mechanism-specific amplification by subsampling and group privacy
amplification", Thm 3.8 (tight group-privacy amplification of the Poisson-subsampled
Gaussian; one deletion and one insertion = replace-one) gives exactly this pair as the
tight bound, so it is the UPPER pair too. (We read the statement through the authors' code,
group_amplification/privacy_analysis/subsampling/adp/poisson.py, whose quadrature for
Thm 3.8 with insertions = deletions = 1 integrates this P against this Q; our tests add a
2-D quadrature over random g, g' that never exceeds it.) The same pair is dp-accounting's
REPLACE_ONE PLD for PoissonSampledDpEvent(q, GaussianDpEvent(sigma)) (GaussianPrivacyLoss,
REPLACE: mu(x + 1) vs mu(x - 1) mixtures, sensitivity 1 per side, so NOT the sensitivity
erratum of its RDP accountant, dp-accounting issue #378). The pair is symmetric (x -> -x
swaps P and Q): one PLD serves both directions, and it dominates at every order alpha >= 0
(for alpha < 1 by H_alpha(P||Q) = 1 - alpha + alpha H_{1/alpha}(Q||P) with g, g' swapped),
so the T-fold product dominates the adaptive composition (Zhu, Dong, Wang 2022, Thm 10).
It is always below the unamplified bound (sigma/2, q = 1): keeping N(+-1) with probability
q and drawing N(0) otherwise is post-processing of N(1) vs N(-1).

Never falls over: unsampled Gaussian steps compose exactly into one (closed form when
nothing else is recorded); losses of hundreds (Laplace with scale 1e-4) are discretised with
scaled masses, underflow read conservatively on each side; the grid step is bounded below by
a memory budget (one release within _MAX_BINS bins, the composition within _MAX_COMPOSED)
and a composition no grid can hold is refused with a ValueError before any large allocation;
when the discretisation's allowance reaches delta (delta near 1e-12 and below) the upper end
falls back on the RDP bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from scipy import special

from ._grid import Groups, rounded_groups, rounded_releases, sgm_groups, too_many_releases
from ._validate import (
    check_count,
    check_delta,
    check_eps,
    check_instances,
    check_positive,
)
from .events import Event
from .registry import (
    ACCOUNTANTS,
    DPPart,
    GaussianPart,
    LaplacePart,
    PLDPart,
    UnsupportedEventError,
    no_privacy_reason,
    pure_total,
)

__all__ = ["PLDBounds", "pld_epsilon", "pld_delta", "PLDOptions"]

#: Tail mass (per side, per convolution) that is truncated (moved validly, see module doc).
_TAIL = 1e-16
#: Default grid refinement: halve h (at most _REFINE - 1 times) while the bracket is wider
#: than _WIDTH relative to its upper end.
_REFINE = 3
_WIDTH = 0.01
#: Where sigmas are rounded onto a grid, the first refinement divides its spacing by this.
_SIGMA_REFINE = 5.0
#: A frequency whose partial product of transforms is below this is dropped (see _spectrum).
_NEGLIGIBLE = 1e-22
#: At most about this many grid steps across the loss range of one step.
_MAX_BINS = 30_000
#: Standard deviations of the noise kept on each side when a step's loss range is built
#: (at least; more for tiny deltas, see _z_and_tail).
_Z = 8.5
#: At most this many bins in a composed PLD (a 2^23-point real FFT: ~200 MB of work
#: arrays); beyond it the grid step is coarsened (still valid, only looser).
_MAX_COMPOSED = 2**23
#: A refinement pass over rounded sigma groups is skipped when groups x bins would exceed
#: this (the discretisation costs about that many normal CDF evaluations per side).
_MAX_CELLS = 1e7


class PLDBounds(NamedTuple):
    """Certified bracket on the true eps: lower <= eps <= upper; estimate = midpoint."""

    lower: float
    estimate: float
    upper: float


class PLDOptions(NamedTuple):
    """Discretisation settings (checked by :func:`_options`)."""

    value_interval: float | None  # grid step h of the loss; None: see _grid_step
    sigma_resolution: float  # geometric sigma grid when there are many distinct sigmas
    max_distinct: int  # more distinct (q, sigma) pairs than this: round onto the grid


def _options(value_interval: float | None, sigma_resolution: float,
             max_distinct: int) -> PLDOptions:
    if value_interval is not None:
        value_interval = check_positive("value_interval", value_interval)
    return PLDOptions(value_interval, check_positive("sigma_resolution", sigma_resolution),
                      check_count("max_distinct", max_distinct, minimum=1))


class _PMF(NamedTuple):
    """A discrete PLD: P-mass ``p[i]`` at loss (offset + i) h + shift, plus ``inf`` at +inf
    (``shift`` in [0, h): the lattice of a step may be offset; offsets add in a sum)."""

    offset: int
    p: np.ndarray
    inf: float
    shift: float = 0.0


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


def _gaussian_intervals(qs: np.ndarray, sigmas: np.ndarray, edges: np.ndarray,
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


def _atom_intervals(atoms: list[tuple[float, float, float]], edges: np.ndarray,
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


def _laplace_intervals(eps0: float, edges: np.ndarray, h: float) -> tuple[np.ndarray, ...]:
    """Exact interval masses of the Laplace pair P = Lap(0, b), Q = Lap(D, b), eps0 = D/b.

    Atoms: loss eps0 with P = 1/2 (x <= 0), loss -eps0 with P = e^-eps0 / 2 (x >= D); for
    x = u D, u in (0, 1), the loss eps0 (1 - 2u) is continuous with P-density
    eps0 e^(-eps0 u) / 2 and Q-density eps0 e^(-eps0 (1-u)) / 2.
    """
    pm, qm, below, above = _atom_intervals(
        [(eps0, 0.5, 0.5 * math.exp(-eps0)), (-eps0, 0.5 * math.exp(-eps0), 0.5)], edges, h)
    la = np.clip(edges[:-1], -eps0, eps0)
    lb = np.clip(edges[1:], -eps0, eps0)
    ua = (1.0 - la / eps0) / 2.0  # the larger u (smaller loss)
    ub = (1.0 - lb / eps0) / 2.0
    pm += 0.5 * (np.exp(-eps0 * ub) - np.exp(-eps0 * ua))
    qm += 0.5 * (np.exp(-eps0 * (1.0 - ua)) - np.exp(-eps0 * (1.0 - ub)))
    return pm, qm, below, above


def _approx_dp_atoms(eps0: float, delta0: float) -> list[tuple[float, float, float]]:
    """Randomised response with a delta atom: the dominating pair of (eps0, delta0)-DP."""
    hi = (1 - delta0) / (1 + math.exp(-eps0))
    lo = (1 - delta0) / (1 + math.exp(eps0))
    return [(eps0, hi, lo), (-eps0, lo, hi)]


# ---------------------------------------------------------------- discretisation
def _connect_dots(pm: np.ndarray, qm: np.ndarray, ks: np.ndarray, h: float) -> np.ndarray:
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
_MAX_EXP_STEP = 700.0


def _merge_down(pm: np.ndarray, qm: np.ndarray, ks: np.ndarray, h: float) -> np.ndarray:
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
    """:func:`_merge_down`'s recursion for many rows at once, one column at a time (the
    ratios and floors that do not depend on the carry are computed for all columns first).
    Returns t transposed: shape (size, rows)."""
    rows, size = dlo.shape
    with np.errstate(divide="ignore", invalid="ignore"):
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
    """One row of :func:`_merge_down`'s recursion (scaled Dlo, Dup), on Python floats."""
    size = len(dlo)
    out = [1.0] * size
    carry = 0.0
    for k in range(size):
        d = -dlo[k]
        if carry > 0:
            need = carry * eh / d if d > 0 else math.inf
        else:
            need = 0.0
        nxt = -dlo[k + 1] * emh if k + 1 < size else 0.0
        up = dup[k]
        floor = 1.0 - nxt / up if up > 0 else 0.0
        tk = need if need > floor else floor
        tk = min(max(tk, 0.0), 1.0) if math.isfinite(tk) else 1.0
        out[k] = tk
        carry = (1.0 - tk) * up
    return out


def _discretise(pm: np.ndarray, qm: np.ndarray, below: np.ndarray, above: np.ndarray,
                k0: int, h: float, upper: bool, tail: float = _TAIL,
                shift: float | np.ndarray = 0.0) -> list[_PMF]:
    """Rows of interval masses -> one discrete PLD per row (upper or lower version); the
    intervals are [k h + shift, (k+1) h + shift), k = k0, k0 + 1, ..."""
    ks = np.arange(k0, k0 + pm.shape[1], dtype=float) + np.asarray(shift)[..., None] / h
    if upper:
        grid = _connect_dots(pm, qm, ks, h)
        grid[:, 0] += below  # losses below the grid rounded up onto it
        return [_trim(_PMF(k0, row, float(inf), float(c)), upper, tail)
                for row, inf, c in zip(grid, above, np.broadcast_to(shift, above.shape))]
    if h > _MAX_EXP_STEP:  # a grid step past exp's range (sigma ~1e-12): no mass kept, a
        # lower bound of 0 (the empty sub-probability is dominated by any pair) instead of
        # an OverflowError; the upper side answers on its own
        return [_PMF(k0, np.zeros(pm.shape[1]), 0.0, float(c))
                for c in np.broadcast_to(shift, pm.shape[:1])]
    grid = _merge_down(pm, qm, ks, h)  # tails dropped: sub-probability, still a lower bound
    return [_trim(_PMF(k0, row, 0.0, float(c)), upper, tail)
            for row, c in zip(grid, np.broadcast_to(shift, grid.shape[:1]))]


def gaussian_step_pmf(q: float, s: float, h: float, direction: str, upper: bool) -> _PMF:
    """Discrete PLD of ONE Poisson-subsampled Gaussian step (rate q, multiplier s; q = 1 the
    plain Gaussian pair) in one direction on the grid {k h}: connect-the-dots upper,
    merge-down lower (what :func:`_discretise` does for every row)."""
    qs, sig = np.array([q]), np.array([s])
    llo, lhi = _loss_limits(qs, sig)
    if direction == "add":
        llo, lhi = -lhi, -llo
    k0 = int(np.floor(llo[0] / h)) - 1
    k1 = int(np.ceil(lhi[0] / h)) + 1
    edges = np.arange(k0, k1 + 1, dtype=float) * h
    pm, qm, below, above = _gaussian_intervals(qs, sig, edges, direction)
    return _discretise(pm, qm, below, above, k0, h, upper)[0]


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


def _replace_loss_limits(qs: np.ndarray, sig: np.ndarray,
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
    below and above the grid (as :func:`_gaussian_intervals`). Q is the mirror image of P
    (x -> -x), so its masses are P's on the mirrored intervals."""
    q, s = qs[:, None], sigmas[:, None]
    x = _x_of_loss_replace(edges[None, :], q, s)
    pm, below, above = _masses(x, q, s)
    qm, _, _ = _masses(-x[:, ::-1], q, s)
    return pm, qm[:, ::-1], below, above


def replace_pmfs(qs: np.ndarray, sigmas: np.ndarray, counts: np.ndarray, h: float,
                 upper: bool, z: float = _REPLACE_Z,
                 tail: float = _REPLACE_TAIL) -> list[tuple[_PMF, int]]:
    """Discrete PLDs (connect-the-dots upper, merge-down lower) of Poisson-subsampled
    Gaussian steps under replace-one, one per (q, sigma) row (0 < q < 1, sigma > 0), as
    the +-1 pair (module doc). The pair is symmetric (x -> -x swaps P and Q), so the same
    PLD serves both directions."""
    llo, lhi = _replace_loss_limits(qs, sigmas, z)
    k_lo = np.floor(llo / h).astype(np.int64) - 1
    k_hi = np.ceil(lhi / h).astype(np.int64) + 1
    out: list[tuple[_PMF, int]] = []
    order = np.argsort(k_hi - k_lo)
    for block in np.array_split(order, max(1, order.size // 256)):
        k0, k1 = int(k_lo[block].min()), int(k_hi[block].max())
        edges = np.arange(k0, k1 + 1, dtype=float) * h
        pm, qm, below, above = _replace_intervals(qs[block], sigmas[block], edges)
        out.extend(zip(_discretise(pm, qm, below, above, k0, h, upper, tail),
                       counts[block].tolist()))
    return out


def _replace_variance(qs: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """About the variance of one step's loss under the +-1 pair: 4 q^2 sinh(1/s^2) for small
    q, at most 4/s^2 (q = 1: the Gaussian pair at distance 2); sets the grid step only."""
    with np.errstate(over="ignore"):
        small = 4.0 * qs * qs * np.sinh(np.minimum(1.0 / sigmas**2, 700.0))
    return np.minimum(small, 4.0 / sigmas**2)


def _trim(pmf: _PMF, upper: bool, tail: float = _TAIL) -> _PMF:
    """Cut negligible tails validly: upper: low tail rounded up, high tail to +inf;
    lower: both dropped."""
    p = np.maximum(pmf.p, 0.0)
    c = np.cumsum(p)
    if c.size == 0 or c[-1] <= 0:
        return _PMF(0, np.zeros(1), pmf.inf, pmf.shift)
    lo = int(np.searchsorted(c, tail, side="right"))
    r = np.cumsum(p[::-1])
    hi = p.size - int(np.searchsorted(r, tail, side="right"))
    lo, hi = min(lo, p.size - 1), max(hi, min(lo, p.size - 1) + 1)
    kept = p[lo:hi].copy()
    inf = pmf.inf
    if upper:
        kept[0] += c[lo - 1] if lo > 0 else 0.0
        inf += float(p[hi:].sum())
    return _PMF(pmf.offset + lo, kept, inf, pmf.shift)


# ---------------------------------------------------------------- composition
def _padded(pmfs: list[_PMF], rows: np.ndarray) -> np.ndarray:
    """The PMFs ``rows`` as one zero-padded (rows, width) block."""
    width = max(pmfs[g].p.size for g in rows)
    block = np.zeros((rows.size, width))
    for r, g in enumerate(rows):
        block[r, : pmfs[g].p.size] = pmfs[g].p
    return block


def _log_mgf(pmfs: list[_PMF], means: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
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


def _window(pmfs: list[_PMF], counts: np.ndarray, tol: float) -> tuple[int, int, float]:
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
    while (c > 0).any():
        odd = (c & 1).astype(bool)
        out[odd] *= base[odd]
        c >>= 1
        live = c > 0
        base[live] *= base[live]
    return out


def _spectrum(pmfs: list[_PMF], counts: np.ndarray, n: int) -> tuple[np.ndarray, float]:
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


def _compose(parts: list[tuple[_PMF, int]], tol: float) -> tuple[_PMF, float]:
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
    if hi - lo + 1 > _MAX_COMPOSED:
        raise _GridTooLarge(hi - lo + 1)
    n = sfft.next_fast_len(max(hi - lo + 1, max(p.p.size for p in pmfs)), real=True)
    spectrum, dropped = _spectrum(pmfs, counts, n)
    folded = sfft.irfft(spectrum, n)
    p = np.roll(folded, -(lo % n))  # p[i] is the mass of composed index lo + i
    # round-off of the transforms: a few ulps times log2(n) sqrt(n) (the l2 norm of a
    # probability vector is <= 1), plus twice the negative mass the round-off produced
    roundoff = (8.0 * np.finfo(float).eps * math.log2(n) * math.sqrt(n)
                + 2.0 * float(np.abs(np.minimum(p, 0.0)).sum()))
    return _PMF(shift + lo, np.maximum(p, 0.0), inf, frac), err + dropped + roundoff


# ---------------------------------------------------------------- hockey stick
def _delta_of(pmf: _PMF, eps: float, h: float) -> float:
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


def _eps_of(pmf: _PMF, delta: float, h: float) -> float:
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


# ---------------------------------------------------------------- driver
def _step_std(groups: Groups, others: list[Event]) -> tuple[float, float]:
    """(sd of the composed loss, largest sd of one step): sets the grid step h."""
    q, s, c = groups
    keep = q > 0
    q, s, c = q[keep], s[keep], c[keep]
    with np.errstate(over="ignore"):
        var = np.minimum(q * q * np.expm1(np.minimum(1.0 / (s * s), 700.0)), 1.0 / (s * s))
    total = float((var * c).sum())
    per = [float(var.max())] if var.size else []
    for e in others:
        if isinstance(e, (LaplacePart, DPPart)) and math.isfinite(e.eps):
            total += e.count * e.eps**2
            per.append(e.eps**2)
        elif isinstance(e, PLDPart):  # e.g. random allocation: its own loss variance
            try:
                var_e = e.event.pld_loss_variance()
            except (ValueError, OverflowError, FloatingPointError, MemoryError) as exc:
                raise UnsupportedEventError(e.event, "pld", f"its PLD could not be built "
                                            f"here ({type(exc).__name__}: {exc})") from exc
            total += e.count * var_e
            per.append(var_e)
    return math.sqrt(max(total, 1e-300)), math.sqrt(max(per, default=0.0))


def _loss_range(groups: Groups) -> float:
    """Widest loss range of one Gaussian step (x within _Z noise sds of both means)."""
    keep = groups.qs > 0
    if not keep.any():
        return 0.0
    llo, lhi = _loss_limits(groups.qs[keep], groups.sigmas[keep])
    return float(np.max(lhi - llo))


def _loss_limits(qs: np.ndarray, sig: np.ndarray,
                 z: float = _Z) -> tuple[np.ndarray, np.ndarray]:
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


def _widest(groups: Groups, others: list) -> float:
    """Widest loss range of one release: Gaussian groups, Laplace / (eps, delta) atoms at
    +-eps, and parts that state their own range (``pld_loss_range``, e.g. replace-one)."""
    return max([_loss_range(groups)]
               + [2.0 * e.eps for e in others
                  if isinstance(e, (LaplacePart, DPPart)) and math.isfinite(e.eps)]
               + [e.event.pld_loss_range() for e in others
                  if isinstance(e, PLDPart) and hasattr(e.event, "pld_loss_range")])


def _grid_step(groups: Groups, others: list, opts: PLDOptions) -> float:
    if opts.value_interval is not None:
        widest = _widest(groups, others)
        if widest / opts.value_interval > 4 * _MAX_BINS:
            raise ValueError(f"value_interval={opts.value_interval!r} needs "
                             f"{widest / opts.value_interval:.3g} bins for one release's loss "
                             f"range (at most {4 * _MAX_BINS}): use value_interval >= "
                             f"{widest / (4 * _MAX_BINS):.3g} or the default")
        return opts.value_interval
    total, _ = _step_std(groups, others)
    steps = int(groups.counts[groups.qs > 0].sum()) + sum(e.count for e in others)
    # the O(h^2) bias per step adds up over the steps: finer grids for longer compositions
    bins = min(max(1000.0 * math.sqrt(steps / 10_000.0), 400.0), 2000.0)
    widest = _widest(groups, others)
    h = max(total / bins, widest / _MAX_BINS)
    # atoms at +-eps0 (Laplace, (eps, delta)) fall between grid points: keep h << eps0
    for e in others:
        if isinstance(e, (LaplacePart, DPPart)) and e.eps > 0:
            h = min(h, e.eps / 1000.0)
    h = min(max(h, 1e-7), 1e-2)
    # ... but never more bins than memory allows: one release's range within _MAX_BINS,
    # the composed law's (~ 2 x 10 sd) within _MAX_COMPOSED (a coarser grid is still valid)
    return float(max(h, widest / _MAX_BINS, 20.0 * total / _MAX_COMPOSED))


def _z_and_tail(tol: float) -> tuple[float, float]:
    """Noise sds kept on each side of a step's loss range, and the tail mass a trim may move:
    both follow the target (tiny deltas need wider ranges and smaller trims)."""
    tiny = max(tol * 1e-3, 1e-300)
    return max(_Z, float(-special.ndtri(tiny))), min(_TAIL, tiny)


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
    pm, qm, _, _ = _gaussian_intervals(qs, sig, edges, direction)
    ks = edges[:, :-1] / h
    lower = _merge_down(pm, qm, ks, h)
    upper = _connect_dots(pm, qm, ks, h)
    pts = np.arange(edges.shape[1], dtype=float) * h  # losses relative to each row's edges[0]
    return (lower - upper) @ pts


def _lower_shifts(qs: np.ndarray, sig: np.ndarray, h: float, direction: str) -> np.ndarray:
    """Offset c in [0, h) of the grid {k h + c} of each row for the LOWER discretisation.

    Any offset gives a valid lower bound (the merge is post-processing on every grid), but
    the mass the merge has to round down depends on where the grid points fall against the
    bulk of the loss: at q << 1 most of it lies within q of log(1 - q), narrower than h, and
    the mean loss lost per step varies ~100-fold with c (at q = 0.001, sigma 0.6, h = 2e-4:
    3e-5 for c = 0, 3e-7 at the best c; over 10,000 steps that is 0.3 against 0.003 in eps).
    The mean loss lost, measured on a window of the bulk, is minimised by scanning c.
    """
    rows = qs.size
    if h > _MAX_EXP_STEP:  # no mass is kept on such a grid (see _discretise): nothing to gain
        return np.zeros(rows)
    # the window: W grid steps from the end of the loss range where the bulk sits (the low
    # end for remove, log(1 - q) there; the high end for add)
    llo, _ = _loss_limits(qs, sig)
    _, bulk = _loss_limits(qs, sig, 4.0)  # x = 1 + 4 sigma
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


def _gaussian_pmfs(groups: Groups, h: float, direction: str,
                   upper: bool, tol: float = 1e-11) -> list[tuple[_PMF, int]]:
    """Discrete PLDs of the Gaussian groups (rows with q = 0 carry no loss: skipped)."""
    keep = groups.qs > 0
    qs, sig = groups.qs[keep], groups.sigmas[keep]
    if qs.size == 0:
        return []
    out: list[tuple[_PMF, int]] = []
    z, tail = _z_and_tail(tol)
    # loss range of every row: x within z noise sds of both means, except where the P-mass
    # beyond x = 1 + z' sigma is already below the tail a trim moves (to +inf on the upper
    # side, dropped on the lower: both valid): q Phi(-z') + Phi(-z' - 1/sigma) for remove,
    # Phi(-z' - 1/sigma) for add (P = N(0, sigma^2)); at q << 1 that is well inside z
    llo, _ = _loss_limits(qs, sig, z)
    with np.errstate(divide="ignore"):
        half = -special.ndtri(tail / 2.0)
        z_hi = (np.maximum(-special.ndtri(np.minimum(tail / (2.0 * qs), 0.5)), half - 1.0 / sig)
                if direction == "remove" else -special.ndtri(tail) - 1.0 / sig)
    _, lhi = _loss_limits(qs, sig, np.clip(z_hi, 0.0, z))
    if direction == "add":
        llo, lhi = -lhi, -llo
    k_lo = np.floor(llo / h).astype(np.int64) - 1
    k_hi = np.ceil(lhi / h).astype(np.int64) + 1
    counts = groups.counts[keep]
    # rows with similar ranges share one (rows, intervals) block
    order = np.argsort(k_hi - k_lo)
    shifts = np.zeros(qs.size) if upper else _lower_shifts(qs, sig, h, direction)
    for block in np.array_split(order, max(1, order.size // 256)):
        c = shifts[block]
        k0, k1 = int(k_lo[block].min()), int(k_hi[block].max())
        edges = np.arange(k0, k1 + 1, dtype=float)[None, :] * h + c[:, None]
        pm, qm, below, above = _gaussian_intervals(qs[block], sig[block], edges, direction)
        out.extend(zip(_discretise(pm, qm, below, above, k0, h, upper, tail, c),
                       counts[block]))
    return out


def _other_pmfs(others: list[Event], h: float, upper: bool,
                tol: float = 1e-11) -> list[tuple[_PMF, int]]:
    """Discrete PLDs of Laplace and (eps, delta) releases (symmetric: both directions)."""
    out = []
    for e in others:
        if not isinstance(e, (LaplacePart, DPPart)):
            continue
        if e.eps == 0 and e.delta == 0:
            continue  # nothing leaks (a (0, delta) release still carries its delta atom)
        k0 = int(math.floor(-e.eps / h)) - 1
        edges = np.arange(k0, int(math.ceil(e.eps / h)) + 2, dtype=float) * h
        if isinstance(e, LaplacePart):
            pm, qm, below, above = _laplace_intervals(e.eps, edges, h)
        else:
            pm, qm, below, above = _atom_intervals(_approx_dp_atoms(e.eps, e.delta), edges, h)
        pmf = _discretise(pm[None], qm[None], np.array([below]), np.array([above]), k0, h,
                          upper, _z_and_tail(tol)[1])[0]
        inf = pmf.inf + (e.delta if upper else 0.0)
        if not upper:
            inf = e.delta  # the delta atom is exact: keep it in the lower bound too
        out.append((_PMF(pmf.offset, pmf.p, inf), e.count))
    return out


def _composed(groups: Groups, others: list[Event], h: float, direction: str,
              upper: bool, tol: float) -> tuple[_PMF, float]:
    """The composed discrete PLD of one direction and one side, and its allowance."""
    parts = (_gaussian_pmfs(groups, h, direction, upper, tol)
             + _other_pmfs(others, h, upper, tol))
    extra = 0.0
    for e in others:
        if isinstance(e, PLDPart):
            try:
                more, allowance = e.event.pld_parts(h, direction, upper)
            except (ValueError, OverflowError, FloatingPointError, MemoryError) as exc:
                raise UnsupportedEventError(e.event, "pld", f"its PLD could not be built "
                                            f"here ({type(exc).__name__}: {exc})") from exc
            parts += more
            extra += allowance
    if not parts:
        return _PMF(0, np.ones(1), 0.0), 0.0
    if len(parts) == 1 and parts[0][1] == 1:
        return parts[0][0], extra  # one release: nothing to convolve, no round-off
    pmf, allowance = _compose(parts, tol)
    return pmf, allowance + extra


def _merge_full_gaussians(groups: Groups) -> Groups:
    """Every q = 1 Gaussian step composed exactly into ONE Gaussian step with multiplier
    (sum_i c_i / sigma_i^2)^(-1/2) (Gaussian pairs compose into a Gaussian pair: Dong, Roth,
    Su 2022, Cor. 3.3; Balle & Wang 2018): exact, and one PMF instead of thousands."""
    full = (groups.qs == 1.0) & (groups.sigmas > 0)
    if full.sum() <= 1 and not (full & (groups.counts > 1)).any():
        return groups
    inv = float((groups.counts[full] / groups.sigmas[full] ** 2).sum())
    rest = ~full
    return Groups(np.append(groups.qs[rest], 1.0), np.append(groups.sigmas[rest], inv ** -0.5),
                  np.append(groups.counts[rest], 1).astype(np.int64))


class _GridTooLarge(Exception):
    """The composed PLD would need more than _MAX_COMPOSED bins at this grid step."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.width = width


def _bound(events: tuple[Event, ...], others: list[Event], opts: PLDOptions, upper: bool,
           query, tol: float) -> float:
    """max over the two directions of ``query(pmf, allowance, h)`` on one side (elementwise
    when the query returns an array).

    Gaussian steps enter as the Poisson add/remove pairs that account them under their
    sampling and relation (:func:`accounting._grid.sgm_groups`): the upper-bound pairs on the
    upper side, the lower-bound pairs (valid for the relation) on the lower side.
    """
    h = _grid_step(sgm_groups(events), others, opts)
    groups = _merge_full_gaussians(sgm_groups(events, "upper" if upper else "lower"))
    if groups.qs.size > opts.max_distinct:
        groups = rounded_groups(groups, opts.sigma_resolution, "down" if upper else "up")
    others = rounded_releases(others, opts.sigma_resolution, opts.max_distinct, upper)
    for _ in range(8):
        try:
            values = []
            for direction in ("remove", "add"):
                pmf, allowance = _composed(groups, others, h, direction, upper, tol)
                values.append(query(pmf, allowance, h))
            break
        except _GridTooLarge as exc:  # coarser grid: fewer bins, still a valid bound
            h *= 1.25 * exc.width / _MAX_COMPOSED
    else:  # pragma: no cover - each retry shrinks the width ~ 1/h
        raise ValueError("this composition cannot be discretised within the memory budget "
                         f"({_MAX_COMPOSED} bins); use method='rdp'")
    return np.maximum.reduce(values) if isinstance(values[0], np.ndarray) else max(values)


def _others(events: tuple[Event, ...]) -> list:
    """The non-Gaussian PLD parts of ``events`` (refused by name where there is no rule)."""
    return [p for p in ACCOUNTANTS["pld"].parts(events) if not isinstance(p, GaussianPart)]


def _trivial(events: tuple[Event, ...]) -> float | None:
    """inf when a release has no noise, 0 when nothing leaks, else None."""
    items = ACCOUNTANTS["pld"].parts(events)
    if no_privacy_reason(items) is not None:
        return math.inf
    groups = sgm_groups(events)
    if not ((groups.qs > 0).any() or any(
            isinstance(e, PLDPart) or (isinstance(e, (LaplacePart, DPPart))
                                       and (e.eps > 0 or e.delta > 0)) for e in items)):
        return 0.0
    return None


def pld_epsilon(
    events: Iterable[Event],
    delta: float,
    *,
    value_interval: float | None = None,
    sigma_resolution: float = 5e-3,
    max_distinct: int = 64,
) -> PLDBounds:
    """Certified (lower, estimate, upper) eps of a sequence of events at ``delta``.

    Args:
        events: the releases (e.g. ``ledger.events``): sampled Gaussian steps and
            schedules, Laplace and (eps, delta) releases.
        delta: target delta in (0, 1).
        value_interval: grid step h of the privacy loss (> 0); default: the standard
            deviation of the composed loss / (1000 sqrt(steps / 10,000)) (that divisor
            within [400, 2000]; h within [1e-7, 1e-2]).
        sigma_resolution: relative spacing of the geometric sigma grid used when there are
            more than ``max_distinct`` distinct (q, sigma) pairs (down: upper, up: lower).
        max_distinct: see ``sigma_resolution``.

    Returns:
        (lower, estimate, upper); when the default grid leaves the bracket wider than 1% of
        the upper end, it is refined (at most twice): where sigmas were rounded onto their
        grid, first that grid (5x finer, same h: the usual cause at small sigma), then the
        grid step h is halved.
    """
    delta = check_delta("delta", delta)
    opts = _options(value_interval, sigma_resolution, max_distinct)
    events = check_instances("events", events, Event)
    trivial = _trivial(events)
    if trivial is not None:
        return PLDBounds(trivial, trivial, trivial)
    others = _others(events)
    up_exact = _full_gaussian_eps(sgm_groups(events), others, delta)
    lo_exact = _full_gaussian_eps(sgm_groups(events, "lower"), others, delta)
    if up_exact is not None and lo_exact is not None:  # closed form on both sides
        lo_exact *= 1.0 - 1e-11  # the bisection's bracket is 1e-12 relative
        return PLDBounds(lo_exact, (lo_exact + up_exact) / 2.0, up_exact)
    tol = delta * 1e-6
    user_grid = opts.value_interval is not None
    upper, lower = (math.inf if up_exact is None else up_exact), 0.0
    sigma_refined = False
    rounded = too_many_releases(others, opts.max_distinct)
    for _ in range(_REFINE if not user_grid else 1):
        # every pass is a certified bracket: keep the best end of each side over the passes
        if up_exact is None:  # (a closed-form upper end needs no discretisation)
            upper = min(upper, _bound(events, others, opts, True,
                                      lambda pmf, allow, h: _eps_of(pmf, delta - allow, h),
                                      tol))
        lower = max(lower, _bound(events, others, opts, False,
                                  lambda pmf, allow, h: _eps_of(pmf, delta + allow, h), tol))
        if math.isinf(upper) or upper - lower <= _WIDTH * upper or rounded:
            break  # (a finer grid cannot undo the rounding of many distinct releases)
        groups = sgm_groups(events)
        h = _grid_step(groups, others, opts)
        if groups.qs.size > opts.max_distinct and not sigma_refined:
            # sigmas rounded onto the grid (down for the upper end, up for the lower): at
            # small sigma eps moves ~3x as much as sigma, and this is the bias that remains
            # (the lower end's grid bias is small on its offset lattice, the upper end's
            # O(h^2)): a _SIGMA_REFINE times finer sigma grid on the same h, if affordable
            finer = opts.sigma_resolution / _SIGMA_REFINE
            rows = rounded_groups(groups, finer, "down").qs.size
            sigma_refined = True
            if rows * _loss_range(groups) / h <= _MAX_CELLS:
                opts = opts._replace(sigma_resolution=finer, max_distinct=rows, value_interval=h)
                continue
        # too coarse for this loss distribution: halve the grid step and redo; where sigmas
        # were rounded onto a grid, refine that grid too (its bias dominates at small sigma)
        h /= 2.0
        if h < 20.0 * _step_std(groups, others)[0] / _MAX_COMPOSED:
            break  # below the memory floor the next pass would be coarsened back: no gain
        if groups.qs.size > opts.max_distinct:
            bins = _loss_range(groups) / h
            now = rounded_groups(groups, opts.sigma_resolution, "down").qs.size
            finer = opts.sigma_resolution / 2.0
            rows = rounded_groups(groups, finer, "down").qs.size
            if rows * bins <= _MAX_CELLS:
                opts = opts._replace(sigma_resolution=finer, max_distinct=rows)
            elif now * bins > _MAX_CELLS:
                break  # a finer pass would cost more than the budget: keep this bracket
        opts = opts._replace(value_interval=h)
    if up_exact is not None:
        upper = min(upper, up_exact)
    pure = pure_total(others) if not (sgm_groups(events).qs > 0).any() else None
    if pure is not None:  # only pure-DP releases: their summed eps is an (eps, 0) guarantee
        upper = min(upper, pure)
    if lo_exact is not None:
        lower = max(lower, lo_exact * (1.0 - 1e-11))
    return _finished(events, others, opts, delta, tol, lower, upper)


def _finished(events: tuple[Event, ...], others: list, opts: PLDOptions, delta: float,
              tol: float, lower: float, upper: float) -> PLDBounds:
    """The bracket after the passes: a for_delta pass where it is still wide, the RDP
    fallback where the upper end is still infinite, the ends checked against each other."""
    if math.isinf(upper) or upper - lower > _WIDTH * upper:
        # an event whose discrete PLD can be built for this delta (tails and round-off
        # scaled to it) gets a second pass: both passes are certified, keep the better ends
        up2, lo2 = _for_delta_bounds(events, others, opts, delta, tol)
        upper, lower = min(upper, up2), max(lower, lo2)
    if math.isinf(upper):
        # a finite eps may exist but the discretisation's allowance (or an atom at +inf of
        # the discretised loss) reached delta: the RDP accountant, which must itself support
        # every event (UnsupportedEventError otherwise: no silent fallback), is a valid upper
        upper = _rdp_fallback(events, delta)
    lower = _ordered(lower, upper)
    mid = upper if math.isinf(upper) else (lower + upper) / 2.0
    return PLDBounds(lower, mid, upper)


def _for_delta_bounds(events: tuple[Event, ...], others: list, opts: PLDOptions,
                      delta: float, tol: float) -> tuple[float, float]:
    """(upper, lower) again with every PLDPart event replaced by ``event.for_delta(delta)``
    where it defines it (the PLDPart protocol's optional method: the same pair, its discrete
    PLD built for this delta, tails and round-off scaled to it); (inf, 0) where none does."""
    small = [replace(p, event=p.event.for_delta(delta))
             if isinstance(p, PLDPart) and hasattr(p.event, "for_delta") else p for p in others]
    if all(a is b for a, b in zip(small, others)):
        return math.inf, 0.0
    upper = _bound(events, small, opts, True,
                   lambda pmf, allow, h: _eps_of(pmf, delta - allow, h), tol)
    lower = _bound(events, small, opts, False,
                   lambda pmf, allow, h: _eps_of(pmf, delta + allow, h), tol)
    return upper, lower


def _full_gaussian_eps(groups: Groups, others: list[Event], delta: float) -> float | None:
    """Exact eps when every accounted step is an unsampled Gaussian (q = 1; q = 0 steps leak
    nothing) and there is nothing else: the steps compose into one Gaussian with multiplier
    (sum c / sigma^2)^(-1/2), whose eps is Balle & Wang's (2018, Thm 8) closed form (found by
    bisection to 1e-12 relative, rounded up). None otherwise."""
    from .composition import analytic_gaussian_epsilons

    if others or not np.all((groups.qs == 1.0) | (groups.qs == 0.0)):
        return None
    full = groups.qs == 1.0
    if not full.any():
        return 0.0
    inv = float((groups.counts[full] / groups.sigmas[full] ** 2).sum())
    return float(analytic_gaussian_epsilons(np.array([inv ** -0.5]), delta)[0])


def _rdp_fallback(events: tuple[Event, ...], delta: float) -> float:
    """The RDP accountant's upper end (:mod:`accounting.accountants`; refuses by name an
    event it cannot account)."""
    return float(ACCOUNTANTS["rdp"].epsilon(events, delta, warn=False).eps)


def _ordered(lower: float, upper: float) -> float:
    """``lower``, checked against ``upper``: equal up to round-off is clamped; a lower end
    clearly above a certified upper end is a bug, raised, never hidden."""
    if lower <= upper:
        return lower
    if lower <= upper * (1.0 + 1e-9) + 1e-12:
        return upper
    raise RuntimeError(f"PLD bracket inverted: certified lower end {lower!r} > upper end "
                       f"{upper!r}; please report this input")


def pld_delta(
    events: Iterable[Event],
    eps: float,
    *,
    value_interval: float | None = None,
    sigma_resolution: float = 5e-3,
    max_distinct: int = 64,
    with_lower: bool = True,
) -> tuple[float, float]:
    """Certified (lower, upper) bracket on the smallest delta with (eps, delta)-DP.

    Options as in :func:`pld_epsilon` (``with_lower=False``: both entries are the upper).
    """
    eps = check_eps("eps", eps)
    opts = _options(value_interval, sigma_resolution, max_distinct)
    events = check_instances("events", events, Event)
    trivial = _trivial(events)
    if trivial is not None:
        return (1.0, 1.0) if math.isinf(trivial) else (0.0, 0.0)
    others = _others(events)
    tol = 1e-12
    upper = _bound(events, others, opts, True,
                   lambda pmf, allow, h: min(1.0, _delta_of(pmf, eps, h) + allow), tol)
    if not with_lower:
        return upper, upper
    lower = _bound(events, others, opts, False,
                   lambda pmf, allow, h: max(0.0, _delta_of(pmf, eps, h) - allow), tol)
    return _ordered(lower, upper), upper
