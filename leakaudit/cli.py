"""``leakaudit`` command line.

  leakaudit audit --defenses none,fed-cdp --dataset digits --attacks dlg,idlg,cpl --out results/
  leakaudit privacy-audit --defenses fed-cdp,fed-alpha-cdp --points 2 --trials 10000 --out DIR
  leakaudit defenses
  leakaudit epsilon|calibrate|max-steps|tuning ...   (the accountant CLI, ``python -m accounting``)

Every flag is checked before any work starts, and an error names the flag. The options have
the names of the Python arguments (``--points`` is ``points=``, ``--max-iterations`` is
``max_iterations=``). Ctrl-C stops an audit; rerunning the same command resumes from the
results file in ``--out``.

The vocabularies (defenses, attacks, leak points, profiles, stages, engines, statistics), the
defaults and the help text come from the library's own tables and signatures
(``auditing.PROFILES``, ``STAGES``, ``ENGINES``, ``AuditPlan.make``, ``empirical.STATISTICS``,
...): nothing is typed twice.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import tempfile
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ACCOUNTANT_COMMANDS = ("epsilon", "calibrate", "max-steps", "tuning")
#: the defenses `leakaudit privacy-audit` measures unless told (the CLI's own choice: the
#: library's privacy_audit takes no default)
PRIVACY_AUDIT_DEFENSES = ("fed-cdp", "fed-alpha-cdp")
#: Python argument -> flag, to name the flag in an error raised by the library
FLAGS = {"defense_params": "--defense-param",
         "defenses": "--defenses", "dataset": "--dataset", "attacks": "--attacks",
         "points": "--points", "point": "--points", "profile": "--profile",
         "examples": "--examples", "rounds": "--rounds", "max_iterations": "--max-iterations",
         "threshold": "--threshold", "seed": "--seed", "engine": "--engine",
         "ray_address": "--ray-address", "batch_size": "--batch-size",
         "local_steps": "--local-steps", "stage": "--stage", "stages": "--stage",
         "device": "--device",
         "empirical_trials": "--empirical", "workers": "--workers", "delta": "--delta",
         "trials": "--trials", "confidence": "--confidence", "statistic": "--statistic",
         "results": "--out", "identify": "--identify"}


# ---------------------------------------------------------------- argument types
def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _names(text: str) -> list[str]:
    names = _csv(text)
    if not names:
        raise argparse.ArgumentTypeError(f"needs at least one name, got {text!r}")
    return names


def _points(text: str) -> list[int]:
    from .auditing.auditor import POINTS

    try:
        points = [int(p) for p in _csv(text)]
    except ValueError:
        points = []
    if not points or any(p not in POINTS for p in points) or len(set(points)) < len(points):
        raise argparse.ArgumentTypeError(f"must be distinct leak points among "
                                         f"{','.join(map(str, POINTS))} (comma-separated), "
                                         f"got {text!r}")
    return points


def _int_at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def _value(text: str) -> Any:
    """A defense parameter's value: int, float, true/false, none, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _defense_param(text: str) -> tuple[str, str, Any]:
    match = re.fullmatch(r"\s*([\w.-]+)\s*:\s*(\w+)\s*=\s*(.+?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"must be NAME:KEY=VALUE (e.g. fed-cdp:sigma=1), "
                                         f"got {text!r}")
    return match[1], match[2], _value(match[3])


# ---------------------------------------------------------------- parser
def _version() -> str:
    """The installed distribution's version (pyproject.toml)."""
    try:
        return version("leakaudit")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _default(func: Any, name: str) -> Any:
    """The default of ``func``'s argument ``name`` (the library's: never typed again)."""
    return inspect.signature(func).parameters[name].default


def _joined(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p = argparse.ArgumentParser(prog="leakaudit", formatter_class=fmt,
                                description="Audit DP federated-learning defenses against "
                                "gradient-leakage attacks.")
    p.add_argument("--version", action="version", version=f"leakaudit {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    _audit_command(sub)
    _privacy_audit_command(sub)
    sub.add_parser("defenses", formatter_class=fmt,
                   help="list the registered defenses and the parameters a bare name means")
    for name in ACCOUNTANT_COMMANDS:
        sub.add_parser(name, help="the accountant CLI (python -m accounting " + name + ")",
                       add_help=False)
    return p


def _audit_command(sub: Any) -> None:
    """`leakaudit audit`: the flags of leakaudit.audit, from the library's tables."""
    from . import attacks, data, defenses
    from .auditing.auditor import (
        DEFAULT_ATTACKS,
        DEFAULT_DEFENSES,
        DEFAULT_STAGES,
        POINTS,
        PROFILES,
        STAGES,
        AuditPlan,
        audit,
    )
    from .auditing.engines import ENGINE_HELP, ENGINES

    plan = AuditPlan.make
    fmt = argparse.ArgumentDefaultsHelpFormatter
    a = sub.add_parser("audit", formatter_class=fmt,
                       help="train, tap the leak points, attack, print the table")
    a.add_argument("--defenses", type=_names, default=_joined(DEFAULT_DEFENSES),
                   help="comma-separated defense names among "
                   f"{_joined(defenses.available())} (`leakaudit defenses` lists them and the "
                   "papers' parameters a bare name means)")
    _defense_param_flag(a)
    a.add_argument("--dataset", default=_default(audit, "dataset"),
                   help=f"dataset name (built in: {', '.join(data.available())}; from a "
                   "directory: mnist:DIR, cifar10:DIR, images:DIR, ...)")
    a.add_argument("--attacks", type=_names, default=_joined(DEFAULT_ATTACKS),
                   help=f"comma-separated attack names among {_joined(attacks.available())}")
    a.add_argument("--points", type=_points, default=_joined(_default(plan, "points")),
                   help=f"leak points attacked (comma-separated among {_joined(POINTS)})")
    a.add_argument("--profile", default=_default(plan, "profile"), choices=sorted(PROFILES),
                   help="sizes of the training run and the attacks: " + "; ".join(
                       f"{name}: {prof.clients} clients, {prof.rounds} rounds, "
                       f"{prof.examples} examples, {prof.max_iterations} iterations"
                       for name, prof in sorted(PROFILES.items())))
    a.add_argument("--examples", type=_int_at_least(1), default=None,
                   help="attacked examples per cell (default: the profile's)%(default).0s")
    a.add_argument("--rounds", type=_int_at_least(1), default=None,
                   help="training rounds (default: the profile's)%(default).0s")
    a.add_argument("--max-iterations", type=_int_at_least(1), default=None,
                   help="L-BFGS steps per attack (default: the profile's)%(default).0s")
    a.add_argument("--threshold", type=_positive, default=_default(plan, "threshold"),
                   help="MSE at or below which an attack succeeds")
    a.add_argument("--delta", type=_probability, default=_default(plan, "delta"),
                   help="delta of the eps columns")
    a.add_argument("--seed", type=_int_at_least(0), default=_default(audit, "seed"),
                   help="the one seed")
    a.add_argument("--out", default="results", help="directory for md/csv/tex/json/png and "
                   "the resumable results file (results.jsonl)")
    a.add_argument("--engine", default=_default(audit, "engine"), choices=ENGINES,
                   help="where the trainings and the attack cells run: " + "; ".join(
                       f"{name}: {ENGINE_HELP[name]}" for name in ENGINES))
    a.add_argument("--workers", type=_int_at_least(1), default=None,
                   help="worker processes of --engine process, CPUs of a local Ray (default: "
                   "the CPUs, at most 4; refused with --engine serial)%(default).0s")
    a.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --engine ray: the Ray cluster to use, HOST:PORT (default: "
                   "the one RAY_ADDRESS names, else a local Ray)%(default).0s")
    _attacked_client_flags(a, plan, STAGES, DEFAULT_STAGES)


def _attacked_client_flags(a: argparse.ArgumentParser, plan: Any, stages: dict[str, Any],
                           default_stages: Sequence[str]) -> None:
    """`leakaudit audit`'s flags of the attacked clients' setting, the device and the
    empirical column."""
    a.add_argument("--batch-size", type=_int_at_least(1), default=_default(plan, "batch_size"),
                   help="B of the attacked clients (at most the examples each holds)")
    a.add_argument("--local-steps", type=_int_at_least(1),
                   default=_default(plan, "local_steps"),
                   help="L local SGD steps of the attacked clients")
    a.add_argument("--stage", nargs="+", default=list(default_stages), choices=list(stages),
                   metavar="STAGE",
                   help="weights attacked, one or more of: " + ", ".join(
                       f"{name} (after {'all the profile' if rounds is None else rounds}"
                       " training rounds)" for name, rounds in stages.items())
                   + f" (default: {' '.join(default_stages)})%(default).0s")
    a.add_argument("--device", default=_default(plan, "device"),
                   help="where the attacks run: cpu, cuda[:i] or auto (the GPU of the worker "
                   "that runs the cell when it has one; default: the CPU)%(default).0s")
    a.add_argument("--empirical", type=_int_at_least(100), nargs="?", const=2000,
                   default=None, metavar="TRIALS",
                   help="also measure a lower bound on eps of each defense (privacy-audit "
                   "with TRIALS runs per side, 2000 if not given): a 'measured eps >=' "
                   "column%(default).0s")
    a.add_argument("--identify", type=_int_at_least(1), nargs="?", const=100, default=None,
                   metavar="TRIALS",
                   help="also run the prior-aware identification attack (k = 10 candidates, "
                   "TRIALS releases per defense and stage, 100 if not given) against each "
                   "defense's own release, beside its bound: the profile's 'identified' "
                   "column%(default).0s")
    a.add_argument("--no-progress", action="store_true", help="no progress bar")


def _privacy_audit_command(sub: Any) -> None:
    """`leakaudit privacy-audit`: the flags of leakaudit.privacy_audit."""
    from . import defenses
    from .empirical import STATISTICS, privacy_audit

    fmt = argparse.ArgumentDefaultsHelpFormatter
    e = sub.add_parser("privacy-audit", formatter_class=fmt,
                       help="measured lower bounds on eps next to the claimed and sound eps of "
                       "one release per defense")
    e.add_argument("--defenses", type=_names, default=_joined(PRIVACY_AUDIT_DEFENSES),
                   help="comma-separated defense names (the papers' parameters) among "
                   f"{_joined(defenses.available())}")
    _defense_param_flag(e)
    e.add_argument("--points", type=_points, default=str(_default(privacy_audit, "points")),
                   help="leak point(s) of the audited release, e.g. 2 or 2,1,0 (points where "
                   "a defense releases nothing are skipped)")
    e.add_argument("--trials", type=_int_at_least(100),
                   default=_default(privacy_audit, "trials"),
                   help="held-out runs with the canary, and as many without")
    e.add_argument("--delta", type=_probability, default=_default(privacy_audit, "delta"),
                   help="delta of the eps")
    e.add_argument("--confidence", type=_probability,
                   default=_default(privacy_audit, "confidence"),
                   help="confidence of the measured lower bound")
    e.add_argument("--statistic", default=_default(privacy_audit, "statistic"),
                   choices=STATISTICS,
                   help="the test statistic (default: all, Bonferroni-corrected)"
                   "%(default).0s")
    e.add_argument("--seed", type=_int_at_least(0), default=_default(privacy_audit, "seed"),
                   help="the one seed")
    e.add_argument("--out", default="results", help="directory for privacy.{md,csv,json,png} "
                   "and the resumable results file (privacy_results.jsonl)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")


def _defense_param_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--defense-param", type=_defense_param, action="append", default=[],
                        metavar="NAME:KEY=VALUE",
                        help="a parameter of one defense instead of the profile's or the "
                        "paper's, e.g. fed-cdp:sigma=1 (repeatable)%(default).0s")


def _defense_params(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """--defense-param as audit()'s ``defense_params``; each name must be in --defenses."""
    out: dict[str, dict[str, Any]] = {}
    for name, key, value in args.defense_param:
        if name not in args.defenses:
            raise ValueError(f"--defense-param {name}:{key}: {name!r} is not among --defenses "
                             f"{','.join(args.defenses)}")
        out.setdefault(name, {})[key] = value
    return out


def _checked_defenses(args: argparse.Namespace, base: Any = None
                      ) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """--defenses and --defense-param, every defense built by the library's one resolver
    (:func:`leakaudit.fl.resolve_defenses`: a bad name, key or value is refused before any
    work; ``base``: the audit profile's parameters of a bare name, under --defense-param);
    the Defense objects and the parameters."""
    from .fl import resolve_defenses

    params = _defense_params(args)
    return resolve_defenses(args.defenses, params, base=base), params


def _out_dir(text: str) -> Path:
    """--out, created and checked writable before any work."""
    if not text.strip():
        raise ValueError(f"--out must name a directory, got {text!r} (use --out . for the "
                         f"working directory)")
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {text}: not a writable directory "
                         f"({exc.strerror or exc})") from None
    return out


# ---------------------------------------------------------------- commands
def _cmd_audit(args: argparse.Namespace) -> int:
    from .api import audit
    from .auditing import PROFILES, AuditPlan, EngineConfig
    from .auditing.identification import IdentificationBudget

    defs, _ = _checked_defenses(args, base=PROFILES[args.profile].defense_params)
    engine = EngineConfig.make(args.engine, workers=args.workers, ray_address=args.ray_address)
    plan = AuditPlan.make(profile=args.profile, attacks=args.attacks, points=args.points,
                          examples=args.examples, rounds=args.rounds,
                          max_iterations=args.max_iterations, threshold=args.threshold,
                          delta=args.delta, batch_size=args.batch_size,
                          local_steps=args.local_steps, stages=args.stage, device=args.device)
    out = _out_dir(args.out)
    args.resume_file = out / "results.jsonl"
    report = audit(defs, dataset=args.dataset, plan=plan, engine=engine, seed=args.seed,
                   results=str(args.resume_file), progress=not args.no_progress,
                   empirical=args.empirical or False,
                   identify=None if args.identify is None else IdentificationBudget(
                       k=10, trials=args.identify, pool=100))
    print(report.to_markdown())
    paths = report.save(out)
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_privacy_audit(args: argparse.Namespace) -> int:
    from .empirical import privacy_audit

    _, params = _checked_defenses(args)
    out = _out_dir(args.out)
    args.resume_file = out / "privacy_results.jsonl"
    report = privacy_audit(args.defenses, points=args.points, trials=args.trials,
                           delta=args.delta, confidence=args.confidence, seed=args.seed,
                           defense_params=params, statistic=args.statistic,
                           progress=not args.no_progress, results=str(args.resume_file),
                           skip_silent=len(args.points) > 1)
    print(report.to_markdown())
    paths = report.save(out, stem="privacy")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_defenses() -> int:
    from . import defenses

    print("A bare name means the parameters shown (the source papers'); change one with "
          "--defense-param NAME:KEY=VALUE.")
    for name in defenses.available():
        d = defenses.get(name)
        sites = ",".join(sorted(d.sites)) or "-"
        print(f"{name:<26} acts at: {sites:<10} level: {d.level:<9} {d.describe()}")
    return 0


def _flagged(message: str) -> str:
    """The library's message with a leading argument name written as its flag."""
    head, sep, rest = message.partition(" ")
    name = head.rstrip(":")
    return FLAGS[name] + head[len(name):] + sep + rest if name in FLAGS else message


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
    except KeyboardInterrupt:
        where = getattr(parsed, "resume_file", None)
        print("\ninterrupted: finished cells are kept; rerun the same command to resume"
              + (f" from {where}" if where else ""), file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, ImportError) as exc:
        print(f"error: {_flagged(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
