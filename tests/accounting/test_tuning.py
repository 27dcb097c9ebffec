"""Hyperparameter tuning as an accounted event (Papernot & Steinke 2022; Liu & Talwar 2019)
and the same-sample contract."""

from __future__ import annotations

import json
import math
import warnings

import mpmath as mp
import numpy as np
import pytest

import accounting as A
from accounting.accountants import ACCOUNTANTS, certified, epsilon, tightest
from accounting.registry import UnsupportedEventError
from accounting.tuning import selection_rdp

ORDERS = A.DEFAULT_ORDERS
DELTA = 1e-5


def _gaussian_search(sigma: float, rule: str, mean: float, shape: float = 1.0):
    """One unsampled Gaussian candidate: its RDP is exactly lam / (2 sigma^2)."""
    return A.HyperparameterSearch([[A.SampledGaussian(1.0, sigma, 1)]], rule=rule,
                                  mean=mean, shape=shape)


def _tnb_paper(sigma: float, mean: float, eta: float) -> list:
    """Papernot & Steinke 2022, Thm 2, computed here in 40-digit arithmetic: gamma solved
    from E[K] (their Def. 1), lam_hat over the same grid, then the smallest value at or above
    each order."""
    mp.mp.dps = 40
    sigma, mean, eta = mp.mpf(sigma), mp.mpf(mean), mp.mpf(eta)

    def expected(g):
        if eta == 0:
            return (1 / g - 1) / mp.log(1 / g)
        return eta * (1 - g) / (g * (1 - g**eta))

    gamma = mp.findroot(lambda g: expected(g) - mean, (mp.mpf("1e-12"), mp.mpf(1) - mp.mpf(
        "1e-12")), solver="anderson")
    eps = [mp.mpf(a) / (2 * sigma**2) for a in ORDERS]
    c = (1 + eta) * min((1 - 1 / mp.mpf(a)) * e + mp.log(1 / gamma) / mp.mpf(a)
                        for a, e in zip(ORDERS, eps))
    raw = [e + c + mp.log(mean) / (mp.mpf(a) - 1) for a, e in zip(ORDERS, eps)]
    return [float(min(raw[i:])) for i in range(len(raw))]


@pytest.mark.parametrize("sigma,mean,eta", [(2.0, 10.0, 1.0), (5.0, 40.0, 0.0),
                                            (1.0, 3.0, 0.5)])
def test_truncated_negative_binomial_is_the_published_formula(sigma, mean, eta):
    rule = {1.0: "geometric", 0.0: "logarithmic"}.get(eta, "negative-binomial")
    ours = selection_rdp(_gaussian_search(sigma, rule, mean, eta), ORDERS)
    assert ours == pytest.approx(_tnb_paper(sigma, mean, eta), rel=1e-9)


def _poisson_paper(sigma: float, mean: float, delta_hat) -> list:
    """Papernot & Steinke 2022, Thm 6 with a given (eps_hat, delta_hat(eps_hat)) guarantee of
    the base mechanism, eps_hat = log(1 + 1/(lam - 1)), in 40-digit arithmetic."""
    mp.mp.dps = 40
    out = []
    for a in ORDERS:
        a = mp.mpf(a)
        out.append(a / (2 * mp.mpf(sigma) ** 2) + mean * delta_hat(mp.log(1 + 1 / (a - 1)))
                   + mp.log(mean) / (a - 1))
    return [float(min(out[i:])) for i in range(len(out))]


def _exact_gaussian_delta(sigma: float):
    """The exact delta(eps) of the Gaussian mechanism (Balle & Wang 2018, Thm 8)."""
    s = mp.mpf(sigma)
    return lambda e: mp.ncdf(-e * s + 1 / (2 * s)) - mp.exp(e) * mp.ncdf(-e * s - 1 / (2 * s))


def _classic_delta(sigma: float):
    """delta from the RDP curve by the classic conversion (Mironov 2017, Prop. 3)."""
    return lambda e: min(mp.mpf(1), min(mp.exp((mp.mpf(a) - 1) * (mp.mpf(a) / (
        2 * mp.mpf(sigma) ** 2) - e)) for a in ORDERS))


@pytest.mark.parametrize("sigma,mean", [(2.0, 10.0), (4.0, 40.0), (1.0, 2.0)])
def test_poisson_is_between_the_published_formula_with_exact_and_classic_delta(sigma, mean):
    """Thm 6 holds for any valid delta_hat: ours (delta_hat from the improved conversion of
    the RDP curve) lies between the theorem with the exact Gaussian delta (smaller) and with
    the classic conversion (larger)."""
    ours = np.asarray(selection_rdp(_gaussian_search(sigma, "poisson", mean), ORDERS))
    low = np.array(_poisson_paper(sigma, mean, _exact_gaussian_delta(sigma)))
    high = np.array(_poisson_paper(sigma, mean, _classic_delta(sigma)))
    assert np.all(ours >= low * (1 - 1e-9)) and np.all(ours <= high * (1 + 1e-9))
    assert np.any(ours < high * (1 - 1e-6))  # the improved conversion is used


@pytest.mark.parametrize("rule,shape", [("geometric", 1.0), ("logarithmic", 0.0),
                                        ("negative-binomial", 0.5), ("poisson", math.inf)])
def test_dp_accounting_repeat_and_select_agrees(rule, shape):
    """Google's dp-accounting implements the same theorems (RepeatAndSelectDpEvent)."""
    from dp_accounting import dp_event as de
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    search = A.HyperparameterSearch([[A.SampledGaussian(0.01, 1.1, 1000)]], rule=rule,
                                    mean=12.0, shape=0.5)
    acc = rdp.RdpAccountant(list(ORDERS))
    acc.compose(de.RepeatAndSelectDpEvent(de.SelfComposedDpEvent(
        de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.1)), 1000), 12.0, shape))
    ours, theirs = epsilon([search], DELTA).eps, acc.get_epsilon(DELTA)
    assert ours == pytest.approx(theirs, rel=1e-4) and ours <= theirs * (1 + 1e-9)
    if rule != "poisson":  # same curve (Poisson: their delta_hat conversion differs)
        assert selection_rdp(search, ORDERS) == pytest.approx(acc._rdp, rel=1e-5)


def _dpsgd_runs(k: int, seed: int = 0) -> list:
    """k DP-SGD configurations (n = 60,000): batch 64..1024, sigma 0.8..2, 2..20 epochs."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(k):
        batch, sigma = int(rng.choice([64, 128, 256, 512, 1024])), float(rng.uniform(0.8, 2))
        q = batch / 60_000
        ledger = A.PrivacyLedger()
        ledger.step(q=q, sigma=sigma, count=int(rng.integers(2, 21) / q))
        runs.append(ledger)
    return runs


@pytest.mark.parametrize("k", [10, pytest.param(40, marks=pytest.mark.slow)])
def test_a_random_search_over_dpsgd_configurations_gets_a_certified_eps(k):
    runs = _dpsgd_runs(k)
    alone = [r.tightest(DELTA).eps for r in runs]
    out = {}
    for rule in ("geometric", "poisson"):
        ledger = A.PrivacyLedger()
        ledger.record(A.HyperparameterSearch(runs, rule=rule, mean=k))
        best = ledger.tightest(DELTA)
        assert best.method == "rdp" and best.eps == ledger.epsilon(DELTA)
        assert math.isfinite(best.eps) and best.eps >= max(alone)
        assert "refused" in best.candidates["pld"]  # no PLD of a random count: by name
        out[rule] = best.eps
    fixed = A.PrivacyLedger()
    fixed.record(A.HyperparameterSearch(runs, rule="fixed"))
    composed = A.PrivacyLedger()
    for r in runs:
        composed = composed.merge(r)
    assert fixed.epsilon(DELTA) == composed.epsilon(DELTA)
    assert fixed.tightest(DELTA).eps == pytest.approx(composed.tightest(DELTA).eps, rel=1e-12)
    assert fixed.tightest(DELTA).method == "pld" and fixed.tightest(DELTA).eps >= max(alone)


def test_more_candidates_and_more_runs_never_cost_less():
    runs = _dpsgd_runs(40)
    ten = A.HyperparameterSearch(runs[:10], rule="geometric", mean=10)
    forty = A.HyperparameterSearch(runs, rule="geometric", mean=10)
    more = A.HyperparameterSearch(runs[:10], rule="geometric", mean=40)
    e = [epsilon([s], DELTA).eps for s in (ten, forty, more)]
    assert e[0] <= e[1] and e[0] < e[2]


def test_liu_talwar_closed_form_for_pure_candidates_and_tightest_names_it():
    search = A.HyperparameterSearch([[A.Laplace(2.0)], [A.Laplace(2.0, count=2)]],
                                    rule="geometric", mean=10)
    best = tightest([search], DELTA)
    assert best.method == "liu-talwar" and best.eps == pytest.approx(3 * 1.0)  # 3 max eps
    assert best.candidates["rdp"] > best.eps
    nb = A.HyperparameterSearch([[A.Laplace(1.0)]], rule="negative-binomial", mean=5, shape=0.5)
    assert epsilon([nb], DELTA, "liu-talwar").eps == pytest.approx(2.5)
    gauss = A.HyperparameterSearch([[A.SampledGaussian(0.1, 2.0)]], rule="geometric", mean=5)
    with pytest.raises(UnsupportedEventError, match="not pure"):
        epsilon([gauss], DELTA, "liu-talwar")
    assert "liu-talwar" in certified()


def test_rules_not_covered_are_refused_by_name_by_every_accountant():
    adaptive = A.HyperparameterSearch([[A.Laplace(1.0)]], rule="adaptive", mean=5)
    for method in ACCOUNTANTS:
        with pytest.raises(UnsupportedEventError, match="adaptive|closed form"):
            epsilon([adaptive], DELTA, method)
    approx = A.HyperparameterSearch([[A.ApproxDP(1.0, 1e-9)]], rule="poisson", mean=5)
    with pytest.raises(UnsupportedEventError, match="no RDP curve"):
        epsilon([approx], DELTA, "rdp")
    with pytest.raises(ValueError, match="mean"):
        A.HyperparameterSearch([[A.Laplace(1.0)]], rule="poisson", mean=0.5)
    with pytest.raises(ValueError, match="rule"):
        A.HyperparameterSearch([[A.Laplace(1.0)]], rule="bayesian")
    with pytest.raises(ValueError, match="shape"):
        A.HyperparameterSearch([[A.Laplace(1.0)]], rule="negative-binomial", mean=3, shape=-1)
    with pytest.raises(ValueError, match="candidates"):
        A.HyperparameterSearch([], rule="fixed")


def test_search_round_trips_through_json_and_converts_relation():
    ledger = A.PrivacyLedger()
    ledger.record(A.HyperparameterSearch(_dpsgd_runs(3), rule="negative-binomial", mean=4,
                                         shape=2.0))
    again = A.PrivacyLedger.from_json(ledger.to_json())
    assert again == ledger and again.epsilon(DELTA) == ledger.epsilon(DELTA)
    json.loads(ledger.to_json())
    replaced = ledger.converted("replace-one")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert replaced.epsilon(DELTA) >= ledger.epsilon(DELTA)


def test_one_call_reports_the_procedure_beside_the_chosen_run():
    from accounting.procedure import procedure_epsilon

    runs = _dpsgd_runs(10)
    rep = procedure_epsilon(runs, "geometric", delta=DELTA, chosen=3)
    assert rep.chosen == 3 and rep.chosen_eps == runs[3].tightest(DELTA).eps
    assert rep.tightest == rep.rdp > max(rep.runs_eps) and rep.search.mean == 10
    assert "procedure (what is published)" in rep.describe()
    worst = procedure_epsilon([r.events for r in runs], "poisson", delta=DELTA, mean=5)
    assert worst.chosen_eps == max(worst.runs_eps)  # default: the most expensive run
    with pytest.raises(ValueError, match="chosen"):
        procedure_epsilon(runs, delta=DELTA, chosen=10)
    with pytest.raises(ValueError, match="runs"):
        procedure_epsilon([], delta=DELTA)


# ---------------------------------------------------------------- the same-sample contract
def test_two_releases_over_one_batch_cannot_be_composed_as_independent():
    """A gradient (sigma 1) and a second query (sigma 2) of one Poisson batch: one sampled
    Gaussian of multiplier (1 + 1/4)^(-1/2); the independent composition understates it."""
    grad, other = A.SampledGaussian(0.01, 1.0, 500), A.SampledGaussian(0.01, 2.0, 500)
    one = A.SameBatch([grad, other])
    joint = A.SampledGaussian(0.01, (1 + 0.25) ** -0.5, 500)
    for method in ("rdp", "pld", "zcdp"):
        assert epsilon([one], DELTA, method).eps == pytest.approx(
            epsilon([joint], DELTA, method).eps, rel=1e-9)
    independent = epsilon([grad, other], DELTA).eps
    assert epsilon([one], DELTA).eps > 1.2 * independent


def test_releases_over_one_batch_without_a_composite_are_refused_by_name():
    mixed = A.SameBatch([A.SampledGaussian(0.01, 1.0), A.Laplace(1.0)])
    rates = A.SameBatch([A.SampledGaussian(0.01, 1.0), A.SampledGaussian(0.02, 1.0)])
    for event in (mixed, rates):
        for method in ("rdp", "pld", "basic"):
            with pytest.raises(UnsupportedEventError, match="independent"):
                epsilon([event], DELTA, method)
    with pytest.raises(ValueError, match="members"):
        A.SameBatch([A.SampledGaussian(0.01, 1.0)])
