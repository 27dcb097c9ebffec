"""Training-run audit: the multi-run mode (R runs, one canary in a random half)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import stats as sps

import leakaudit
from leakaudit.data import resolve
from leakaudit.scoring.bounds import clopper_pearson_upper


def _tiny() -> object:
    ds = resolve("digits")
    return dataclasses.replace(ds, x_train=ds.x_train[:40], y_train=ds.y_train[:40])


@pytest.mark.slow
def test_multi_run_of_none_reaches_the_clopper_pearson_limit_of_its_runs():
    # one gradient canary in every batch (batch = the client's data): perfectly separated
    runs = 40
    row = leakaudit.privacy_audit_training(
        "none", runs=runs, dataset=_tiny(), rounds=1, clients=1, local_steps=1,
        batch_size=64, seed=0).rows()[0]
    assert row["mode"] == "multi-run" and row["trials"] == runs
    n_eval = runs // 2 - runs // 4                  # held out per side (select_fraction 1/2)
    fpr = clopper_pearson_upper(0, n_eval, 0.05 / 2 / 2)
    assert row["eps_lower"] == pytest.approx(math.log((1 - 1e-5 - fpr) / fpr))
    assert row["mu_lower"] == pytest.approx(2 * sps.norm.ppf(1 - fpr))
    assert not row["sound_violated"]


@pytest.mark.slow
def test_multi_run_of_a_weak_dp_fedavg_stays_below_its_sound_eps():
    row = leakaudit.privacy_audit_training(
        "fed-sdp-server", defense_params=dict(clip=1.0, sigma=0.5), runs=16, dataset=_tiny(),
        rounds=1, clients=2, local_steps=1, batch_size=16, seed=0).rows()[0]
    assert row["kind"] == "client" and row["mode"] == "multi-run"
    assert 0 <= row["eps_lower"] <= row["eps_sound"] < math.inf and not row["sound_violated"]
