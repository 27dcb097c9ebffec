"""Hypothesis properties of the accountant."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import accounting as A
from accounting.rdp import log_a_fractional, log_a_integer

qs = st.floats(min_value=1e-4, max_value=0.5)
sigmas = st.floats(min_value=0.5, max_value=20.0)
steps = st.integers(min_value=1, max_value=20_000)
deltas = st.floats(min_value=1e-10, max_value=1e-2)
REL = 1e-9  # round-off allowance for monotonicity


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", A.OrderGridWarning)
        yield


def eps(q, sigma, t, delta, method="rdp"):
    ledger = A.PrivacyLedger()
    ledger.step(q=q, sigma=sigma, count=t)
    return ledger.epsilon(delta, method)


@given(qs, sigmas, st.floats(1.01, 3.0), steps, deltas)
def test_eps_non_increasing_in_sigma(q, sigma, factor, t, delta):
    assert eps(q, sigma * factor, t, delta) <= eps(q, sigma, t, delta) * (1 + REL)


@given(qs, st.floats(1.01, 2.0), sigmas, steps, deltas)
def test_eps_non_decreasing_in_q(q, factor, sigma, t, delta):
    assume(q * factor <= 1.0)
    assert eps(q * factor, sigma, t, delta) >= eps(q, sigma, t, delta) * (1 - REL)


@given(qs, sigmas, steps, st.integers(1, 5000), deltas)
def test_eps_non_decreasing_in_steps(q, sigma, t, extra, delta):
    assert eps(q, sigma, t + extra, delta) >= eps(q, sigma, t, delta) * (1 - REL)


@given(qs, sigmas, steps, deltas, st.floats(1.1, 100.0))
def test_eps_non_decreasing_in_one_over_delta(q, sigma, t, delta, shrink):
    assert eps(q, sigma, t, delta / shrink) >= eps(q, sigma, t, delta) * (1 - REL)


@given(st.lists(st.tuples(qs, sigmas, st.integers(1, 1000)), min_size=1, max_size=5))
def test_rdp_of_composed_ledger_is_sum_of_parts(parts):
    ledger = A.PrivacyLedger()
    total = np.zeros(A.DEFAULT_ORDERS.size)
    for q, sigma, t in parts:
        ledger.step(q=q, sigma=sigma, count=t)
        total += t * A.rdp_sgm(q, sigma)
    np.testing.assert_allclose(ledger.rdp(), total, rtol=1e-12)


@given(sigmas, st.floats(1.01, 300.0))
def test_q_one_is_alpha_over_two_sigma_squared(sigma, alpha):
    assert A.rdp_sgm(1.0, sigma, [alpha])[0] == pytest.approx(alpha / (2 * sigma**2),
                                                             rel=1e-14)


@given(qs, sigmas, st.integers(2, 12))
def test_integer_and_fractional_formulas_agree(q, sigma, alpha):
    li = log_a_integer(q, np.array([sigma]), alpha)[0]
    lf = log_a_fractional(q, np.array([sigma]), np.array([float(alpha)]))[0, 0]
    assert lf == pytest.approx(li, rel=1e-8, abs=3e-13)


@given(qs, sigmas, steps, deltas)
def test_improved_at_most_classic_and_moments_equals_classic(q, sigma, t, delta):
    ledger = A.PrivacyLedger()
    ledger.step(q=q, sigma=sigma, count=t)
    imp = ledger.epsilon(delta)
    cla = ledger.epsilon(delta, "rdp-classic")
    mom = ledger.epsilon(delta, "moments")
    assert imp <= cla * (1 + 1e-12)
    assert mom == pytest.approx(cla, rel=1e-12)


@given(st.floats(0.005, 0.1), st.floats(1.0, 6.0), st.integers(1, 2000))
def test_rdp_never_below_prv_lower_bound(q, sigma, t):
    ledger = A.PrivacyLedger()
    ledger.step(q=q, sigma=sigma, count=t)
    try:
        lo, est, up = A.prv_epsilon(ledger.events, 1e-5, eps_error=0.1)
    except A.PRVUnavailable:  # the peer's own limitation (its issue #42): no oracle here
        assume(False)
    assert lo <= est <= up
    assert ledger.epsilon(1e-5) >= lo


@pytest.mark.slow
@given(st.floats(0.3, 8.0), st.floats(1e-3, 0.2), st.integers(10, 5000), deltas)
def test_calibrate_sigma_round_trips(target, q, t, delta):
    sigma = A.calibrate_sigma(target, delta=delta, q=q, steps=t, rtol=1e-5)
    assert eps(q, sigma, t, delta) <= target  # conservative, always
    assert eps(q, sigma * (1 - 1e-4), t, delta) > target * (1 - 1e-6)  # and tight


def _ledgers():
    event = st.one_of(
        st.tuples(st.just("sgm"), st.floats(0, 1, allow_subnormal=False),
                  st.floats(0, 50, allow_subnormal=False), st.integers(0, 10**6)),
        st.tuples(st.just("laplace"), st.floats(1e-3, 1e3), st.integers(0, 100),
                  st.floats(1e-3, 10)),
        st.tuples(st.just("dp"), st.floats(0, 10, allow_subnormal=False),
                  st.floats(0, 1e-6, allow_subnormal=False), st.integers(0, 100)),
        st.tuples(st.just("sched"), st.floats(0, 1),
                  st.lists(st.floats(0.1, 30), min_size=1, max_size=20)),
    )
    return st.lists(event, max_size=6)


def _build(events, orders=None):
    ledger = A.PrivacyLedger(orders=orders)
    for ev in events:
        if ev[0] == "sgm":
            ledger.step(q=ev[1], sigma=ev[2], count=ev[3])
        elif ev[0] == "laplace":
            ledger.laplace(b=ev[1], count=ev[2], sensitivity=ev[3])
        elif ev[0] == "dp":
            ledger.dp_step(ev[1], ev[2], count=ev[3])
        else:
            ledger.step_schedule(ev[1], ev[2])
    return ledger


@pytest.mark.slow  # 30 s per subnormal sigma (5e-324): the fractional RDP series runs
# 2e6 terms without converging (reported to the lead; an accounting fix, not a test one)
@given(_ledgers())
def test_json_round_trip(events):
    ledger = _build(events)
    back = A.PrivacyLedger.from_json(ledger.to_json())
    assert back == ledger
    np.testing.assert_array_equal(back.rdp(), ledger.rdp())


@given(_ledgers(), deltas, st.sampled_from(
    [m for m in A.METHODS if m != "pld"] + [m for m in A.APPROXIMATE_METHODS if m != "prv"]))
def test_no_nan_for_any_valid_input(events, delta, method):
    ledger = _build(events)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            e = ledger.epsilon(delta, method)
        except A.UnsupportedEventError as exc:  # a refusal by name (gaussian-exact: q < 1)
            assert exc.method == method and exc.why
            e = 0.0
        d = ledger.delta(1.0)
    assert not math.isnan(e) and e >= 0
    assert not math.isnan(d) and 0 <= d <= 1
    assert not np.isnan(ledger.rdp()).any()


@given(st.floats(0, 1), st.floats(0, 1e4), st.lists(st.floats(1.0001, 1000), min_size=1,
                                                      max_size=8))
def test_rdp_is_never_nan_or_negative(q, sigma, orders):
    r = A.rdp_sgm(q, sigma, orders)
    assert not np.isnan(r).any() and (r >= 0).all()
