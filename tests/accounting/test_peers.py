"""Agreement with the peer libraries: Opacus, dp-accounting (integer orders), prv-accountant."""

import warnings

import numpy as np
import pytest
from _extras import require

import accounting as A

opacus_rdp = require("opacus.accountants.analysis.rdp", "opacus")
dp_accounting = require("dp_accounting", "test")

OPACUS_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
# Opacus stops its fractional series at an ABSOLUTE term size exp(-30) ~ 9.4e-14 in A, so its
# own truncation error is up to that much in log A; we sum to exp(-32) and are closer to the
# mpmath truth (see test_rdp). Agreement: relative 1e-8 plus Opacus's truncation error.
OPACUS_ATOL_A = 2 * np.exp(-30.0)


def opacus_rdp_steps(q, sigma, steps, orders):
    return np.asarray(opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps,
                                             orders=orders))


def assert_matches_opacus(ours, theirs, orders, steps=1):
    orders = np.asarray(orders, dtype=float)
    tol = 1e-8 * np.abs(theirs) + steps * OPACUS_ATOL_A / (orders - 1)
    assert np.all(np.abs(ours - theirs) <= tol), np.max(np.abs(ours - theirs) / tol)


@pytest.mark.parametrize("q,sigma", [(0.01, 4.0), (0.01, 1.0), (1 / 120, 6.0), (0.1, 0.8),
                                     (0.5, 2.0), (0.9, 10.0), (0.001, 0.6)])
def test_fixed_cases_match_opacus(q, sigma):
    ours = A.rdp_sgm(q, sigma, OPACUS_ORDERS)
    assert_matches_opacus(ours, opacus_rdp_steps(q, sigma, 1, OPACUS_ORDERS), OPACUS_ORDERS)


def test_random_cases_match_opacus():
    rng = np.random.default_rng(20261121)
    for _ in range(12):
        q = float(10 ** rng.uniform(-4, -0.3))
        sigma = float(rng.uniform(0.5, 12.0))
        orders = sorted(set(np.round(rng.uniform(1.05, 40.0, size=6), 3).tolist()
                            + rng.integers(2, 80, size=4).tolist()))
        ours = A.rdp_sgm(q, sigma, orders)
        assert_matches_opacus(ours, opacus_rdp_steps(q, sigma, 1, orders), orders)


@pytest.mark.slow
def test_schedule_with_new_sigma_every_step_matches_opacus_accountant():
    from opacus.accountants import RDPAccountant

    q = 1 / 120
    sigmas = A.schedules.exponential(15.0, 4.85, 60)
    ledger = A.PrivacyLedger(orders=OPACUS_ORDERS)
    ledger.step_schedule(q, sigmas)
    theirs = np.zeros(len(OPACUS_ORDERS))
    acc = RDPAccountant()
    for s in sigmas:
        theirs += opacus_rdp_steps(q, float(s), 1, OPACUS_ORDERS)
        acc.step(noise_multiplier=float(s), sample_rate=q)
    assert_matches_opacus(ledger.rdp(), theirs, OPACUS_ORDERS, steps=len(sigmas))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps_theirs = acc.get_epsilon(1e-5)
    assert ledger.get_epsilon(1e-5) == pytest.approx(eps_theirs, rel=1e-8)


def test_opacus_style_step_loop_matches_opacus_accountant():
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    ledger = A.PrivacyLedger(orders=OPACUS_ORDERS)
    for s, q in [(1.1, 0.01)] * 50 + [(2.0, 0.02)] * 30 + [(0.9, 0.005)] * 20:
        acc.step(noise_multiplier=s, sample_rate=q)
        ledger.step(noise_multiplier=s, sample_rate=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ledger.get_epsilon(1e-6) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-8)


def _dpacc_rdp(q, sigma, steps, orders):
    acc = dp_accounting.rdp.RdpAccountant(orders=list(orders))
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return np.asarray(acc._rdp)


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 2.5, 50), (0.01, 4.0, 10_000),
                                           (1 / 120, 6.0, 1000), (0.2, 1.1, 3)])
def test_integer_orders_match_dp_accounting(q, sigma, steps):
    orders = list(range(2, 65)) + [128, 256]
    ours = A.rdp_sgm(q, sigma, orders) * steps
    np.testing.assert_allclose(ours, _dpacc_rdp(q, sigma, steps, orders), rtol=1e-10)


def test_dp_accounting_overestimates_fractional_orders():
    """dp-accounting adds |terms| of the alternating series; we sum them signed.

    Its own test file encodes 6.70579741e-4 for alpha=1.5, q=0.01, sigma=2.5, 50 steps
    (rdp_privacy_accountant_test.py, test_compute_rdp_poisson_sampled_gaussian); the
    defining integral gives 6.50070897e-4.
    """
    from test_rdp import rdp_mpmath

    ours = A.rdp_sgm(0.01, 2.5, [1.5])[0] * 50
    theirs = _dpacc_rdp(0.01, 2.5, 50, [1.5])[0]
    truth = rdp_mpmath(0.01, 2.5, 1.5) * 50
    assert ours == pytest.approx(6.50070897e-4, rel=1e-8)
    assert truth <= ours == pytest.approx(truth, rel=1e-8)
    assert theirs == pytest.approx(6.70579741e-4, rel=1e-6)
    assert theirs > 1.03 * truth
    ours11 = A.rdp_sgm(1 / 120, 6.0, [1.1])[0]
    theirs11 = _dpacc_rdp(1 / 120, 6.0, 1, [1.1])[0]
    assert theirs11 > 1.15 * ours11
    assert ours11 == pytest.approx(rdp_mpmath(1 / 120, 6.0, 1.1), rel=1e-8)


def test_dp_accounting_published_integer_values():
    # rdp_privacy_accountant_test.py: orders 5, 50, 100 after 50 steps (q=0.01, sigma=2.5)
    ours = A.rdp_sgm(0.01, 2.5, [5, 50, 100]) * 50
    np.testing.assert_allclose(ours, [2.18075656e-03, 2.38460375e-02, 1.67416308e02],
                               rtol=1e-8)


def test_prv_bounds_bracket_and_rdp_is_never_below_the_lower_bound():
    for q, sigma, steps in [(0.01, 4.0, 1000), (0.05, 1.5, 300), (1.0, 8.0, 10)]:
        ledger = A.PrivacyLedger()
        ledger.step(q=q, sigma=sigma, count=steps)
        lo, est, up = A.prv_epsilon(ledger.events, 1e-5)
        assert lo <= est <= up
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert ledger.epsilon(1e-5) >= lo
            assert ledger.epsilon(1e-5, "rdp-classic") >= lo


@pytest.mark.slow
def test_prv_bucketing_keeps_a_valid_bracket():
    ledger = A.PrivacyLedger()
    ledger.step_schedule(0.05, A.schedules.exponential(3.0, 1.0, 24))
    fine = A.prv_epsilon(ledger.events, 1e-5, max_distinct=1000, eps_error=0.05)
    coarse = A.prv_epsilon(ledger.events, 1e-5, max_distinct=4, eps_error=0.05)
    assert coarse.lower <= fine.estimate <= coarse.upper
    assert ledger.epsilon(1e-5) >= coarse.lower


def test_opacus_gdp_can_under_report_and_we_offer_no_such_number():
    """Opacus's GDP (CLT) accountant falls below the PRV lower bound for q=0.1, T <= 100:
    an approximation that under-reports. None of our sound methods does."""
    from opacus.accountants import GaussianAccountant

    q, sigma, steps, delta = 0.1, 1.0, 50, 1e-5
    gdp = GaussianAccountant()
    for _ in range(steps):
        gdp.step(noise_multiplier=sigma, sample_rate=q)
    ledger = A.PrivacyLedger()
    ledger.step(q=q, sigma=sigma, count=steps)
    lo, _, _ = A.prv_epsilon(ledger.events, delta, eps_error=0.01)
    assert gdp.get_epsilon(delta) < lo  # the peer's approximation under-reports
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in A.accountants.supporting(ledger.events, certified_only=True):
            assert ledger.epsilon(delta, method) >= lo, method
