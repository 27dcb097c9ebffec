"""Bad input: every public function rejects it with a ValueError naming the argument."""

import math

import numpy as np
import pytest

import accounting as A

NAN = float("nan")

CASES = [
    (lambda: A.rdp_sgm(1.5, 1.0), "q"),
    (lambda: A.rdp_sgm(-0.1, 1.0), "q"),
    (lambda: A.rdp_sgm(NAN, 1.0), "q"),
    (lambda: A.rdp_sgm(0.1, -1.0), "sigma"),
    (lambda: A.rdp_sgm(0.1, NAN), "sigma"),
    (lambda: A.rdp_sgm(0.1, math.inf), "sigma"),
    (lambda: A.rdp_sgm(0.1, 1.0, [1.0, 2.0]), "orders"),
    (lambda: A.rdp_sgm(0.1, 1.0, [0.5]), "orders"),
    (lambda: A.rdp_sgm(0.1, 1.0, []), "orders"),
    (lambda: A.rdp_sgm(True, 1.0), "q"),
    (lambda: A.rdp_sgm_many([0.1, 0.2], [1.0, 2.0, 3.0]), "same length"),
    (lambda: A.rdp_laplace(0.0), "b"),
    (lambda: A.rdp_laplace(1.0, sensitivity=-1), "sensitivity"),
    (lambda: A.rdp_pure_dp(-1.0), "eps"),
    (lambda: A.rdp_gaussian(-1.0), "sigma"),
    (lambda: A.rdp_to_dp([0.1], [2.0], 0.0), "delta"),
    (lambda: A.rdp_to_dp([0.1], [2.0], 1.0), "delta"),
    (lambda: A.rdp_to_dp([0.1, 0.2], [2.0], 1e-5), "same length"),
    (lambda: A.rdp_to_dp([-0.1], [2.0], 1e-5), "rdp"),
    (lambda: A.rdp_to_dp([NAN], [2.0], 1e-5), "rdp"),
    (lambda: A.rdp_to_dp([0.1], [2.0], 1e-5, conversion="best"), "conversion"),
    (lambda: A.dp_delta([0.1], [2.0], -1.0), "eps"),
    (lambda: A.moments_epsilon([0.1], [0.0], 1e-5), "lambdas"),
    (lambda: A.moments_epsilon([0.1, 0.2], [1.0], 1e-5), "same length"),
    (lambda: A.gaussian_step_epsilon(1.0, 2.0), "delta"),
    (lambda: A.gaussian_step_epsilon(-1.0, 1e-5), "sigma"),
    (lambda: A.gaussian_step_epsilon(1.0, 1e-5, method="exact"), "method"),
    (lambda: A.amplify_by_sampling(1.0, 1e-5, 2.0), "q"),
    (lambda: A.analytic_gaussian_epsilons([-1.0], 1e-5), "sigmas"),
    (lambda: A.analytic_gaussian_epsilons([1.0], 0.0), "deltas"),
    (lambda: A.analytic_gaussian_epsilons([1.0, 2.0], [1e-5, 1e-5, 1e-5]), "deltas"),
    (lambda: A.gaussian_delta(-1.0, 1.0), "sigma"),
    (lambda: A.gaussian_delta(1.0, -1.0), "eps"),
    (lambda: A.zcdp_sampled_gaussian_approx(1.5, 1.0), "q"),
    (lambda: A.log_moments([0.1], [0.5]), "orders"),
    (lambda: A.schedules.cyclic(5.0, 1.0, 10, cycles=0), "cycles"),
    (lambda: A.schedules.staircase(5.0, 1.0, 10, period=0), "period"),
    (lambda: A.schedules.PlateauDecay(sigma0=1.0, patience=0), "patience"),
    (lambda: A.schedules.PlateauDecay(sigma0=-1.0), "sigma0"),
    (lambda: A.amplify_by_sampling(-1.0, 1e-5, 0.5), "eps"),
    (lambda: A.compose_basic(1.0, 1e-5, k=-1), "k"),
    (lambda: A.compose_basic([-1.0], [0.0]), "eps"),
    (lambda: A.compose_advanced(1.0, 1e-5, 10, 0.0), "delta_prime"),
    (lambda: A.compose_advanced(1.0, 1e-5, 2.5, 1e-5), "k"),
    (lambda: A.compose_advanced_heterogeneous([1.0], [1e-5, 1e-5], 1e-5), "same length"),
    (lambda: A.zcdp_to_dp(-1.0, 1e-5), "rho"),
    (lambda: A.zcdp_to_dp(1.0, 1e-5, conversion="x"), "conversion"),
    (lambda: A.zcdp_gaussian(-2.0), "sigma"),
    (lambda: A.calibrate_sigma(1.0, delta=1e-5, q=0.01, steps=0), "steps"),
    (lambda: A.calibrate_sigma(1.0, delta=0.0, q=0.01, steps=10), "delta"),
    (lambda: A.max_steps(1.0, delta=1e-5, q=0.01, sigma=0.0), "sigma"),
    (lambda: A.round_sigmas([1.0], 0.0, "down"), "resolution"),
    (lambda: A.round_sigmas([1.0], 0.1, "sideways"), "direction"),
    (lambda: A.PrivacyLedger(orders=[1.0]), "orders"),
    (lambda: A.PrivacyLedger().step(q=0.1), "sigma"),
    (lambda: A.PrivacyLedger().step(sigma=1.0), "q"),
    (lambda: A.PrivacyLedger().step(q=0.1, sigma=1.0, count=-1), "count"),
    (lambda: A.PrivacyLedger().step(q=0.1, sigma=1.0, count=1.5), "count"),
    (lambda: A.PrivacyLedger().step_schedule(0.1, []), "sigmas"),
    (lambda: A.PrivacyLedger().step_schedule(0.1, [1.0, NAN]), "sigmas"),
    (lambda: A.PrivacyLedger().laplace(b=-1.0), "b"),
    (lambda: A.PrivacyLedger().dp_step(1.0, delta=1.5), "delta"),
    (lambda: A.PrivacyLedger().epsilon(1e-5, method="gdp"), "method"),
    (lambda: A.PrivacyLedger().epsilon(1e-5, gaussian="exact"), "gaussian"),
    (lambda: A.PrivacyLedger().epsilon(0.0), "delta"),
    (lambda: A.PrivacyLedger().delta(-1.0), "eps"),
    (lambda: A.PrivacyLedger().would_exceed(-1.0, 1e-5), "eps_budget"),
    (lambda: A.PrivacyLedger().epsilon_conservative(1e-5, resolution=-1.0), "resolution"),
    (lambda: A.PrivacyLedger().merge("not a ledger"), "other"),
    (lambda: A.PrivacyLedger().record(("q", 1.0)), "event"),
    (lambda: A.prv_epsilon(A.PrivacyLedger(), 1e-5, eps_error=0.0), "eps_error"),
]


@pytest.mark.parametrize("call,name", CASES, ids=[f"{i}-{n}" for i, (_, n) in enumerate(CASES)])
def test_bad_input_is_a_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"(^|\W){name}\W"):
        call()


def test_bad_input_rejected_before_any_work():
    ledger = A.PrivacyLedger()
    with pytest.raises(ValueError):
        ledger.step(q=2.0, sigma=1.0)
    assert ledger.steps == 0 and ledger.events == ()


def test_infinite_eps_is_legal_and_never_nan():
    r = A.rdp_sgm(0.3, 0.0, [2.0, 1.5])
    assert np.all(np.isinf(r))
