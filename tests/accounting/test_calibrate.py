"""Calibration: sigma for a target eps, steps within a budget, scaling a schedule."""

import warnings

import numpy as np
import pytest

import accounting as A


def eps_const(q, sigma, t, delta=1e-5, method="rdp"):
    ledger = A.PrivacyLedger()
    ledger.step(q=q, sigma=sigma, count=t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ledger.epsilon(delta, method)


@pytest.mark.parametrize("method", ["rdp", "rdp-classic", "zcdp"])
def test_calibrated_sigma_is_conservative_and_tight(method):
    sigma = A.calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=10_000, method=method)
    assert eps_const(0.01, sigma, 10_000, method=method) <= 1.0
    assert eps_const(0.01, sigma * (1 - 1e-5), 10_000, method=method) > 1.0 - 1e-6


def test_calibrate_matches_opacus_get_noise_multiplier():
    from opacus.accountants.utils import get_noise_multiplier

    ours = A.calibrate_sigma(2.0, delta=1e-5, q=0.004, steps=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = get_noise_multiplier(target_epsilon=2.0, target_delta=1e-5, sample_rate=0.004,
                                      steps=5000, accountant="rdp", epsilon_tolerance=1e-4)
    # Opacus's orders stop at 63 and it stops at eps within 1e-4: agree to ~1e-3
    assert ours == pytest.approx(theirs, rel=2e-3)


def test_max_steps_is_the_exact_boundary():
    t = A.max_steps(1.0, delta=1e-5, q=0.01, sigma=4.0)
    assert eps_const(0.01, 4.0, t) <= 1.0 < eps_const(0.01, 4.0, t + 1)
    assert A.max_steps(1e-6, delta=1e-5, q=0.5, sigma=0.5) == 0
    assert A.max_steps(10.0, delta=1e-5, q=1e-6, sigma=50.0, limit=1000) == 1000


@pytest.mark.slow
def test_scale_schedule_keeps_shape_and_hits_target():
    base = A.schedules.exponential(15.0, 4.85, 300)
    scaled = A.scale_schedule(base, target_eps=2.0, delta=1e-5, q=0.05)
    ratio = scaled / base
    assert np.allclose(ratio, ratio[0])
    ledger = A.PrivacyLedger()
    ledger.step_schedule(0.05, scaled)
    assert ledger.epsilon(1e-5) <= 2.0
    tighter = A.PrivacyLedger()
    tighter.step_schedule(0.05, scaled * (1 - 1e-5))
    assert tighter.epsilon(1e-5) > 2.0 - 1e-6


def test_calibration_rejects_approximations_and_bad_targets():
    with pytest.raises(ValueError, match="method"):
        A.calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=100, method="zcdp-approx")
    with pytest.raises(ValueError, match="target_eps"):
        A.calibrate_sigma(0.0, delta=1e-5, q=0.01, steps=100)
    with pytest.raises(ValueError, match="sigmas"):
        A.scale_schedule([1.0, -1.0], target_eps=1.0, delta=1e-5, q=0.01)


def test_keywords_after_the_first_argument_the_old_positional_form_warns():
    new = A.calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=100, rtol=1e-3)
    with pytest.warns(DeprecationWarning, match=r"calibrate_sigma\(\.\.\., delta=\.\.\."):
        assert A.calibrate_sigma(1.0, 1e-5, 0.01, 100, rtol=1e-3) == new
    with pytest.warns(DeprecationWarning, match="max_steps"):
        assert A.max_steps(1.0, 1e-5, 0.01, 4.0) == A.max_steps(1.0, delta=1e-5, q=0.01,
                                                                   sigma=4.0)
    base = np.array([2.0, 1.0])
    with pytest.warns(DeprecationWarning, match="scale_schedule"):
        old = A.scale_schedule(base, 2.0, 1e-5, 0.05)
    assert np.array_equal(old, A.scale_schedule(base, target_eps=2.0, delta=1e-5, q=0.05))
    with pytest.raises(TypeError, match="1 positional argument"):
        A.calibrate_sigma(1.0, 1e-5, 0.01, 100, "rdp", None)
    with pytest.raises(TypeError, match="multiple values for argument 'delta'"):
        A.calibrate_sigma(1.0, 1e-5, delta=1e-5, q=0.01, steps=100)
