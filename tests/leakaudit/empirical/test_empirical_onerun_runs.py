"""Training-run audit: whole runs through the simulator with white-box gradient canaries."""

from __future__ import annotations

import math

import pytest

import leakaudit
from leakaudit.scoring import fdp
from leakaudit.scoring import onerun as one_run

RUN = dict(canaries=500, rounds=2, clients=10, local_steps=3, batch_size=64)
P = one_run.level_per_test(0.95, len(one_run.GUESSES))


@pytest.mark.slow
def test_one_run_of_none_gives_the_largest_bound_its_guesses_allow():
    # the pre-registered grid (Bonferroni): its best count is all right
    row = leakaudit.privacy_audit_training("none", seed=0, guesses=one_run.GUESSES,
                                           **RUN).rows()[0]
    assert row["guess_rule"] == "9 pre-registered (Bonferroni)"
    assert row["mode"] == "one-run" and row["guesses"] == row["correct"] >= 100
    assert row["eps_lower"] == pytest.approx(
        one_run.eps_one_run(RUN["canaries"], row["guesses"], row["guesses"], 1e-5, P))
    assert row["mu_guesses"] == row["mu_correct"]
    assert row["mu_lower"] == pytest.approx(
        fdp.mu_one_run(RUN["canaries"], row["mu_guesses"], row["mu_guesses"], P))
    assert math.isinf(row["eps_sound"]) and not row["sound_violated"]
    assert math.isnan(row["eps_ideal"])          # no finite mu to compare with


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_one_run_of_a_weak_fed_cdp_is_nonzero_and_below_its_sound_eps(seed):
    row = leakaudit.privacy_audit_training("fed-cdp", defense_params=dict(clip=1.0, sigma=0.5),
                                           seed=seed, **RUN).rows()[0]
    assert 0.5 < row["eps_lower"] <= row["eps_sound"] < math.inf
    assert row["mu_lower"] > 0 and row["eps_lower_gdp"] >= row["eps_lower"]
    assert not row["sound_violated"] and row["relation"] == "add-remove"
