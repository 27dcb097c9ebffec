"""The score-to-bound engine (leakaudit.scoring): one game for every audit, at the
foundations (no torch, no simulator, no defense), and record/replay on it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from leakaudit.interop.replay import replay_row
from leakaudit.scoring import bounds


def _replay(out: np.ndarray, into: np.ndarray, seed: int) -> dict:
    """A replay row of one-coordinate releases: the canary moves the release by 2, noise 1."""
    paired_out = np.random.default_rng(seed + 99).normal(size=(100, 1))
    return replay_row(library="test", version="0", mode="m", relation="add-remove",
                      out=out[:, None], into=into[:, None], paired_in=paired_out + 2.0,
                      paired_out=paired_out, sensitivity=2.0, noise_std=1.0, mu_claimed=2.0,
                      mu_sound=2.0, delta=1e-5, confidence=0.95, seed=seed)


def test_replay_gives_the_bound_of_the_empirical_audit_on_the_same_scores():
    # N(0, 1) vs N(2, 1), 4,000 per side, 20 seeds: the copy replay used to carry gave
    # eps >= 2.43 on average where the empirical game gives 3.41
    got, ref = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        out, into = rng.normal(size=4000), rng.normal(2.0, 1.0, size=4000)
        row = _replay(out, into, seed)
        got.append(row["eps_lower"])
        ref.append(bounds.bounds_from_scores(out, into, seed=seed)["eps_lower"])
        assert row["statistic"] in ("projection", "energy") and row["finding"] == "none"
    assert np.mean(got) == pytest.approx(np.mean(ref), abs=0.05)
    assert 3.2 < np.mean(got) < 3.6


def test_the_winning_candidate_is_chosen_on_the_selection_split_only():
    rng = np.random.default_rng(0)
    signal = (rng.normal(size=2000), rng.normal(1.5, 1.0, size=2000))
    noise = (rng.normal(size=2000), rng.normal(size=2000))
    got = bounds.bounds_from_candidates({"noise": noise, "signal": signal}, seed=0)
    assert got["eps_candidate"] == "signal" and got["mu_candidate"] == "signal"
    assert 1.0 < got["mu_lower"] <= 1.5 + 1e-9
    alone = bounds.bounds_from_scores(*signal, seed=0)
    assert got["mu_lower"] == alone["mu_lower"] and got["eps_lower"] == alone["eps_lower"]
    with pytest.raises(ValueError, match="same runs"):
        bounds.bounds_from_candidates({"a": signal, "b": (signal[0][:10], signal[1])})
    with pytest.raises(ValueError, match="at least one"):
        bounds.bounds_from_candidates({})


def test_held_out_test_and_curve_points_are_clopper_pearson():
    out, into = np.zeros(1000), np.ones(1000)
    rule = bounds.Threshold(0.5, 1)
    tested = bounds.test_rule(out, into, rule, 0.05, 1e-5, "eps")
    assert tested.fpr == pytest.approx(bounds.clopper_pearson_upper(0, 1000, 0.025))
    assert tested.bound == pytest.approx(bounds.eps_lower_bound(tested.fpr, tested.fnr, 1e-5))
    points = bounds.curve_points([rule, rule], out, into, 0.05)
    assert points[0][0] == pytest.approx(bounds.clopper_pearson_upper(0, 1000, 0.0125))


@pytest.mark.slow  # a fresh interpreter: about 3 s
def test_the_engine_loads_neither_torch_nor_the_simulator_nor_the_defenses():
    heavy = "m == 'torch' or m.startswith(('leakaudit.fl', 'leakaudit.defenses', " \
        "'leakaudit.empirical'))"
    code = ("import sys, leakaudit.scoring\n"
            f"print(' '.join(m for m in sys.modules if {heavy}))\n"
            "import leakaudit.interop.replay\n"
            f"print(' '.join(m for m in sys.modules if ({heavy}) and m != 'torch'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert loaded.stdout.split("\n")[:2] == ["", ""]
