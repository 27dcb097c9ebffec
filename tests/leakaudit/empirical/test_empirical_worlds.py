"""The game searches the worlds: bugs that show only on a dataset (zero or split gradients),
a call (a batch above its declared size, a later round, a fresh instance) or a statistic (a
lattice) are flagged in that world, correct code is not, and a world the code cannot run is
replaced (an empty batch) or named (anything else), never silently dropped."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from leakaudit.empirical import audit_release, game
from leakaudit.empirical.mutants import CORRECT, MUTANTS, SHAPES, UserDPSGD

#: each bug, the world that shows it, and the runs per side that suffice there
WORLDS = [("noise-where-nonzero", "dirac+zero", 200), ("median-clip", "dirac+split", 200),
          ("seeded-once", "dirac+fresh", 200), ("lattice-noise", "lattice+zero", 200),
          ("clip-first-rows", "large+above-declared", 200),
          ("decaying-noise", "dirac+round-1", 2000)]


def _audit(defense, trials: int, seed: int = 0, **kw) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # users' code does not declare batching
        return audit_release(defense, point=2, trials=trials, seed=seed, shapes=SHAPES,
                             background=8, **kw).rows()[0]


@pytest.mark.parametrize("name,world,trials", [w for w in WORLDS if w[2] <= 500])
def test_each_bug_is_flagged_in_the_world_that_shows_it(name, world, trials):
    r = _audit(MUTANTS[name].factory(), trials, canaries=[world])
    assert r["sound_violated"], (name, r["eps_lower"], r["mu_lower"], r["eps_sound"])


@pytest.mark.slow
def test_noise_that_decays_with_the_round_is_flagged_in_round_one_only():
    mutant = MUTANTS["decaying-noise"].factory
    assert not _audit(mutant(), 2000, canaries=["dirac"])["sound_violated"]
    r = _audit(mutant(), 2000, canaries=["dirac+round-1"])
    assert r["sound_violated"] and r["violated_by"] == "mu", r


@pytest.mark.slow
@pytest.mark.parametrize("world", sorted({w for _, w, _ in WORLDS}))
def test_correct_user_code_is_not_flagged_in_any_world(world):
    r = _audit(CORRECT["user-dp-sgd"](), 500, canaries=[world])
    assert not r["sound_violated"] and not r["claim_violated"], (world, r)


@pytest.mark.slow
def test_the_worlds_are_needed_the_plain_game_misses_what_they_show():
    for name in ("noise-where-nonzero", "median-clip", "seeded-once", "clip-first-rows"):
        r = _audit(MUTANTS[name].factory(), 200, canaries=["dirac", "large"])
        assert not r["sound_violated"], (name, r)


def test_a_generator_seeded_in_init_gives_identical_releases_in_fresh_instances():
    setup = game.make_setup(UserDPSGD(), 2, SHAPES, 4, 0.05, 1, torch.Generator().manual_seed(0))
    bound = game.canary_bound(UserDPSGD())
    for factory, same in ((MUTANTS["seeded-once"].factory, True), (UserDPSGD, False)):
        fresh = game.with_scenario(setup, "dirac", setup.canary, "fresh", bound,
                                   torch.Generator().manual_seed(1), pristine=factory())
        rows = game.run_trials(factory(), fresh, False, 3, None,
                               torch.Generator().manual_seed(2), vectorise=False)
        spread = float(rows.total_sq.sum() / 3 - (rows.total / 3).pow(2).sum())
        assert (spread < 1e-6) is same, factory


def test_an_empty_batch_the_code_cannot_take_is_replaced_by_one_zero_gradient():
    # UserDPSGD takes norms with g.reshape(g.shape[0], -1), which fails on 0 rows
    r = _audit(CORRECT["user-dp-sgd"](), 100, canaries=["dirac+empty"])
    assert r["replaced"].startswith("dirac+empty -> dirac+zero-row (RuntimeError")
    assert r["canary"] == "dirac+zero-row" and not r["sound_violated"]


class _FailsOnZeros(UserDPSGD):
    """Refuses a batch whose gradients are all zero (any other failure of a world)."""

    name = "fails-on-zeros"

    def privatize_batch(self, grads, ctx):
        if all(float(g.abs().sum()) == 0.0 for g in grads[:1]) and grads[0].shape[0] > 1:
            raise ZeroDivisionError("all-zero batch")
        return super().privatize_batch(grads, ctx)


def test_a_world_the_code_cannot_run_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"cannot run the audit's game 'dirac\+zero'.*"
                                         r"ZeroDivisionError"):
        _audit(_FailsOnZeros(), 100, canaries=["dirac", "dirac+zero"])


def test_the_lattice_statistic_sees_a_lattice_and_nothing_in_continuous_noise():
    canary = torch.zeros(101, dtype=torch.bool)
    canary[0] = True
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(400, 101, generator=g)
    lattice = torch.round(noise * 4) / 4
    off = lattice.clone()
    off[:, 0] += game.LATTICE * 0.3
    assert np.all(game.lattice_offset(lattice, canary) < 1e-6)
    assert np.all(game.lattice_offset(off, canary) > 0.1)
    cont = game.lattice_offset(noise, canary)
    assert 0.15 < cont.mean() < 0.35          # uniform on [0, 1/2]: no signal either way
