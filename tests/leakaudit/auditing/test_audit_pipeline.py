"""One pipeline behind both entry points: audit() attacks the observations of a simulated
round exactly as audit_observations() attacks the same observations handed to it."""

import dataclasses

import pytest

import leakaudit
from leakaudit import data, models
from leakaudit.auditing import auditor
from leakaudit.auditing.pipeline import protocol_options

L, B = 5, 2
BUDGET = dict(attacks=("fedavg-l2",), max_iterations=3, restarts=1, seed=0)


@pytest.fixture(scope="module")
def both():
    """The audit's cell for one client of L = 5 local steps, and the observation it saw."""
    report = leakaudit.audit(["none"], points=(1,), examples=1, trained=True, local_steps=L,
                             batch_size=B, engine="serial", progress=False, **BUDGET)
    ds = data.resolve("digits", seed=0)
    model = models.resolve(None, ds, seed=0)
    plan = auditor._plan("quick", 1, 1, 3, 1, 1, (1,), BUDGET["attacks"], B, L)
    defense = auditor._resolve_defenses(["none"], None)[0]
    clients = max(plan.profile.clients, plan.examples)
    run = auditor._attack_round(defense, ds, model, plan, clients, 0)
    obs = run.observations_at(1)[0]
    return report, ds, model, obs, run.truth(obs)


def _observed(ds, model, obs, truth):
    return leakaudit.audit_observations(
        [obs], attacks=BUDGET["attacks"], model=model, truths=[truth], input_shape=ds.input_shape,
        num_classes=ds.num_classes, engine="serial", progress=False,
        max_iterations=BUDGET["max_iterations"], restarts=BUDGET["restarts"],
        seed=BUDGET["seed"])


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_the_observation_tells_the_attack_the_protocol(both):
    _, _, _, obs, truth = both
    assert obs.local_steps == L and obs.examples_behind == B == truth.inputs.shape[0]
    assert protocol_options("fedavg-l2", obs) == {
        "local_steps": L, "client_lr": obs.lr, "client_optimizer": "sgd"}
    assert protocol_options("idlg", obs) == {}  # a one-step attack is told nothing more


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_five_local_steps_give_the_same_reconstruction_through_both_entry_points(both):
    report, ds, model, obs, truth = both
    simulated, = report.cells
    observed, = _observed(ds, model, obs, truth).cells
    for column in ("reconstruction", "mse", "gradient_loss", "label_accuracy", "iterations"):
        assert observed[column] == simulated[column], column
    # and L is what made it: the same update read as one local step is another attack
    one_step = dataclasses.replace(obs, local_steps=1)
    other, = _observed(ds, model, one_step, truth).cells
    assert other["gradient_loss"] != simulated["gradient_loss"]
