"""One pipeline behind both entry points: audit() attacks the observations of a simulated
round exactly as audit_observations() attacks the same observations handed to it."""

import copy
import dataclasses
import json

import pytest
import torch

import leakaudit
from leakaudit import data, fl, models
from leakaudit.auditing import auditor
from leakaudit.auditing.cells import content_key, run_cell
from leakaudit.auditing.engines import Engine
from leakaudit.auditing.pipeline import protocol_options, run_jobs
from leakaudit.auditing.trainings import Setting
from leakaudit.records import ResultsFile

L, B = 5, 2
BUDGET = dict(attacks=("fedavg-l2",), max_iterations=3, restarts=1, seed=0)


@pytest.fixture(scope="module")
def both():
    """The audit's cell for one client of L = 5 local steps, and the observation it saw."""
    report = leakaudit.audit(["none"], points=(1,), examples=1, trained=True, local_steps=L,
                             batch_size=B, engine="serial", progress=False, **BUDGET)
    ds = data.resolve("digits", seed=0)
    model = models.resolve(None, ds, seed=0)
    plan = auditor.AuditPlan.make(examples=1, rounds=1, max_iterations=3, restarts=1,
                                  points=(1,), attacks=BUDGET["attacks"], batch_size=B,
                                  local_steps=L)
    defense = fl.resolve_defense("none")
    clients = max(plan.profile.clients, plan.examples)
    run = Setting(plan, ds, model, clients, 0).attack_round(defense, model)
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


# ------------------------------------------------------------------ cells of the same content
@pytest.fixture(scope="module")
def same_content():
    """The idlg cells of leak points 0 and 1 under "none" (the same update: the defense
    acts nowhere) and point 2 (the local gradient), 2 L-BFGS steps each."""
    ds = data.resolve("digits", seed=0)
    model = models.resolve(None, ds, seed=0)
    plan = auditor.AuditPlan.make(examples=1, rounds=1, max_iterations=2, restarts=1,
                                  attacks=("idlg",))
    defense = fl.resolve_defense("none")
    return Setting(plan, ds, model, 10, 0).attack_jobs(
        defense, model, key=lambda t: f"none()|initial|{t.observation.point}",
        pending={f"none()|initial|{p}|idlg|0" for p in (0, 1, 2)})


class _Counting(Engine):
    def __init__(self):
        self.ran = []

    def run(self, jobs):
        self.ran += [k for k, _ in jobs]
        yield from super().run(jobs)


def test_content_key_sees_every_bit_of_the_observation(same_content):
    (k0, j0), (k1, j1), (k2, j2) = same_content
    assert content_key(j0) == content_key(j1) != content_key(j2)
    nudged = copy.deepcopy(j1)
    g = nudged.spec.gradients[0].view(-1)
    g[0] = torch.nextafter(g[0], torch.tensor(float("inf")))
    assert content_key(nudged) != content_key(j0)
    nudged = copy.deepcopy(j1)
    nudged.truth.inputs.view(-1)[0] += 1
    assert content_key(nudged) != content_key(j0)


@pytest.mark.slow  # three short attacks
def test_a_cell_of_the_same_content_runs_once_and_gets_the_record_it_would_compute(
        same_content, tmp_path):
    store = ResultsFile(str(tmp_path / "r.jsonl"), {"test": 1})
    engine, memo = _Counting(), {}
    run_jobs(same_content, engine, store, memo=memo)
    keys = [k for k, _ in same_content]
    assert engine.ran == [keys[0], keys[2]]  # point 1 reused point 0's record
    assert _cell_lines(tmp_path / "r.jsonl") == keys  # written in the order of the jobs
    alone = run_cell(same_content[1][1])  # what point 1 computes on its own
    got = store.get("cell", keys[1])
    assert {k: v for k, v in got.items() if k != "seconds"} == \
        {k: v for k, v in json.loads(json.dumps(alone)).items() if k != "seconds"}
    assert got["point"] == 1 and store.get("cell", keys[0])["point"] == 0
    # a later call (the next defense) finds them in the memo: nothing runs again
    again = ResultsFile(str(tmp_path / "again.jsonl"), {"test": 1})
    run_jobs(same_content, engine, again, memo=memo)
    assert engine.ran == [keys[0], keys[2]]
    assert _cell_lines(tmp_path / "again.jsonl") == keys


def _cell_lines(path):
    return [r["key"] for r in map(json.loads, path.read_text().splitlines())
            if r["kind"] == "cell"]


def test_content_key_sees_every_entry_of_an_array_option(same_content):
    (_, job), _, _ = same_content
    prior = torch.zeros(1, 40, 40)
    other = prior.clone()
    other[0, 20, 20] = 1e-3  # repr() of a tensor this large elides this entry
    a, b = copy.deepcopy(job), copy.deepcopy(job)
    a.spec.config.options["prior"], b.spec.config.options["prior"] = prior, other
    assert content_key(a) != content_key(b) != content_key(job)
