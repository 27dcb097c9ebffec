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
* ``tiny`` (``--tiny``): the quick profile shrunk to a smoke run of seconds (the tests).
The run is resumable: every finished cell goes to ``--results`` (default
``OUT/resilience.jsonl``); rerun the same command to continue. ``--engine ray`` runs the cells
as Ray tasks (``--ray-address`` for a cluster). The work is ``leakaudit.audit`` and its
report's ``save``/``to_markdown``, as the CLI's ``leakaudit audit`` does; this script adds the
profiles, the sizes and the summary table.

Usage::

    python -m benchmarks.resilience                        # quick profile, digits
    python -m benchmarks.resilience --profile paper --engine ray --ray-address auto
    python -m benchmarks.resilience --profile paper --data mnist:/data/mnist
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import leakaudit
import leakaudit.defenses as D
from benchmarks._common import Report, Stopwatch, at_least, parser, profile, today, write_outputs
from leakaudit import auditing, data
from leakaudit.auditing import AuditReport

#: the baseline defenses of the seed papers, then the adaptive ones (each at its registry /
#: source-paper parameters, ``leakaudit.auditing.PAPER_PARAMS``)
DEFENSES = auditing.DEFAULT_DEFENSES + ("adap-dp-fl", "dpfl-agn", "adadp",
                                       "cos-adaptive-laplace", "dssgd", "quantile-clip",
                                       "adaclip")

#: sizes per profile: the dataset, the audit's profile and its overrides (keywords of
#: ``leakaudit.audit``)
PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(dataset="digits", audit_profile="quick", examples=1, rounds=5),
    "paper": dict(dataset="fashion-mnist", audit_profile="paper"),
    "tiny": dict(dataset="digits", audit_profile="quick", examples=1, rounds=1,
                 max_iterations=3, restarts=1),
}
#: the overrides a flag may set
SIZES = ("examples", "rounds", "max_iterations", "restarts")


def summary(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """defense x point: 'resilient' when no attack rebuilt an example there, else 'leaks'."""
    res = report.resilience()
    points = sorted({p for per in res.values() for p in per})
    rows = [[d] + [("resilient" if per[p] else "leaks") if p in per else "-" for p in points]
            for d, per in res.items()]
    return ["defense"] + [f"type {p}" for p in points], rows


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    ap = parser(__doc__, PROFILES, out="results/benchmarks",
                out_help="directory for resilience.{md,csv,tex,json,png}")
    ap.add_argument("--data", default=None,
                    help="dataset name or '<kind>:<dir>' (default: the profile's)")
    ap.add_argument("--defenses", default=None,
                    help="comma-separated names (default: baselines + adaptive)")
    ap.add_argument("--attacks", default="dlg,idlg,cpl")
    ap.add_argument("--points", default="0,1,2")
    ap.add_argument("--examples", type=at_least(1), default=None)
    ap.add_argument("--rounds", type=at_least(1), default=None, help="training rounds")
    ap.add_argument("--max-iterations", type=at_least(1), default=None)
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--engine", choices=auditing.ENGINES, default="process")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--workers", type=at_least(1), default=None)
    ap.add_argument("--results", default=None,
                    help="JSON-lines results file to resume from (default OUT/resilience.jsonl)")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)

    prof = dict(profile(PROFILES, args.profile))
    prof.update({k: getattr(args, k) for k in SIZES if getattr(args, k, None) is not None})
    known = D.available()
    names = _csv(args.defenses) if args.defenses else [n for n in DEFENSES if n in known]
    try:
        points = [int(p) for p in _csv(args.points)]
    except ValueError:
        ap.error(f"--points must be comma-separated integers, got {args.points!r}")
    dataset = args.data or prof["dataset"]
    try:
        ds = data.load(dataset, seed=args.seed)
    except (FileNotFoundError, OSError, ValueError) as exc:
        ap.error(f"cannot load {dataset!r} ({exc}); give --data mnist:<dir>, "
                 "cifar10:<dir> or images:<dir>")
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.results or str(args.out / "resilience.jsonl")

    report = Report()
    report.line(f"# Resilience ({today()}, profile {args.profile}, {ds.name})")
    report.line()
    clock = Stopwatch()
    try:
        plan = leakaudit.AuditPlan.make(profile=prof["audit_profile"], points=points,
                                        **{k: prof[k] for k in SIZES if k in prof})
        engine = leakaudit.EngineConfig.make(args.engine, workers=args.workers,
                                             ray_address=args.ray_address)
        audited = leakaudit.audit(names, dataset=ds, attacks=_csv(args.attacks), plan=plan,
                                  engine=engine, seed=args.seed, results=results,
                                  progress=args.progress)
    except ValueError as exc:  # the library names the argument; say it as a flag
        ap.error(str(exc))
    sizes = auditing.PROFILES[prof["audit_profile"]]
    report.line(f"Command: `python -m benchmarks.resilience {' '.join(argv or sys.argv[1:])}`"
                f" ({clock.seconds:.0f} s, engine {args.engine}; results file {results}).")
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
    report.table(*summary(audited))
    for line in audited.to_markdown().splitlines():
        report.line(line)
    paths = audited.save(args.out, "resilience")
    # the page printed above replaces the table-only Markdown that save() wrote
    write_outputs(args.out, "resilience", markdown=report.text())
    report.line()
    report.line("Written: " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
