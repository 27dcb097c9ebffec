"""The white-box check: the release's own code on the same noise in both worlds.

A Laplace mechanism scaled by the L2 instead of the L1 sensitivity is measured at its true
size (sqrt(d) x its claim, d = 13,426 on LeNet's shapes), which no two-sample test of a few
thousand runs can show; correct Laplace and Gaussian code is measured at its claim; code
whose noise is not drawn from the context's generator is "not applicable", never flagged.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from accounting import PrivacyLedger
from leakaudit.empirical import api as empirical_api
from leakaudit.empirical import audit_release, game
from leakaudit.empirical.mutants import CORRECT, MUTANTS, SHAPES, UserDPSGD
from leakaudit.empirical.whitebox import RUNS, dense_canary, runs_for, whitebox_check
from leakaudit.scoring import whitebox as wb

D_LENET = sum(math.prod(s) for s in game.LENET_SHAPES)


def _check(defense, shapes, seed: int = 0, n: int = RUNS) -> dict:
    setup = game.make_setup(defense, 2, shapes, 8, 0.05, 1, torch.Generator().manual_seed(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        vec = game.vectorisable(defense, 2)
    return whitebox_check(defense, setup, shapes, delta=1e-5, seed=seed, vec=vec, chunk=256,
                          n=n)


def test_release_value_is_the_laplace_and_gaussian_eps_of_known_noise():
    rng = np.random.default_rng(0)
    slices = [slice(0, 300), slice(300, 1000)]
    move = np.zeros(1000)
    move[:300], move[300:] = 0.01, -0.02           # L1 = 3 + 14 = 17, L2^2 = 0.03 + 0.28
    lap = rng.laplace(0.0, 0.5, size=(400, 1000))
    value, tol = wb.release_value(move, lap, slices, "laplace")
    assert value == pytest.approx(17 / 0.5, rel=tol) and tol < 0.05
    gauss = rng.normal(0.0, 0.25, size=(400, 1000))
    value, tol = wb.release_value(move, gauss, slices, "gaussian")
    assert value == pytest.approx(math.sqrt(0.31) / 0.25, rel=tol) and tol < 0.05
    # a tensor the canary moves but no noise covers: infinite
    gauss[:, :300] = 0.0
    assert wb.release_value(move, gauss, slices, "gaussian")[0] == math.inf
    with pytest.raises(ValueError, match="family"):
        wb.release_value(move, gauss, slices, "uniform")


def test_ledger_noise_reads_the_family_through_the_registry():
    g, lap, mixed = PrivacyLedger(), PrivacyLedger(), PrivacyLedger()
    g.step(q=1.0, sigma=2.0)
    g.step(q=1.0, sigma=2.0)
    lap.laplace(0.5, sensitivity=1.0)
    mixed.step(q=1.0, sigma=2.0)
    mixed.laplace(0.5, sensitivity=1.0)
    assert wb.ledger_noise(g) == ("gaussian", pytest.approx(math.sqrt(2) / 2))
    assert wb.ledger_noise(lap) == ("laplace", pytest.approx(2.0))
    assert isinstance(wb.ledger_noise(mixed), str)
    assert isinstance(wb.ledger_noise(PrivacyLedger()), str)
    poisson = PrivacyLedger()
    poisson.step(q=0.1, sigma=1.0)
    assert isinstance(wb.ledger_noise(poisson), str)


def test_the_dense_canary_has_the_large_norm_spread_over_every_coordinate():
    c = dense_canary(SHAPES, 2.0)
    flat = torch.cat([t.reshape(-1) for t in c])
    assert float(flat.norm()) == pytest.approx(game.LARGE * 2.0, rel=1e-5)
    assert float(flat.min()) == pytest.approx(float(flat.max()))


class _GlobalRandom(UserDPSGD):
    """Correct DP-SGD that draws from torch's global generator (users do)."""

    def noise(self, shape, std, ctx):
        return torch.randn(shape) * std


class _DataScaledNoise(UserDPSGD):
    """Noise scaled by the batch's largest norm: not additive."""

    def noise(self, shape, std, ctx):
        return torch.randn(shape, generator=ctx.generator) * std * self.scale

    def privatize_batch(self, grads, ctx):
        self.scale = float(self.norms(grads).max())
        return super().privatize_batch(grads, ctx)


def test_code_whose_noise_is_not_from_the_context_is_not_applicable_never_flagged():
    got = _check(_GlobalRandom(), SHAPES)
    assert got["whitebox"].startswith("not applicable: ") and "same seed" in got["whitebox"]
    assert not got["whitebox_sound"] and math.isnan(got["eps_whitebox"])
    got = _check(_DataScaledNoise(), SHAPES)
    assert "varies with the seed" in got["whitebox"] and not got["whitebox_sound"]


@pytest.mark.parametrize("n", [100, RUNS])  # the fewest an audit plays (trials >= 100), most
def test_correct_gaussian_and_laplace_code_is_measured_at_its_claim(n):
    for make, family in ((CORRECT["user-dp-sgd"], "gaussian"),
                         (CORRECT["user-l1-laplace-sgd"], "laplace"),
                         (CORRECT["user-dp-sgd-sigma1"], "gaussian")):
        got = _check(make(), SHAPES, n=n)
        assert got["whitebox"].startswith(family), got["whitebox"]
        assert not got["whitebox_sound"] and not got["whitebox_claim"], got["whitebox"]
        assert got["whitebox_factor"] == pytest.approx(1.0, abs=0.05), got["whitebox"]


def test_the_check_plays_the_audits_trials_per_world_within_its_limits(monkeypatch):
    assert [runs_for(t) for t in (100, RUNS, 10_000)] == [100, RUNS, RUNS]
    played = []

    def spy(*args, n, **kwargs):
        played.append(n)
        return whitebox_check(*args, n=n, **kwargs)

    monkeypatch.setattr(empirical_api, "whitebox_check", spy)
    for trials in (120, 300):
        audit_release(CORRECT["user-dp-sgd"](), point=2, trials=trials, seed=0, shapes=SHAPES,
                      background=8, canaries=["dirac"], statistic="projection")
    assert played == [120, RUNS]


@pytest.mark.slow
@pytest.mark.parametrize("seed", (0, 1, 2))
def test_laplace_scaled_by_the_l2_sensitivity_is_measured_at_sqrt_d_its_claim(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        row = audit_release(MUTANTS["l2-clipped-laplace"].factory(), point=2, trials=200,
                            seed=seed, shapes=game.LENET_SHAPES, background=8,
                            canaries=["dirac"], statistic="projection").rows()[0]
    assert row["eps_whitebox"] > 4.0 * row["eps_claimed"]
    assert row["whitebox_factor"] == pytest.approx(math.sqrt(D_LENET), rel=0.05)
    assert row["sound_violated"] and row["claim_violated"]
    assert row["violated_by"] == "white-box"


@pytest.mark.slow
def test_correct_code_on_lenet_is_not_flagged_by_the_white_box_check():
    for make in (CORRECT["user-l1-laplace-sgd"], CORRECT["user-dp-sgd"]):
        got = _check(make(), game.LENET_SHAPES, seed=1)
        assert not got["whitebox_sound"] and not got["whitebox_claim"], got["whitebox"]
        assert got["whitebox_factor"] == pytest.approx(1.0, abs=0.05), got["whitebox"]
