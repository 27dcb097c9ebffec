"""Random allocation with a sigma schedule whose one step is far noisier in loss terms than
the rest (a "jump": one sigma 0.3 among 999 at sigma 50): the heavy term kept exact.

The pair of :func:`accounting.allocation.allocation_schedule_bounds` has the loss
log(S / t), S = sum_i Y_i, mean-1 log-normal terms log Y_i ~ N(-s_i^2 / 2, s_i^2) under Q,
s_i = 1 / sigma_i, and dP/dQ = S / t. One grid for all of S must be as coarse as the
heaviest term's tail (the jump's Y reaches 1e8 where the other 999 terms sum to 999 +- 1):
the rest then falls in one bin and the bracket is wide ([2.686, 19.131] around 5.654).
Here S = Y_h + R, the heaviest term Y_h apart and R the sum of the others:

* R: the ceil / floor laws of :func:`accounting.allocation` (T_up >= R >= T_dn pointwise,
  one-sided rounding on a linear grid with an absorbing top bin, L1 round-off bound);
  atoms below 1e-18 of mass are moved to the top bin (ceil law) or to 0 (floor law):
  monotone moves, so the order is kept;
* Y_h: exact log-normal CDF, so the law of Y_h + r on the loss grid {k h} (bins
  [t e^(k h), t e^((k+1) h))) is a difference of CDFs for each atom r, with no grid on Y_h;
* the pairs are those of the one-sided construction (module doc of
  :mod:`accounting.allocation`): remove upper, P-mass e^((k+1) h) Q(T_up in bin k) at loss
  (k+1) h (S <= T_up < t e^((k+1) h) there), the excess over 1 removed from the bottom, the
  absorbed P-mass (R's top bin, Y_h beyond its threshold) at +inf; remove lower, e^(k h)
  Q(T_dn in bin k) at k h, the absorbed mass dropped; add upper, Q(T_dn in bin k) at
  -k h (T_dn = 0 or below the grid: +inf); add lower, Q(T_up in bin k) at -(k+1) h.

Allowances: R's L1 round-off (times (1 + (1 + cap) / t) e^h on the remove side, the most
P' = (T / t) Q can scale it) plus 1e-13 for the CDF differences. E epochs compose by FFT.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import special

__all__ = ["jump_schedule_bounds"]

#: R's atoms lighter than this move to its top bin (ceil law) or to 0 (floor law).
_LIGHT = 1e-18
#: R's kept atoms are moved onto at most this many values (rounded up / down).
_ATOMS = 256
#: At most this many loss bins.
_MAX_LOSS_BINS = 2**17


def _heavy_threshold(s: float, t: int, tail: float) -> float:
    """c with P'(Y_h > c) <= tail: the tilted term log Y ~ N(s^2/2, s^2) (the example in
    the heavy step, probability 1/t) and the untilted one: sf_tilted / t + sf <= tail."""
    z = -float(special.ndtri(tail / 2.0))
    return float(math.exp(s * s / 2.0 + z * s))


def _atoms(law: np.ndarray, hr: float, up: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """(values, masses, absorbed mass) of R's law with the light atoms moved (module doc)."""
    n = law.size - 1
    vals = np.arange(n + 1, dtype=float) * hr
    mass = law.copy()
    light = mass < _LIGHT
    absorbed = 0.0
    if up:  # to the top bin (absorbing, +inf; the top bin itself is bounded by the caller)
        light[n] = False
        absorbed = float(mass[light].sum())
        keep = ~light
        keep[n] = False
    else:  # to 0
        mass[0] += float(mass[light].sum()) - (mass[0] if light[0] else 0.0)
        keep = ~light
        keep[0] = True
    vals, mass = vals[keep], mass[keep]
    if vals.size > _ATOMS:  # onto a coarse grid over the kept range: up or down (monotone)
        lo, g = float(vals.min()), float(vals.max() - vals.min()) / (_ATOMS - 1)
        idx = (np.ceil((vals - lo) / g - 1e-9) if up else np.floor((vals - lo) / g + 1e-9))
        idx = np.clip(idx, 0, _ATOMS - 1).astype(np.int64)
        mass = np.bincount(idx, weights=mass, minlength=_ATOMS)
        vals = lo + np.arange(_ATOMS, dtype=float) * g
    return vals, mass, absorbed


def _top_mass(r_up: np.ndarray, hr: float, rest: np.ndarray) -> float:
    """Bound on P'(R >= cap): with the example in light step i (tilted Y_i), R >= cap
    implies Y_i >= a or R - Y_i >= cap - a, whose Q-mass is at most Q(T_up >= cap - a)
    (union bound); with it in the heavy step, R keeps its Q-law. The best a of a
    geometric set."""
    n = r_up.size - 1
    cap = n * hr
    suffix = np.cumsum(r_up[::-1])[::-1]  # suffix[j] = Q(T_up >= j hr)
    best = 1.0
    for a in np.geomspace(hr, cap / 2.0, 48):
        tilt = float(special.ndtr(-(math.log(a) - rest * rest / 2.0) / rest).max())
        j = int(math.floor((cap - a) / hr))
        best = min(best, tilt + float(suffix[max(j, 0)]))
    return best


def _bin_masses(vals: np.ndarray, mass: np.ndarray, s: float, edges: np.ndarray,
                c_h: float) -> tuple[np.ndarray, float]:
    """Q(Y_h + r in [edges_k, edges_k+1)) summed over the atoms (r, w), Y_h <= c_h, and the
    Q-mass below edges_0 (Y_h below the grid)."""
    out = np.zeros(edges.size - 1)
    below = 0.0
    mu = -s * s / 2.0
    for r, w in zip(vals, mass):
        # only the edges with 0 < edges - r < c_h move the CDF: below them z is -inf, above
        # it is constant, and the bins there get exactly 0 (computed on that window alone,
        # one edge of margin above against the rounding of r + c_h)
        lo = max(int(np.searchsorted(edges, r, side="right")) - 1, 0)
        hi = min(int(np.searchsorted(edges, r + c_h, side="left")) + 2, edges.size)
        if hi - lo < 2:
            lo, hi = 0, edges.size
        y = np.minimum(edges[lo:hi] - r, c_h)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(y > 0, (np.log(np.maximum(y, 1e-300)) - mu) / s, -np.inf)
        cdf, sf = special.ndtr(z), special.ndtr(-z)
        out[lo:hi - 1] += w * np.maximum(np.where(z[:-1] > 0, sf[:-1] - sf[1:],
                                                  cdf[1:] - cdf[:-1]), 0.0)
        below += w * (float(cdf[0]) if lo == 0 else 0.0)  # lo > 0: edges_0 <= r, z_0 = -inf
    return out, below


def _pmf(offset: int, p: np.ndarray, inf: float, upper: bool):
    from . import pld

    return pld.trim(pld.PMF(offset, np.maximum(p, 0.0), float(inf)), upper)


def _epoch_pmfs(sig: np.ndarray, tail: float, bins: int,
                rest_laws: Callable) -> tuple[dict, float] | None:
    """The four one-epoch discrete PLDs ((direction, upper) -> (pmf, allowance)) and the
    grid step h, or None where the construction does not apply (t = 1)."""
    t = sig.size
    if t < 2:
        return None
    s_all = 1.0 / sig
    i = int(np.argmax(s_all))
    s = float(s_all[i])
    rest = np.sort(np.delete(s_all, i))
    r_up, r_dn, hr, err = rest_laws(rest, bins, {})
    cap = (r_up.size - 1) * hr
    c_h = _heavy_threshold(s, t, tail)
    v_up, w_up, abs_up = _atoms(r_up, hr, True)
    v_dn, w_dn, _ = _atoms(r_dn, hr, False)
    pos = v_dn[v_dn > 0]
    t_lo = float(min(pos.min() if pos.size else hr, v_up.min() if v_up.size else hr))
    t_lo = max(t_lo, hr)
    l_lo, l_hi = math.log(t_lo / t), math.log((cap + c_h) / t)
    h = max((l_hi - l_lo) / _MAX_LOSS_BINS, 1e-6)
    k0, k1 = int(math.floor(l_lo / h)), int(math.ceil(l_hi / h))
    edges = t * np.exp(np.arange(k0, k1 + 1, dtype=float) * h)
    q_up, below_up = _bin_masses(v_up, w_up, s, edges, c_h)
    q_dn, below_dn = _bin_masses(v_dn, w_dn, s, edges, c_h)
    beyond = float(special.ndtr(-(math.log(c_h) + s * s / 2.0) / s))  # Q(Y_h > c_h)
    tilted = float(special.ndtr(-(math.log(c_h) - s * s / 2.0) / s))
    ks = np.arange(k0, k1, dtype=float)
    out: dict = {}
    # remove, upper: P' <= e^((k+1) h) Q on bin k; below the grid rounds up into bin 0
    p = np.exp((ks + 1.0) * h) * q_up
    p[0] += math.exp((k0 + 1) * h) * below_up
    top_r = _top_mass(r_up, hr, rest)
    inf = min(1.0, tilted / t + beyond + top_r + abs_up * (1.0 + (1.0 + cap) / t))
    excess = float(p.sum()) + inf - 1.0
    if excess > 0:
        c = np.cumsum(p)
        cut = int(np.searchsorted(c, excess))
        p[:cut] = 0.0
        if cut < p.size:
            p[cut] = c[cut] - excess
    scale = (1.0 + (1.0 + cap) / t) * math.exp(h)
    out[("remove", True)] = (_pmf(k0 + 1, p, inf, True), err * scale + 1e-13)
    # remove, lower: P >= e^(k h) Q(T_dn in bin k) at k h
    out[("remove", False)] = (_pmf(k0, np.exp(ks * h) * q_dn, 0.0, False), 0.0)
    # add, upper: loss -log(S / t) <= -k h on T_dn's bin k; below the grid (S tiny): +inf
    out[("add", True)] = (_pmf(-k1 + 1, q_dn[::-1], below_dn, True), err + 1e-13)
    # add, lower: loss >= -(k+1) h on T_up's bin k
    out[("add", False)] = (_pmf(-k1, q_up[::-1], 0.0, False), 0.0)
    return out, h


def jump_schedule_bounds(sigmas: np.ndarray, delta: float, epochs: int, rest_laws: Callable,
                         bins: int = 2**13) -> tuple[float, float]:
    """Certified (lower, upper) eps of ``epochs`` epochs of random allocation (k = 1) with
    per-step ``sigmas``, the step of the smallest sigma kept exact (module doc); (0, inf)
    where it does not apply or its allowance reaches delta. ``rest_laws(s, bins, memo)``:
    the (ceil law, floor law, grid step, L1 round-off) of the sum of the mean-1 log-normal
    terms of the other steps (s = 1 / sigma), :mod:`accounting.allocation`'s."""
    from . import pld

    sig = np.asarray(sigmas, dtype=float)
    tail = delta * 1e-3 / epochs
    got = _epoch_pmfs(sig, tail, bins, rest_laws)
    if got is None:
        return 0.0, math.inf
    pm, h = got
    tol = delta * 1e-6
    upper, lower = 0.0, 0.0
    for direction in ("remove", "add"):
        (pu, au), (pl, al) = pm[(direction, True)], pm[(direction, False)]
        if epochs > 1:
            pu, a = pld.compose([(pu, epochs)], tol)
            au = epochs * au + a
            pl, al = pld.compose([(pl, epochs)], tol)
        upper = max(upper, pld.eps_of(pu, delta - au, h) if delta > au else math.inf)
        lower = max(lower, pld.eps_of(pl, delta + al, h))
    return lower, upper
