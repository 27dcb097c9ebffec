"""Trainings are units of the engines, like attack cells: the audit's trainings under each
defense, the seeds of a one-run audit and the trainings of a multi-run game. The same seed
gives the same records on every engine; each unit is stored as it finishes, and a resumed
run does not redo it."""

import json

import pytest
import torch

import leakaudit
from leakaudit import engines, workload
from leakaudit.auditing import AuditPlan, EngineConfig, audit
from leakaudit.auditing.trainings import Training, pack_weights, unpack_weights

# two defenses, three stages: the profile's training (2 rounds), a 1-round training, and
# the given weights; one tiny attack per (stage, point)
PLAN = AuditPlan.make(attacks=("idlg",), points=(2,), examples=1, rounds=2, max_iterations=3,
                      stages=("initial", "round1", "trained"))
DEFENSES = ["none", "fed-cdp"]
ONE_RUN = dict(canaries=50, rounds=1, clients=3, local_steps=1, batch_size=20)


def _kinds(path):
    return [(r["kind"], r["key"]) for r in map(json.loads, path.read_text().splitlines())]


def _table(rep):
    cells = [{k: v for k, v in c.items() if k != "seconds"} for c in rep.cells]
    return rep.defenses, cells


def _rows(rep):
    """The rows as text: nan equals nan (a row of a fresh and of a resumed run)."""
    return json.dumps(rep.rows())


def _no_training(monkeypatch):
    def boom(self):
        raise AssertionError("a stored training ran again")

    monkeypatch.setattr(Training, "run", boom)


def test_weights_are_stored_bit_for_bit():
    ds = leakaudit.data.resolve("digits", seed=0)
    net = leakaudit.models.resolve(None, ds, seed=0)
    back = unpack_weights(json.loads(json.dumps(pack_weights(net))))
    for name, t in net.state_dict().items():
        assert back[name].dtype == t.dtype and bool((back[name] == t).all()), name


@pytest.fixture(scope="module")
def serial_audit(tmp_path_factory):
    path = tmp_path_factory.mktemp("serial") / "results.jsonl"
    return audit(DEFENSES, plan=PLAN, engine="serial", results=str(path),
                 progress=False), path


@pytest.mark.slow  # 4 short trainings and 6 tiny attacks per engine
def test_the_audit_trains_on_the_engine_and_every_engine_gives_one_table(serial_audit,
                                                                          tmp_path):
    rep, path = serial_audit
    kinds = _kinds(path)
    # the trainings first (units of the engine), each stored once, with the weights a
    # stage attacks
    assert kinds[:8] == [
        ("weights", "training|none()"), ("training", "none()"),
        ("weights", "stage|none()|round1"), ("stage", "none()|round1"),
        ("weights", "training|fed-cdp(clip=4.0, sigma=0.9)"),
        ("training", "fed-cdp(clip=4.0, sigma=0.9)"),
        ("weights", "stage|fed-cdp(clip=4.0, sigma=0.9)|round1"),
        ("stage", "fed-cdp(clip=4.0, sigma=0.9)|round1")]
    got = audit(DEFENSES, plan=PLAN, engine=EngineConfig.make("process", workers=2),
                results=str(tmp_path / "p.jsonl"), progress=False)
    assert _table(got) == _table(rep)
    assert sorted(_kinds(tmp_path / "p.jsonl")) == sorted(kinds)


@pytest.mark.slow
def test_a_resumed_audit_trains_nothing_again_and_says_what_it_reused(serial_audit,
                                                                       tmp_path, monkeypatch,
                                                                       capsys):
    rep, path = serial_audit
    lines = path.read_text().splitlines()
    cells = [i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "cell"]
    partial = tmp_path / "partial.jsonl"  # as if killed after all but the last two cells
    partial.write_text("\n".join(ln for i, ln in enumerate(lines)
                                 if i not in cells[-2:]) + "\n")
    _no_training(monkeypatch)
    got = audit(DEFENSES, plan=PLAN, engine="serial", results=str(partial), progress=True)
    assert _table(got) == _table(rep)
    assert sorted(_kinds(partial)) == sorted(_kinds(path))  # each unit stored once
    err = capsys.readouterr().err
    # 4 trainings and 4 cells reused from the file, 2 cells run (the trained stage's cells
    # of the two defenses: different weights, nothing shared)
    assert "leakaudit: 2 units run (" in err and "8 reused from the results file" in err


def test_the_workload_counts_units_and_their_cpu_time(capsys):
    class Sleepy:
        def __init__(self, n):
            self.n = n

        def run(self):
            return {"n": sum(range(self.n))}

    store = leakaudit.records.ResultsFile(None, {"t": 1})
    store.put("u", "a", {"n": 0})
    with workload.Workload(EngineConfig.make("serial"), total=3, done=1, desc="t") as work:
        got = work.units(store, "u", [("a", Sleepy(1)), ("b", Sleepy(10**6)),
                                      ("c", Sleepy(3))])
    assert got == {"a": {"n": 0}, "b": {"n": sum(range(10**6))}, "c": {"n": 3}}
    assert work.ran == 2 and work.cpu > 0
    assert "leakaudit: 2 units run (" in capsys.readouterr().err


def test_privacy_audit_training_checks_its_seeds_and_engine_before_any_work():
    with pytest.raises(ValueError, match="seeds"):
        leakaudit.privacy_audit_training("fed-cdp", seeds=[1, 1], **ONE_RUN)
    with pytest.raises(ValueError, match="seed or seeds"):
        leakaudit.privacy_audit_training("fed-cdp", seed=3, seeds=[1, 2], **ONE_RUN)
    with pytest.raises(ValueError, match="engine"):
        leakaudit.privacy_audit_training("fed-cdp", engine="dask", **ONE_RUN)


@pytest.fixture(scope="module")
def one_run_serial(tmp_path_factory):
    path = tmp_path_factory.mktemp("onerun") / "r.jsonl"
    rep = leakaudit.privacy_audit_training("fed-cdp", seeds=[0, 1, 2, 3], results=str(path),
                                           **ONE_RUN)
    return rep, path


@pytest.mark.slow  # 4 one-round trainings per engine
def test_one_run_seeds_are_units_equal_on_every_engine_and_resumed(one_run_serial,
                                                                   tmp_path, capsys):
    rep, path = one_run_serial
    assert [r["seed"] for r in rep.rows()] == [0, 1, 2, 3]
    games = {(r["included"], r["correct"], r["mu_correct"]) for r in rep.rows()}
    assert len(games) == 4  # 4 seeds, 4 games
    alone = leakaudit.privacy_audit_training("fed-cdp", seed=2, **ONE_RUN).rows()[0]
    assert json.dumps(rep.rows()[2]) == json.dumps(alone)  # no seed depends on another
    got = leakaudit.privacy_audit_training("fed-cdp", seeds=[0, 1, 2, 3], engine=EngineConfig
                                           .make("process", workers=2), **ONE_RUN)
    assert _rows(got) == _rows(rep)
    lines = path.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:2]) + "\n")  # killed after two seeds
    again = leakaudit.privacy_audit_training("fed-cdp", seeds=[0, 1, 2, 3],
                                             results=str(partial), progress=True, **ONE_RUN)
    assert _rows(again) == _rows(rep)
    assert partial.read_text().splitlines() == lines  # the two others, once each
    assert "2 units run (" in capsys.readouterr().err


@pytest.mark.slow  # 8 one-round trainings per engine
def test_the_multi_run_game_trains_on_the_engine_and_resumes(tmp_path, monkeypatch):
    kw = dict(runs=8, rounds=1, clients=3, local_steps=1, batch_size=20, seed=5)
    path = tmp_path / "r.jsonl"
    rep = leakaudit.privacy_audit_training("fed-cdp", results=str(path), **kw)
    row = rep.rows()[0]
    assert row["mode"] == "multi-run" and row["trials"] == 8
    assert sum(k.endswith("|in") for _, k in _kinds(path)) == 4  # the canary in half
    got = leakaudit.privacy_audit_training(
        "fed-cdp", engine=EngineConfig.make("process", workers=2), **kw)
    assert _rows(got) == _rows(rep)
    lines = path.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:5]) + "\n")
    ran = []
    real = engines.execute
    monkeypatch.setattr(engines, "execute", lambda unit: ran.append(unit) or real(unit))
    again = leakaudit.privacy_audit_training("fed-cdp", results=str(partial), **kw)
    assert _rows(again) == _rows(rep) and len(ran) == 3
    assert sorted(partial.read_text().splitlines()) == sorted(lines)


def test_device_auto_is_chosen_by_the_worker_and_changes_nothing_on_a_cpu(monkeypatch):
    plan = AuditPlan.make(attacks=("idlg",), points=(2,), examples=1, max_iterations=2,
                          trained=True, device="auto")
    assert plan.device == "auto"  # resolved where the cell runs, not where it is planned
    here = audit(["none"], plan=plan, engine="serial", progress=False)
    cpu = audit(["none"], plan=plan.replace(device=None), engine="serial", progress=False)
    assert _table(here)[1] == _table(cpu)[1]
    seen = []
    real = leakaudit.attacks.base.check_device
    monkeypatch.setattr(leakaudit.attacks.base, "check_device",
                        lambda name, value: seen.append(value) or real(name, value))
    audit(["none"], plan=plan, engine="serial", progress=False)
    assert seen == ["auto"]  # the worker's own check: CUDA where it has it, else its CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert str(real("device", "auto")) == "cuda"  # on a worker with a GPU
