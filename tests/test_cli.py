"""The accountant CLI and its forwarding from `leakaudit`."""

import json
import subprocess
import sys

import pytest

from accounting.cli import main
from leakaudit.cli import main as leakaudit_main


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
