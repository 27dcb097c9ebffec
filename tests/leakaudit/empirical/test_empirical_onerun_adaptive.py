"""Training-run audit: the adaptive guess count (chosen from the unlabelled scores, no
Bonferroni), the idealised-game gap, and white-box Dirac gradient canaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import leakaudit
from leakaudit.defenses.fed_cdp import FedCDP
from leakaudit.empirical import onerun
from leakaudit.empirical.stats import gdp_epsilon

#: jax_privacy's golden f-DP figures on the idealised game, 10k in + 10k out (eps at 1e-5)
JAX_GOLDEN = {1.0: 2.16, 2.0: 4.72, 4.0: 9.13}


def _ideal(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return rng.normal(size=m) + mu * included, included


def test_fit_shift_recovers_the_mixture_without_the_labels():
    scores, _ = _ideal(2.0, 20_000, 0)
    assert onerun.fit_shift(scores) == pytest.approx(2.0, abs=0.15)
    assert onerun.fit_shift(3.0 * scores + 7.0) == pytest.approx(2.0, abs=0.15)   # scale-free
    assert onerun.fit_shift(np.ones(100)) == 0.0


def test_a_release_that_ignores_the_data_gets_nothing_adaptive():
    # every canary scores the same: the guesses carry no information
    included = np.random.default_rng(0).random(1000) < 0.5
    got = onerun.one_run_bound(np.zeros(1000), included, 1e-5, guesses="adaptive")
    assert got["eps_lower"] == 0.0 and got["mu_lower"] == 0.0
    with pytest.raises(ValueError, match="guesses"):
        onerun.one_run_bound(np.zeros(10), included[:10], 1e-5, guesses="best")


@pytest.mark.slow
def test_adaptive_bound_is_honest_on_scores_independent_of_the_inclusions():
    rng, reps, positive = np.random.default_rng(1), 40, 0
    for _ in range(reps):
        included = rng.random(500) < 0.5
        got = onerun.one_run_bound(rng.normal(size=500), included, 1e-5, guesses="adaptive")
        positive += got["eps_lower"] > 0 or got["mu_lower"] > 0
    # each bound at level 0.025: at most 5 % of the runs (+3 sd) may report anything
    assert positive / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


@pytest.mark.slow
@pytest.mark.parametrize("mu", [1.0, pytest.param(2.0, marks=pytest.mark.slow),
                                pytest.param(4.0, marks=pytest.mark.slow)])
def test_adaptive_bound_reaches_jax_privacy_golden_figures_and_stays_valid(mu):
    scores, included = _ideal(mu, 20_000, 0)
    got = onerun.one_run_bound(scores, included, 1e-5, guesses="adaptive")
    grid = onerun.one_run_bound(scores, included, 1e-5)          # 9 counts, Bonferroni
    assert got["eps_lower_gdp"] >= JAX_GOLDEN[mu]
    assert got["eps_lower_gdp"] > grid["eps_lower_gdp"] and got["eps_lower"] > grid["eps_lower"]
    assert got["mu_lower"] < mu and got["eps_lower"] < gdp_epsilon(mu, 1e-5)
    # the idealised gap of the ideal game itself: the measured bound is the expected one
    ideal = onerun.idealised_bound(20_000, mu, 1e-5)
    assert got["mu_lower"] == pytest.approx(ideal["mu_ideal"], abs=0.12)
    assert got["eps_lower"] == pytest.approx(ideal["eps_ideal"], abs=0.5)


def test_idealised_bound_grows_with_the_canaries_and_is_nan_without_a_finite_mu():
    small, large = (onerun.idealised_bound(m, 1.0, 1e-5) for m in (1000, 10_000))
    assert 0 < small["mu_ideal"] < large["mu_ideal"] < 1.0
    assert math.isnan(onerun.idealised_bound(1000, math.inf, 1e-5)["mu_ideal"])


DIRAC = dict(canaries=300, canary="dirac", rounds=1, clients=2, local_steps=2,
             batch_size=10_000, seed=0)


class _IgnoresData(FedCDP):
    """fed-cdp whose release never reads the gradients (noise only)."""

    def privatize_batch(self, grads, ctx):
        return super().privatize_batch([torch.zeros_like(g) for g in grads], ctx)


@pytest.mark.slow
def test_dirac_canaries_audit_a_release_that_ignores_the_data_to_zero():
    for seed in (0, 1):
        row = leakaudit.privacy_audit_training(_IgnoresData(clip=1.0, sigma=0.5),
                                               **{**DIRAC, "seed": seed}).rows()[0]
        assert row["eps_lower"] == 0.0 and row["mu_lower"] == 0.0, row


@pytest.mark.slow
def test_dirac_canaries_on_full_batch_fed_cdp_match_the_idealised_game():
    # q = 1 (batch >= the client's examples): each score is the ledger's Gaussian, so the
    # measured bound is the idealised game's within sampling error, and below the ledger
    row = leakaudit.privacy_audit_training(
        "fed-cdp", defense_params=dict(clip=1.0, sigma=1.0), **DIRAC).rows()[0]
    assert row["kind"] == "dirac" and row["steps"] == 2 and row["relation"] == "add-remove"
    assert row["mu_sound"] == pytest.approx(math.sqrt(2)) and row["ideal_mu"] == row["mu_sound"]
    assert 0 < row["mu_lower"] <= row["mu_sound"] and not row["sound_violated"]
    assert row["mu_lower"] == pytest.approx(row["mu_ideal"], abs=0.35)
    assert row["fitted_mu"] == pytest.approx(math.sqrt(2), abs=0.5)


def test_dirac_canaries_need_one_coordinate_each():
    with pytest.raises(ValueError, match="Dirac canaries need as many parameters"):
        leakaudit.privacy_audit_training("fed-cdp", **{**DIRAC, "canaries": 10**6})
    with pytest.raises(ValueError, match="releases nothing"):
        leakaudit.privacy_audit_training("fed-sdp-server", **{**DIRAC, "canaries": 10})
    with pytest.raises(ValueError, match="guesses must be 'adaptive'"):
        leakaudit.privacy_audit_training("fed-cdp", canaries=10, guesses="best")


@pytest.mark.slow
def test_adaptive_bound_rejects_the_true_mu_no_more_often_than_its_level():
    # the idealised game at the true mu: a bound above the truth (eps or mu, each at level
    # 2.5 %) in at most 5 % (+3 sd) of the runs, though the count is chosen from the scores
    reps, wrong = 30, 0
    for seed in range(reps):
        scores, included = _ideal(1.0, 1000, 100 + seed)
        got = onerun.one_run_bound(scores, included, 1e-5, guesses="adaptive")
        wrong += got["mu_lower"] > 1.0 or got["eps_lower"] > gdp_epsilon(1.0, 1e-5)
    assert wrong / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


@pytest.mark.slow
def test_a_whole_fed_cdp_run_with_sound_eps_below_4_is_audited_above_half_of_it():
    # full-batch fed-cdp (q = 1, mu-GDP ledger, mu 0.889, eps 3.82), 5,000
    # Dirac canaries: eps_lower_gdp above half the sound eps, mu_lower above half its mu
    row = leakaudit.privacy_audit_training(
        "fed-cdp", defense_params=dict(clip=1.0, sigma=2.25), canaries=5000, canary="dirac",
        rounds=2, clients=10, local_steps=2, batch_size=10_000, seed=0).rows()[0]
    assert row["eps_sound"] <= 4.0 and row["mu_sound"] == pytest.approx(2 / 2.25)
    assert row["eps_sound"] / 2 < row["eps_lower_gdp"] <= row["eps_sound"]
    assert row["mu_sound"] / 2 < row["mu_lower"] < row["mu_sound"]
    assert not row["sound_violated"]
