"""Privacy loss distributions: certified brackets against closed forms and dp-accounting."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest
from _extras import require
from scipy import optimize

import accounting as A
from accounting.composition import gaussian_delta


def _ledger(*events: A.Event) -> A.PrivacyLedger:
    ledger = A.PrivacyLedger()
    for e in events:
        ledger.record(e)
    return ledger


def _exact_gaussian_eps(sigma: float, steps: int, delta: float) -> float:
    """T Gaussian releases = one with sigma / sqrt(T); its exact eps (Balle & Wang 2018)."""
    s = sigma / math.sqrt(steps)
    return optimize.brentq(lambda e: gaussian_delta(s, e) - delta, 0.0, 100.0, xtol=1e-14)


@pytest.mark.parametrize("sigma,steps", [(2.0, 10), (0.7, 3), (20.0, 1000)])
def test_unsampled_gaussian_bracket_holds_the_closed_form(sigma: float, steps: int) -> None:
    exact = _exact_gaussian_eps(sigma, steps, 1e-5)
    lo, est, up = A.pld_epsilon([A.SampledGaussian(1.0, sigma, steps)], 1e-5)
    assert lo <= exact <= up
    assert lo <= est <= up
    assert up - lo <= 0.005 * up


def test_single_laplace_bracket_holds_the_closed_form() -> None:
    # one Laplace release, eps0 = 1/b: delta(eps) = 1 - exp((eps - eps0) / 2) for eps < eps0
    eps0, delta = 0.8, 0.05
    exact = eps0 + 2.0 * math.log1p(-delta)
    lo, _, up = A.pld_epsilon([A.Laplace(b=1.0 / eps0)], delta)
    assert lo <= exact <= up
    assert up - lo < 1e-3


def test_constant_sigma_matches_dp_accounting_and_the_lower_bound_is_usable() -> None:
    pld = require("dp_accounting.pld.privacy_loss_distribution", "test")
    ref = pld.from_gaussian_mechanism(6.0, sampling_prob=0.01).self_compose(10_000)
    ref_eps = ref.get_epsilon_for_delta(1e-5)  # pessimistic connect-the-dots: >= the truth
    logging.disable(logging.WARNING)  # dp-accounting logs that it falls back to buckets
    try:
        buckets = pld.from_gaussian_mechanism(6.0, sampling_prob=0.01, pessimistic_estimate=False)
        buckets_eps = buckets.self_compose(10_000).get_epsilon_for_delta(1e-5)
    finally:
        logging.disable(logging.NOTSET)
    lo, _, up = A.pld_epsilon([A.SampledGaussian(0.01, 6.0, 10_000)], 1e-5)
    assert lo <= ref_eps
    assert abs(up - ref_eps) <= 0.005 * ref_eps
    # the pitfall of the issue: rounding every loss down drifts by T h / 2 over T steps
    assert buckets_eps < 0.5 * ref_eps
    assert lo >= 0.99 * up


def _dp_accounting_eps(events: list[A.Event], delta: float) -> float:
    pld = require("dp_accounting.pld.privacy_loss_distribution", "test")
    total = None
    for e in events:
        if isinstance(e, A.SampledGaussian):
            p = pld.from_gaussian_mechanism(e.sigma, sampling_prob=e.q)
        elif isinstance(e, A.Laplace):
            p = pld.from_laplace_mechanism(e.b, sensitivity=e.sensitivity)
        else:
            assert isinstance(e, A.ApproxDP)
            params = pld.common.DifferentialPrivacyParameters(e.eps, e.delta)
            p = pld.from_privacy_parameters(params)
        p = p.self_compose(e.count)
        total = p if total is None else total.compose(p)
    return total.get_epsilon_for_delta(delta)


@pytest.mark.parametrize("events", [
    [A.SampledGaussian(0.2, 1.0, 100)],  # large eps: the add direction matters
    [A.SampledGaussian(0.5, 0.8, 20)],
    [A.Laplace(5.0, 10)],
    [A.ApproxDP(0.3, 1e-7, 5)],
    [A.SampledGaussian(0.01, 2.0, 500), A.Laplace(20.0, 3), A.ApproxDP(0.1, 1e-7, 2)],
])
@pytest.mark.slow
def test_bracket_agrees_with_dp_accounting(events: list[A.Event]) -> None:
    ref = _dp_accounting_eps(events, 1e-5)  # an upper bound, tight to its grid 1e-4
    lo, _, up = A.pld_epsilon(events, 1e-5)
    assert lo <= ref
    assert abs(up - ref) <= 0.005 * ref


@pytest.mark.slow
def test_sigma_grid_keeps_the_bracket_certified() -> None:
    sigmas = A.schedules.exponential(6.0, 2.0, 120)
    events = [A.GaussianSchedule(0.02, sigmas)]
    # on one fixed grid (no refinement passes): rounding sigmas down (up) only raises
    # (lowers) eps
    exact = A.pld_epsilon(events, 1e-5, max_distinct=1000, value_interval=1e-4)
    coarse = A.pld_epsilon(events, 1e-5, max_distinct=4, sigma_resolution=0.05,
                           value_interval=1e-4)
    assert coarse.lower <= exact.lower + 1e-9
    assert coarse.upper >= exact.upper - 1e-9
    assert coarse.upper - coarse.lower > exact.upper - exact.lower
    # with the default refinement (finer grids where too wide) both are certified brackets:
    # neither lower end is above the other run's upper end
    exact = A.pld_epsilon(events, 1e-5, max_distinct=1000)
    coarse = A.pld_epsilon(events, 1e-5, max_distinct=4, sigma_resolution=0.05)
    assert coarse.lower <= exact.upper + 1e-9 and exact.lower <= coarse.upper + 1e-9


def test_ledger_api() -> None:
    ledger = A.PrivacyLedger()
    ledger.step_schedule(1 / 120, A.schedules.exponential(15.0, 4.85, 300))
    lo, est, up = ledger.epsilon_bounds(1e-5, method="pld")
    assert ledger.epsilon(1e-5, "pld") == up
    assert lo <= est <= up <= ledger.epsilon(1e-5, "rdp")
    # delta at the certified eps is at most the target (up to the grid of the inverse)
    assert ledger.delta(up, "pld") <= 1e-5 * (1 + 1e-6)
    assert ledger.delta(0.5 * up, "pld") > 1e-5
    assert "pld" in ledger.epsilon_report(1e-5, prv=False)


@pytest.mark.slow
def test_calibration_with_pld_is_feasible_and_needs_less_noise() -> None:
    sigma_pld = A.calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=300, method="pld", rtol=1e-2)
    sigma_rdp = A.calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=300, method="rdp", rtol=1e-2)
    ledger = A.PrivacyLedger()
    ledger.step(q=0.01, sigma=sigma_pld, count=300)
    assert ledger.epsilon(1e-5, "pld") <= 1.0
    assert sigma_pld < sigma_rdp
    assert (A.max_steps(1.0, delta=1e-5, q=0.01, sigma=1.0, method="pld")
            >= A.max_steps(1.0, delta=1e-5, q=0.01, sigma=1.0, method="rdp"))


def test_no_noise_empty_and_nothing_leaking() -> None:
    assert A.pld_epsilon([A.SampledGaussian(0.1, 0.0, 3)], 1e-5) == (math.inf,) * 3
    assert A.pld_epsilon([], 1e-5) == (0.0, 0.0, 0.0)
    assert A.pld_epsilon([A.SampledGaussian(0.0, 1.0, 3)], 1e-5) == (0.0, 0.0, 0.0)
    assert A.pld_delta([A.SampledGaussian(0.1, 0.0, 3)], 1.0) == (1.0, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ledger = _ledger(A.ApproxDP(math.inf, 0.0))
        assert math.isinf(ledger.epsilon(1e-5, "pld"))


@pytest.mark.parametrize("call,name", [
    (lambda: A.pld_epsilon([A.SampledGaussian(0.1, 1.0)], 1e-5, value_interval=0.0),
     "value_interval"),
    (lambda: A.pld_epsilon([A.SampledGaussian(0.1, 1.0)], 1e-5, value_interval=-1e-4),
     "value_interval"),
    (lambda: A.pld_epsilon([A.SampledGaussian(0.1, 1.0)], 1e-5, sigma_resolution=0.0),
     "sigma_resolution"),
    (lambda: A.pld_epsilon([A.SampledGaussian(0.1, 1.0)], 1e-5, max_distinct=0),
     "max_distinct"),
    (lambda: A.pld_epsilon([A.SampledGaussian(0.1, 1.0)], 0.0), "delta"),
    (lambda: A.pld_epsilon(A.PrivacyLedger(), 1e-5), "events"),
    (lambda: A.pld_epsilon([(0.1, 1.0, 1)], 1e-5), "events"),
    (lambda: A.pld_delta([A.SampledGaussian(0.1, 1.0)], -1.0), "eps"),
    (lambda: A.PrivacyLedger().epsilon_bounds(1e-5, method="rdp"), "method"),
])
def test_bad_input_names_the_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_pld_is_never_nan_and_finite_for_tiny_and_huge_losses() -> None:
    for events in ([A.SampledGaussian(1e-4, 50.0, 10)], [A.SampledGaussian(0.9, 0.3, 5)]):
        b = A.pld_epsilon(events, 1e-5)
        assert not any(np.isnan(b))
        assert b.lower <= b.upper
    assert np.isfinite(A.pld_epsilon([A.SampledGaussian(0.9, 0.3, 5)], 1e-5).upper)


def test_a_zero_eps_release_still_spends_its_delta() -> None:
    # (0, delta)-DP composed k times is (0, 1 - (1 - delta)^k)-DP: eps is 0 below that delta
    events = [A.ApproxDP(0.0, 1e-4, 3)]
    spent = 1.0 - (1.0 - 1e-4) ** 3
    assert math.isinf(A.pld_epsilon(events, 0.5 * spent).upper)
    assert A.pld_epsilon(events, 2.0 * spent).upper == 0.0
    lo, up = A.pld_delta(events, 0.0)
    assert lo <= spent <= up
