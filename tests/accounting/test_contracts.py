"""Property-based contracts over the registry: every registered event type x every
registered accountant x delta in [1e-15, 1e-3] gives a number (or inf where honest) or a
refusal by name, never NaN; upper >= lower; non-increasing in delta; tightest <= every
certified upper end. The suite enumerates the registry: an event type registered without a
strategy here, or without any accountant, fails it."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accounting as A
from accounting.accountants import ACCOUNTANTS, CERTIFIED, certified, supporting
from accounting.events import Event
from accounting.registry import UnsupportedEventError, event_types, register_event

#: extremes included: sigma from 0.01 (almost no noise) to 1e4, q from 1e-9 to 1
SIGMA = st.one_of(st.floats(0.3, 50.0), st.sampled_from([0.01, 0.05, 0.1, 1e3, 1e4]))
Q = st.one_of(st.floats(1e-5, 1.0), st.sampled_from([1e-9, 1e-7, 0.999999, 1.0]))

#: one strategy per registered event type (a new type must add one: see the test below)
STRATEGIES = {
    "sampled_gaussian": st.builds(A.SampledGaussian, q=Q, sigma=SIGMA,
                                  count=st.integers(1, 10**6)),
    "gaussian_schedule": st.builds(lambda q, s: A.GaussianSchedule(q, np.array(s)), Q,
                                   st.lists(SIGMA, min_size=1, max_size=20)),
    "laplace": st.builds(A.Laplace, b=st.one_of(st.floats(0.05, 1e6),
                                                st.sampled_from([1e-3, 1e9, 1e12])),
                         count=st.integers(1, 1000)),
    "approx_dp": st.builds(A.ApproxDP, eps=st.one_of(st.floats(0.0, 5.0), st.just(30.0)),
                           delta=st.one_of(st.floats(0.0, 1e-9), st.just(1e-16)),
                           count=st.integers(1, 100)),
    "random_allocation": st.builds(A.RandomAllocation, sigma=st.floats(0.7, 5.0),
                                   steps=st.integers(1, 200), selected=st.just(1),
                                   epochs=st.integers(1, 3)),
}
#: one fixed instance per registered event type
SAMPLES = {
    "sampled_gaussian": A.SampledGaussian(0.01, 1.0, 100),
    "gaussian_schedule": A.GaussianSchedule(0.01, np.array([1.0, 2.0])),
    "laplace": A.Laplace(2.0),
    "approx_dp": A.ApproxDP(1.0, 1e-9),
    "random_allocation": A.RandomAllocation(1.0, 10),
}
STRATEGIES["sampled_without_replacement"] = st.builds(
    lambda s, b, extra, c: A.SampledWithoutReplacement(s, b, b + extra, c),
    SIGMA, st.integers(1, 100), st.integers(0, 10_000), st.integers(1, 1000))
SAMPLES["sampled_without_replacement"] = A.SampledWithoutReplacement(2.0, 10, 1000, 100)
#: a candidate run of a search: DP-SGD-like steps or pure releases
_RUN = st.lists(st.one_of(
    st.builds(A.SampledGaussian, q=st.floats(1e-3, 1.0), sigma=st.floats(0.5, 20.0),
              count=st.integers(1, 1000)),
    st.builds(A.Laplace, b=st.floats(0.5, 100.0))), min_size=1, max_size=2)
STRATEGIES["hyperparameter_search"] = st.builds(
    A.HyperparameterSearch, st.lists(_RUN, min_size=1, max_size=3),
    rule=st.sampled_from(A.SELECTION_RULES), mean=st.floats(1.0, 100.0),
    shape=st.floats(-0.9, 3.0))
SAMPLES["hyperparameter_search"] = A.HyperparameterSearch(
    [[A.SampledGaussian(0.01, 1.0, 100)], [A.SampledGaussian(0.01, 2.0, 100)]],
    rule="geometric", mean=10)
STRATEGIES["same_batch"] = st.builds(
    lambda q, sigmas, c: A.SameBatch([A.SampledGaussian(q, s, c) for s in sigmas]),
    Q, st.lists(SIGMA, min_size=2, max_size=3), st.integers(1, 1000))
SAMPLES["same_batch"] = A.SameBatch([A.SampledGaussian(0.01, 1.0, 100),
                                     A.SampledGaussian(0.01, 2.0, 100)])
FAST = ("rdp", "rdp-classic", "moments", "zcdp", "basic", "advanced", "gaussian-exact",
        "zcdp-approx")
DELTAS = st.floats(1e-15, 1e-3)
ANY_EVENT = st.one_of(*STRATEGIES.values())
QUIET = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_every_registered_event_type_has_a_strategy_and_an_accountant():
    # types defined by a script (the docs' example runs as __main__ in tests/project) are
    # the user's; every type of a module (the package's, a test's) must be here
    for cls in (c for c in event_types() if c.__module__ != "__main__"):
        assert cls.kind in STRATEGIES and cls.kind in SAMPLES, (
            f"{cls.__name__}: add a strategy to the contract suite")
        sample = SAMPLES[cls.kind]
        assert supporting([sample], certified_only=True), f"{cls.__name__}: no accountant"


def _eps(method: str, events: list, delta: float) -> float | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return A.accountants.epsilon(events, delta, method, warn=False).eps
        except UnsupportedEventError as exc:
            assert exc.method == method and exc.why
            return None


@QUIET
@given(events=st.lists(ANY_EVENT, min_size=1, max_size=3), d1=DELTAS, d2=DELTAS)
def test_every_fast_method_answers_or_refuses_by_name_and_is_monotone_in_delta(events, d1, d2):
    lo_d, hi_d = sorted((d1, d2))
    for method in FAST:
        a, b = _eps(method, events, lo_d), _eps(method, events, hi_d)
        if a is None:
            assert b is None and not ACCOUNTANTS[method].supports(
                next(e for e in events if not ACCOUNTANTS[method].supports(e)))
            continue
        assert not math.isnan(a) and a >= 0.0 and b is not None
        assert b <= a * (1 + 1e-9) + 1e-12, (method, a, b)  # eps non-increasing in delta


def _pld_contract(event: Event, delta: float) -> None:
    events = [event]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            lo, est, up = ACCOUNTANTS["pld"].bounds(events, delta)
        except UnsupportedEventError as exc:
            assert exc.method == "pld"
            return
    assert not any(map(math.isnan, (lo, est, up))) and 0.0 <= lo <= est <= up
    for method in certified():
        other = _eps(method, events, delta)
        if other is not None:
            assert lo <= other * (1 + 1e-6) + 1e-9, (method, lo, other)  # lower <= any upper
    best = A.accountants.tightest(events, delta)
    assert best.method in certified() and best.eps <= up and best.eps >= lo * (1 - 1e-6) - 1e-9


PLD_DELTAS = st.sampled_from([1e-3, 1e-6, 1e-9, 1e-12, 1e-15])


@pytest.mark.slow
@settings(QUIET, max_examples=6)
@given(event=ANY_EVENT, delta=PLD_DELTAS)
def test_pld_bracket_is_ordered_and_below_every_certified_upper(event, delta):
    _pld_contract(event, delta)


@pytest.mark.sweep
@settings(QUIET, max_examples=300)
@given(event=ANY_EVENT, delta=PLD_DELTAS)
def test_pld_bracket_contract_sweep(event, delta):
    _pld_contract(event, delta)


@QUIET
@given(q=st.floats(1e-4, 1.0), s1=SIGMA, s2=SIGMA, n=st.integers(1, 10_000))
def test_rdp_is_monotone_in_sigma_q_and_steps(q, s1, s2, n):
    lo_s, hi_s = sorted((s1, s2))

    def eps(q_, s_, n_):
        return A.accountants.epsilon([A.SampledGaussian(q_, s_, n_)], 1e-6, "rdp").eps

    assert eps(q, hi_s, n) <= eps(q, lo_s, n) * (1 + 1e-9)
    assert eps(q, lo_s, n) <= eps(q, lo_s, n + 1) * (1 + 1e-9) + 1e-12
    assert eps(q / 2, lo_s, n) <= eps(q, lo_s, n) * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("sigma", [0.2, 1.0, 5.0])
def test_certified_uppers_are_above_the_exact_gaussian(sigma):
    exact = float(A.analytic_gaussian_epsilons(np.array([sigma]), 1e-5)[0])
    events = [A.SampledGaussian(1.0, sigma, 1)]
    for method in certified():
        eps = _eps(method, events, 1e-5)
        assert eps is None or eps >= exact * (1 - 1e-9)  # None: refused by name
    assert A.accountants.tightest(events, 1e-5).eps == pytest.approx(exact, rel=1e-9)


@pytest.mark.slow
def test_allocation_never_prints_zero_and_tightest_names_its_method():
    """The issue's case: the PLD gave (0, 0, 0) at delta 1e-7 and 1e-9 (its RDP fallback did
    not know random allocation)."""
    ledger = A.PrivacyLedger()
    ledger.allocate(sigma=1.0, steps=100, selected=1, epochs=10)
    for delta in (1e-5, 1e-7, 1e-9):
        lo, _, up = ledger.epsilon_bounds(delta, method="pld")
        eps, method = ledger.tightest_epsilon(delta, with_method=True)
        assert 1.0 < lo <= up and 1.0 < eps <= up and method in CERTIFIED
    assert ledger.tightest_epsilon(1e-5) == ledger.tightest(1e-5).eps  # float call kept


def test_tightest_is_monotone_in_steps_at_tiny_sigma():
    """q 0.01, sigma 1e-6: 5.5e11 for one step and 2,126 for ten before (the PLD's loss
    overflowed past 709 and put the mass above the grid into its last bin)."""
    out = []
    for n in (1, 10):
        ledger = A.PrivacyLedger()
        ledger.step(q=0.01, sigma=1e-6, count=n)
        out.append(ledger.tightest_epsilon(1e-5))
    assert 1e11 < out[0] <= out[1]


@dataclass(frozen=True)
class _Unwired(Event):
    """An event type registered for JSON but wired into no accountant."""

    x: float = 1.0
    note: str = ""
    sampling: str = "all"
    relation: str = "add-remove"
    kind: ClassVar[str] = "contract_test_unwired"

    @property
    def steps(self) -> int:
        return 1

    def describe(self) -> str:
        return f"unwired x={self.x}"


def test_an_unwired_event_type_is_refused_by_name_and_fails_the_suite():
    register_event(_Unwired)
    try:
        ledger = A.PrivacyLedger()
        ledger.record(_Unwired())
        for method in ACCOUNTANTS:
            with pytest.raises(UnsupportedEventError, match=method):
                ledger.epsilon(1e-5, method)
        with pytest.raises(UnsupportedEventError, match="no certified accountant"):
            ledger.tightest_epsilon(1e-5)
        with pytest.raises(AssertionError, match="add a strategy"):
            test_every_registered_event_type_has_a_strategy_and_an_accountant()
    finally:
        from accounting import registry

        registry._TYPES.pop(_Unwired.kind, None)
        registry._RULES.pop(_Unwired, None)


@pytest.mark.parametrize("call", [
    lambda: A.PrivacyLedger().step(q=0.5, sigma=1.0, count=10**20),
    lambda: A.PrivacyLedger(orders=[1e10]),
    lambda: A.PrivacyLedger(relation="add-remove").step(q=1.0, sigma=1.0, sampling="shuffle"),
])
def test_absurd_inputs_are_refused_by_name(call):
    with pytest.raises(ValueError, match="count|orders|shuffle"):
        call()


def test_robustness_cases_answer_within_seconds():
    lap = A.PrivacyLedger()
    lap.laplace(b=1e12)
    assert lap.tightest_epsilon(1e-5) >= 0.0
    b = A.shuffle_epsilon_bounds(0.01, 10, 1, 1e-5)
    assert b.lower <= b.upper and math.isfinite(b.upper)
    many = A.PrivacyLedger()
    for _ in range(10_000):
        many.laplace(b=2.0)
    assert len(many.events) == 1 and many.epsilon(1e-5) > 0
    with pytest.raises(ValueError, match="value_interval"):
        many.epsilon_bounds(1e-5, "pld", value_interval=1e-12)


def test_allocation_converts_to_replace_one_without_amplification():
    """The docs and the allocation's own message recommend ledger.converted('replace-one');
    it raised. Under replace-one the new record takes the old one's slots: k steps per epoch
    move by 2C each, so the conversion is k x epochs Gaussian steps at sigma / 2."""
    ledger = A.PrivacyLedger()
    ledger.allocate(sigma=2.0, steps=50, selected=1, epochs=3)
    out = ledger.converted("replace-one")
    (event,) = out.events
    assert (event.q, event.sigma, event.count, event.relation) == (1.0, 2.0, 3, "replace-one")
    exact = float(A.analytic_gaussian_epsilons(np.array([1.0 / math.sqrt(3.0)]), 1e-5)[0])
    assert out.tightest_epsilon(1e-5) == pytest.approx(exact, rel=1e-9)
    assert out.tightest_epsilon(1e-5) >= ledger.tightest_epsilon(1e-5)


@pytest.mark.slow
def test_user_fractional_orders_are_never_below_a_50_digit_evaluation():
    """22 of 120 random (q, sigma, fractional order) sat up to 5.6e-13 relative below the
    exact value; every fractional value is now rounded up by 1e-10 relative."""
    from test_rdp import rdp_mpmath

    rng = np.random.default_rng(0)
    for _ in range(20):
        q, s = float(10 ** rng.uniform(-4, -0.1)), float(rng.uniform(0.5, 10))
        a = float(rng.uniform(1.01, 60)) + 1e-3
        ours = float(A.rdp_sgm_many(np.array([q]), np.array([s]), np.array([a]))[0, 0])
        exact = rdp_mpmath(q, s, a, dps=50)
        assert exact <= ours <= exact * (1 + 1e-9) + 1e-300


def test_repeated_releases_are_one_event_and_the_fast_path_still_validates():
    ledger = A.PrivacyLedger()
    for _ in range(1000):
        ledger.step(q=0.01, sigma=2.0)
        ledger.laplace(b=2.0)  # alternating: no merge across types
    assert len(ledger.events) == 2000
    once = A.PrivacyLedger()
    for _ in range(1000):
        once.laplace(b=2.0)
    assert len(once.events) == 1 and once.events[0].count == 1000
    with pytest.raises(ValueError, match="b"):
        once.laplace(b=-2.0)
    with pytest.raises(ValueError, match="count"):
        once.laplace(b=2.0, count=-1)
    with pytest.raises(ValueError, match="count"):
        once.laplace(b=2.0, count=2**53)  # the summed count would pass 2**53


def test_a_huge_order_never_spreads_nan_to_the_others():
    """Orders [2.5, 1e5]: the order-1e5 sum overflowed to NaN and the monotone envelope
    copied it to 2.5, so eps was inf; the 1e5 value is now +inf and 2.5 still counts."""
    ledger = A.PrivacyLedger(orders=[2.5, 1e5])
    ledger.step(q=0.01, sigma=1.0, count=1000)
    alone = A.PrivacyLedger(orders=[2.5])
    alone.step(q=0.01, sigma=1.0, count=1000)
    assert math.isfinite(ledger.epsilon(1e-5))
    assert ledger.epsilon(1e-5) == pytest.approx(alone.epsilon(1e-5), rel=1e-12)


def test_allocation_at_tiny_sigma_is_answered_or_refused_by_name():
    """sigma 0.05 crashed inside the allocation PLD: now its bracket or a refusal by name."""
    ledger = A.PrivacyLedger()
    ledger.allocate(sigma=0.05, steps=100)
    try:
        lo, _, up = ledger.epsilon_bounds(1e-5, "pld")
    except UnsupportedEventError as exc:
        assert exc.method == "pld"
    else:
        assert 0.0 <= lo <= up
    eps, method = ledger.tightest_epsilon(1e-5, with_method=True)
    assert math.isfinite(eps) and eps > 100 and method in CERTIFIED


@QUIET

def _assert_same_eps(first: list, second: list, delta: float) -> None:
    """Every fast method gives the same eps (or the same refusal) for both histories."""
    for method in FAST:
        a, b = _eps(method, first, delta), _eps(method, second, delta)
        if a is None or b is None:
            assert a is None and b is None, (method, a, b)
            continue
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), (method, a, b)

@given(events=st.lists(ANY_EVENT, min_size=2, max_size=4), delta=DELTAS, data=st.data())
def test_every_fast_method_is_invariant_under_reordering_and_splitting(events, delta, data):
    """Sequential composition commutes: the history in any order, and with a release
    recorded twice (interleaved with the others) instead of once at twice the count, gives
    the same eps (equal releases anywhere in a history are merged into one part, which must
    not change any value)."""
    order = data.draw(st.permutations(range(len(events))))
    shuffled = [events[i] for i in order]
    _assert_same_eps(events, shuffled, delta)
    lap = A.Laplace(b=data.draw(st.floats(0.1, 100.0)), count=2)
    once = [*events, lap]
    twice = [A.Laplace(b=lap.b), *events, A.Laplace(b=lap.b)]
    _assert_same_eps(once, twice, delta)


# ---------------------------------------------------------------- hyperparameter searches
_COVERED = [r for r in A.SELECTION_RULES if r not in A.tuning.NOT_COVERED]


@settings(QUIET, max_examples=30)
@given(runs=st.lists(_RUN, min_size=1, max_size=4), rule=st.sampled_from(_COVERED),
       mean=st.floats(1.0, 50.0), more=st.floats(1.0, 4.0), shape=st.floats(-0.9, 3.0),
       delta=DELTAS)
def test_a_search_never_costs_less_than_its_best_run_and_grows_with_runs(runs, rule, mean,
                                                                          more, shape, delta):
    """Every fast method that accounts the search: never below the eps of any single
    candidate run (same method, or the run's tightest for the search's tightest); adding a
    candidate or raising the expected number of runs never lowers it."""
    def search(cands, m):
        return [A.HyperparameterSearch(cands, rule=rule, mean=m, shape=shape)]

    base, wider, longer = search(runs, mean), search(runs + runs[:1], mean), search(
        runs, mean * more)
    for method in FAST:
        got = _eps(method, base, delta)
        if got is None:
            continue
        for run in runs:
            alone = _eps(method, list(run), delta)
            assert alone is None or got >= alone * (1 - 1e-9) - 1e-12, (method, got, alone)
        for bigger in (wider, longer):
            assert _eps(method, bigger, delta) >= got * (1 - 1e-9) - 1e-12, method
    if rule != "fixed":  # (fixed: the PLD's composition, slow; covered by test_tuning)
        best = A.accountants.tightest(base, delta).eps
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for run in runs:
                alone = min(_eps(m, list(run), delta) for m in ("rdp", "basic"))
                assert best >= alone * (1 - 1e-9) - 1e-12


@pytest.mark.parametrize("rule", [r for r in A.SELECTION_RULES if r in A.tuning.NOT_COVERED])
def test_a_selection_rule_not_covered_is_refused_by_name_everywhere(rule):
    event = A.HyperparameterSearch([[A.SampledGaussian(0.01, 1.0, 10)]], rule=rule, mean=5)
    for method in ACCOUNTANTS:
        with pytest.raises(UnsupportedEventError) as info:
            A.accountants.epsilon([event], 1e-5, method)
        assert info.value.method == method and (rule in info.value.why
                                                or "closed form" in info.value.why)
