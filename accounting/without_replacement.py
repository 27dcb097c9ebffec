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

Lower bound (realised pair). Let every other record's gradient be 0, the replaced record's
gradient have norm C and its replacement's be 0. The step's output on the two datasets is
then (1 - gamma) N(0, sigma^2) + gamma N(1, sigma^2) against N(0, sigma^2) (in units of C,
one coordinate): the Poisson remove pair with q = gamma, and, swapping the datasets, the
add pair. So the certified LOWER end of the Poisson add/remove PLD bracket
(:func:`accounting.pld_epsilon` of ``SampledGaussian(gamma, sigma, steps)``) is a lower bound
on the eps of fixed-size batches under replace-one.

A certified PLD upper end would need a dominating pair valid for every order of the
hockey-stick divergence after composition: the tight tradeoff function of one step is the
symmetrised min{f_gamma, f_gamma^-1}** (Dong, Roth, Su 2022, Thm 9, with f = G_{2/sigma}),
whose composition is not the larger of the two directions' compositions; it is not built
here, so the upper end is the RDP one (dp-accounting's PLD accountant does not accept
``SampledWithoutReplacementDpEvent`` either: only its RDP accountant does).
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
]


class WORBounds(NamedTuple):
    """Certified bracket: lower (realised pair, PLD) <= eps <= upper (RDP, Theorem 9)."""

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


def epsilon_bounds_without_replacement(sigma: float, batch_size: int, dataset_size: int,
                                       steps: int, delta: float) -> WORBounds:
    """Certified (lower, upper) eps of ``steps`` fixed-size-batch steps under replace-one.

    upper: the smaller of Theorem 9's RDP bound and the unamplified Gaussian (every step a
    Gaussian release with multiplier sigma / 2: the T steps compose into one with sigma /
    (2 sqrt(T)), Balle & Wang 2018 closed form). lower: the lower end of the Poisson
    add/remove PLD bracket at q = B / n, a pair the mechanism realises (module doc).
    """
    from .composition import analytic_gaussian_epsilons
    from .events import SampledGaussian
    from .pld import pld_epsilon

    sigma, b, n = _check(sigma, batch_size, dataset_size)
    steps = check_count("steps", steps)
    delta = check_delta("delta", delta)
    if steps == 0:
        return WORBounds(0.0, 0.0)
    if sigma == 0:
        return WORBounds(math.inf, math.inf)
    plain = float(analytic_gaussian_epsilons(
        np.array([sigma / (2.0 * math.sqrt(steps))]), delta)[0])
    upper = min(epsilon_without_replacement(sigma, b, n, steps, delta), plain)
    lower = pld_epsilon([SampledGaussian(b / n, sigma, steps)], delta).lower
    return WORBounds(min(lower, upper), upper)
