"""Training-run audit, the bounds: the one-run bounds (Steinke, Nasr, Jagielski 2023;
Mahloujifar, Melis, Chaudhuri 2025), the idealised Gaussian check, ledger mu, canary kinds,
bad input. Whole runs: test_empirical_onerun_runs.py, _clients.py, _multirun.py (split so
that no file dominates ``--dist loadfile``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

import leakaudit
from leakaudit.empirical import onerun
from leakaudit.scoring import fdp
from leakaudit.scoring import onerun as one_run
from leakaudit.scoring.bounds import gdp_epsilon

P = one_run.level_per_test(0.95, len(one_run.GUESSES))


def test_p_value_is_the_binomial_tail_plus_the_delta_term():
    m, r, v, eps = 1000, 200, 150, 1.0
    q = 1 / (1 + math.exp(-eps))
    assert one_run.p_value_one_run(m, r, v, eps, 0.0) == pytest.approx(sps.binom.sf(v - 1, r, q))
    assert one_run.p_value_one_run(m, r, v, eps, 1e-5) > one_run.p_value_one_run(m, r, v, eps, 0)
    # all r guesses right, delta = 0: eps = logit(p^(1/r)) exactly
    p = 0.05
    q_all = p ** (1 / r)
    assert one_run.eps_one_run(m, r, r, 0.0, p) == pytest.approx(math.log(q_all / (1 - q_all)),
                                                                rel=1e-6)
    # more correct guesses, a larger bound; a coin's accuracy, none
    assert one_run.eps_one_run(m, r, 160, 1e-5, p) > one_run.eps_one_run(m, r, 140, 1e-5, p)
    assert one_run.eps_one_run(m, r, r // 2, 1e-5, p) == 0.0


def test_gdp_floor_is_the_gaussian_trade_off_curve():
    x = np.array([1e-6, 0.01, 0.3, 0.5, 0.9])
    for mu in (0.0, 0.5, 2.0):
        got = [fdp.gdp_floor(float(a), mu) for a in x]
        assert got == pytest.approx(sps.norm.cdf(sps.norm.ppf(x) - mu), rel=1e-9, abs=1e-15)
    assert fdp.gdp_floor(0.3, 0.0) == pytest.approx(0.3)    # mu = 0: no information


def test_fdp_bound_is_monotone_in_the_correct_guesses_and_zero_for_a_coin():
    m, r = 1000, 200
    mus = [fdp.mu_one_run(m, r, v, 0.05) for v in range(100, r + 1, 10)]
    assert mus[0] == 0.0                                      # a coin's accuracy
    assert all(b >= a for a, b in zip(mus, mus[1:])) and mus[-1] > mus[-2] > 0
    # rejection is monotone in mu and in the level tau
    v = 170
    rejected = [fdp.fdp_rejects(m, r, v, mu, 0.05) for mu in np.linspace(0.05, 3, 30)]
    assert rejected == sorted(rejected, reverse=True) and rejected[0] and not rejected[-1]
    mu = fdp.mu_one_run(m, r, v, 0.05)
    assert fdp.mu_one_run(m, r, v, 0.01) < mu < fdp.mu_one_run(m, r, v, 0.2)
    with pytest.raises(ValueError, match="v <= r"):
        fdp.fdp_rejects(10, 5, 6, 1.0, 0.05)


def test_fdp_bound_rejects_the_true_mu_no_more_often_than_its_level():
    # the paper's game at the true mu: a mu-GDP run (scores N(mu, 1) in, N(0, 1) out) must
    # not be rejected at level 0.05 more often than 5 % (+3 sd) of the runs
    rng = np.random.default_rng(0)
    m, mu, tau, reps, rejected = 1000, 1.0, 0.05, 200, 0
    for _ in range(reps):
        included = rng.random(m) < 0.5
        order = np.argsort(rng.normal(size=m) + mu * included)
        k = 50
        v = int(included[order[m - k:]].sum() + (~included[order[:k]]).sum())
        rejected += fdp.fdp_rejects(m, 2 * k, v, mu, tau)
    assert rejected / reps <= tau + 3 * math.sqrt(tau * (1 - tau) / reps)


def _expected_bounds(m: int, mu: float, delta: float) -> dict[str, tuple[float, float]]:
    """The eps and mu bounds at the expected number of correct guesses -+3 sd, best over the
    guess counts (Bonferroni as the auditor), for scores N(mu, 1) in / N(0, 1) out."""
    grid = np.linspace(-8, 9, 20001)
    mix = 0.5 * sps.norm.cdf(grid - mu) + 0.5 * sps.norm.cdf(grid)
    out = {"eps": [0.0, 0.0], "mu": [0.0, 0.0]}
    for f_in, f_out in one_run.GUESSES:
        k_in, k_out = int(f_in * m), int(f_out * m)
        hi, lo = np.interp(1 - f_in, mix, grid), np.interp(f_out, mix, grid)
        v = m * 0.5 * sps.norm.sf(hi - mu) * (k_in > 0) + m * 0.5 * sps.norm.cdf(lo) * (k_out > 0)
        r = k_in + k_out
        sd = math.sqrt(r * (v / r) * (1 - v / r)) if 0 < v < r else 1.0
        for i, vv in enumerate((v - 3 * sd, v + 3 * sd)):
            vv = int(min(r, max(0, round(vv))))
            out["eps"][i] = max(out["eps"][i], one_run.eps_one_run(m, r, vv, delta, P))
            out["mu"][i] = max(out["mu"][i], fdp.mu_one_run(m, r, vv, P))
    return {k: (v[0], v[1]) for k, v in out.items()}


@pytest.mark.parametrize("seed, mu", [(0, 1.0), pytest.param(1, 1.0, marks=pytest.mark.slow),
                                      pytest.param(2, 1.0, marks=pytest.mark.slow),
                                      pytest.param(0, 2.0, marks=pytest.mark.slow)])
def test_idealised_gaussian_check_matches_the_theorems_within_sampling_error(seed, mu):
    # the papers' idealised setting: every canary's score is its own Gaussian mechanism,
    # N(mu, 1) if included, N(0, 1) if not (sigma = 1, mu = 1: eps(1e-5) = 4.38), m = 10^4
    m, delta = 10_000, 1e-5
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    scores = rng.normal(size=m) + mu * included
    got = one_run.one_run_bound(scores, included, delta)
    band = _expected_bounds(m, mu, delta)
    assert band["eps"][0] <= got["eps_lower"] <= band["eps"][1], (got, band)
    assert band["mu"][0] <= got["mu_lower"] <= band["mu"][1], (got, band)
    # both valid (below the truth); the f-DP bound the tighter (Mahloujifar et al.'s point)
    assert 0.5 < got["eps_lower"] < got["eps_lower_gdp"] < gdp_epsilon(mu, delta)
    assert 0.4 * mu < got["mu_lower"] < mu


def test_bad_input_names_the_argument_before_any_work(monkeypatch):
    from leakaudit import fl

    def boom(*a, **k):
        raise AssertionError("work started")
    monkeypatch.setattr(fl, "simulate", boom)
    audit = leakaudit.privacy_audit_training
    with pytest.raises(ValueError, match="canaries"):
        audit("fed-cdp", canaries=1)
    with pytest.raises(ValueError, match="runs"):
        audit("fed-cdp", runs=onerun.MIN_RUNS - 1)
    with pytest.raises(ValueError, match="canaries=100 with runs=10"):
        audit("fed-cdp", canaries=100, runs=10)
    with pytest.raises(ValueError, match="trials"):
        audit("fed-cdp", canaries=100, trials=1000)
    with pytest.raises(ValueError, match="statistic"):
        audit("fed-cdp", runs=10, statistic="llr")
    with pytest.raises(ValueError, match="defense 'fed-sdp-server' releases nothing"):
        audit("fed-sdp-server", canaries=100, canary="gradient")
    with pytest.raises(ValueError, match="defense 'fed-cdp' releases nothing"):
        audit("fed-cdp", canaries=100, canary="client")
    with pytest.raises(ValueError, match="canary must be one of"):
        audit("none", canaries=100, canary="example")
    with pytest.raises(ValueError, match="canaries"):
        one_run.one_run_bound(np.zeros(1), np.zeros(1, bool), 1e-5)


def test_canary_kind_follows_what_the_defense_protects():
    from leakaudit.defenses import get
    assert onerun.canary_kind(get("fed-cdp")) == "gradient"
    assert onerun.canary_kind(get("none")) == "gradient"
    assert onerun.canary_kind(get("none"), "client") == "client"
    for name in ("fed-sdp-server", "fed-sdp-client", "quantile-clip", "dssgd-dp"):
        assert onerun.canary_kind(get(name)) == "client"


def test_ledger_mu_counts_the_sensitivity_of_its_steps():
    from accounting import PrivacyLedger, tightest_epsilon

    plain = PrivacyLedger()
    plain.step(q=1.0, sigma=2.0, count=4)                       # mu = sqrt(4) / 2 = 1
    assert fdp.ledger_mu(plain) == pytest.approx(1.0)
    assert gdp_epsilon(1.0, 1e-5) == pytest.approx(tightest_epsilon(plain, 1e-5), rel=1e-3)
    fixed = PrivacyLedger(relation="replace-one")                # sensitivity 2C: mu doubles
    fixed.step(q=1.0, sigma=2.0, count=4, sampling="fixed-size")
    assert fdp.ledger_mu(fixed) == pytest.approx(2.0)
    assert gdp_epsilon(2.0, 1e-5) == pytest.approx(tightest_epsilon(fixed, 1e-5), rel=1e-3)
    sampled = PrivacyLedger()
    sampled.step(q=0.1, sigma=2.0, count=4)                      # amplified: not mu-GDP
    assert fdp.ledger_mu(sampled) is None and fdp.ledger_mu(PrivacyLedger()) is None


def test_ledger_mu_reads_events_through_the_registry_not_by_type():
    """A user's event type with a Gaussian upper pair counts like a shipped one (no
    isinstance on event classes); an amplified one is not mu-GDP; an unwired one is None."""
    from dataclasses import dataclass
    from typing import ClassVar

    import numpy as np

    from accounting import PrivacyLedger
    from accounting.events import Event
    from accounting.registry import GaussianPart, register_event, unregister_event

    @dataclass(frozen=True)
    class _UserGaussian(Event):
        sigma: float = 2.0
        q: float = 1.0
        note: str = ""
        sampling: str = "all"
        relation: str = "add-remove"
        kind: ClassVar[str] = "test_user_gaussian"

        @property
        def steps(self) -> int:
            return 1

        def describe(self) -> str:
            return f"user gaussian sigma={self.sigma} q={self.q}"

    def rule(e, side):
        return [GaussianPart(np.array([e.q]), np.array([e.sigma]), np.array([1]))]

    register_event(_UserGaussian, pld=rule, rdp=rule)
    try:
        ledger = PrivacyLedger()
        for _ in range(4):
            ledger.record(_UserGaussian())
        assert fdp.ledger_mu(ledger) == pytest.approx(1.0)        # sqrt(4) / 2
        ledger.step(q=1.0, sigma=1.0)                              # + a shipped step: mu^2 + 1
        assert fdp.ledger_mu(ledger) == pytest.approx(math.sqrt(2.0))
        amplified = PrivacyLedger()
        amplified.record(_UserGaussian(q=0.5))
        assert fdp.ledger_mu(amplified) is None
        unregister_event(_UserGaussian)
        register_event(_UserGaussian)                                # now wired to nothing
        assert fdp.ledger_mu(ledger) is None
    finally:
        unregister_event(_UserGaussian)
