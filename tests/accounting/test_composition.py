"""Composition theorems, Gaussian calibration, amplification by sampling, zCDP."""

import math
import warnings

import pytest

import accounting as A


def test_basic_composition():
    assert A.compose_basic(0.5, 1e-6, k=10) == pytest.approx((5.0, 1e-5))
    assert A.compose_basic([0.1, 0.2], [0.0, 1e-6]) == pytest.approx((0.3, 1e-6))


def test_advanced_composition_homogeneous_formula():
    eps, delta, k, dp = 0.1, 1e-7, 100, 1e-5
    res = A.compose_advanced(eps, delta, k, dp)
    expected = math.sqrt(2 * k * math.log(1 / dp)) * eps + k * eps * math.expm1(eps)
    assert res.eps == pytest.approx(expected, rel=1e-12)
    assert res.delta == pytest.approx(k * delta + dp)


def test_advanced_heterogeneous_reduces_to_homogeneous():
    hom = A.compose_advanced(0.2, 1e-8, 50, 1e-6)
    het = A.compose_advanced_heterogeneous([0.2] * 50, [1e-8] * 50, 1e-6)
    assert het.eps == pytest.approx(hom.eps) and het.delta == pytest.approx(hom.delta)


def test_advanced_beats_basic_for_many_small_steps():
    assert A.compose_advanced(0.01, 0.0, 10_000, 1e-5).eps < A.compose_basic(0.01, 0.0,
                                                                               10_000).eps


def test_classical_gaussian_and_range_warning():
    eps = A.gaussian_step_epsilon(10.0, 1e-5)
    assert eps == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 10.0)
    with pytest.warns(A.RangeWarning, match="eps < 1"):
        A.gaussian_step_epsilon(1.0, 1e-5)


def test_analytic_gaussian_is_exact_and_tighter():
    for sigma in (0.7, 1.0, 3.0, 10.0):
        e = A.gaussian_step_epsilon(sigma, 1e-5, method="analytic")
        assert A.gaussian_delta(sigma, e) <= 1e-5
        assert A.gaussian_delta(sigma, e * (1 - 1e-6)) > 1e-5
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", A.RangeWarning)
            assert e <= A.gaussian_step_epsilon(sigma, 1e-5)


def test_gaussian_delta_matches_rdp_of_q1():
    # The analytic Gaussian's delta at the RDP-derived eps never exceeds the target.
    sigma = 2.0
    eps = A.rdp_to_dp(A.rdp_sgm(1.0, sigma), A.DEFAULT_ORDERS, 1e-5, warn_edge=False).eps
    assert A.gaussian_delta(sigma, eps) <= 1e-5


def test_amplification_by_sampling():
    res = A.amplify_by_sampling(1.0, 1e-5, 0.01)
    assert res.eps == pytest.approx(math.log1p(0.01 * math.expm1(1.0)))
    assert res.delta == pytest.approx(1e-7)
    assert A.amplify_by_sampling(1.0, 1e-5, 1.0).eps == pytest.approx(1.0)
    assert A.amplify_by_sampling(1.0, 1e-5, 0.0) == (0.0, 0.0)
    huge = A.amplify_by_sampling(1000.0, 0.0, 0.5)
    assert huge.eps == pytest.approx(1000.0 + math.log(0.5)) and math.isfinite(huge.eps)


def test_zcdp():
    assert A.zcdp_gaussian(2.0) == pytest.approx(1 / 8)
    assert math.isinf(A.zcdp_gaussian(0.0))
    # sigma^2 underflows to 0 (the smallest normal float, found by the property suite): inf,
    # not a ZeroDivisionError; the sampled approximation likewise
    for tiny in (2.2250738585072014e-308, 1e-160):
        assert math.isinf(A.zcdp_gaussian(tiny))
        assert math.isinf(A.zcdp_sampled_gaussian_approx(0.5, tiny))
    rho, delta = 0.5, 1e-5
    classic = A.zcdp_to_dp(rho, delta)
    assert classic.eps == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)))
    # min over alpha of alpha rho + log(1/delta)/(alpha-1) equals the closed form
    grid = min(a * rho + math.log(1 / delta) / (a - 1) for a in [1 + i / 1000 for i in
                                                                    range(1, 20000)])
    assert grid == pytest.approx(classic.eps, rel=1e-5)
    improved = A.zcdp_to_dp(rho, delta, conversion="improved")
    assert improved.eps < classic.eps


def test_zcdp_approx_is_labelled_and_small_q_only():
    assert A.zcdp_sampled_gaussian_approx(0.01, 4.0) == pytest.approx(1e-4 / 16)
    assert "APPROXIMATION" in A.zcdp_sampled_gaussian_approx.__doc__


def test_joint_gaussian_multiplier_composes_as_gdp():
    # two releases at sigma: one at sigma / sqrt(2); RDP of the Gaussian adds up the same way
    assert A.joint_gaussian_multiplier(2.0, 2.0) == pytest.approx(2.0 / math.sqrt(2.0))
    for alpha in (2.0, 8.0, 32.0):
        joint = A.joint_gaussian_multiplier(1.5, 3.0)
        assert alpha / (2 * joint**2) == pytest.approx(alpha / (2 * 1.5**2) + alpha / (2 * 9.0))
    # Andrew et al.: the update multiplier left when the count (sensitivity 1/2) shares z
    from leakaudit.defenses.quantile_clip import update_noise_multiplier

    z, sigma_b = 0.8, 1.0
    assert A.joint_gaussian_multiplier(update_noise_multiplier(z, sigma_b),
                                       2 * sigma_b) == pytest.approx(z)
    assert A.joint_gaussian_multiplier(0.0, 3.0) == 0.0
    with pytest.raises(ValueError, match="multipliers"):
        A.joint_gaussian_multiplier()
    with pytest.raises(ValueError, match="multipliers"):
        A.joint_gaussian_multiplier(-1.0)
