"""The PLD's refinement never refuses a grid the user did not choose: a legal replace-one
ledger at delta 1e-10 gets its certified bracket (it raised "value_interval=7.67e-05 needs
1.2e+05 bins ... use value_interval >= 7.67e-05 or the default" although the default was
used, and tightest fell back on RDP's 3.365)."""

import pytest

from accounting import PrivacyLedger, SampledGaussian, pld_epsilon

dpa_pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
from dp_accounting.privacy_accountant import NeighboringRelation  # noqa: E402


def dp_accounting_replace_one(q: float, sigma: float, steps: int, delta: float,
                              pessimistic: bool) -> float:
    """dp-accounting's REPLACE_ONE PLD of PoissonSampledDpEvent(q, GaussianDpEvent(sigma))."""
    pld = dpa_pld.from_gaussian_mechanism(
        sigma, sampling_prob=q, pessimistic_estimate=pessimistic,
        value_discretization_interval=1e-4,
        neighboring_relation=NeighboringRelation.REPLACE_ONE)
    return pld.self_compose(steps).get_epsilon_for_delta(delta)


def test_replace_one_ledger_at_delta_1e_10_is_answered_by_the_pld():
    q, sigma, steps, delta = 1e-3, 1.0, 100, 1e-10
    ledger = PrivacyLedger(relation="replace-one")
    ledger.step(q=q, sigma=sigma, count=steps)
    lo, _, up = ledger.epsilon_bounds(delta, method="pld")
    optimistic = dp_accounting_replace_one(q, sigma, steps, delta, False)
    pessimistic = dp_accounting_replace_one(q, sigma, steps, delta, True)
    assert 0.38 < optimistic <= pessimistic < 0.41
    assert lo <= pessimistic * (1 + 1e-3) and up >= optimistic * (1 - 1e-3)
    assert up - lo <= 0.02 * up
    eps, method = ledger.tightest_epsilon(delta, with_method=True)
    assert method == "pld" and eps == up


def test_a_grid_the_user_chose_too_fine_is_still_refused_by_name():
    events = [SampledGaussian(1e-3, 1.0, 100, relation="replace-one")]
    with pytest.raises(ValueError, match="value_interval"):
        pld_epsilon(events, 1e-10, value_interval=1e-7)
