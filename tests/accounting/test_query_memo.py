"""One computation per ledger history: epsilon, epsilon_bounds, tightest and the report share
the PLD bracket; any change of the history (a new step, a merged count, a recorded event)
recomputes it."""

import pytest

import accounting.pld as pld_module
from accounting import PrivacyLedger
from accounting.query_memo import QueryMemo, memoised


@pytest.fixture
def pld_calls(monkeypatch):
    calls = []
    real = pld_module.pld_epsilon

    def counting(events, delta, **kw):
        calls.append((len(tuple(events)), delta))
        return real(events, delta, **kw)

    monkeypatch.setattr(pld_module, "pld_epsilon", counting)
    return calls


def test_the_queries_of_one_history_share_one_pld_computation(pld_calls):
    ledger = PrivacyLedger()
    ledger.step(q=0.01, sigma=1.0, count=200)
    eps = ledger.epsilon(1e-5, "pld")
    bounds = ledger.epsilon_bounds(1e-5, method="pld")
    best = ledger.tightest(1e-5)
    report = ledger.epsilon_report(1e-5, prv=False)
    assert len(pld_calls) == 1
    assert eps == bounds.upper == best.candidates["pld"] == report["pld"]
    assert best.eps == ledger.tightest_epsilon(1e-5) <= eps
    ledger.epsilon_bounds(1e-6, method="pld")  # another delta: another computation
    assert len(pld_calls) == 2
    # a returned Tightest is the caller's: mutating it leaves the memo intact
    best.candidates.clear()
    assert ledger.tightest(1e-5).candidates["pld"] == eps


@pytest.mark.parametrize("change", ["same step (merged count)", "new step", "record",
                                    "laplace"])
def test_every_change_of_the_history_recomputes(pld_calls, change):
    from accounting.events import SampledGaussian

    ledger = PrivacyLedger()
    ledger.step(q=0.01, sigma=1.0, count=100)
    before = ledger.epsilon(1e-5, "pld")
    if change == "same step (merged count)":
        ledger.step(q=0.01, sigma=1.0, count=100)  # bumps the last event's count in place
    elif change == "new step":
        ledger.step(q=0.02, sigma=1.0)
    elif change == "record":
        ledger.record(SampledGaussian(0.01, 2.0, 5))
    else:
        ledger.laplace(b=10.0)
    after = ledger.epsilon(1e-5, "pld")
    assert len(pld_calls) == 2 and after > before
    fresh = PrivacyLedger()
    for e in ledger.events:
        fresh.record(e)
    assert fresh.epsilon(1e-5, "pld") == after


def test_copies_do_not_share_answers_and_refusals_are_answers():
    ledger = PrivacyLedger()
    ledger.step(q=0.01, sigma=1.0, count=100)
    eps = ledger.epsilon(1e-5, "pld")
    other = ledger.copy()
    other.step(q=0.01, sigma=0.5, count=100)
    assert other.epsilon(1e-5, "pld") > eps == ledger.epsilon(1e-5, "pld")
    memo = QueryMemo().answers("add-remove", b"", ())
    with pytest.raises(ValueError, match="no"):
        memoised(memo, ("k",), lambda: (_ for _ in ()).throw(ValueError("no")))
    with pytest.raises(ValueError, match="no"):  # stored: raised again, not recomputed
        memoised(memo, ("k",), lambda: 1.0)
