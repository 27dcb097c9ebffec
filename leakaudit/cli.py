"""``leakaudit`` command line.

  leakaudit audit --defenses none,fed-cdp --dataset digits --attacks dlg,idlg,cpl --out results/
  leakaudit privacy-audit --defenses fed-cdp,fed-alpha-cdp --point 2 --trials 10000 --out DIR
  leakaudit defenses
  leakaudit epsilon|calibrate|max-steps ...   (the accountant CLI, ``python -m accounting``)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ACCOUNTANT_COMMANDS = ("epsilon", "calibrate", "max-steps")


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _points(text: str, option: str) -> list[int] | None:
    """Leak points from a comma-separated list; None (after printing why) when not integers."""
    try:
        return [int(p) for p in _csv(text)]
    except ValueError:
        print(f"error: {option} must be integers among 0,1,2, got {text!r}", file=sys.stderr)
        return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leakaudit", description="Audit DP federated-learning "
                                "defenses against gradient-leakage attacks.")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("audit", help="train, tap the leak points, attack, print the table")
    a.add_argument("--defenses", default="none,fed-sdp-server,fed-sdp-client,fed-cdp,"
                   "fed-alpha-cdp,prune,random-noise", help="comma-separated defense names")
    a.add_argument("--dataset", default="digits")
    a.add_argument("--attacks", default="dlg,idlg,cpl")
    a.add_argument("--points", default="0,1,2")
    a.add_argument("--profile", default="quick", choices=["quick", "paper"])
    a.add_argument("--examples", type=int, default=None, help="attacked examples per cell")
    a.add_argument("--rounds", type=int, default=None, help="training rounds")
    a.add_argument("--iterations", type=int, default=None, help="L-BFGS steps per attack")
    a.add_argument("--threshold", type=float, default=0.01, help="MSE of a successful attack")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--out", default="results", help="directory for md/csv/tex/json/png and "
                   "the resumable results file")
    a.add_argument("--engine", default="process", choices=["process", "serial", "ray"],
                   help="where the attack cells run: a local process pool (default), this "
                   "process, or Ray tasks (pip install 'leakaudit[ray]')")
    a.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --engine ray: the Ray cluster to use (default: a local Ray)")
    a.add_argument("--batch-size", type=int, default=1, help="B of the attacked clients")
    a.add_argument("--local-steps", type=int, default=1,
                   help="L local SGD steps of the attacked clients")
    a.add_argument("--stage", default="initial",
                   help="weights attacked: initial, round1 or round5 (after that many "
                   "training rounds)")
    a.add_argument("--device", default=None,
                   help="where the attacks run: cpu, cuda[:i] or auto (CUDA when present)")
    a.add_argument("--empirical", type=int, default=None, metavar="TRIALS",
                   help="also measure a lower bound on eps of each defense (privacy-audit "
                   "with TRIALS runs per side): a 'measured eps >=' column")
    a.add_argument("--no-progress", action="store_true")
    e = sub.add_parser("privacy-audit", help="measured lower bounds on eps next to the "
                       "claimed and sound eps of one release per defense")
    e.add_argument("--defenses", default="fed-cdp,fed-alpha-cdp",
                   help="comma-separated defense names (the papers' parameters)")
    e.add_argument("--point", default="2", help="leak point(s) of the audited release, e.g. 2 "
                   "or 2,1,0 (points where a defense releases nothing are skipped)")
    e.add_argument("--trials", type=int, default=10_000,
                   help="held-out runs with the canary, and as many without")
    e.add_argument("--delta", type=float, default=1e-5)
    e.add_argument("--confidence", type=float, default=0.95)
    e.add_argument("--statistic", default=None,
                   help="projection, energy or llr (default: all, Bonferroni-corrected)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", default="results", help="directory for privacy.{md,csv,json,png} "
                   "and the resumable results file")
    e.add_argument("--no-progress", action="store_true")
    sub.add_parser("defenses", help="list the registered defenses")
    for name in ACCOUNTANT_COMMANDS:
        sub.add_parser(name, help="the accountant CLI (python -m accounting " + name + ")",
                       add_help=False)
    return p


def _cmd_audit(args: argparse.Namespace) -> int:
    from .api import audit

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points = _points(args.points, "--points")
    if points is None:
        return 2
    report = audit(defenses=_csv(args.defenses), dataset=args.dataset,
                   attacks=_csv(args.attacks), points=points, examples=args.examples,
                   rounds=args.rounds, seed=args.seed, profile=args.profile,
                   results=str(out / "results.jsonl"), threshold=args.threshold,
                   max_iterations=args.iterations, progress=not args.no_progress,
                   engine=args.engine, ray_address=args.ray_address,
                   batch_size=args.batch_size, local_steps=args.local_steps,
                   stage=args.stage, device=args.device,
                   empirical=args.empirical is not None,
                   empirical_trials=args.empirical or 2000)
    print(report.to_markdown())
    paths = report.save(out)
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_privacy_audit(args: argparse.Namespace) -> int:
    from .empirical import privacy_audit

    points = _points(args.point, "--point")
    if points is None:
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = privacy_audit(_csv(args.defenses), point=points, trials=args.trials,
                           delta=args.delta, confidence=args.confidence, seed=args.seed,
                           statistic=args.statistic, progress=not args.no_progress,
                           results=str(out / "privacy_results.jsonl"),
                           skip_silent=len(points) > 1)
    print(report.to_markdown())
    paths = report.save(out, stem="privacy")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_defenses() -> int:
    from . import defenses

    for name in defenses.available():
        d = defenses.get(name)
        sites = ",".join(sorted(d.sites)) or "-"
        print(f"{name:<26} acts at: {sites:<10} level: {d.level:<9} {d.describe()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ACCOUNTANT_COMMANDS:
        from accounting.cli import main as accounting_main

        return accounting_main(args, prog="leakaudit")
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as exc:  # --help (0) or a usage error (2): return, do not exit
        return int(exc.code or 0)
    try:
        if parsed.command == "audit":
            return _cmd_audit(parsed)
        if parsed.command == "privacy-audit":
            return _cmd_privacy_audit(parsed)
        return _cmd_defenses()
    except (ValueError, FileNotFoundError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
