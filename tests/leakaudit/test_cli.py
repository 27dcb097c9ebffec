"""The accountant CLI and its forwarding from `leakaudit`."""

import argparse
import json
import subprocess
import sys

import pytest

from accounting.cli import build_parser, main
from leakaudit.cli import ACCOUNTANT_COMMANDS
from leakaudit.cli import main as leakaudit_main


def test_every_accountant_subcommand_is_forwarded_by_leakaudit():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(ACCOUNTANT_COMMANDS)


def test_tuning_prints_the_procedure_beside_the_chosen_run(capsys):
    runs = ["--run", "0.01,1.0,1000", "--run", "0.01,1.5,1000", "--run", "0.02,2.0,1000"]
    assert main(["tuning", *runs, "--rule", "geometric", "--mean", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["procedure"]["method"] == "rdp" and out["chosen"]["index"] == 0
    assert out["procedure"]["tightest"] > 2 * out["chosen"]["eps"] > 0
    assert leakaudit_main(["tuning", *runs, "--chosen", "1"]) == 0
    text = capsys.readouterr().out
    assert "composition" in text and "chosen run 1 alone" in text and "(pld" in text
    assert main(["tuning", *runs, "--rule", "adaptive"]) == 2
    assert "adaptive" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--run"):
        main(["tuning"])


def test_tuning_over_a_grid_of_configurations(capsys):
    grid = ["--grid-q", "0.004", "0.008", "--grid-sigma", "1", "2", "--epochs", "2"]
    assert main(["tuning", *grid, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == 4 and len(out["runs_eps"]) == 4 and out["procedure"]["method"] == "pld"
    with pytest.raises(SystemExit, match="--steps or --epochs"):
        main(["tuning", "--grid-q", "0.01", "--grid-sigma", "1"])


def test_epsilon_prints_every_method(capsys):
    assert main(["epsilon", "--q", "0.01", "--sigma", "4", "--steps", "10000",
                 "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    for method in ("rdp", "rdp-classic", "moments", "zcdp", "advanced", "basic", "prv",
                   "zcdp-approx"):
        assert f"\n{method} " in out
    assert "1.2586" in out  # moments accountant, Abadi et al. 2016
    assert "APPROXIMATION" in out and "bounds [" in out


@pytest.mark.slow
def test_epsilon_schedule_json(capsys):
    assert main(["epsilon", "--q", "0.01", "--sigma", "15", "--sigma-end", "4.85",
                 "--schedule", "exponential", "--steps", "2000", "--json", "--no-prv"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "exponential" in data["setting"]
    assert data["epsilon"]["rdp"] <= data["epsilon"]["rdp-classic"]
    assert "prv" not in data["epsilon"]


def test_schedule_needs_sigma_end():
    with pytest.raises(SystemExit, match="sigma-end"):
        main(["epsilon", "--q", "0.01", "--sigma", "6", "--steps", "10",
              "--schedule", "linear"])


def test_sigma_end_without_a_schedule_is_refused():
    with pytest.raises(SystemExit, match="--sigma-end needs --schedule"):
        main(["epsilon", "--q", "0.01", "--sigma", "6", "--steps", "10", "--sigma-end", "2"])


def test_calibrate_and_max_steps(capsys):
    assert main(["calibrate", "--eps", "1", "--q", "0.01", "--steps", "10000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sigma=4.12") and "<= target 1" in out
    assert main(["max-steps", "--eps", "1", "--q", "0.01", "--sigma", "4"]) == 0
    assert capsys.readouterr().out.startswith("steps=")


def test_bad_input_is_a_clear_error(capsys):
    assert main(["epsilon", "--q", "2", "--sigma", "1", "--steps", "3"]) == 2
    assert "q must be in [0, 1]" in capsys.readouterr().err


def test_leakaudit_forwards_epsilon(capsys):
    assert leakaudit_main(["epsilon", "--q", "0.01", "--sigma", "6", "--steps", "100",
                           "--no-prv"]) == 0
    assert "rdp-classic" in capsys.readouterr().out
    assert leakaudit_main(["frobnicate"]) == 2


def test_python_dash_m_accounting_runs():
    proc = subprocess.run([sys.executable, "-m", "accounting", "epsilon", "--q", "0.01",
                           "--sigma", "6", "--steps", "100", "--no-prv"],
                          capture_output=True, text=True, check=True)
    assert "rdp" in proc.stdout


# ---------------------------------------------------------------- leakaudit's own commands
@pytest.mark.parametrize("argv, flag", [
    (["audit", "--threshold", "-1"], "--threshold"),
    (["audit", "--threshold", "0"], "--threshold"),
    (["audit", "--local-steps", "-5"], "--local-steps"),
    (["audit", "--examples", "0"], "--examples"),
    (["audit", "--points", "3"], "--points"),
    (["audit", "--defenses", ""], "--defenses"),
    (["audit", "--defense-param", "fed-cdp=1"], "--defense-param"),
    (["audit", "--defenses", "none", "--defense-param", "fed-cdp:sigma=1"], "--defense-param"),
    (["audit", "--defenses", "fed-cdp", "--defense-param", "fed-cdp:sigmax=1"],
     "--defense-param"),
    (["audit", "--defenses", "nope"], "--defenses"),
    (["audit", "--ray-address", "127.0.0.1:1"], "--ray-address"),
    (["audit", "--engine", "serial", "--workers", "2"], "--workers"),   # was ignored
    (["audit", "--points", "2,2"], "--points"),
    (["audit", "--defenses", "none,none"], "--defenses"),
    (["privacy-audit", "--points", "5"], "--points"),
    (["privacy-audit", "--confidence", "1"], "--confidence"),
])
def test_bad_flags_are_refused_before_any_work_naming_the_flag(argv, flag, tmp_path, capsys):
    out = tmp_path / "out"
    assert leakaudit_main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err
    assert not out.exists()  # nothing was written: refused before any work


def test_an_unwritable_out_is_refused_before_training(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert leakaudit_main(["audit", "--out", str(blocker / "sub")]) == 2
    assert capsys.readouterr().err.startswith("error: --out ")


def test_an_empty_out_is_refused(tmp_path, capsys, monkeypatch):
    # it used to write the tables and the results file into the working directory
    monkeypatch.chdir(tmp_path)
    for argv in (["audit", "--defenses", "none"], ["privacy-audit"]):
        assert leakaudit_main(argv + ["--out", ""]) == 2
        assert capsys.readouterr().err.startswith("error: --out must name a directory")
    assert list(tmp_path.iterdir()) == []


def test_a_batch_size_beyond_the_clients_data_is_refused_naming_the_flag(tmp_path, capsys,
                                                                          monkeypatch):
    # it was accepted: the attacked clients of the quick profile hold ~606 examples
    from leakaudit.auditing import auditor

    monkeypatch.setattr(auditor, "_train", lambda *a, **k: 1 / 0)  # no training
    assert leakaudit_main(["audit", "--defenses", "none", "--batch-size", "100000",
                           "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --batch-size must be at most") and "606 examples" in err


def _choices(parser, command, flag):
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return next(a for a in sub._actions if flag in a.option_strings)


def test_every_cli_vocabulary_is_the_librarys_and_back():
    """Contract: each CLI choice exists in the library, each library registry entry is
    offered by the CLI, and the defaults are the library's."""
    import inspect

    from leakaudit import attacks, defenses
    from leakaudit.auditing import ENGINES, PROFILES, AuditPlan, audit
    from leakaudit.auditing.auditor import (
        DEFAULT_ATTACKS,
        DEFAULT_DEFENSES,
        DEFAULT_STAGES,
        POINTS,
        STAGES,
    )
    from leakaudit.cli import build_parser
    from leakaudit.empirical import STATISTICS, privacy_audit

    p = build_parser()
    for command, flag, table in (("audit", "--engine", ENGINES),
                                 ("audit", "--profile", PROFILES),
                                 ("audit", "--stage", STAGES),
                                 ("privacy-audit", "--statistic", STATISTICS)):
        assert set(_choices(p, command, flag).choices) == set(table), flag
    for command in ("audit", "privacy-audit"):
        text = _choices(p, command, "--defenses").help
        assert all(name in text.split(" among ")[1] for name in defenses.available())
        for point in POINTS:
            assert p.parse_args([command, "--points", str(point)]).points == [point]
    text = _choices(p, "audit", "--attacks").help
    assert set(text.split(" among ")[1].split(",")) == set(attacks.available())
    args = p.parse_args(["audit", "--attacks", ",".join(attacks.available()),
                         "--defenses", ",".join(defenses.available())])
    AuditPlan.make(attacks=args.attacks)            # every attack offered is the library's
    assert args.defenses == defenses.available()
    plan = inspect.signature(AuditPlan.make).parameters
    defaults = p.parse_args(["audit"])
    assert defaults.defenses == list(DEFAULT_DEFENSES)
    assert defaults.attacks == list(DEFAULT_ATTACKS)
    for name in ("profile", "threshold", "delta", "batch_size", "local_steps", "device"):
        assert getattr(defaults, name) == plan[name].default, name
    assert defaults.stage == list(DEFAULT_STAGES)  # a full audit: initial and trained weights
    assert AuditPlan.make(stages=defaults.stage).stages == DEFAULT_STAGES
    assert tuple(defaults.points) == plan["points"].default
    top = inspect.signature(audit).parameters
    assert (defaults.engine, defaults.seed) == (top["engine"].default, top["seed"].default)
    priv = inspect.signature(privacy_audit).parameters
    got = p.parse_args(["privacy-audit"])
    for name in ("trials", "delta", "confidence", "seed", "statistic"):
        assert getattr(got, name) == priv[name].default, name
    assert got.points == [priv["points"].default]


def test_version_and_defaults_in_help(capsys):
    import leakaudit

    assert leakaudit_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"leakaudit {leakaudit.__version__}"
    assert leakaudit_main(["audit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 0.01)" in text and "(default: initial trained)" in text


def test_defense_params_reach_the_audit_and_ctrl_c_says_how_to_resume(tmp_path, capsys,
                                                                      monkeypatch):
    from leakaudit import api

    seen = {}

    def interrupted(defenses, **kwargs):
        seen.update(kwargs, defenses=defenses)
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "audit", interrupted)
    code = leakaudit_main(["audit", "--defenses", "fed-cdp,prune", "--defense-param",
                           "fed-cdp:sigma=1", "--defense-param", "fed-cdp:clip=2.5",
                           "--points", "2", "--max-iterations", "3", "--out", str(tmp_path)])
    assert code == 130
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "rerun the same command to resume" in last and "results.jsonl" in last
    cdp, prune = seen["defenses"]   # built once, by the library's resolver
    assert (cdp.name, cdp.sigma, cdp.clip) == ("fed-cdp", 1, 2.5) and prune.name == "prune"
    assert seen["plan"].points == (2,) and seen["plan"].max_iterations == 3


def test_defenses_lists_the_parameters_the_audit_uses(capsys):
    assert leakaudit_main(["defenses"]) == 0
    assert "random-noise(variance=0.001)" in capsys.readouterr().out


def test_an_unreachable_ray_address_is_one_clear_error():
    import socket

    from leakaudit.auditing.engines import check_ray_address

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ValueError, match=f"nothing answers at 127.0.0.1:{port}"):
        check_ray_address(f"127.0.0.1:{port}", timeout=1.0)
    with pytest.raises(ValueError, match="ray_address must be"):
        check_ray_address("no-port-here")
    check_ray_address("auto")  # left to Ray


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_worker_processes_are_not_started_from_an_unguarded_script(tmp_path):
    script = tmp_path / "pasted.py"
    script.write_text(
        "from leakaudit.auditing.engines import ProcessEngine, spawn_safe\n"
        "engine = ProcessEngine(2)\n"
        "print(spawn_safe(), engine.pool is None)\n"
        "def main():\n"
        "    engine = ProcessEngine(2)\n"
        "    print(spawn_safe(), engine.pool is None)\n"
        "    engine.close()\n"
        "if __name__ == '__main__':\n"
        "    main()\n")
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": root})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True", "True", "False"]
    assert len(run.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert "if __name__" in run.stderr
