"""A real Ray cluster: a head and a second node, started here on 127.0.0.1 only (one CPU
and a 100 MB object store each), joined by address as a user joins theirs. The audit (API
and CLI) and the one-run audit over 4 seeds and a multi-run game train and attack on it,
give the serial engine's table, and resume after a kill without redoing a finished unit.

First the audit joins the cluster itself (API and CLI) and leaves it again; then this
module connects once, as a caller who started Ray does, and the audits after that use
that connection and leave it alone (one set of Ray workers: each worker imports torch).
The cluster is stopped by this module: every process whose command line names its own
temporary directory (``ray stop --force`` would stop every Ray of the machine, the other
users' too)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from _extras import require

import leakaudit
from leakaudit.auditing import AuditPlan, EngineConfig, audit
from leakaudit.cli import main as cli_main

pytestmark = pytest.mark.slow  # two Ray nodes start (seconds), each worker imports torch

ROOT = Path(__file__).resolve().parents[3]
PLAN = AuditPlan.make(attacks=("idlg",), points=(2,), examples=1, rounds=1, max_iterations=3,
                      stages=("initial", "trained"))
ONE_RUN = dict(canaries=50, rounds=1, clients=3, local_steps=1, batch_size=20)
CLI = ["audit", "--defenses", "none,fed-cdp", "--attacks", "idlg", "--points", "2",
       "--examples", "2", "--rounds", "1", "--max-iterations", "3", "--stage", "initial",
       "trained", "--no-progress"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _own_pids(marker: str) -> list[int]:
    """The processes whose command line names ``marker`` (this cluster's directory)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _stop(marker: str) -> None:
    """SIGTERM to the cluster's processes, SIGKILL to those still there 2 s later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _own_pids(marker):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + 2
        while _own_pids(marker) and time.time() < deadline:
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster():
    require("ray", "ray")
    if not sys.platform.startswith("linux"):
        pytest.skip("the cluster's processes are found through /proc")
    ray_bin = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="lkray")  # short: Ray's socket paths have a length limit
    port = _free_port()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    node = ["--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1"]
    try:  # free ports where Ray has fixed defaults: another cluster may hold those
        subprocess.run([ray_bin, "start", "--head", f"--port={port}", f"--temp-dir={temp}",
                        "--include-dashboard=false", f"--ray-client-server-port={_free_port()}",
                        f"--dashboard-agent-listen-port={_free_port()}", *node],
                       check=True, env=env, capture_output=True, timeout=180)
        subprocess.run([ray_bin, "start", f"--address=127.0.0.1:{port}",
                        f"--dashboard-agent-listen-port={_free_port()}", *node],
                       check=True, env=env, capture_output=True, timeout=180)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(temp)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The serial engine's audit of PLAN and its results file: what every engine must give."""
    path = tmp_path_factory.mktemp("serial") / "results.jsonl"
    return audit(["none", "fed-cdp"], plan=PLAN, engine="serial", results=str(path),
                 progress=False), path


@pytest.fixture(scope="module")
def driver(cluster):
    """This process connected to the cluster, as a caller who started Ray: the audits
    below use this connection and must leave it running."""
    ray = require("ray", "ray")
    ray.init(address=cluster)
    yield ray
    ray.shutdown()


def _on(address):
    return EngineConfig.make("ray", ray_address=address)


def _table(rep):
    return rep.defenses, [{k: v for k, v in c.items() if k != "seconds"} for c in rep.cells]


def _keys(path):
    return [(r["kind"], r["key"]) for r in map(json.loads, path.read_text().splitlines())]


# ------------------------------------------------- the audit joins the cluster and leaves it
def test_an_audit_trains_and_attacks_on_the_cluster_as_the_serial_engine(cluster, serial,
                                                                         tmp_path):
    ray = require("ray", "ray")
    assert not ray.is_initialized()  # the audit connects by address itself
    got = audit(["none", "fed-cdp"], plan=PLAN, engine=_on(cluster),
                results=str(tmp_path / "r.jsonl"), progress=False)
    assert not ray.is_initialized()  # and disconnects: the connection was its own
    assert _table(got) == _table(serial[0])
    assert len(_keys(tmp_path / "r.jsonl")) == len(set(_keys(tmp_path / "r.jsonl")))


def test_the_cli_on_the_cluster_resumes_after_a_kill(cluster, tmp_path, monkeypatch):
    assert cli_main([*CLI, "--out", str(tmp_path / "serial"), "--engine", "serial"]) == 0
    out = tmp_path / "ray"
    results = out / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    proc = subprocess.Popen([sys.executable, "-m", "leakaudit", *CLI, "--out", str(out),
                             "--engine", "ray", "--ray-address", cluster], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # killed once the trainings and a first cell are in
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if results.exists() and any(k == "cell" for k, _ in _keys(results)):
                break
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    before = _keys(results)
    assert any(k == "training" for k, _ in before)
    monkeypatch.setenv("RAY_ADDRESS", cluster)  # the cluster found as Ray users point to it
    assert cli_main([*CLI, "--out", str(out), "--engine", "ray"]) == 0
    after = _keys(results)
    assert after[:len(before)] == before and len(after) == len(set(after))  # nothing redone
    assert len(after) > len(before)  # the kill left work to do
    assert sorted(after) == sorted(_keys(tmp_path / "serial" / "results.jsonl"))
    mine = [json.loads(ln) for ln in results.read_text().splitlines()]
    theirs = [json.loads(ln) for ln in (tmp_path / "serial" / "results.jsonl").read_text()
              .splitlines()]
    strip = {r["key"]: {k: v for k, v in r["data"].items() if k != "seconds"}
             for r in theirs if r["kind"] == "cell"}
    assert {r["key"]: {k: v for k, v in r["data"].items() if k != "seconds"}
            for r in mine if r["kind"] == "cell"} == strip


# ------------------------------------------------- a caller's connection, left alone
def test_the_cluster_has_two_nodes(driver):
    assert sum(n["Alive"] for n in driver.nodes()) == 2


def test_ray_resume_runs_only_the_missing_cells(driver, serial, tmp_path):
    rep, path = serial
    lines = path.read_text().splitlines()
    # as if killed after the trainings and the first cell: the other cells are missing
    first = next(i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "cell")
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:first + 1]) + "\n")
    before = _keys(partial)
    got = audit(["none", "fed-cdp"], plan=PLAN, engine="ray", results=str(partial),
                progress=False)
    assert _table(got) == _table(rep)
    after = _keys(partial)
    assert after[:len(before)] == before and sorted(after) == sorted(_keys(path))  # once each
    assert driver.is_initialized()  # the caller's Ray is still running


def test_cli_engine_ray(driver, tmp_path, capsys):
    code = cli_main(["audit", "--defenses", "none", "--attacks", "idlg", "--points", "2",
                     "--examples", "1", "--rounds", "1", "--max-iterations", "10", "--out",
                     str(tmp_path), "--no-progress", "--engine", "ray", "--stage", "initial"])
    assert code == 0
    assert "| defense | stage | point | attack | resilient |" in capsys.readouterr().out
    assert sum(k == "cell" for k, _ in _keys(tmp_path / "results.jsonl")) == 1
    assert driver.is_initialized()


def test_one_run_seeds_and_a_multi_run_game_on_the_cluster(driver, cluster, tmp_path):
    kw = dict(seeds=[0, 1, 2, 3], **ONE_RUN)
    serial = json.dumps(leakaudit.privacy_audit_training("fed-cdp", **kw).rows())
    path = tmp_path / "seeds.jsonl"
    got = leakaudit.privacy_audit_training("fed-cdp", engine=_on(cluster), results=str(path),
                                           **kw)
    assert json.dumps(got.rows()) == serial
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n")  # as if killed after two seeds
    again = leakaudit.privacy_audit_training("fed-cdp", engine=_on(cluster),
                                             results=str(path), **kw)
    assert json.dumps(again.rows()) == serial and path.read_text().splitlines() == lines
    game = dict(runs=8, rounds=1, clients=3, local_steps=1, batch_size=20, seed=1)
    serial = json.dumps(leakaudit.privacy_audit_training("fed-cdp", **game).rows())
    path = tmp_path / "game.jsonl"
    got = leakaudit.privacy_audit_training("fed-cdp", engine=_on(cluster), results=str(path),
                                           **game)
    assert json.dumps(got.rows()) == serial
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n")
    again = leakaudit.privacy_audit_training("fed-cdp", engine=_on(cluster),
                                             results=str(path), **game)
    assert json.dumps(again.rows()) == serial
    assert sorted(path.read_text().splitlines()) == sorted(lines)
    assert driver.is_initialized()
