"""The PrivacyLedger: recording, methods, budgets, JSON, composition of ledgers."""

import json
import math
import warnings

import numpy as np
import pytest

import accounting as A


@pytest.fixture(autouse=True)
def _quiet_grid():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", A.OrderGridWarning)
        yield


def abadi():
    ledger = A.PrivacyLedger()
    ledger.step(q=0.01, sigma=4.0, count=10_000)
    return ledger


def test_empty_ledger_is_zero():
    ledger = A.PrivacyLedger()
    for m in A.METHODS:
        assert ledger.epsilon(1e-5, m) == 0.0
    assert ledger.delta(0.1) == 0.0 and ledger.steps == 0


def test_every_method_is_finite_and_ordered_as_theory_says():
    report = abadi().epsilon_report(1e-5)
    assert report["rdp"] <= report["rdp-classic"] == pytest.approx(report["moments"])
    assert report["prv-lower"] <= report["prv"] <= report["prv-upper"]
    assert report["rdp"] >= report["prv-lower"]
    # zCDP ignores sampling (conservative) and the composition theorems are far looser
    assert report["zcdp"] > report["advanced"] > report["rdp"]
    assert report["basic"] > report["advanced"]
    assert all(math.isfinite(v) for v in report.values())


def test_opacus_names():
    ledger = A.PrivacyLedger()
    ledger.step(noise_multiplier=4.0, sample_rate=0.01)
    assert ledger.events[0] == A.SampledGaussian(0.01, 4.0, 1)
    assert ledger.get_epsilon(1e-5) == ledger.epsilon(1e-5)
    eps, order = ledger.get_privacy_spent(1e-5)
    assert eps == ledger.epsilon(1e-5) and order in A.DEFAULT_ORDERS
    with pytest.raises(ValueError, match="not both"):
        ledger.step(q=0.1, sample_rate=0.1, sigma=1.0)


def test_consecutive_equal_steps_merge_and_describe():
    ledger = A.PrivacyLedger()
    for _ in range(5):
        ledger.step(q=0.01, sigma=6.0)
    ledger.laplace(b=10.0, count=2)
    ledger.dp_step(0.1, 1e-7, note="claimed only: clip from a private median")
    assert len(ledger.events) == 3 and ledger.steps == 8
    text = ledger.describe()
    assert "Poisson-sampled Gaussian q=0.01 sigma=6 x 5" in text
    assert "Laplace b=10" in text and "claimed only" in text


def test_composed_rdp_is_sum_of_parts_and_merge():
    a, b = A.PrivacyLedger(), A.PrivacyLedger()
    a.step(q=0.01, sigma=2.0, count=100)
    b.step_schedule(0.02, [3.0, 2.5, 2.0])
    b.laplace(b=4.0)
    both = a + b
    np.testing.assert_allclose(both.rdp(), a.rdp() + b.rdp(), rtol=1e-12)
    assert both.steps == a.steps + b.steps
    assert a.steps == 100  # merge does not mutate


def test_schedule_equals_individual_steps():
    sig = A.schedules.linear(5.0, 2.0, 20)
    s1, s2 = A.PrivacyLedger(), A.PrivacyLedger()
    s1.step_schedule(0.05, sig)
    for s in sig:
        s2.step(q=0.05, sigma=float(s))
    np.testing.assert_allclose(s1.rdp(), s2.rdp(), rtol=1e-12)
    assert s1.epsilon(1e-5) == pytest.approx(s2.epsilon(1e-5), rel=1e-12)


def test_would_exceed_does_not_mutate_and_matches_adding_the_step():
    ledger = abadi()
    before_eps, before_steps = ledger.epsilon(1e-5), ledger.steps
    budget = before_eps + 1e-3
    assert not ledger.would_exceed(budget, 1e-5)
    will = ledger.would_exceed(budget, 1e-5, q=0.01, sigma=4.0, count=100)
    assert ledger.steps == before_steps and ledger.epsilon(1e-5) == before_eps
    after = ledger.copy()
    after.step(q=0.01, sigma=4.0, count=100)
    assert will == (after.epsilon(1e-5) > budget) and will
    with pytest.raises(ValueError, match="approximations"):
        ledger.would_exceed(10.0, 1e-5, method="zcdp-approx")


def test_json_round_trip_exact(tmp_path):
    ledger = A.PrivacyLedger(orders="integer")
    ledger.step(q=1 / 3, sigma=0.1 + 0.2, count=7, note="fed-cdp client 3")
    ledger.step_schedule(0.01, A.schedules.exponential(15.0, 4.85, 50))
    ledger.laplace(b=0.7, count=3, sensitivity=2.0)
    ledger.dp_step(0.25, 1e-9, count=2)
    back = A.PrivacyLedger.from_json(ledger.to_json())
    assert back == ledger
    np.testing.assert_array_equal(back.rdp(), ledger.rdp())
    path = tmp_path / "ledger.json"
    ledger.save(path)
    assert A.PrivacyLedger.load(path) == ledger
    data = json.loads(path.read_text())
    assert data["format"] == "leakaudit.ledger/1" and len(data["events"]) == 4


def test_from_events_keeps_the_history_as_given_and_checks_its_relation():
    """Two equal adjacent events stay two (record would merge them); the JSON form
    round-trips such a history; an event of another relation is refused by name."""
    step = A.SampledGaussian(0.01, 2.0, 5)
    ledger = A.PrivacyLedger.from_events([step, step], orders="integer")
    assert ledger.events == (step, step) and ledger.steps == 10
    assert A.PrivacyLedger.from_json(ledger.to_json()) == ledger
    merged = A.PrivacyLedger(orders="integer")
    merged.record(step)
    merged.record(step)
    assert len(merged.events) == 1 and merged.epsilon(1e-5) == ledger.epsilon(1e-5)
    with pytest.raises(ValueError, match="relation"):
        A.PrivacyLedger.from_events([step], relation="replace-one")
    with pytest.raises(ValueError, match="events"):
        A.PrivacyLedger.from_events([object()])


def test_json_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="not valid JSON"):
        A.PrivacyLedger.from_json("{")
    with pytest.raises(ValueError, match="format"):
        A.PrivacyLedger.from_json('{"events": []}')
    bad = '{"format": "leakaudit.ledger/1", "events": [{"type": "mystery"}]}'
    with pytest.raises(ValueError, match="unknown event type 'mystery'"):
        A.PrivacyLedger.from_json(bad)
    with pytest.raises(ValueError, match="does not exist"):
        A.PrivacyLedger.load(tmp_path / "missing.json")


def test_no_noise_is_infinite_with_a_reason():
    ledger = A.PrivacyLedger()
    ledger.step(q=0.01, sigma=0.0, count=3)
    with pytest.warns(A.NoPrivacyWarning, match="sigma=0"):
        assert math.isinf(ledger.epsilon(1e-5))
    assert "not private" in ledger.why_infinite()
    assert ledger.delta(5.0) == 1.0
    assert math.isinf(A.prv_epsilon(ledger.events, 1e-5).upper)


def test_the_reason_counts_every_infinite_release_the_ledger_merged():
    # two identical eps = inf releases are one event of count 2: the reason says 2
    ledger = A.PrivacyLedger()
    ledger.dp_step(math.inf, note="noise scale from the data")
    ledger.dp_step(math.inf, note="noise scale from the data")
    ledger.dp_step(math.inf, count=3)
    assert len(ledger.events) == 2
    assert "5 release(s) recorded with eps=inf" in ledger.why_infinite()


def test_approx_dp_steps_spend_their_delta():
    ledger = A.PrivacyLedger()
    ledger.step(q=0.01, sigma=4.0, count=1000)
    base = ledger.epsilon(1e-5)
    ledger.dp_step(0.1, 2e-6)
    # basic composition with the RDP part at the remaining delta
    expect = A.PrivacyLedger()
    expect.step(q=0.01, sigma=4.0, count=1000)
    assert ledger.epsilon(1e-5) == pytest.approx(expect.epsilon(8e-6) + 0.1)
    assert ledger.epsilon(1e-5) > base
    ledger.dp_step(0.1, 1e-5)
    with pytest.warns(A.NoPrivacyWarning, match="already spend"):
        assert math.isinf(ledger.epsilon(1e-5))


def test_laplace_and_pure_steps():
    ledger = A.PrivacyLedger()
    ledger.laplace(b=2.0, count=10)
    # never worse than basic composition of pure eps: 10 * 0.5
    assert ledger.epsilon(1e-5) <= 5.0
    assert ledger.epsilon(1e-5, "basic") == pytest.approx(5.0)
    pure = A.PrivacyLedger()
    pure.dp_step(0.5, count=10)
    assert pure.epsilon(1e-5, "basic") == pytest.approx(5.0)
    assert pure.epsilon(1e-5) == pytest.approx(5.0)  # order inf: never above basic
    many = A.PrivacyLedger()
    many.dp_step(0.01, count=1000)
    # many small pure steps: RDP via min(eps, alpha eps^2 / 2) beats basic composition (10)
    assert many.epsilon(1e-5) < 0.5 * many.epsilon(1e-5, "basic")


def test_basic_and_advanced_split_delta_soundly():
    ledger = A.PrivacyLedger()
    ledger.step(q=0.01, sigma=2.0, count=100)
    basic = ledger.epsilon(1e-5, "basic")
    # basic: each step gets delta/T after amplification -> per-step delta (delta/T)/q
    e0 = A.gaussian_step_epsilon(2.0, 1e-5 / 100 / 0.01, method="analytic")
    amp = A.amplify_by_sampling(e0, 1e-5 / 100 / 0.01, 0.01)
    assert basic == pytest.approx(100 * amp.eps, rel=1e-9)
    assert 100 * amp.delta == pytest.approx(1e-5)
    with pytest.warns(A.RangeWarning):
        classical = ledger.epsilon(1e-5, "basic", gaussian="classical")
    assert classical >= basic
    adv = ledger.epsilon(1e-5, "advanced")
    half = A.PrivacyLedger()
    half.step(q=0.01, sigma=2.0, count=100)
    # any fixed split is a valid bound; the ledger's is the best of a fixed grid
    e_half = A.gaussian_step_epsilon(2.0, 0.5e-5 / 100 / 0.01, method="analytic")
    a_half = A.amplify_by_sampling(e_half, 0.5e-5 / 100 / 0.01, 0.01)
    fixed = A.compose_advanced(a_half.eps, a_half.delta, 100, 0.5e-5)
    assert fixed.delta == pytest.approx(1e-5)
    assert adv <= fixed.eps + 1e-12


def test_zcdp_methods():
    ledger = abadi()
    rho = 10_000 / (2 * 16.0)
    assert ledger.epsilon(1e-5, "zcdp") == pytest.approx(A.zcdp_to_dp(rho, 1e-5).eps)
    approx = ledger.epsilon(1e-5, "zcdp-approx")
    assert approx < ledger.epsilon(1e-5, "zcdp")


def test_conservative_epsilon_bounds_the_exact_value():
    ledger = A.PrivacyLedger()
    ledger.step_schedule(1 / 120, A.schedules.exponential(15.0, 4.85, 2000))
    exact = ledger.epsilon(1e-5)
    for res in (1e-2, 1e-3):
        fast = ledger.epsilon_conservative(1e-5, resolution=res)
        assert exact <= fast.eps <= exact + fast.max_excess + 1e-12
        assert fast.max_excess < 20 * res * exact


def test_parallel_composition_is_the_worst_client():
    a, b = A.PrivacyLedger(), A.PrivacyLedger()
    a.step(q=0.1, sigma=1.0, count=10)
    b.step(q=0.1, sigma=1.0, count=100)
    assert A.parallel_epsilon([a, b], 1e-5) == b.epsilon(1e-5)
    assert A.parallel_epsilon([], 1e-5) == 0.0


def test_integer_orders_mode():
    ledger = A.PrivacyLedger(orders="integer")
    ledger.step(q=0.01, sigma=4.0, count=10_000)
    np.testing.assert_array_equal(ledger.orders, np.arange(2, 65))
    assert ledger.epsilon(1e-5) >= abadi().epsilon(1e-5) - 1e-12
    with pytest.raises(ValueError, match="orders"):
        A.PrivacyLedger(orders="fractional")
