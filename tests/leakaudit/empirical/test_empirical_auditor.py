"""The auditor's choices: null and reversed scores, canaries, statistics, the verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from accounting import PrivacyLedger
from leakaudit.defenses import Defense, ops
from leakaudit.empirical import api, audit_release, game
from leakaudit.scoring import bounds as stats

SMALL = ((40,), (6, 5), (3,))


# ----------------------------------------------------------------------------- null, reversed
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_null_scores_are_no_evidence(seed):
    rng = np.random.default_rng(seed)
    out, into = rng.normal(size=4000), rng.normal(size=4000)
    got = stats.bounds_from_scores(out, into, seed=seed)
    # |mu| of a test pointing either way would be ~0.05-0.1 here, and eps_from_gdp of that
    # about 0.5; clamped per direction the evidence is none (0 w.p. >= 95 %)
    assert got["mu_lower"] <= 0.05 and got["eps_lower"] <= 0.05
    assert stats.gdp_epsilon(got["mu_lower"], 1e-5) <= 0.3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reversed_scores_give_the_mirrored_bound(seed):
    rng = np.random.default_rng(seed)
    out, into = rng.normal(size=4000), rng.normal(-1.5, 1.0, size=4000)
    rev = stats.bounds_from_scores(out, into, seed=seed)
    mir = stats.bounds_from_scores(-out, -into, seed=seed)
    assert rev["mu_direction"] == -1 and mir["mu_direction"] == 1
    assert rev["mu_lower"] == pytest.approx(mir["mu_lower"], abs=1e-9)
    assert 1.2 <= rev["mu_lower"] <= 1.5 + 1e-9       # mu = 1.5 is the truth
    # and a rule oriented the wrong way on held-out runs is clamped, never |mu|
    fpr, fnr = 0.9, 0.95
    assert stats.gdp_mu_lower(fpr, fnr) == 0.0


class _PureNoise(Defense):
    """Releases noise that does not depend on the data: every test is a null test."""

    name, sites, level, batched_trials = "pure-noise", frozenset({"example"}), "instance", True

    def privatize_batch(self, grads, ctx):
        ctx.sound.step(q=1.0, sigma=1.0)
        ctx.claimed.step(q=1.0, sigma=1.0)
        return ops.gaussian_like([g[0] for g in grads], 1.0, ctx.generator)


def test_an_audit_of_a_release_that_ignores_the_data_finds_nothing():
    r = audit_release(_PureNoise(), point=2, trials=600, shapes=SMALL, background=4,
                      seed=0).rows()[0]
    assert r["eps_lower"] <= 0.1 and r["mu_lower"] <= 0.1
    assert not r["sound_violated"] and r["mu_sound"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- canaries
def test_canaries_test_each_part_of_the_mechanism():
    found = game.canaries(SMALL, 2.0)
    assert set(found) == {"dirac", "large", "large@0", "large@1", "large@2", "lattice"}

    def norm(ts):
        return float(torch.sqrt(sum(t.pow(2).sum() for t in ts)))
    assert all(float(t.abs().max()) == 2.0 for t in found["dirac"])
    assert norm(found["large"]) == pytest.approx(game.LARGE * 2.0)
    for k in range(3):
        c = found[f"large@{k}"]
        assert norm(c) == pytest.approx(game.LARGE * 2.0)
        assert [float(t.abs().sum()) > 0 for t in c] == [i == k for i in range(3)]
    assert norm(found["lattice"]) == pytest.approx(game.LATTICE * 2.0)   # inside the clip


def test_coordinate_statistic_corrects_for_the_number_of_coordinates():
    setup = game.make_setup(_PureNoise(), 2, SMALL, 4, 0.05, 1, torch.Generator())
    d = sum(math.prod(s) for s in SMALL)
    ref = game.Reference(mean=torch.zeros(d, dtype=torch.float64),
                         sd=torch.ones(d, dtype=torch.float64))
    rows = torch.randn(20000, d, generator=torch.Generator().manual_seed(0))
    coord = game.statistics(rows, setup, ref)["coordinate"]
    # -log10 of a Bonferroni p-value over d coordinates: P(coord > 1.3) = 1 - (1 - 0.05/d)^d
    # = 0.0488 under noise (Bonferroni nearly exact here); 20,000 runs: sd 0.0015
    assert abs(np.mean(coord > -math.log10(0.05)) - (1 - (1 - 0.05 / d) ** d)) <= 0.0045
    # one coordinate without noise that the canary moves stands out by orders of magnitude
    sd = ref.sd.clone()
    sd[0] = 1e-6
    moved = rows.clone()
    moved[:, 0] = 1e-3
    assert game.statistics(moved, setup, game.Reference(ref.mean, sd))["coordinate"].min() > 100


# ----------------------------------------------------------------------------- the verdict
def test_ledger_mu_reads_compositions_of_gaussians_only():
    led = PrivacyLedger()
    led.step(q=1.0, sigma=2.0, count=2)
    assert api.ledger_mu(led) == pytest.approx(math.sqrt(2) / 2)
    led.step(q=1.0, sigma=1.0)
    assert api.ledger_mu(led) == pytest.approx(math.sqrt(1.5))
    sampled = PrivacyLedger()
    sampled.step(q=0.5, sigma=1.0)
    assert api.ledger_mu(sampled) is None
    lap = PrivacyLedger()
    lap.laplace(1.0)
    assert api.ledger_mu(lap) is None and api.ledger_mu(PrivacyLedger()) is None


def test_a_general_claim_is_tested_along_its_curve_not_at_one_delta():
    led = PrivacyLedger()
    led.step(q=0.5, sigma=1.0)          # sampled: no mu-GDP form, a whole (eps, delta) curve
    curve = api.ledger_curve(led, 1e-5, led.epsilon(1e-5))
    eps_at = dict(curve)
    point = (0.2, 0.3)
    # invisible at the row's delta ...
    assert stats.eps_lower_bound(*point, 1e-5) < eps_at[1e-5]
    # ... but outside the claimed region at a larger delta of the same ledger
    where = api.outside_curve([point], curve)
    assert where is not None and "outside" in where
    assert api.outside_curve([(0.5, 0.5)], curve) is None


def test_the_row_names_the_canary_and_statistic_that_won():
    r = audit_release(_PureNoise(), point=2, trials=200, shapes=SMALL, background=4, seed=1,
                      canaries=["large@1", "dirac"], statistic=["tensor", "projection"]
                      ).rows()[0]
    assert r["canary"] in ("large@1", "dirac") and r["statistic"] in ("tensor", "projection")
    assert set(r["selection"]) == {"large@1", "dirac"}
    assert set(r["selection"]["dirac"]) == {"tensor", "projection"}
    with pytest.raises(ValueError, match="canaries"):
        audit_release(_PureNoise(), point=2, trials=200, shapes=SMALL, canaries=["large@7"])
    with pytest.raises(ValueError, match="canaries"):
        audit_release(_PureNoise(), point=2, trials=200, shapes=SMALL, canaries="dirac")


@pytest.mark.parametrize("transform", [np.exp, lambda x: x ** 3, lambda x: np.sinh(3 * x)])
def test_threshold_choice_depends_only_on_ranks(transform):
    # a strictly increasing map of a statistic carries the same information: the chosen cut,
    # its predicted bound and its held-out error counts must not change (a normal fit of the
    # transformed scores would rate the skewed copy differently and pick it for its tail)
    rng = np.random.default_rng(3)
    out, into = rng.normal(size=800), rng.normal(size=800) + 1.0
    e_out, e_in = rng.normal(size=4000), rng.normal(size=4000) + 1.0
    for target in ("eps", "mu"):
        rule, score = stats.best_rule(out, into, 0.02, 1e-5, target, (4000, 4000))
        rule_t, score_t = stats.best_rule(transform(out), transform(into), 0.02, 1e-5, target,
                                          (4000, 4000))
        assert score_t == pytest.approx(score)
        assert stats.error_counts(transform(e_out), transform(e_in), rule_t) \
            == stats.error_counts(e_out, e_in, rule)


def test_predicted_counts_are_pessimistic_and_grow_with_the_selection_count():
    k = np.arange(0, 200)
    pred = stats.predicted_count(k, 1000, 5000, 1.0)
    assert np.all(np.diff(pred) >= 0) and np.all(pred >= 5 * k) and np.all(pred <= 5000)
    assert stats.predicted_count(np.array([0]), 1000, 5000, 1.0)[0] >= 2   # 0 seen: not 0
    # a mu cut is kept away from the tails (the Gaussian bound is flat in the cut, the noise
    # of the tails is not): on N(0,1) vs N(1,1) the chosen cut lies between the means +- 1
    rng = np.random.default_rng(0)
    rule, _ = stats.best_rule(rng.normal(size=2000), rng.normal(size=2000) + 1.0, 0.01, 1e-5,
                              "mu", (10_000, 10_000))
    assert -0.5 <= rule.value <= 1.5
