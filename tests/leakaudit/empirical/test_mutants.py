"""The auditor's regression suite: every mutant flagged at its budget, correct code never.

Fast: a few mutants at a small budget on one seed. Sweeps (``make test-sweeps``,
``--sweeps``; minutes per test): every mutant at the budget the suite states, on
three seeds; the correct user DP-SGD and the shipped defenses with a finite sound eps at
10,000 held-out runs per side on three seeds, never flagged.
"""

from __future__ import annotations

import math
import warnings

import pytest

from leakaudit import defenses as D
from leakaudit.empirical import audit_release, privacy_audit
from leakaudit.empirical.mutants import CORRECT, MUTANTS, SHAPES

SEEDS = (0, 1, 2)


def _audit(defense, trials: int, seed: int) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # users' code does not declare batching
        return audit_release(defense, point=2, trials=trials, seed=seed, shapes=SHAPES,
                             background=8).rows()[0]


def test_the_suite_states_a_budget_and_a_finite_claim_for_every_mutant():
    assert len(MUTANTS) >= 10
    for name, m in MUTANTS.items():
        assert m.bug and 100 <= m.budget <= 2000, name
        d = m.factory()
        assert d.name == name and d.level == "instance"
    # every mutant's ledger claims a finite eps: a flag is a false claim, not an inf ledger
    r = _audit(MUTANTS["noise-drawn-once"].factory(), 100, 0)
    assert math.isfinite(r["eps_sound"]) and r["sound_violated"]


@pytest.mark.parametrize("name", ["noise-on-some-tensors", "missing-clip-on-a-layer",
                                  "centred-noise"])
def test_a_mutant_is_flagged_at_a_small_budget(name):
    r = _audit(MUTANTS[name].factory(), 100, 0)
    assert r["sound_violated"], r


@pytest.mark.slow
def test_the_correct_mechanism_is_not_flagged_at_a_small_budget():
    r = _audit(CORRECT["user-dp-sgd"](), 200, 0)
    assert not r["sound_violated"] and r["eps_lower"] <= r["eps_sound"]
    assert r["mu_lower"] <= r["mu_sound"]


@pytest.mark.slow
@pytest.mark.sweep  # minutes each: make test-sweeps (--sweeps)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_mutant_is_flagged_at_its_budget_on_every_seed(name, seed):
    m = MUTANTS[name]
    r = _audit(m.factory(), m.budget, seed)
    assert r["sound_violated"], (name, seed, r["eps_lower"], r["mu_lower"], r["eps_sound"])


@pytest.mark.slow
@pytest.mark.sweep  # minutes each: make test-sweeps (--sweeps)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_user_code_is_never_flagged_at_ten_thousand_runs(name, seed):
    r = _audit(CORRECT[name](), 10_000, seed)
    assert not r["sound_violated"] and not r["claim_violated"], r


FINITE_SOUND = ["fed-cdp", "adap-dp-fl", "dpfl-agn", "adadp", "adaclip", "fed-sdp-server",
                "fed-sdp-client", "quantile-clip", "cos-adaptive-laplace-public", "dssgd-dp"]


@pytest.mark.slow
@pytest.mark.sweep  # minutes each: make test-sweeps (--sweeps)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", FINITE_SOUND)
def test_shipped_defenses_are_never_flagged_at_ten_thousand_runs(name, seed):
    rows = privacy_audit([D.get(name)], points=[0, 1, 2], trials=10_000, seed=seed,
                         shapes=SHAPES, background=8, skip_silent=True).rows()
    for r in rows:
        assert not r["sound_violated"], (name, r["point"], r)
