"""Explicit sampling and neighbouring relations in the accountant."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import accounting as A
from accounting import relations as R


def _eps(ledger: A.PrivacyLedger, delta: float = 1e-5, method: str = "rdp") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ledger.epsilon(delta, method)


def test_constants_and_defaults_keep_old_numbers() -> None:
    assert R.RELATIONS == ("add-remove", "replace-one", "zero-out")
    assert set(R.SAMPLINGS) == {"poisson", "fixed-size", "random-allocation", "shuffle", "all"}
    e = A.SampledGaussian(0.01, 4.0, 3)
    assert (e.sampling, e.relation) == ("poisson", "add-remove")
    a, b = A.PrivacyLedger(), A.PrivacyLedger(relation="add-remove")
    a.step(q=0.01, sigma=2.0, count=100)
    b.step(q=0.01, sigma=2.0, count=100, sampling="poisson")
    assert a == b and a.relation == "add-remove" and _eps(a) == _eps(b)


@pytest.mark.parametrize("sampling,relation,sens", [
    ("fixed-size", "add-remove", 2.0), ("fixed-size", "replace-one", 2.0),
    ("fixed-size", "zero-out", 1.0), ("shuffle", "replace-one", 2.0),
    ("all", "add-remove", 1.0), ("all", "replace-one", 2.0), ("all", "zero-out", 1.0),
])
def test_non_poisson_steps_are_unamplified_gaussians_at_the_relation_sensitivity(
        sampling: str, relation: str, sens: float) -> None:
    ledger = A.PrivacyLedger(relation=relation)
    q = 1.0 if sampling == "all" else 0.01
    ledger.step(q=q, sigma=3.0, count=50, sampling=sampling)
    ref = A.PrivacyLedger()
    ref.step(q=1.0, sigma=3.0 / sens, count=50)
    for method in ("rdp", "pld"):
        assert _eps(ledger, method=method) == pytest.approx(_eps(ref, method=method), rel=1e-12)
    assert A.tightest_epsilon(ledger, 1e-5) == pytest.approx(
        float(A.analytic_gaussian_epsilons(np.array([3.0 / sens / math.sqrt(50)]), 1e-5)[0]))


def test_fixed_size_rule_matches_the_defenses_rule_of_today() -> None:
    # FixedSizeBatchLedger (leakaudit/defenses/base.py): q = 1, sigma / 2, replace-one
    new = A.PrivacyLedger(relation="replace-one")
    new.step(q=0.05, sigma=1.2, count=30, sampling="fixed-size")
    old = A.PrivacyLedger()
    old.step(q=1.0, sigma=0.6, count=30)
    np.testing.assert_allclose(new.rdp(), old.rdp(), rtol=1e-14)


def test_poisson_replace_one_is_bracketed_validly() -> None:
    ar, ro = A.PrivacyLedger(), A.PrivacyLedger(relation="replace-one")
    for ledger in (ar, ro):
        ledger.step(q=0.01, sigma=1.0, count=100)
    noamp = A.PrivacyLedger()
    noamp.step(q=1.0, sigma=0.5, count=100)
    b_ar, b_ro = ar.epsilon_bounds(1e-5, "pld"), ro.epsilon_bounds(1e-5, "pld")
    # both ends are the realisable +-1 pair (tests/accounting/test_replace_one.py): a
    # replacement +C -> -C leaks more than an addition or removal, and amplification is kept
    assert b_ar.upper < b_ro.lower <= b_ro.upper <= _eps(noamp, method="pld")
    assert b_ro.upper - b_ro.lower <= 0.01 * b_ro.upper
    assert b_ro.upper < 1.5 * b_ar.upper
    # the RDP accountant (group privacy 2 of add/remove, or sigma/2 unamplified) stays above
    assert b_ro.lower <= _eps(ro) < _eps(noamp)
    assert A.tightest_epsilon(ro, 1e-5) == pytest.approx(b_ro.upper, rel=1e-12)


def test_zero_out_poisson_equals_add_remove() -> None:
    ar, zo = A.PrivacyLedger(), A.PrivacyLedger(relation="zero-out")
    for ledger in (ar, zo):
        ledger.step(q=0.02, sigma=1.5, count=200)
    assert _eps(zo) == _eps(ar) and _eps(zo, method="pld") == _eps(ar, method="pld")


def test_unaccountable_pairs_are_refused_before_any_work() -> None:
    ledger = A.PrivacyLedger()
    with pytest.raises(ValueError, match="sampling='random-allocation'"):
        ledger.step(q=0.1, sigma=1.0, sampling="random-allocation")
    with pytest.raises(ValueError, match="sampling"):
        ledger.step(q=0.1, sigma=1.0, sampling="stratified")
    with pytest.raises(ValueError, match="q = 1"):
        ledger.step(q=0.5, sigma=1.0, sampling="all")
    with pytest.raises(ValueError, match="sampling='poisson'"):
        A.Laplace(1.0, sampling="poisson")
    with pytest.raises(ValueError, match="relation"):
        A.PrivacyLedger(relation="swap")
    assert ledger.steps == 0


def test_one_ledger_one_relation() -> None:
    ar, ro = A.PrivacyLedger(), A.PrivacyLedger(relation="replace-one")
    ar.step(q=0.01, sigma=1.0)
    ro.step(q=0.01, sigma=1.0)
    with pytest.raises(ValueError, match="'add-remove'.*'replace-one'"):
        ar.merge(ro)
    with pytest.raises(ValueError, match="'add-remove'.*'replace-one'"):
        ar.record(A.Laplace(2.0, relation="replace-one"))
    both = ar.converted("replace-one").merge(ro)
    assert both.relation == "replace-one" and both.steps == 2


def test_conversions_are_the_valid_ones_only() -> None:
    lap = A.Laplace(2.0, sensitivity=1.0)
    lap_ro = R.convert_event(lap, "replace-one")
    assert lap_ro.sensitivity == 2.0 and lap_ro.relation == "replace-one"
    dp = R.convert_event(A.ApproxDP(0.5, 1e-6), "replace-one")
    assert dp.eps == 1.0 and dp.delta == pytest.approx((1 + math.exp(0.5)) * 1e-6)
    with pytest.raises(ValueError, match="no valid conversion"):
        R.convert_event(lap_ro, "add-remove")
    with pytest.raises(ValueError, match="no valid conversion"):
        R.convert_event(lap, "zero-out")
    g = R.convert_event(A.SampledGaussian(0.01, 1.0, relation="replace-one"), "add-remove")
    assert g.relation == "add-remove" and g.sigma == 1.0


def test_reports_and_json_carry_relation_and_sampling() -> None:
    ledger = A.PrivacyLedger(relation="replace-one")
    ledger.step(q=0.02, sigma=2.0, count=10, sampling="fixed-size")
    ledger.step_schedule(0.02, [3.0, 2.0], sampling="shuffle")
    text = ledger.describe()
    assert "replace-one" in text and "fixed-size" in text and "shuffle" in text
    report = ledger.epsilon_report(1e-5, prv=False)
    assert report.relation == "replace-one" and report.samplings == ("fixed-size", "shuffle")
    assert "replace-one" in report.describe()
    back = A.PrivacyLedger.from_json(ledger.to_json())
    assert back == ledger and back.relation == "replace-one"
    old = {"format": "leakaudit.ledger/1", "orders": None,
           "events": [{"type": "sampled_gaussian", "q": 0.01, "sigma": 1.0, "count": 2,
                       "note": ""}]}
    loaded = A.PrivacyLedger.from_dict(old)
    assert loaded.relation == "add-remove" and loaded.events[0].sampling == "poisson"


def test_prv_lower_end_is_omitted_where_the_accounting_is_only_an_upper_bound() -> None:
    pytest.importorskip("prv_accountant")
    ledger = A.PrivacyLedger(relation="replace-one")
    ledger.step(q=0.02, sigma=2.0, count=10, sampling="fixed-size")
    lo, _, up = ledger.epsilon_bounds(1e-5, "prv")
    assert lo == 0.0 and up > 0
    pld = ledger.epsilon_bounds(1e-5, "pld")
    assert pld.lower == 0.0  # fixed-size steps are left out of the lower end


def test_cli_states_the_relation_and_sampling(capsys) -> None:
    from accounting.cli import main

    assert main(["epsilon", "--q", "0.01", "--sigma", "2", "--steps", "100", "--no-prv",
                 "--relation", "replace-one", "--sampling", "fixed-size", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["relation"] == "replace-one" and data["sampling"] == "fixed-size"
    ref = A.PrivacyLedger()
    ref.step(q=1.0, sigma=1.0, count=100)
    assert data["epsilon"]["rdp"] == pytest.approx(_eps(ref))


def test_old_positional_orders_still_work() -> None:
    ledger = A.PrivacyLedger("integer")
    assert ledger.relation == "add-remove" and ledger.orders[0] == 2.0
    assert A.PrivacyLedger(None).relation == "add-remove"
    assert A.PrivacyLedger([2.0, 3.0]).orders.tolist() == [2.0, 3.0]
