"""Where the audit's attack cells run: audit(engine="serial" | "process" | "ray").

Every engine gives the same cells for the same seed, and resumes from the results file the
same way. Ray is started once here (it takes seconds), by audit() itself, which must shut it
down again; a Ray the caller started, which audit() must leave alone, is a real cluster's
connection in test_ray_cluster.py (and a stand-in here).
"""

import importlib.util
import json
import os
import sys

import pytest
from _extras import require

from leakaudit import engines
from leakaudit.auditing import ENGINES, audit, auditor
from leakaudit.cli import build_parser
from leakaudit.cli import main as cli_main

# trained=True: a one-step "training" run; the cells are what the engines run
TINY = dict(defenses=["none", "fed-cdp"], attacks=("idlg",), points=(0, 1, 2), examples=1,
            rounds=1, max_iterations=10, trained=True, progress=False)


def _cells(rep):
    return [{k: v for k, v in c.items() if k != "seconds"} for c in rep.cells]


def _cell_keys(path):
    return [r["key"] for r in map(json.loads, path.read_text().splitlines())
            if r["kind"] == "cell"]


def _partial(path, dest, keep):
    """A copy of results file ``path`` with the lines for which keep(record) is true."""
    lines = [ln for ln in path.read_text().splitlines() if keep(json.loads(ln))]
    dest.write_text("\n".join(lines) + "\n")
    return dest


def _trainings_only(path, dest):
    """As if killed after training: every cell is left to the engine."""
    return _partial(path, dest, lambda r: r["kind"] == "training")


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    path = tmp_path_factory.mktemp("serial") / "results.jsonl"
    return audit(results=str(path), engine="serial", **TINY), path


def _no_work(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(auditor, "_train", boom)
    monkeypatch.setattr(auditor.data_mod, "load", boom)
    monkeypatch.setattr(auditor.data_mod, "resolve", boom)


# ------------------------------------------------------------------ arguments, no Ray needed
def test_bad_engine_fails_before_any_work(monkeypatch, tmp_path):
    _no_work(monkeypatch)
    with pytest.raises(ValueError, match="engine"):
        audit(engine="dask", results=str(tmp_path / "r.jsonl"), **TINY)
    with pytest.raises(ValueError, match="ray_address"):
        audit(engine="process", ray_address="ray://head:10001", **TINY)
    assert not (tmp_path / "r.jsonl").exists()


def test_missing_ray_is_a_clear_error(monkeypatch, tmp_path, capsys):
    _no_work(monkeypatch)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ImportError, match=r"engine='ray'.*leakaudit\[ray\]"):
        audit(engine="ray", **TINY)
    assert cli_main(["audit", "--engine", "ray", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "leakaudit[ray]" in capsys.readouterr().err


def test_the_pool_never_forks_a_process_whose_torch_threads_may_run(monkeypatch):
    # a fork server (single-threaded, torch imported once) where the platform has one,
    # else spawn; never plain fork
    import multiprocessing

    got = engines.pool_context().get_start_method()
    assert got == ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                   else "spawn")
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn", "fork"])
    assert engines.pool_context().get_start_method() == "spawn"
    assert all(importlib.util.find_spec(m) for m in engines.PRELOAD)


def test_cli_offers_every_engine():
    parser = build_parser()
    assert parser.parse_args(["audit"]).engine == "process"
    for engine in ENGINES:
        args = parser.parse_args(["audit", "--engine", engine, "--ray-address", "auto"])
        assert (args.engine, args.ray_address) == (engine, "auto")
    assert cli_main(["audit", "--engine", "dask"]) == 2


class _FakeRay:
    """Just enough of Ray's API, run in this process; finishes tasks in reverse order."""

    class Ref:
        def __init__(self, value):
            self.value = value

    def __init__(self, initialized=False):
        self.initialized = initialized
        self.calls = []

    def is_initialized(self):
        return self.initialized

    def init(self, address=None, **kwargs):
        self.calls.append(("init", address, kwargs, os.environ.get("RAY_USAGE_STATS_ENABLED")))
        self.initialized = True

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.initialized = False

    def remote(self, **options):
        def wrap(fn):
            return type("Task", (), {"remote": staticmethod(lambda job: self.Ref(fn(job)))})

        return wrap

    def wait(self, refs, num_returns=1):
        return refs[-num_returns:], refs[:-num_returns]

    def get(self, ref):
        return ref.value

    def cancel(self, ref):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("address", [None, "ray://head:10001"])
def test_ray_init_arguments_and_shutdown(serial, tmp_path, monkeypatch, address):
    rep, path = serial
    lines = path.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:-1]) + "\n")  # the last cell is missing
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # the fake cluster has no host to answer the reachability check the audit makes first
    monkeypatch.setattr(engines, "check_ray_address", lambda address: None)
    again = audit(engine="ray", ray_address=address, workers=3, results=str(partial), **TINY)
    assert _cells(again) == _cells(rep)
    (_, addr, kwargs, usage), shutdown = fake.calls
    assert addr == address and usage == "0" and shutdown == ("shutdown",)
    if address is None:  # a local instance sized by `workers`
        assert kwargs["num_cpus"] == 3 and kwargs["include_dashboard"] is False
    else:  # a cluster: its own resources
        assert "num_cpus" not in kwargs
    assert "RAY_USAGE_STATS_ENABLED" not in os.environ  # set only while starting Ray


@pytest.mark.slow
def test_ray_without_dev_shm_keeps_its_object_store_in_tmp(serial, tmp_path, monkeypatch):
    _, path = serial
    partial = _partial(path, tmp_path / "partial.jsonl",
                       lambda r: r["key"] != "none()|initial|2|idlg|0")
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    isdir = os.path.isdir
    monkeypatch.setattr(engines.os.path, "isdir", lambda p: p != "/dev/shm" and isdir(p))
    audit(engine="ray", workers=1, results=str(partial), **TINY)
    kwargs = fake.calls[0][2]
    if sys.platform.startswith("linux"):  # Ray itself would fail to open /dev/shm
        assert kwargs["_plasma_directory"] and kwargs["object_store_memory"] >= 75 * 2**20


@pytest.mark.slow
def test_ray_initialised_by_the_caller_is_left_alone(serial, tmp_path, monkeypatch):
    rep, path = serial
    lines = path.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:-1]) + "\n")
    fake = _FakeRay(initialized=True)
    monkeypatch.setitem(sys.modules, "ray", fake)
    again = audit(engine="ray", results=str(partial), **TINY)
    assert _cells(again) == _cells(rep) and fake.calls == [] and fake.initialized


# ------------------------------------------------------------------ the real engines
@pytest.mark.slow
def test_process_engine_matches_serial(serial, tmp_path):
    rep, path = serial
    part = _trainings_only(path, tmp_path / "r.jsonl")
    got = audit(engine="process", workers=2, results=str(part), **TINY)
    assert _cells(got) == _cells(rep)
    assert sorted(_cell_keys(part)) == sorted(_cell_keys(path))


@pytest.mark.slow
def test_ray_engine_matches_serial_and_shuts_down_its_ray(serial, tmp_path):
    ray = require("ray", "ray")
    rep, path = serial
    part = _trainings_only(path, tmp_path / "r.jsonl")
    assert not ray.is_initialized()
    # starts a local Ray with 1 CPU (one worker process: each one imports torch), stops it
    got = audit(engine="ray", workers=1, results=str(part), **TINY)
    assert not ray.is_initialized()
    assert _cells(got) == _cells(rep)
    assert sorted(_cell_keys(part)) == sorted(_cell_keys(path))  # each cell written once


_RUNTIME_ATTACK = '''
from leakaudit import attacks
from leakaudit.attacks.idlg import IDLG
from leakaudit.auditing import AuditPlan, EngineConfig, audit


class Renamed(IDLG):
    name = "renamed-idlg"


if __name__ == "__main__":
    attacks.register(Renamed())  # at run time: the spawned workers never run this line
    plan = AuditPlan.make(attacks=["renamed-idlg"], points=(2,), examples=2, max_iterations=1,
                          trained=True)
    report = audit(["none"], plan=plan, engine=EngineConfig.make("process", workers=2),
                   progress=False)
    print("attacks:", sorted({c["attack"] for c in report.cells}), len(report.cells))
'''


@pytest.mark.slow  # two spawned workers import torch
def test_an_attack_registered_at_run_time_works_in_the_process_engine(tmp_path):
    """Attacks travel to the workers as objects: one registered under the main guard (as
    docs/attacks.md suggests) used to fail there with "unknown attack"."""
    import subprocess

    script = tmp_path / "runtime_attack.py"
    script.write_text(_RUNTIME_ATTACK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "attacks: ['renamed-idlg'] 2" in done.stdout
    assert "continuing in this process" not in done.stderr  # the workers ran the cells
