"""Noise schedules: formulas, end points, never below sigma_T; event-driven decays."""

import math

import numpy as np
import pytest

from accounting import schedules as S


@pytest.mark.parametrize("name", ["linear", "staircase", "exponential", "cyclic"])
def test_decays_start_at_sigma0_and_never_go_below_sigma_end(name):
    sig = S.schedule(name, 15.0, 4.85, 100)
    assert sig.size == 100 and sig[0] == 15.0
    assert sig.min() >= 4.85 and sig.max() <= 15.0


@pytest.mark.parametrize("name", ["linear", "staircase", "exponential"])
def test_monotone_decays_end_exactly_at_sigma_end(name):
    sig = S.schedule(name, 15.0, 4.85, 101)
    assert sig[-1] == 4.85
    assert np.all(np.diff(sig) <= 1e-12)


def test_formulas():
    t = np.arange(11)
    g = (1 - 5.0 / 10.0) / 10
    np.testing.assert_allclose(S.linear(10.0, 5.0, 11), 10.0 * (1 - g * t))
    ge = math.log(10.0 / 5.0) / 10
    np.testing.assert_allclose(S.exponential(10.0, 5.0, 11), 10.0 * np.exp(-ge * t))
    st = S.staircase(10.0, 5.0, 11, period=5)  # stairs at t = 0, 5, 10
    np.testing.assert_allclose(st, [10.0] * 5 + [7.5] * 5 + [5.0])


def test_cyclic_restarts_and_is_clamped():
    sig = S.cyclic(8.0, 2.0, 40, cycles=4)
    assert np.all(sig[::10] == 8.0)  # restarts every ceil(40/4) = 10 steps
    raw = 8.0 / 2 * (1 + np.cos(np.pi * (np.arange(40) % 10) / 10))
    assert raw.min() < 2.0  # the printed formula would go below sigma_T (towards 0)
    np.testing.assert_allclose(sig, np.maximum(raw, 2.0))


def test_constant_and_single_step():
    assert np.all(S.constant(3.0, 5) == 3.0)
    assert S.exponential(10.0, 5.0, 1).tolist() == [10.0]


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match="sigma_end"):
        S.linear(5.0, 6.0, 10)
    with pytest.raises(ValueError, match="sigma_end"):
        S.exponential(5.0, 0.0, 10)
    with pytest.raises(ValueError, match="steps"):
        S.linear(5.0, 1.0, 0)
    with pytest.raises(ValueError, match="name"):
        S.schedule("sawtooth", 5.0, 1.0, 10)
    with pytest.raises(ValueError, match="sigma_end is required"):
        S.schedule("linear", 5.0, None, 10)


def test_plateau_decay_fires_exactly_on_third_consecutive_drop():
    d = S.PlateauDecay(sigma0=10.0, beta=0.5, patience=3)
    losses = [5.0, 4.0, 3.0, 2.9, 3.5, 3.0, 2.0, 1.0]
    sigmas = [d.update(x) for x in losses]
    # drops at rounds 1, 2, 3 -> fires after round 3; rise at 4 resets; drops 5, 6, 7 -> fires
    assert sigmas == [10.0, 10.0, 10.0, 5.0, 5.0, 5.0, 5.0, 2.5]
    assert d.history == [10.0, 10.0, 10.0, 10.0, 5.0, 5.0, 5.0, 5.0]


def test_threshold_decay():
    d = S.ThresholdDecay(sigma0=4.0, rho=0.5, mu=0.1)
    assert d.update(1.0) == 4.0  # first round: nothing to compare
    assert d.update(0.5) == 4.0  # improved by 0.5 >= mu
    assert d.update(0.45) == 2.0  # improved by 0.05 < mu
    assert d.update(0.6) == 1.0  # got worse
    with pytest.raises(ValueError, match="rho"):
        S.ThresholdDecay(sigma0=1.0, rho=0.0)
    with pytest.raises(ValueError, match="loss"):
        d.update(float("nan"))
