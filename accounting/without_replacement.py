"""Fixed-size batches: the Gaussian mechanism on a batch sampled WITHOUT replacement.

Every step draws a uniformly random subset of exactly B of the n records (gamma = B / n),
adds their clipped gradients (L2 norm <= C) and Gaussian noise of standard deviation
sigma C. Neighbouring relation: REPLACE-ONE (n is public; one record is substituted by
another), the relation under which fixed-size sampling has an amplification theorem.

Sensitivity, stated once (dp-accounting issue #378 is this pitfall): sigma here is the noise
standard deviation divided by the CLIP NORM C, as everywhere in this package. Replacing one
record moves the sum by up to 2C, so the base Gaussian mechanism's RDP under replace-one is

    eps(j) = j (2C)^2 / (2 (sigma C)^2) = 2 j / sigma^2,

i.e. that of noise multiplier sigma / 2 against sensitivity 1. dp-accounting's
``SampledWithoutReplacementDpEvent`` takes ``noise_multiplier`` relative to the replace-one
sensitivity: passing it sigma (std / C) instead of sigma / 2 understates its RDP by 4x;
the tests check that this module gives the sigma / 2 value, not that one.

RDP (upper bound). Wang, Balle, Kasiviswanathan, AISTATS 2019, "Subsampled Renyi
differential privacy and analytical moments accountant", Theorem 9, for integer alpha >= 2:

    eps'(alpha) <= 1/(alpha-1) log( 1 + gamma^2 C(alpha,2) min{4 (e^eps(2) - 1),
                    e^eps(2) min{2, (e^eps(inf) - 1)^2}}
                  + sum_{j=3..alpha} gamma^j C(alpha,j) e^((j-1) eps(j))
                                     min{2, (e^eps(inf) - 1)^j} )

with eps(inf) = inf for the Gaussian (so both min{2, .} are 2), summed in log space
(logsumexp; no overflow for small sigma or large alpha). Fractional orders: (alpha - 1)
eps'(alpha) is convex in alpha (their Corollary 10), so linear interpolation of
log A between floor(alpha) and ceil(alpha) is an upper bound. gamma = 1: the plain Gaussian,
2 alpha / sigma^2. dp-accounting implements the sharper Theorem 27 of the same paper (for
mechanisms like the Gaussian): ours is never below it (tested).

Lower bounds (realised pairs: any pair of neighbouring datasets the mechanism runs on gives
a lower bound; units of C, one coordinate):

* "Same gradient" pair (the tight one): every other record's gradient equals the replaced
  record's, +C, and its replacement's is -C. Every batch of D then sums to B C; a batch of
  D' sums to B C - 2C when it holds the replacement (probability gamma), else B C. Shifted
  by B C and scaled by 1/2, the step's outputs are N(0, s^2) against
  (1 - gamma) N(0, s^2) + gamma N(-1, s^2) with s = sigma / 2: the Poisson add/remove pair at
  q = gamma and multiplier sigma / 2, in either direction (swap D and D'). So the certified
  LOWER end of the Poisson add/remove PLD bracket of ``SampledGaussian(gamma, sigma / 2,
  steps)`` is a lower bound on eps here (sigma 1, B 256 of n 60,000, 1,000 steps, delta
  1e-5: 7.12 against the upper end 7.57). Its one-step tradeoff is f_gamma of the upper
  bound below, so the bracket's width is only what the symmetrisation adds in composition.
* The +-1 pair: every other gradient 0, the replaced record's +C, its replacement's -C:
  (1 - gamma) N(0, sigma^2) + gamma N(1, sigma^2) against (1 - gamma) N(0, sigma^2) +
  gamma N(-1, sigma^2) (:func:`pld_lower_without_replacement`); below the first except at
  gamma = 1 (where both are the Gaussian pair at distance 2C), kept for reference.

With every other gradient v and |x|, |x'|, |v| <= C, a step's outputs are the mixtures
(1 - gamma) N(0) + gamma N(x - v) against the same with x' - v; the chi-square divergence of
such a pair at small gamma, gamma^2 (e^(|a|^2 / s^2) + e^(|b|^2 / s^2) - 2 e^(<a, b> / s^2))
with a = x - v, b = x' - v, is largest at a = 0, |b| = 2C (the first pair); the +-1 pair is
a = -b = C. Composing the two directions of the first pair over different steps (the
gradients may change between steps) measured below the pure direction in every setting
tried.

PLD (upper bound). Dong, Roth, Su 2022 (JRSS-B, Thm 9): if M is f-DP under replace-one,
the mechanism on a uniform B-of-n subset is C_gamma(f)-DP, C_gamma(f) = min{f_gamma,
f_gamma^-1}** with f_gamma = gamma f + (1 - gamma) Id; here f = G_{2/sigma}, so f_gamma is
the tradeoff of the Poisson pair P = (1-gamma) N(0, s^2) + gamma N(1, s^2), Q = N(0, s^2)
with s = sigma / 2, and C_gamma(f)'s privacy profile is the larger of the two directions'
(the conjugate of a min is the max of the conjugates). Its dominating pair is SYMMETRIC: the
PLD of the remove direction on losses > 0, mirrored onto losses < 0 (P-mass e^-l omega(l)
at -l), an atom at 0 (Zhu, Dong, Wang 2022, symmetrisation). Built from the discretised
UPPER remove PLD of :mod:`accounting.pld` (connect-the-dots: a pair dominating the true
one), it is valid when that PLD's profile is >= the add direction's upper profile at every
eps >= 0 (checked exactly on the grid; on eps < 0 both directions then follow by the
symmetry relation delta(eps) = 1 - e^eps + e^eps delta'(-eps)), else the other direction
is mirrored, else no PLD upper end is claimed (RDP only). The T steps compose by FFT. The
larger of the two directions' composed PLDs would NOT be a valid bound: the composition of
min{f, f^-1}** can be below both compositions. dp-accounting's PLD accountant does not
accept ``SampledWithoutReplacementDpEvent`` (only its RDP accountant does).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
from scipy import special

from ._validate import check_count, check_delta, check_orders, check_sigma

__all__ = [
    "WORBounds",
    "rdp_without_replacement",
    "epsilon_without_replacement",
    "epsilon_bounds_without_replacement",
    "pld_lower_without_replacement",
    "pld_upper_without_replacement",
    "same_gradient_lower",
    "same_gradient_pld_parts",
    "without_replacement_pld_parts",
]


class WORBounds(NamedTuple):
    """Certified bracket: lower (realised pair, PLD) <= eps <= upper (the smaller of the
    symmetrised PLD, Theorem 9's RDP and no amplification)."""

    lower: float
    upper: float


def _check(sigma: float, batch_size: int, dataset_size: int) -> tuple[float, int, int]:
    sigma = check_sigma("sigma", sigma)
    n = check_count("dataset_size", dataset_size, minimum=1)
    b = check_count("batch_size", batch_size, minimum=1)
    if b > n:
        raise ValueError(f"batch_size (B={b}) must be <= dataset_size (n={n})")
    return sigma, b, n


def _log_a_int(gamma: float, sigma: float, alpha: int) -> float:
    """log of Theorem 9's bound on E[(P/Q)^alpha] at an integer alpha >= 2 (log space)."""
    j = np.arange(2, alpha + 1, dtype=float)
    log_comb = (special.gammaln(alpha + 1.0) - special.gammaln(j + 1.0)
                - special.gammaln(alpha - j + 1.0))
    eps = 2.0 * j / sigma**2  # base RDP at order j under replace-one (sensitivity 2C)
    terms = j * math.log(gamma) + log_comb + (j - 1.0) * eps + math.log(2.0)
    e2 = 4.0 / sigma**2  # eps(2)
    # j = 2: min{4 (e^eps(2) - 1), 2 e^eps(2)}
    log_em1 = e2 + math.log(-math.expm1(-e2)) if e2 > 0 else -math.inf
    terms[0] = 2.0 * math.log(gamma) + log_comb[0] + min(math.log(4.0) + log_em1,
                                                          e2 + math.log(2.0))
    return float(special.logsumexp(np.append(terms, 0.0)))


def rdp_without_replacement(sigma: float, batch_size: int, dataset_size: int,
                            orders: object) -> np.ndarray:
    """RDP eps'(alpha) of ONE step of the Gaussian mechanism on a fixed-size batch of B of n
    records drawn without replacement, under replace-one (module doc: Wang, Balle,
    Kasiviswanathan 2019, Thm 9; sigma = noise std / clip norm, sensitivity 2C).

    Args:
        sigma: noise multiplier (std / clip norm), >= 0; 0 gives inf.
        batch_size: B >= 1.
        dataset_size: n >= B.
        orders: RDP orders > 1 (fractional ones by Corollary 10's interpolation).

    Returns:
        eps'(alpha) at each order (inf where sigma = 0). Compose T steps by multiplying by T.
    """
    sigma, b, n = _check(sigma, batch_size, dataset_size)
    orders = check_orders("orders", orders)
    if sigma == 0:
        return np.full(orders.shape, math.inf)
    gamma = b / n
    if gamma == 1.0:
        return 2.0 * orders / sigma**2
    out = np.empty(orders.shape)
    cache: dict[int, float] = {1: 0.0}

    def log_a(a: int) -> float:
        if a not in cache:
            cache[a] = _log_a_int(gamma, sigma, a)
        return cache[a]

    for i, alpha in enumerate(orders.ravel()):
        if math.isinf(alpha):
            out.flat[i] = math.inf
            continue
        lo, hi = math.floor(alpha), math.ceil(alpha)
        w = alpha - lo
        val = log_a(lo) if w == 0 else (1.0 - w) * log_a(lo) + w * log_a(hi)
        # Theorem 9 can exceed the unamplified Gaussian (2 alpha / sigma^2) at large
        # alpha: both are upper bounds, keep the smaller
        out.flat[i] = min(val / (alpha - 1.0), 2.0 * alpha / sigma**2)
    return out


def epsilon_without_replacement(sigma: float, batch_size: int, dataset_size: int,
                                steps: int, delta: float,
                                orders: object | None = None) -> float:
    """Upper bound on eps of ``steps`` fixed-size-batch Gaussian steps under replace-one:
    Theorem 9's RDP (:func:`rdp_without_replacement`) times ``steps``, improved conversion
    (Balle et al. 2020, Thm 21) on ``orders`` (default: :data:`accounting.DEFAULT_ORDERS`)."""
    from .conversions import rdp_to_dp
    from .rdp import DEFAULT_ORDERS

    steps = check_count("steps", steps)
    delta = check_delta("delta", delta)
    orders = DEFAULT_ORDERS if orders is None else check_orders("orders", orders)
    curve = rdp_without_replacement(sigma, batch_size, dataset_size, orders) * steps
    if steps == 0:
        return 0.0
    if not np.isfinite(curve).any():
        return math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(rdp_to_dp(curve, orders, delta, "improved").eps)


def _poisson_upper_pmf(q: float, s: float, h: float, direction: str):
    """UPPER discrete PLD (``accounting.pld._PMF``) of one Poisson-subsampled Gaussian step
    (q, multiplier s) in one direction, on the grid {k h} (connect-the-dots)."""
    from . import pld

    return pld.gaussian_step_pmf(q, s, h, direction, True)


def _profile_at_grid(pmf, h: float, ks: np.ndarray) -> np.ndarray:
    """delta(k h) = inf + sum_{l > k h} p_l (1 - e^(k h - l)) of a discrete PLD at the grid
    points ``ks`` (integers, increasing), in O(size + len(ks)): with suffix sums
    A_k = sum_{l > k} p_l and B_k = sum_{l > k} p_l e^(-(l - k) h), delta(k h) = inf + A_k -
    B_k, and B obeys the decaying recursion B_k = e^(-h) (p_(k+1) + B_(k+1)) (computed by a
    first-order linear filter: no overflow for any loss range)."""
    from scipy.signal import lfilter

    n = pmf.p.size
    decay = math.exp(-h)
    # over the array index i (loss offset + i): a[i] = sum_{j > i} p_j, b[i] = sum_{j > i}
    # p_j e^(-(j - i) h); b = decay * lfilter on the reversed p, shifted by one
    rev = lfilter([1.0], [1.0, -decay], pmf.p[::-1])  # rev[m] = sum_{j >= n-1-m} ...
    incl = rev[::-1]  # incl[i] = sum_{j >= i} p_j e^(-(j - i) h)
    b = np.zeros(n)
    b[:-1] = decay * incl[1:]
    a = np.zeros(n)
    a[:-1] = np.cumsum(pmf.p[::-1])[::-1][1:]
    idx = np.asarray(ks, dtype=np.int64) - pmf.offset
    out = np.full(idx.size, pmf.inf)
    below = idx < 0  # every atom lies above: the sums over the whole array, shifted
    inside = (idx >= 0) & (idx < n)
    out[inside] += np.maximum(a[idx[inside]] - b[idx[inside]], 0.0)
    if below.any():
        total = float(pmf.p.sum())
        shift = np.exp(idx[below] * h)  # e^(-(0 - i) h) scaling for i < 0: e^(i h) <= 1
        out[below] += np.maximum(total - shift * incl[0], 0.0)
    return out


def _symmetrised(pmf, h: float):
    """The symmetric discrete PLD with the same profile on eps >= 0 (module doc), or None
    when the atom at 0 would be negative."""
    from . import pld

    loss_k = pmf.offset + np.arange(pmf.p.size)
    pos = loss_k > 0
    if not pos.any():
        return pld._PMF(0, np.ones(1), 0.0) if pmf.inf == 0 else None
    kp = loss_k[pos]
    p_pos = pmf.p[pos]
    q_pos = p_pos * np.exp(-kp * h)  # Q-mass of the positive losses
    atom = 1.0 - pmf.inf - float(p_pos.sum()) - float(q_pos.sum())
    if atom < -1e-12:
        return None
    top = int(kp.max())
    out = np.zeros(2 * top + 1)  # losses -top .. top
    out[top + kp] += p_pos
    out[top - kp] += q_pos
    out[top] += max(atom, 0.0)
    return pld._trim(pld._PMF(-top, out, pmf.inf), True)


def _upper_pmf(gamma: float, sigma: float, h: float):
    """The symmetrised UPPER discrete PLD of one step (module doc), or None where neither
    direction's discretised profile dominates the other's on eps >= 0."""
    s = sigma / 2.0
    rem = _poisson_upper_pmf(gamma, s, h, "remove")
    add = _poisson_upper_pmf(gamma, s, h, "add")
    top = max(rem.offset + rem.p.size, add.offset + add.p.size)
    ks = np.arange(0, top + 1)
    d_rem, d_add = _profile_at_grid(rem, h, ks), _profile_at_grid(add, h, ks)
    if np.all(d_add <= d_rem + 1e-15):
        return _symmetrised(rem, h)
    if np.all(d_rem <= d_add + 1e-15):
        return _symmetrised(add, h)
    return None


def step_loss_variance(gamma: float, sigma: float) -> float:
    """About the variance of one step's privacy loss (the +-1 pair, and the symmetrised pair
    at sigma / 2): at most gamma^2 (e^(4 / sigma^2) - 1) and (2 / sigma)^2; sets grid steps."""
    with np.errstate(over="ignore"):
        var = gamma**2 * math.expm1(min(4.0 / sigma**2, 700.0))
    return float(min(var, 4.0 / sigma**2))


def _composition_grid(steps: int, var: float) -> float:
    """Grid step of the loss for ``steps`` steps of loss variance ``var``: the composed
    standard deviation / (1000 x sqrt(steps / 10,000), that factor within [0.4, 2]), h
    within [1e-6, 1e-2]."""
    sd = math.sqrt(steps * var)
    return min(1e-2, max(1e-6, sd / (1000.0 * min(2.0, max(0.4, math.sqrt(steps / 1e4))))))


def pld_upper_without_replacement(sigma: float, batch_size: int, dataset_size: int,
                                  steps: int, delta: float) -> float:
    """Certified PLD upper bound on eps of ``steps`` fixed-size-batch steps under
    replace-one: the symmetrised pair of Dong, Roth, Su's C_gamma(G_{2/sigma}) (module doc),
    composed by FFT. inf where no direction's profile dominates the other's (then use
    :func:`epsilon_without_replacement`)."""
    from . import pld

    sigma, b, n = _check(sigma, batch_size, dataset_size)
    steps = check_count("steps", steps)
    delta = check_delta("delta", delta)
    if steps == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    q = b / n
    h = _composition_grid(steps, step_loss_variance(q, sigma))
    sym = _upper_pmf(q, sigma, h)
    if sym is None:
        return math.inf
    if steps == 1:
        return pld._eps_of(sym, delta, h)
    try:
        pmf, allowance = pld._compose([(sym, steps)], delta * 1e-6)
    except pld._GridTooLarge:
        return math.inf
    if allowance >= delta:
        return math.inf
    return pld._eps_of(pmf, delta - allowance, h)


def _lower_pmf(gamma: float, sigma: float, h: float):
    """LOWER discrete PLD of one step's realised +-1 pair on {k h} (merge-down): the
    replace-one Poisson pair of :func:`accounting.pld.replace_pmfs` at q = gamma (the same
    pair; gamma = 1: the Gaussian pair at distance 2), or None when its loss range would
    need more than 2,000,000 grid points."""
    from . import pld

    qs, ss = np.array([gamma]), np.array([sigma])
    if gamma >= 1.0:
        llo, lhi = pld._loss_limits(qs, ss / 2.0)
    else:
        llo, lhi = pld._replace_loss_limits(qs, ss)
    if (float(lhi[0]) - float(llo[0])) / h > 2_000_000:
        return None
    if gamma >= 1.0:
        return pld.gaussian_step_pmf(1.0, sigma / 2.0, h, "remove", False)
    return pld.replace_pmfs(qs, ss, np.array([1]), h, False)[0][0]


def without_replacement_pld_parts(sigma: float, batch_size: int, dataset_size: int,
                                  count: int, h: float, upper: bool) -> tuple[list, float]:
    """Discrete PLDs (``accounting.pld._PMF``, count) of ``count`` fixed-size-batch steps
    on the loss grid {k h}, for a ledger's PLD composition, and the round-off allowance
    (0): upper, the symmetrised pair (module doc); lower, the realised +-1 pair. Both are
    symmetric, so the same parts serve the "remove" and "add" directions. Under
    replace-one only. Raises ValueError where no PLD upper end is certified (the caller
    then uses :func:`rdp_without_replacement`)."""
    sigma, b, n = _check(sigma, batch_size, dataset_size)
    count = check_count("count", count)
    if sigma == 0:
        raise ValueError("sigma=0: no privacy (eps = inf)")
    pmf = _upper_pmf(b / n, sigma, h) if upper else _lower_pmf(b / n, sigma, h)
    if pmf is None:
        raise ValueError("no certified PLD for this fixed-size step at this grid step "
                         "(use the RDP bound)")
    return [(pmf, count)], 0.0


def same_gradient_pld_parts(sigma: float, batch_size: int, dataset_size: int, count: int,
                            h: float, direction: str) -> tuple[list, float]:
    """LOWER discrete PLDs (``accounting.pld._PMF``, count) of ``count`` fixed-size-batch
    steps on the loss grid {k h} in one ``direction`` ("remove": D' is the mixture): the
    "same gradient" pair (module doc), i.e. the Poisson add/remove pair at q = B / n and
    multiplier sigma / 2, merged down on :mod:`accounting.pld`'s offset lattice (a dominated
    pair); round-off allowance 0."""
    from . import pld
    from ._grid import Groups

    sigma, b, n = _check(sigma, batch_size, dataset_size)
    count = check_count("count", count)
    if sigma == 0:
        raise ValueError("sigma=0: no privacy (eps = inf)")
    groups = Groups(np.array([b / n]), np.array([sigma / 2.0]),
                    np.array([count], dtype=np.int64))
    return pld._gaussian_pmfs(groups, h, direction, False), 0.0


def pld_lower_without_replacement(sigma: float, batch_size: int, dataset_size: int,
                                  steps: int, delta: float) -> float:
    """Certified lower bound on eps of ``steps`` fixed-size-batch steps under replace-one:
    the pair the mechanism realises when the replaced record's gradient is +C, its
    replacement's -C and every other one 0 (one coordinate, units of C):
    (1 - gamma) N(0, sigma^2) + gamma N(1, sigma^2) against (1 - gamma) N(0, sigma^2) +
    gamma N(-1, sigma^2), discretised from below (:mod:`accounting.pld`'s merge-down, a
    dominated pair) and composed by FFT (symmetric: one direction)."""
    from . import pld

    sigma, b, n = _check(sigma, batch_size, dataset_size)
    steps = check_count("steps", steps)
    delta = check_delta("delta", delta)
    if steps == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    gamma = b / n
    h = _composition_grid(steps, step_loss_variance(gamma, sigma))
    pmf = _lower_pmf(gamma, sigma, h)
    if pmf is None:
        return 0.0
    if steps == 1:
        return pld._eps_of(pmf, delta, h)
    try:
        comp, allowance = pld._compose([(pmf, steps)], delta * 1e-6)
    except pld._GridTooLarge:
        return 0.0
    return pld._eps_of(comp, delta + allowance, h)


def same_gradient_lower(sigma: float, batch_size: int, dataset_size: int, steps: int,
                        delta: float) -> float:
    """Certified lower bound on eps of ``steps`` fixed-size-batch steps under replace-one
    from the "same gradient" datasets (module doc): every record's gradient +C in D, the
    replaced one's -C in D'; the lower end of the Poisson add/remove PLD bracket at
    q = B / n and multiplier sigma / 2 (:func:`accounting.pld.pld_epsilon`)."""
    from .events import SampledGaussian
    from .pld import pld_epsilon

    sigma, b, n = _check(sigma, batch_size, dataset_size)
    steps = check_count("steps", steps)
    delta = check_delta("delta", delta)
    if steps == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    return float(pld_epsilon([SampledGaussian(b / n, sigma / 2.0, steps)], delta).lower)


def epsilon_bounds_without_replacement(sigma: float, batch_size: int, dataset_size: int,
                                       steps: int, delta: float) -> WORBounds:
    """Certified (lower, upper) eps of ``steps`` fixed-size-batch steps under replace-one.

    upper: the smaller of the symmetrised PLD (:func:`pld_upper_without_replacement`),
    Theorem 9's RDP bound and the unamplified Gaussian (every step a Gaussian release with
    multiplier sigma / 2: the T steps compose into one with sigma / (2 sqrt(T)), Balle &
    Wang 2018 closed form). lower: the larger of the lower end of the Poisson add/remove PLD
    bracket at q = B / n and multiplier sigma / 2 (the "same gradient" pair) and the +-1
    pair's (:func:`pld_lower_without_replacement`), pairs the mechanism realises (module
    doc).
    """
    from .composition import analytic_gaussian_epsilons

    sigma, b, n = _check(sigma, batch_size, dataset_size)
    steps = check_count("steps", steps)
    delta = check_delta("delta", delta)
    if steps == 0:
        return WORBounds(0.0, 0.0)
    if sigma == 0:
        return WORBounds(math.inf, math.inf)
    plain = float(analytic_gaussian_epsilons(
        np.array([sigma / (2.0 * math.sqrt(steps))]), delta)[0])
    upper = min(epsilon_without_replacement(sigma, b, n, steps, delta), plain,
                pld_upper_without_replacement(sigma, b, n, steps, delta))
    lower = max(same_gradient_lower(sigma, b, n, steps, delta),
                pld_lower_without_replacement(sigma, b, n, steps, delta))
    return WORBounds(min(lower, upper), upper)
