"""Shuffled fixed-size batches: a certified (lower, upper) bracket on eps, not a guess.

Mechanism (one epoch): a uniformly random permutation of the n = b T examples is cut into T
consecutive batches of b; step i releases the sum of the batch's clipped gradients (L2 norm
<= 1, adaptively chosen) plus N(0, sigma^2 I). E epochs draw E independent permutations.

Neighbouring relation certified: "zero-out" (the example's record replaced by one whose
gradient is zero: n, the batches and every position stay the same; equivalently removal
where the batcher keeps its T batches and one of them is one short), the convention of
Chua et al. 2024; or "replace-one" (the example replaced by any other: sensitivity 2). Plain
add/remove is refused: adding an example to a permutation cut into fixed-size batches shifts
every later batch, so no per-step sensitivity bound of one example holds.

UPPER (no amplification, tightened by "one step per epoch"): revealing the permutation can
only help the adversary; given it, exactly one step per epoch differs between the
neighbours, by at most s = 1 (zero-out) or 2 (replace-one) in L2, so an epoch is one
Gaussian release with multiplier sigma / s, and E epochs compose (adaptively) into the
Gaussian mechanism with mu = s sqrt(E) / sigma, whose eps is exact (Balle & Wang 2018,
Thm 8).

LOWER (realised pairs: the mechanism on a 1-d model with fixed gradients; every
post-processing of a realised pair gives a lower bound):

* Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang (ICML 2024, "How private are DP-SGD
  implementations?"), single-epoch construction: every other example's gradient is -1, the
  example's +1 (zero-out: 0; replace-one: -1). Shifted by b, the outputs are
  P = MoG(2) against Q = MoG(1) (zero-out) where MoG(m) = (1/T) sum_t N(m e_t, sigma^2 I_T).
  They test the sets {max_t x_t > C}; here the maximum is binned finely and the binned pair
  (P(max in bin), Q(max in bin)) is used whole (every set of thresholds, both directions),
  which contains their sets. E epochs: the E-fold product of the binned pair, composed as a
  PLD rounded down (:mod:`accounting.pld`, merge-down: certified lower).
* Every other gradient 0: P = MoG(s) against Q = N(0): the random-allocation pair (k = 1),
  whose certified lower end comes from :mod:`accounting.allocation` (sigma / s).

The lower bound is the larger of the two.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import special

from ._validate import check_choice, check_count, check_delta, check_positive
from .composition import analytic_gaussian_epsilons

__all__ = ["ShuffleBounds", "shuffle_epsilon_bounds", "shuffle_epsilon_lower",
           "shuffle_epsilon_upper", "shuffle_sensitivity", "SHUFFLE_RELATIONS"]

#: Relations under which shuffled fixed-size batches are certified (see the module doc).
SHUFFLE_RELATIONS = ("zero-out", "replace-one")
#: Bins per noise standard deviation when the maximum coordinate is binned.
_BINS_PER_SD = 400


class ShuffleBounds(NamedTuple):
    """lower <= eps <= upper; the lower end is the larger of its two constructions."""

    lower: float
    upper: float
    lower_max_statistic: float  # Chua et al. 2024, binned maximum
    lower_allocation: float  # the random-allocation pair (others' gradients 0)


def shuffle_sensitivity(relation: str) -> float:
    """L2 change of the one step holding the example: 1 (zero-out) or 2 (replace-one)."""
    if relation == "add-remove":
        raise ValueError("relation='add-remove' cannot be certified for shuffled fixed-size "
                         "batches: adding an example shifts every later batch; use 'zero-out' "
                         "(Chua et al. 2024's convention) or 'replace-one'")
    check_choice("relation", relation, SHUFFLE_RELATIONS)
    return 1.0 if relation == "zero-out" else 2.0


def _check(sigma: float, steps: int, epochs: int, delta: float,
           relation: str) -> tuple[float, int, int, float, float]:
    sigma = check_positive("sigma", sigma)
    if math.isinf(sigma):
        raise ValueError("sigma must be finite")
    steps = check_count("steps", steps, minimum=1)
    epochs = check_count("epochs", epochs, minimum=1)
    delta = check_delta("delta", delta)
    return sigma, steps, epochs, delta, shuffle_sensitivity(relation)


def shuffle_epsilon_upper(sigma: float, epochs: int, delta: float, *,
                          relation: str = "zero-out") -> float:
    """Sound eps of E epochs of shuffled fixed-size batches: one Gaussian release per epoch
    (mu = s sqrt(E) / sigma, exact analytic eps); independent of the number of steps."""
    sigma, _, epochs, delta, sens = _check(sigma, 1, epochs, delta, relation)
    eff = sigma / (sens * math.sqrt(epochs))
    return float(analytic_gaussian_epsilons(np.array([eff]), delta)[0])


def _max_pair(sigma: float, steps: int, m_hi: float, m_lo: float) -> tuple[np.ndarray, ...]:
    """P- and Q-mass of the maximum coordinate of MoG(m_hi) / MoG(m_lo) in fine bins
    (the two tails are bins too, so both vectors sum to 1)."""
    w = sigma / _BINS_PER_SD
    lo = min(m_lo, 0.0) - 9.0 * sigma
    hi = max(m_hi, 0.0) + 9.0 * sigma + sigma * math.sqrt(2.0 * math.log(steps + 1.0))
    edges = np.arange(lo, hi + w, w)

    def masses(mean: float) -> np.ndarray:
        # log P(max <= x) = log Phi((x - mean)/sigma) + (T - 1) log Phi(x / sigma)
        log_cdf = special.log_ndtr((edges - mean) / sigma) + (steps - 1) * special.log_ndtr(
            edges / sigma)
        cdf = np.exp(log_cdf)
        sf = -np.expm1(log_cdf)
        mid = np.where(cdf[:-1] < 0.5, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:])
        return np.maximum(np.concatenate([[cdf[0]], mid, [sf[-1]]]), 0.0)

    return masses(m_hi), masses(m_lo)


def _hockey(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    """sum_b (p_b - e^eps q_b)_+ : delta(eps) of a discrete pair (exact for the pair),
    as p_b (1 - e^(eps + log q_b - log p_b))_+ so that no e^eps overflows (sigma 0.01)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = eps + np.log(q) - np.log(p)
        val = p * -np.expm1(np.minimum(log_ratio, 0.0))
    return float(np.where(p > 0, val, 0.0).sum())


def _eps_of_pair(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """Smallest eps >= 0 with delta_pair(eps) <= delta (bisection, rounded down). P-mass
    where Q underflowed to 0 is dropped (a sub-pair: still a lower bound, never inf)."""
    p = np.where(q > 0, p, 0.0)
    if _hockey(p, q, 0.0) <= delta:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(p) - np.log(q)
    top = float(np.max(ratio[np.isfinite(ratio)], initial=0.0))
    if _hockey(p, q, top) > delta:  # mass where q = 0: eps unbounded for this pair
        return math.inf
    a, b = 0.0, top
    for _ in range(60):
        mid = (a + b) / 2.0
        if _hockey(p, q, mid) > delta:
            a = mid
        else:
            b = mid
    return a  # delta(a) > delta: a is below the pair's eps


def _composed_pair_eps(p: np.ndarray, q: np.ndarray, epochs: int, delta: float) -> float:
    """Lower bound on eps of the E-fold product of the discrete pair (p, q): its PLD is
    merged down onto a loss grid and composed (:mod:`accounting.pld`, certified lower)."""
    from . import pld

    keep = (p > 0) & (q > 0)
    loss = np.log(p[keep]) - np.log(q[keep])
    sd = math.sqrt(max(float((p[keep] * loss**2).sum()), 1e-12))
    h = max(sd * math.sqrt(epochs) / 2000.0, 1e-6)
    atoms = list(zip(loss.tolist(), p[keep].tolist(), q[keep].tolist()))
    k0 = int(math.floor(loss.min() / h)) - 1
    edges = np.arange(k0, int(math.ceil(loss.max() / h)) + 2, dtype=float) * h
    pm, qm, below, above = pld.atom_intervals(atoms, edges, h)
    pmf = pld.discretise(pm[None], qm[None], np.array([below]), np.array([above]), k0, h,
                          False)[0]
    composed, allowance = pld.compose([(pmf, epochs)], delta * 1e-6)
    return pld.eps_of(composed, delta + allowance, h)


def shuffle_epsilon_lower(sigma: float, steps: int, epochs: int, delta: float, *,
                          relation: str = "zero-out") -> tuple[float, float]:
    """(max-statistic lower bound of Chua et al. 2024, random-allocation lower bound) on
    eps of E epochs of shuffled batches (``steps`` = T batches per epoch)."""
    from .allocation import RandomAllocation
    from .pld import pld_epsilon

    sigma, steps, epochs, delta, sens = _check(sigma, steps, epochs, delta, relation)
    m_hi, m_lo = (2.0, 1.0) if sens == 1.0 else (2.0, 0.0)
    p, q = _max_pair(sigma, steps, m_hi, m_lo)
    if epochs == 1:
        chua = max(_eps_of_pair(p, q, delta), _eps_of_pair(q, p, delta))
    else:
        chua = max(_composed_pair_eps(p, q, epochs, delta),
                   _composed_pair_eps(q, p, epochs, delta))
    try:
        alloc = pld_epsilon([RandomAllocation(sigma / sens, steps, 1, epochs)], delta).lower
    except (ValueError, OverflowError, MemoryError):
        alloc = 0.0  # the allocation pair cannot be built here: its (valid) lower end is 0
    return float(chua), float(alloc)


def shuffle_epsilon_bounds(sigma: float, steps: int, epochs: int, delta: float, *,
                           relation: str = "zero-out") -> ShuffleBounds:
    """Certified bracket on eps of E epochs of shuffled fixed-size batches (T = ``steps``
    batches per epoch, noise multiplier ``sigma``) at ``delta`` under ``relation``."""
    upper = shuffle_epsilon_upper(sigma, epochs, delta, relation=relation)
    chua, alloc = shuffle_epsilon_lower(sigma, steps, epochs, delta, relation=relation)
    return ShuffleBounds(max(chua, alloc), upper, chua, alloc)
