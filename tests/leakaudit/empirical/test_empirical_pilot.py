"""The pilot: every game plays a share of the selection runs, only the first and the best few
by the pilot play the rest. A bug that shows in one world still wins there, correct code is
still unflagged, and every game keeps a selection score in the report."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from leakaudit import defenses as D
from leakaudit.empirical import api, audit_release, game
from leakaudit.empirical.mutants import CORRECT, MUTANTS, SHAPES


def _audit(defense, trials: int, seed: int = 0, **kw) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # users' code does not declare batching
        return audit_release(defense, point=2, trials=trials, seed=seed, shapes=SHAPES,
                             background=8, **kw).rows()[0]


@pytest.fixture
def small_pilot(monkeypatch):
    """A pilot of 50 runs per side, so that a 1,000-run audit prunes (200 selection runs)."""
    monkeypatch.setattr(api, "PILOT_MIN", 50)


@pytest.mark.slow
def test_a_bug_in_one_world_survives_the_pilot_and_wins(small_pilot):
    r = _audit(MUTANTS["noise-where-nonzero"].factory(), 1000)
    assert r["sound_violated"], r
    assert r["canary"].endswith(("+zero", "+zero-row")), r["canary"]
    # every game keeps a score, the pruned ones their pilot's
    assert set(r["selection"]) >= {game.scenario_name(c, b) for c, b in game.SCENARIOS
                                   if b not in ("empty", "fresh")}


@pytest.mark.slow
def test_correct_code_stays_unflagged_after_the_pilot(small_pilot):
    r = _audit(CORRECT["user-dp-sgd"](), 1000, seed=1)
    assert not r["sound_violated"] and not r["claim_violated"], r


def test_the_pilot_plays_fewer_selection_runs_and_keeps_the_first_game(small_pilot,
                                                                        monkeypatch):
    played: dict[str, int] = {}
    real = game.run_trials

    def counting(template, setup, canary_in, n, reference, *args, **kw):
        if reference is not None and canary_in:
            played[setup.canary_name] = played.get(setup.canary_name, 0) + n
        return real(template, setup, canary_in, n, reference, *args, **kw)

    monkeypatch.setattr(game, "run_trials", counting)
    r = audit_release(D.get("fed-cdp"), point=2, trials=1000, seed=0, shapes=SHAPES,
                      background=8).rows()[0]
    held = {r["canary"], r["mu_canary"]}         # 1,000 held-out runs per side each
    sel = {k: v - (1000 if k in held else 0) for k, v in played.items()}
    finalists = [k for k, v in sel.items() if v == 200]          # the whole selection split
    assert "dirac" in finalists and len(finalists) == api.FINALISTS + 1, sel
    assert all(v == 50 for k, v in sel.items() if k not in finalists), sel   # the pilot only
    assert held <= set(finalists)
    assert set(r["selection"]) == set(played)


def test_the_subspace_statistic_is_one_dot_product_with_the_folded_weights():
    gen = torch.Generator().manual_seed(0)
    setup = game.make_setup(D.get("fed-cdp"), 2, SHAPES, 8, 0.05, 1, gen)
    space = game.make_subspace(setup, 200)
    ref = game.run_trials(D.get("fed-cdp"), setup, False, 200, None, gen, subspace=space)
    reference = game.Reference.from_sums(ref.total, ref.total_sq, 200,
                                         (space, ref.sub_total, ref.sub_sq), setup.direction)
    rows = torch.randn(64, setup.direction.numel(), generator=gen)
    got = game.statistics(rows, setup, reference, ("subspace",))["subspace"]
    want = (space.project(rows - reference.mean.float()).double() @ reference.weights).numpy()
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
