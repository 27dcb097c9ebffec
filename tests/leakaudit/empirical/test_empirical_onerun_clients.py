"""Training-run audit: whole runs with canary clients (client-level defenses)."""

from __future__ import annotations

import math

import pytest

import leakaudit
from leakaudit.scoring import onerun as one_run

#: canary clients: 300 canaries among 6 real clients, one local step each
CLIENTS = dict(canaries=300, rounds=2, clients=6, local_steps=1, batch_size=32)
P = one_run.level_per_test(0.95, len(one_run.GUESSES))


@pytest.mark.slow
def test_canary_clients_audit_a_weak_client_level_dp_fedavg():
    # fed-sdp (DP-FedAvg) sigma 0.5, Poisson client sampling q = 0.5: the canary clients
    # are sampled like every client, and the ledgers are a canary client's (client level)
    row = leakaudit.privacy_audit_training(
        "fed-sdp-server", defense_params=dict(clip=1.0, sigma=0.5), client_fraction=0.5,
        seed=0, **CLIENTS).rows()[0]
    # add/remove: an excluded canary client is absent from the population
    assert row["kind"] == "client" and row["relation"] == "add-remove"
    assert row["excluded"] == "absent"
    # each included canary client uploads in each round with probability q (the run's rule)
    n = row["included"] * CLIENTS["rounds"]
    assert abs(row["steps"] - 0.5 * n) <= 4 * math.sqrt(0.25 * n)
    assert 0.3 < row["eps_lower"] <= row["eps_sound"] < math.inf
    assert 0 < row["mu_lower"] and not row["sound_violated"]


@pytest.mark.slow
def test_canary_clients_without_noise_reach_the_largest_bound_their_count_allows():
    row = leakaudit.privacy_audit_training(
        "fed-sdp-client", defense_params=dict(clip=1.0, sigma=0.0), seed=0,
        **CLIENTS).rows()[0]
    m = CLIENTS["canaries"]
    # every client in every round (fixed-size): replace-one, an excluded canary sends zero
    assert row["relation"] == "replace-one" and row["excluded"] == "a zero update"
    assert row["guesses"] == row["correct"] and row["mu_guesses"] == row["mu_correct"]
    # the grid's best: every canary guessed at its largest guess count
    largest = max(one_run.eps_one_run(m, int(a * m) + int(b * m), int(a * m) + int(b * m),
                                     1e-5, P) for a, b in one_run.GUESSES
                  if int(a * m) + int(b * m) <= row["guesses"])
    # no noise: the sound ledger has no finite mu to plan a count from, so the planned rule
    # (the default) falls back to the grid, and its best count is all right
    assert row["guess_rule"] == "9 pre-registered (Bonferroni)"
    assert row["eps_lower"] == pytest.approx(largest)
    assert math.isinf(row["eps_sound"]) and not row["sound_violated"]
