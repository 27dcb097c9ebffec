"""The identification check: per-tensor scores paid for by Bonferroni, a noise draw of its
own per defense and cell, and the two mutants the whole-release likelihood missed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from leakaudit import data, models
from leakaudit import defenses as D
from leakaudit.attacks import CandidateScorer
from leakaudit.auditing import identification as ident
from leakaudit.defenses import ops


@pytest.fixture(scope="module")
def digits():
    return data.resolve("digits", seed=0)


@pytest.fixture(scope="module")
def mlp(digits):
    gen = torch.Generator().manual_seed(0)
    return models.mlp(int(np.prod(digits.input_shape)), digits.num_classes, (100,), "relu",
                      generator=gen)


class StatesTwiceItsNoise(D.FedCDP):
    """fed-cdp whose ledger (and public sigma) states sigma while it draws sigma / 2."""

    def privatize_batch(self, grads, ctx):
        sums, _ = ops.clipped_sum(grads, self.clip)
        noise = ops.gaussian_like(sums, 0.5 * self.sigma * self.clip, ctx.generator)
        ctx.sound.step(q=ctx.batch_rate, sigma=self.sigma, note="fed-cdp local step")
        return [(s + n) / ctx.batch_size for s, n in zip(sums, noise)]


class OutputLayerBare(D.FedCDP):
    """fed-cdp that leaves its output layer (the last weight and bias) unnoised."""

    def privatize_batch(self, grads, ctx):
        sums, _ = ops.clipped_sum(grads, self.clip)
        noise = ops.gaussian_like(sums, self.sigma * self.clip, ctx.generator)
        noise = [torch.zeros_like(n) if i >= len(noise) - 2 else n
                 for i, n in enumerate(noise)]
        ctx.sound.step(q=ctx.batch_rate, sigma=self.sigma, note="fed-cdp local step")
        return [(s + n) / ctx.batch_size for s, n in zip(sums, noise)]


def test_tensor_rows_add_up_to_the_whole_release(digits, mlp):
    """Gaussian scores are sums over coordinates: the per-tensor rows add up to row 0."""
    scorer = CandidateScorer(mlp, digits.x_train[:6], digits.y_train[:6], noise_std=0.3,
                             clip=0.5, clip_mode="example")
    y = torch.randn(sum(n for _, n in scorer.tensors), dtype=torch.float64)
    rows = scorer.tensor_scores(y, [1, 3, 4])
    assert rows.shape == (1 + len(scorer.tensors), 3)
    torch.testing.assert_close(rows[1:].sum(dim=0), rows[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rows[0], scorer.scores(y, [1, 3, 4]))


def test_protected_point_and_release_model():
    cdp = D.get("fed-cdp", clip=0.5, sigma=2.0)
    client = D.get("fed-sdp-client", clip=0.5, sigma=2.0)
    server = D.get("fed-sdp-server", clip=0.5, sigma=2.0)
    assert ident.protected_point(cdp, (0, 1, 2)) == 2
    assert ident.protected_point(client, (0, 1, 2)) == 1
    assert ident.protected_point(server, (0, 1, 2)) == 0
    assert ident.protected_point(D.get("none"), (0, 1, 2)) == 2
    assert ident.protected_point(server, (1, 2)) == 2  # protects none of them
    assert ident.release_model(cdp, 1.0, 2)["noise_std"] == pytest.approx(1.0)
    assert ident.release_model(client, 0.5, 1) == {"clip_mode": "update", "clip": 1.0,
                                                   "noise_std": 2.0}
    assert ident.release_model(client, 0.5, 2)["clip_mode"] is None  # noise acts later


def test_trial_seeds_differ_by_defense_cell_and_trial():
    seeds = {ident.trial_seed(0, d, c, t) for d in ("fed-cdp(sigma=1)", "fed-sdp-client")
             for c in ("k=2", "k=10") for t in range(50)}
    assert len(seeds) == 200
    assert ident.trial_seed(0, "a", 1) == ident.trial_seed(0, "a", 1)


def test_summary_pays_for_the_best_scorer():
    budget = ident.IdentificationBudget(k=10, trials=100, pool=20)
    one = ident.summarise(np.array([60]), ["all"], budget, 1.0, 100, 1)
    five = ident.summarise(np.array([40, 60, 10, 10, 10]), list("abcde"), budget, 1.0, 100, 1)
    assert five["scorer"] == "b" and five["success"] == one["success"] == 0.6
    assert five["ci_low"] < one["ci_low"] and five["ci_high"] > one["ci_high"]
    assert five["success_all"] == 0.4
    assert one["bound"] == pytest.approx(0.389, abs=1e-3)  # Phi(Phi^-1(0.1) + 1)
    assert ident.summarise(np.array([5]), ["all"], budget, None, 100, 1)["bound"] == 1.0
    with pytest.raises(ValueError, match="pool"):
        ident.IdentificationBudget(k=10, pool=5)


@pytest.mark.slow
@pytest.mark.parametrize("make", [lambda: D.get("fed-cdp", clip=0.5, sigma=1.0),
                                  lambda: D.get("fed-sdp-client", clip=0.5, sigma=1.0)])
def test_shipped_defenses_stay_within_their_bound(digits, mlp, make):
    budget = ident.IdentificationBudget(k=10, trials=100, pool=60)
    r = ident.identification(mlp, digits, make(), point=1, budget=budget, seed=1)
    assert r["bound"] == pytest.approx(0.389, abs=1e-3)
    assert not ident.above_bound(r)
    assert r["clean"] > 0.9  # the tier could succeed: the noise is what stops it


@pytest.mark.slow
def test_a_ledger_stating_twice_its_noise_is_caught(digits, mlp):
    budget = ident.IdentificationBudget(k=10, trials=100, pool=60)
    r = ident.identification(mlp, digits, StatesTwiceItsNoise(clip=0.5, sigma=0.5),
                             point=1, budget=budget, seed=0)
    assert r["mu"] == pytest.approx(2.0) and ident.above_bound(r)


@pytest.mark.slow
def test_an_unnoised_output_layer_is_caught_by_its_tensor(digits, mlp):
    """The whole-release likelihood trusts the stated noise and misses it; the output
    layer's own row identifies every target."""
    budget = ident.IdentificationBudget(k=10, trials=100, pool=60)
    r = ident.identification(mlp, digits, OutputLayerBare(clip=0.5, sigma=2.0), point=1,
                             budget=budget, seed=0)
    assert ident.above_bound(r) and r["scorer"].startswith("fc2")
    assert r["success_all"] < r["bound"] and not math.isnan(r["mu"])


def test_success_interval_is_the_two_one_sided_clopper_pearson_bounds():
    from leakaudit import metrics
    from leakaudit.scoring.bounds import clopper_pearson_lower, clopper_pearson_upper

    for k, n in ((0, 10), (3, 10), (10, 10), (28, 100)):
        low, high = metrics.success_interval(k, n, 0.9)
        assert low == pytest.approx(clopper_pearson_lower(k, n, 0.05))
        assert high == pytest.approx(clopper_pearson_upper(k, n, 0.05))
    with pytest.raises(ValueError, match="successes"):
        metrics.success_interval(11, 10)
