"""The resilience table: defenses x leak points (type 0/1/2) x attacks (DLG, iDLG, CPL).

Each cell: resilient (no attacked example rebuilt), MSE, RMSE, PSNR, SSIM, attack success
rate, tau (L-BFGS steps to success, else the limit), label accuracy; and per defense the test
accuracy of its training run with claimed and sound eps (and why they differ). A summary
table gives defense x point: resilient against every attack or not. Everything comes from
``leakaudit.audit`` (train -> tap -> attack -> score); this script chooses sizes, writes
Markdown + CSV + LaTeX + JSON + PNG under ``--out`` and prints the Markdown.

Profiles:
* ``quick``: the built-in digits, the audit's quick sizes with one attacked example per cell
  and 5 training rounds (a few minutes on 2 cores);
* ``paper``: Fashion-MNIST when installed (Debian's ``dataset-fashion-mnist``), or the data
  given with ``--data`` (``mnist:<dir>``, ``cifar10:<dir>``, ``images:<lfw dir>``), the
  papers' client counts and attack budget (hours).
``--tiny`` shrinks any profile to a smoke run (CI). The run is resumable: every finished
cell goes to ``--results`` (default ``OUT/resilience.jsonl``); rerun the same command to
continue. ``--engine ray`` runs the cells as Ray tasks (``--ray-address`` for a cluster).

Usage::

    python -m benchmarks.resilience                        # quick profile, digits
    python -m benchmarks.resilience --profile paper --engine ray --ray-address auto
    python -m benchmarks.resilience --profile paper --data mnist:/data/mnist
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import leakaudit.defenses as D
from benchmarks._common import Report
from leakaudit import auditing, data
from leakaudit.auditing import AuditReport

#: the baseline defenses of the seed papers, then the adaptive ones (each at its registry /
#: source-paper parameters, ``leakaudit.auditing.PAPER_PARAMS``)
DEFENSES = auditing.DEFAULT_DEFENSES + ("adap-dp-fl", "dpfl-agn", "adadp",
                                       "cos-adaptive-laplace", "dssgd", "quantile-clip",
                                       "adaclip")

#: sizes per profile: the audit profile and its overrides
PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(dataset="digits", audit_profile="quick", examples=1, rounds=5),
    "paper": dict(dataset="fashion-mnist", audit_profile="paper"),
}
TINY = dict(examples=1, rounds=1, max_iterations=3, restarts=1)


def summary(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """defense x point: 'resilient' when no attack rebuilt an example there, else 'leaks'."""
    res = report.resilience()
    points = sorted({p for per in res.values() for p in per})
    rows = [[d] + [("resilient" if per[p] else "leaks") if p in per else "-" for p in points]
            for d, per in res.items()]
    return ["defense"] + [f"type {p}" for p in points], rows


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--data", default=None,
                        help="dataset name or '<kind>:<dir>' (default: the profile's)")
    parser.add_argument("--defenses", default=None,
                        help="comma-separated names (default: baselines + adaptive)")
    parser.add_argument("--attacks", default="dlg,idlg,cpl")
    parser.add_argument("--points", default="0,1,2")
    parser.add_argument("--examples", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None, help="training rounds")
    parser.add_argument("--max-iterations", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="smoke-run sizes (CI)")
    parser.add_argument("--engine", choices=auditing.ENGINES, default="process")
    parser.add_argument("--ray-address", default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    parser.add_argument("--results", type=Path, default=None,
                        help="JSON-lines results file to resume from (default "
                        "OUT/resilience.jsonl)")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)

    prof = dict(PROFILES[args.profile])
    if args.tiny:
        prof.update(TINY)
    for key in ("examples", "rounds", "max_iterations"):
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                parser.error(f"--{key.replace('_', '-')} must be >= 1")
            prof[key] = value
    known = D.available()
    names = ([n.strip() for n in args.defenses.split(",") if n.strip()] if args.defenses
             else [n for n in DEFENSES if n in known])
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        parser.error(f"unknown defense(s) {', '.join(unknown) or '(none given)'}; "
                     f"available: {', '.join(known)}")
    try:
        points = tuple(int(p) for p in args.points.split(","))
    except ValueError:
        parser.error(f"--points must be comma-separated integers, got {args.points!r}")
    attacks = tuple(a.strip() for a in args.attacks.split(",") if a.strip())
    dataset = args.data or prof["dataset"]
    try:
        ds = data.load(dataset, seed=args.seed)
    except (FileNotFoundError, OSError, ValueError) as exc:
        parser.error(f"cannot load {dataset!r} ({exc}); give --data mnist:<dir>, "
                     "cifar10:<dir> or images:<dir>")
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.results or args.out / "resilience.jsonl"

    report = Report()
    report.line(f"# Resilience ({_dt.date.today().isoformat()}, profile {args.profile}"
                f"{' tiny' if args.tiny else ''}, {ds.name})")
    report.line()
    t0 = time.perf_counter()
    audited = auditing.audit(
        names, dataset=ds, attacks=attacks, points=points, examples=prof.get("examples"),
        rounds=prof.get("rounds"), seed=args.seed, profile=prof["audit_profile"],
        results=str(results), max_iterations=prof.get("max_iterations"),
        restarts=prof.get("restarts"), workers=args.workers, progress=args.progress,
        engine=args.engine, ray_address=args.ray_address)
    seconds = time.perf_counter() - t0
    sizes = auditing.PROFILES[prof["audit_profile"]]
    report.line(f"Command: `python -m benchmarks.resilience {' '.join(argv or sys.argv[1:])}`"
                f" ({seconds:.0f} s, engine {args.engine}; results file {results}).")
    report.line(f"Training run: N = {audited.config['clients']} clients, "
                f"K = {sizes.clients_per_round}, T = {audited.config['rounds']} rounds, "
                f"L = {sizes.local_steps}, B = {sizes.batch_size}, {sizes.optimizer} lr "
                f"{sizes.lr}. Attacks: {audited.config['examples']} example(s) per cell, "
                f"{audited.config['max_iterations']} L-BFGS steps, "
                f"{audited.config['restarts']} restart(s); success = MSE <= "
                f"{audited.threshold:g}.")
    report.line()
    report.line("## Resilient against every attack, per leak point")
    report.line()
    headers, rows = summary(audited)
    report.table(headers, rows)
    for line in audited.to_markdown().splitlines():
        report.line(line)
    paths = audited.save(args.out, "resilience")
    (args.out / "resilience.md").write_text(report.text())
    report.line()
    report.line("Written: " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
