"""One-run audit (Steinke, Nasr, Jagielski 2023): the bound, the idealised Gaussian check,
a whole training run through the simulator, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

import leakaudit
from leakaudit.empirical import onerun
from leakaudit.empirical.stats import gdp_epsilon

RUN = dict(canaries=500, rounds=2, clients=10, local_steps=3, batch_size=64)


def test_p_value_is_the_binomial_tail_plus_the_delta_term():
    m, r, v, eps = 1000, 200, 150, 1.0
    q = 1 / (1 + math.exp(-eps))
    assert onerun.p_value_one_run(m, r, v, eps, 0.0) == pytest.approx(sps.binom.sf(v - 1, r, q))
    assert onerun.p_value_one_run(m, r, v, eps, 1e-5) > onerun.p_value_one_run(m, r, v, eps, 0)
    # all r guesses right, delta = 0: eps = logit(p^(1/r)) exactly
    p = 0.05
    q_all = p ** (1 / r)
    assert onerun.eps_one_run(m, r, r, 0.0, p) == pytest.approx(math.log(q_all / (1 - q_all)),
                                                                rel=1e-6)
    # more correct guesses, a larger bound; a coin's accuracy, none
    assert onerun.eps_one_run(m, r, 160, 1e-5, p) > onerun.eps_one_run(m, r, 140, 1e-5, p)
    assert onerun.eps_one_run(m, r, r // 2, 1e-5, p) == 0.0


def _expected_bound(m: int, mu: float, delta: float) -> tuple[float, float, float]:
    """The bound at the expected number of correct guesses, and at -+3 sd, best over the
    guess counts (Bonferroni as the auditor), for scores N(mu, 1) in / N(0, 1) out."""
    p = 0.05 / len(onerun.GUESSES)
    grid = np.linspace(-8, 9, 20001)
    mix = 0.5 * sps.norm.cdf(grid - mu) + 0.5 * sps.norm.cdf(grid)
    out = [0.0, 0.0, 0.0]
    for f_in, f_out in onerun.GUESSES:
        k_in, k_out = int(f_in * m), int(f_out * m)
        hi, lo = np.interp(1 - f_in, mix, grid), np.interp(f_out, mix, grid)
        v = m * 0.5 * sps.norm.sf(hi - mu) * (k_in > 0) + m * 0.5 * sps.norm.cdf(lo) * (k_out > 0)
        r = k_in + k_out
        sd = math.sqrt(r * (v / r) * (1 - v / r)) if 0 < v < r else 1.0
        for i, vv in enumerate((v - 3 * sd, v, v + 3 * sd)):
            vv = int(min(r, max(0, round(vv))))
            out[i] = max(out[i], onerun.eps_one_run(m, r, vv, delta, p))
    return out[0], out[1], out[2]


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])
def test_idealised_gaussian_check_matches_the_theorem_within_sampling_error(seed):
    # the papers' idealised setting: every canary's score is its own Gaussian mechanism,
    # N(1, 1) if included, N(0, 1) if not (sigma = 1, mu = 1: eps(1e-5) = 4.38), m = 10^4
    m, mu, delta = 10_000, 1.0, 1e-5
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    scores = rng.normal(size=m) + mu * included
    got = onerun.one_run_bound(scores, included, delta)
    low, mid, high = _expected_bound(m, mu, delta)
    assert low <= got["eps_lower"] <= high, (got, low, mid, high)
    assert 0.5 < got["eps_lower"] < gdp_epsilon(mu, delta)   # valid, and far from tight


def test_bad_input_names_the_argument_before_any_work(monkeypatch):
    from leakaudit import fl

    def boom(*a, **k):
        raise AssertionError("work started")
    monkeypatch.setattr(fl, "simulate", boom)
    with pytest.raises(ValueError, match="canaries"):
        leakaudit.privacy_audit_training("fed-cdp", canaries=1)
    with pytest.raises(ValueError, match="trials"):
        leakaudit.privacy_audit_training("fed-cdp", canaries=100, trials=1000)
    with pytest.raises(ValueError, match="statistic"):
        leakaudit.privacy_audit_training("fed-cdp", canaries=100, statistic="llr")
    with pytest.raises(ValueError, match="defense 'fed-sdp-server' releases nothing"):
        leakaudit.privacy_audit_training("fed-sdp-server", canaries=100)
    with pytest.raises(ValueError, match="canaries"):
        onerun.one_run_bound(np.zeros(1), np.zeros(1, bool), 1e-5)


@pytest.mark.slow
def test_one_run_of_none_gives_the_largest_bound_its_guesses_allow():
    row = leakaudit.privacy_audit_training("none", seed=0, **RUN).rows()[0]
    assert row["guesses"] == row["correct"] >= 100
    p = 0.05 / len(onerun.GUESSES)
    assert row["eps_lower"] == pytest.approx(
        onerun.eps_one_run(RUN["canaries"], row["guesses"], row["guesses"], 1e-5, p))
    assert math.isinf(row["eps_sound"]) and not row["sound_violated"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_one_run_of_a_weak_fed_cdp_is_nonzero_and_below_its_sound_eps(seed):
    row = leakaudit.privacy_audit_training("fed-cdp", defense_params=dict(clip=1.0, sigma=0.5),
                                           seed=seed, **RUN).rows()[0]
    assert 0.5 < row["eps_lower"] <= row["eps_sound"] < math.inf
    assert not row["sound_violated"]
