"""Lets ``python benchmarks/<name>.py`` import this repository's ``benchmarks`` package.

Run directly, a script puts its own folder (``benchmarks/``) first on ``sys.path``, so its
``from benchmarks._common import ...`` finds this file before anything installed, and in
particular before the stray top-level package ``benchmarks`` that Opacus installs into
site-packages. This file puts the repository root first and hands over to the real package.
``python -m benchmarks.<name>`` from the repository root (the documented way) never loads it.
"""

import importlib
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if __name__ == "benchmarks":  # imported by a script run as a file, not as a submodule
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    else:  # make it come first
        sys.path.remove(_ROOT)
        sys.path.insert(0, _ROOT)
    del sys.modules["benchmarks"]
    sys.modules["benchmarks"] = importlib.import_module("benchmarks")
