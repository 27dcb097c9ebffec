"""The cost of a ledger's queries: one computation per history, and bounded cost per mix.

1. Shared queries: ``epsilon(delta, "pld")``, ``epsilon_bounds(delta, method="pld")`` and
   ``tightest_epsilon(delta)`` each alone on a fresh ledger, then all three (and
   ``epsilon_report``) on one ledger: the ledger answers every query of one history from one
   PLD computation (``accounting/query_memo.py``), so the three together cost about the
   most expensive one. CPU seconds (``time.process_time``).
2. Mixed ledgers: CPU seconds and peak resident memory of ``tightest_epsilon`` on ledgers
   that mix every event type, each in a fresh subprocess (its own peak memory).

Usage::

    python -m benchmarks.ledger_queries --profile quick
    python -m benchmarks.ledger_queries --tiny
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import accounting as A

try:
    from ._common import Report, Stopwatch, environment, parser, profile, write_outputs
except ImportError:  # run as a file: ``python benchmarks/ledger_queries.py``
    from _common import Report, Stopwatch, environment, parser, profile, write_outputs


@dataclass(frozen=True)
class Profile:
    """Distinct sigmas of the shared-query schedule; mixes run in section 2."""

    sigmas: int
    mixes: tuple[str, ...]


PROFILES = {
    "tiny": Profile(1_000, ("small-mix",)),
    "quick": Profile(10_000, ("small-mix", "every-type", "schedule-epochs", "replace-schedule")),
}
DELTA = 1e-5


def schedule_ledger(distinct: int, seed: int = 0) -> A.PrivacyLedger:
    """q = 0.001, ``distinct`` sigmas uniform in [0.55, 0.65] (one per step)."""
    ledger = A.PrivacyLedger()
    ledger.step_schedule(0.001, np.random.default_rng(seed).uniform(0.55, 0.65, distinct))
    return ledger


def cpu(fn: Callable[[], object]) -> tuple[float, object]:
    """(CPU seconds, result) of one call."""
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def section_shared(rep: Report, prof: Profile) -> None:
    rep.line(f"## 1. One computation per history ({prof.sigmas:,} distinct sigmas, q 0.001, "
             f"delta {DELTA:g})")
    rep.line()
    queries = {
        "epsilon(pld)": lambda lg: lg.epsilon(DELTA, "pld"),
        "epsilon_bounds(pld)": lambda lg: lg.epsilon_bounds(DELTA, method="pld").upper,
        "tightest_epsilon": lambda lg: lg.tightest_epsilon(DELTA),
    }
    rows, alone = [], {}
    for name, q in queries.items():
        ledger = schedule_ledger(prof.sigmas)
        alone[name], eps = cpu(lambda q=q, lg=ledger: q(lg))
        rows.append([name, f"{eps:.6g}", f"{alone[name]:.2f}"])
    ledger = schedule_ledger(prof.sigmas)
    together, _ = cpu(lambda: [q(ledger) for q in queries.values()])
    rows.append(["the three on one ledger", "-", f"{together:.2f}"])
    again, _ = cpu(lambda: ([q(ledger) for q in queries.values()],
                            ledger.epsilon_report(DELTA, prv=False)))
    rows.append(["the three again + epsilon_report", "-", f"{again:.2f}"])
    rep.table(["query", "eps", "CPU s"], rows)
    rep.line(f"The three together: {together / max(alone.values()):.2f}x the most expensive "
             f"alone ({max(alone, key=alone.__getitem__)}).")
    rep.line()


# ---------------------------------------------------------------- section 2: mixed ledgers
def mixed_ledger(name: str) -> tuple[A.PrivacyLedger, float]:
    """The ledgers of section 2 (and their delta)."""
    rng = np.random.default_rng(1)
    if name == "small-mix":
        lg = A.PrivacyLedger()
        lg.step(q=0.01, sigma=1.0, count=1_000)
        lg.laplace(b=10.0)
        lg.dp_step(0.1, 1e-7)
        return lg, 1e-6
    if name == "every-type":  # fixed-size, (eps, delta), a 500-sigma schedule, allocation
        lg = A.PrivacyLedger()
        lg.step(q=0.01, sigma=1.0, count=100, sampling="fixed-size")
        lg.dp_step(0.5, 1e-12, count=3)
        lg.step_schedule(0.01, rng.uniform(0.8, 1.2, 500))
        lg.allocate(sigma=1.0, steps=100, epochs=2)
        return lg, 1e-10
    if name == "schedule-epochs":  # a 10,000-sigma schedule over 10 epochs
        lg = A.PrivacyLedger()
        sig = rng.uniform(0.8, 1.2, 10_000)
        for _ in range(10):
            lg.step_schedule(0.01, sig)
        return lg, 1e-10
    if name == "replace-schedule":  # replace-one, 5,000 sigmas
        lg = A.PrivacyLedger(relation="replace-one")
        lg.step_schedule(0.01, rng.uniform(0.8, 1.2, 5_000))
        return lg, 1e-8
    raise ValueError(f"unknown mix {name!r}")


def run_one(name: str) -> dict:
    """``tightest`` on mix ``name`` in this process: eps, method, CPU s, peak RSS (MB)."""
    ledger, delta = mixed_ledger(name)
    seconds, res = cpu(lambda: ledger.tightest(delta))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"eps": res.eps, "method": res.method, "cpu": seconds, "peak_mb": peak,
            "delta": delta}


def section_mixes(rep: Report, prof: Profile) -> None:
    rep.line("## 2. Mixed ledgers: tightest_epsilon, each in a fresh process")
    rep.line()
    rows = []
    for name in prof.mixes:
        out = subprocess.run([sys.executable, "-m", "benchmarks.ledger_queries", "--one", name],
                             capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
        got = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append([name, f"{got['delta']:g}", f"{got['eps']:.6g}", got["method"],
                     f"{got['cpu']:.1f}", f"{got['peak_mb']:.0f}"])
    rep.table(["ledger", "delta", "eps", "method", "CPU s", "peak MB"], rows)
    rep.line()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sections; print Markdown (and write it under --out)."""
    if argv is None:
        argv = sys.argv[1:]
    if len(argv) == 2 and argv[0] == "--one":  # one mix, in this (fresh) process
        print(json.dumps(run_one(argv[1])))
        return 0
    args = parser(__doc__, PROFILES, out_help="also write DIR/ledger_queries.md").parse_args(argv)
    prof = profile(PROFILES, args.profile)
    rep, clock = Report(), Stopwatch()
    rep.line("# Ledger query cost")
    rep.line()
    rep.line(environment(("numpy", "leakaudit")) + f"; profile `{args.profile}`.")
    rep.line()
    section_shared(rep, prof)
    section_mixes(rep, prof)
    rep.line(f"Total benchmark time: {clock.seconds:.0f} s.")
    write_outputs(args.out, "ledger_queries", markdown=rep.text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
