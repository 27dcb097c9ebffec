"""Benchmarks run both ways whatever else is installed: ``python -m benchmarks.<name>`` from
the root and ``python benchmarks/<name>.py``, even with a stray top-level ``benchmarks``
package on the path (Opacus installs one into site-packages)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("how", ["file", "module"])  # two interpreters, no torch
def test_benchmark_runs_despite_a_stray_benchmarks_package(tmp_path, how):
    stray = tmp_path / "stray" / "benchmarks"
    stray.mkdir(parents=True)
    (stray / "__init__.py").write_text("raise ImportError('the stray benchmarks package')\n")
    argv = ([str(ROOT / "benchmarks" / "privacy.py")] if how == "file"
            else ["-m", "benchmarks.privacy"])
    env = {"PYTHONPATH": str(tmp_path / "stray"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True,
                          cwd=ROOT if how == "module" else tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: privacy.py" in proc.stdout
    assert "--tiny" in proc.stdout  # the options of this repository's benchmarks._common
