"""RDP of the sampled Gaussian mechanism: closed forms, special cases, errata, precision."""

import math

import mpmath as mp
import numpy as np
import pytest
from _extras import require
from scipy import special

import accounting as A
from accounting.rdp import log_a_fractional, log_a_integer


def rdp_mpmath(q: float, sigma: float, alpha: float, dps: int = 40) -> float:
    """High-precision RDP from the defining integral (not the series we implement).

    A_alpha = E_{z ~ N(0, sigma^2)} [((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha]
    (Mironov, Talwar, Zhang 2019, Section 3); we integrate A - 1 and take log1p.
    """
    with mp.workdps(dps):
        q_, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)

        def f(z):
            ratio = (1 - q_) + q_ * mp.e ** ((2 * z - 1) / (2 * s * s))
            return mp.npdf(z, 0, s) * (ratio**a - 1)

        z0 = s * s * mp.log(1 / q_ - 1) + mp.mpf(1) / 2
        pts = sorted({-10 * s, mp.mpf(0), z0, z0 + 10 * s, a * s})
        am1 = mp.quad(f, [-mp.inf, *pts, mp.inf])
        return float(mp.log1p(am1) / (a - 1))


def test_q_one_is_plain_gaussian():
    orders = A.DEFAULT_ORDERS
    for sigma in (0.5, 1.0, 6.0):
        np.testing.assert_allclose(A.rdp_sgm(1.0, sigma), orders / (2 * sigma**2), rtol=1e-15)


def test_q_zero_is_zero_and_sigma_zero_is_inf():
    assert np.all(A.rdp_sgm(0.0, 1.0) == 0)
    assert np.all(A.rdp_sgm(0.0, 0.0) == 0)  # nothing sampled, nothing released
    r = A.rdp_sgm(0.01, 0.0)
    assert np.all(np.isinf(r)) and not np.isnan(r).any()


@pytest.mark.slow
@pytest.mark.parametrize(
    "q,sigma,alpha",
    [(1 / 120, 6.0, 1.1), (0.01, 2.5, 1.5), (0.01, 4.0, 3.7), (0.1, 1.0, 1.1),
     (0.3, 0.8, 2.5), (0.5, 2.0, 7.3), (0.01, 1.0, 10.9), (0.9, 10.0, 1.4)],
)
def test_fractional_series_matches_high_precision_integral(q, sigma, alpha):
    ours = A.rdp_sgm(q, sigma, [alpha])[0]
    truth = rdp_mpmath(q, sigma, alpha)
    # A_alpha is summed in double precision: absolute error ~1e-14 in A.
    assert ours == pytest.approx(truth, rel=1e-8, abs=6e-14 / (alpha - 1))
    assert ours >= truth * (1 - 1e-12)  # the slack makes the series conservative


@pytest.mark.slow
@pytest.mark.parametrize("q,sigma,alpha", [(0.01, 4.0, 2), (0.01, 1.0, 32), (0.2, 0.7, 5),
                                           (1e-4, 50.0, 2), (1e-3, 20.0, 64)])
def test_integer_formula_matches_high_precision_integral(q, sigma, alpha):
    ours = A.rdp_sgm(q, sigma, [alpha])[0]
    truth = rdp_mpmath(q, sigma, alpha, dps=60)
    # expm1 form: full relative accuracy even when eps_RDP ~ 1e-12
    assert ours == pytest.approx(truth, rel=1e-9)


def test_integer_and_fractional_formulas_agree_at_integers():
    for q, sigma in [(0.01, 1.0), (0.05, 2.0), (0.3, 1.5), (1 / 120, 6.0)]:
        for alpha in (2, 3, 5, 8):
            li = log_a_integer(q, np.array([sigma]), alpha)[0]
            lf = log_a_fractional(q, np.array([sigma]), np.array([float(alpha)]))[0, 0]
            assert lf == pytest.approx(li, rel=1e-9, abs=3e-13)
            assert lf >= li * (1 - 1e-12)


def test_fractional_orders_are_continuous_around_integers():
    q, sigma = 0.02, 1.3
    r = A.rdp_sgm(q, sigma, [2.999999, 3.0, 3.000001])
    assert r[0] <= r[1] <= r[2]
    assert r[2] - r[0] < 1e-5 * r[1]


def test_many_pairs_equal_scalar_calls():
    qs = np.array([0.01, 0.01, 0.2, 1.0, 0.0])
    sig = np.array([1.0, 3.0, 0.9, 2.0, 1.0])
    many = A.rdp_sgm_many(qs, sig)
    for i in range(qs.size):
        np.testing.assert_array_equal(many[i], A.rdp_sgm(qs[i], sig[i]))


def errata_no_log(q, sigma, alpha):
    """Seed erratum 1: eps = A_alpha / (alpha - 1), the log missing."""
    k = np.arange(alpha + 1)
    terms = special.binom(alpha, k) * (1 - q) ** (alpha - k) * q**k * np.exp(
        (k * k - k) / (2 * sigma**2))
    return terms.sum() / (alpha - 1)


def errata_sign(q, sigma, alpha):
    """Seed erratum 2: exp(-(k^2 - k) / (2 sigma^2)), the sign flipped."""
    k = np.arange(alpha + 1)
    terms = special.binom(alpha, k) * (1 - q) ** (alpha - k) * q**k * np.exp(
        -(k * k - k) / (2 * sigma**2))
    return math.log(terms.sum()) / (alpha - 1)


def correct_direct(q, sigma, alpha):
    k = np.arange(alpha + 1)
    terms = special.binom(alpha, k) * (1 - q) ** (alpha - k) * q**k * np.exp(
        (k * k - k) / (2 * sigma**2))
    return math.log(terms.sum()) / (alpha - 1)


@pytest.mark.parametrize("q,sigma,alpha", [(0.01, 4.0, 8), (0.01, 6.0, 32), (0.05, 2.0, 4)])
def test_seed_errata_are_not_repeated(q, sigma, alpha):
    ours = A.rdp_sgm(q, sigma, [alpha])[0]
    assert ours == pytest.approx(correct_direct(q, sigma, alpha), rel=1e-10)
    no_log = errata_no_log(q, sigma, alpha)
    flipped = errata_sign(q, sigma, alpha)
    # without the log, eps is about 1/(alpha-1) (A ~ 1): orders of magnitude too large
    assert no_log > 100 * ours
    # the flipped sign makes every k >= 2 term shrink: understates, even below zero
    assert flipped < ours
    assert abs(flipped - ours) > 0.5 * ours
    # and the erroneous per-round sum without log over T rounds differs too
    T = 100
    assert T * no_log != pytest.approx(T * ours, rel=0.5)


def test_no_overflow_for_small_sigma_large_order():
    r = A.rdp_sgm(0.5, 0.05, [256.0, 128.0])
    assert np.all(np.isfinite(r)) and np.all(r > 0)
    # dominated by the k = alpha term: alpha (alpha-1)/(2 sigma^2)/(alpha-1) + log q^alpha/(alpha-1)
    a = 256.0
    approx = (a * a - a) / (2 * 0.05**2) / (a - 1) + a * math.log(0.5) / (a - 1)
    assert r[0] == pytest.approx(approx, rel=1e-6)


def test_tiny_rdp_resolved_below_machine_epsilon_for_integer_orders():
    # log A ~ 1e-17: summing A directly in double gives 0; the expm1 form does not.
    r = A.rdp_sgm(1e-6, 100.0, [2.0])[0]
    exact = math.log1p(1e-12 * math.expm1(1 / 100.0**2))  # alpha=2: A-1 = q^2 (e^{1/s^2}-1)
    assert r == pytest.approx(exact, rel=1e-12)
    assert r > 0


def test_laplace_rdp_matches_mironov_and_pure_limit():
    b = 2.0
    orders = np.array([1.5, 2.0, 10.0, 100.0])
    r = A.rdp_laplace(b, orders)
    a = orders
    direct = np.log(a / (2 * a - 1) * np.exp((a - 1) / b)
                    + (a - 1) / (2 * a - 1) * np.exp(-a / b)) / (a - 1)
    np.testing.assert_allclose(r, direct, rtol=1e-12)
    assert np.all(r <= 1 / b) and r[-1] == pytest.approx(1 / b, rel=0.02)
    assert np.all(np.diff(r) > 0)


def test_pure_dp_rdp_curve():
    r = A.rdp_pure_dp(0.5, [2.0, 4.0, 100.0])
    np.testing.assert_allclose(r, [0.25, 0.5, 0.5])


def test_default_orders_documented_grid():
    o = A.DEFAULT_ORDERS
    assert o[0] == pytest.approx(1.1) and o[-1] == 256
    assert {12.0, 63.0, 64.0, 128.0, 256.0} <= set(o.tolist())
    assert np.all(np.diff(o) > 0)
    np.testing.assert_array_equal(A.INTEGER_ORDERS, np.arange(2, 65))


def _mpmath_rdp(alpha: float, q: float, sigma: float):
    """50-digit RDP of one sampled Gaussian step: the defining integral minus its first-order
    part (which integrates to 0), so tiny values keep their digits."""
    mp = require("mpmath", "test")
    mp.mp.dps = 50
    a, qq, s = mp.mpf(alpha), mp.mpf(q), mp.mpf(sigma)
    z0 = s**2 * mp.log(1 / qq - 1) + mp.mpf(1) / 2

    def integrand(z):
        x = qq * (mp.exp((2 * z - 1) / (2 * s**2)) - 1)
        return mp.npdf(z, 0, s) * ((1 + x) ** a - 1 - a * x)

    val = mp.quad(integrand, [-mp.inf, -10 * s, 0, 1, z0, z0 + 10 * s, mp.inf])
    return mp.log1p(val) / (a - 1)


@pytest.mark.parametrize("alpha,q,sigma", [
    (1.2, 1.05e-4, 16.5),  # the case: +2.07e-4 relative before
    (1.1, 1.0 / 120.0, 15.0),
    (3.748, 4.91e-5, 28.1),
    (1.5, 0.01, 2.5),
    (6.072, 0.122, 1.11),
])
@pytest.mark.slow
def test_fractional_order_within_1e8_of_mpmath_and_never_below(alpha, q, sigma):
    truth = _mpmath_rdp(alpha, q, sigma)
    ours = A.rdp_sgm(q, sigma, np.array([alpha]))[0]
    assert ours >= truth
    assert (ours - truth) / truth < 1e-8


def test_random_fractional_orders_against_mpmath():
    rng = np.random.default_rng(12)
    for _ in range(4):
        alpha = float(rng.uniform(1.01, 10.9))
        q = float(10 ** rng.uniform(-5, -1))
        sigma = float(10 ** rng.uniform(0.3, 1.5))
        truth = _mpmath_rdp(alpha, q, sigma)
        ours = A.rdp_sgm(q, sigma, np.array([alpha]))[0]
        assert truth <= ours <= truth * (1 + 1e-8), (alpha, q, sigma)
