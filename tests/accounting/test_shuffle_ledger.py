"""Shuffled and fixed-size Gaussian steps in a ledger (batch fraction q = B / n < 1): one
Gaussian release per epoch above, realised pairs below (the lower end was 0 and the upper
end one release per step)."""

import math

import pytest

import accounting as A
from accounting.events import SampledGaussian
from accounting.pld import pld_epsilon
from accounting.shuffle import shuffle_epsilon_bounds, shuffle_epsilon_upper


def test_a_million_shuffled_steps_get_the_shuffle_bracket():
    # q = 1e-3 (1,000 batches an epoch), sigma 1, 10^6 steps = 1,000 epochs, zero-out
    ledger = A.PrivacyLedger(relation="zero-out")
    ledger.step(q=1e-3, sigma=1.0, count=10**6, sampling="shuffle")
    lo, _, up = ledger.epsilon_bounds(1e-5, method="pld")
    ref = shuffle_epsilon_bounds(1.0, 1_000, 1_000, 1e-5)
    assert lo >= ref.lower * (1 - 1e-9) > 30 and up <= ref.upper * (1 + 1e-9)
    # every accountant now charges one release per epoch touched (1,001 here), not 10^6
    rdp = ledger.epsilon(1e-5, "rdp")
    assert rdp < 2 * shuffle_epsilon_upper(1.0, 1_001, 1e-5)
    assert ledger.epsilon(1e-5, "pld") >= shuffle_epsilon_upper(1.0, 1_000, 1e-5) * (1 - 1e-9)


def test_shuffled_steps_in_pieces_keep_a_certified_bracket():
    ledger = A.PrivacyLedger(relation="replace-one")
    ledger.step(q=0.1, sigma=2.0, count=15, sampling="shuffle", note="a")
    ledger.step(q=0.1, sigma=2.0, count=15, sampling="shuffle", note="b")
    lo, _, up = ledger.epsilon_bounds(1e-5, method="pld")
    # lower: floor(15 / 10) = 1 epoch from each piece (3 complete epochs in the run)
    one = pld_epsilon([SampledGaussian(0.1, 1.0, 2)], 1e-5).lower
    assert lo == pytest.approx(one, rel=1e-4) and 0 < lo <= up  # (another grid step)
    # upper: at most ceil(15 / 10) + 1 = 3 epochs touched by each piece: 6 releases
    plain = A.PrivacyLedger(relation="replace-one")
    plain.step(q=1.0, sigma=2.0, count=6, sampling="all")
    assert up == pytest.approx(plain.epsilon(1e-5, "gaussian-exact"), rel=1e-6)


@pytest.mark.parametrize("relation, half", [("zero-out", 1.0), ("replace-one", 2.0)])
def test_fixed_size_steps_with_a_stated_fraction_keep_a_realised_lower_end(relation, half):
    ledger = A.PrivacyLedger(relation=relation)
    ledger.step(q=0.01, sigma=1.0, count=1_000, sampling="fixed-size")
    lo, _, up = ledger.epsilon_bounds(1e-5, method="pld")
    realised = pld_epsilon([SampledGaussian(0.01, 1.0 / half, 1_000)], 1e-5).lower
    assert 0.99 * realised <= lo <= up  # the same pair, on the ledger's (coarser) grid


def test_q_one_stand_ins_claim_no_lower_end():
    # callers record "no amplification" as q = 1 fixed-size / shuffled steps: no lower end
    for sampling in ("fixed-size", "shuffle"):
        ledger = A.PrivacyLedger(relation="replace-one")
        ledger.step(q=1.0, sigma=1.0, count=10, sampling=sampling)
        lo, _, up = ledger.epsilon_bounds(1e-5, method="pld")
        assert lo == 0.0 and math.isfinite(up)
