"""Command line: ``python -m accounting epsilon|calibrate|max-steps|tuning ...``.

``epsilon`` prints every accountant side by side for one setting (constant or decaying
sigma), with prv-accountant's bracket and the certified PLD bracket; ``calibrate`` finds
sigma for a target eps; ``max-steps`` the number of steps a budget allows; ``tuning`` the
certified eps of a hyperparameter search (the published procedure) beside the chosen run's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence

from . import schedules
from .calibrate import calibrate_sigma, max_steps
from .conversions import OrderGridWarning
from .ledger import METHODS, PrivacyLedger
from .procedure import procedure_epsilon
from .prv import PRVUnavailable
from .relations import GAUSSIAN_SAMPLINGS, RELATIONS

_NOTES = {
    "rdp": "RDP, improved conversion (Balle et al. 2020)",
    "rdp-classic": "RDP, classic conversion (Mironov 2017)",
    "moments": "moments accountant (Abadi et al. 2016) = rdp-classic",
    "zcdp": "zCDP, rho = 1/(2 sigma^2) per step: sampling ignored (conservative)",
    "advanced": "advanced composition (Dwork et al. 2010), analytic Gaussian steps",
    "basic": "basic composition, analytic Gaussian steps amplified by sampling",
    "prv": "PRV estimate (Gopi et al. 2021)",
    "pld": "PLD, certified upper bound (connect-the-dots; lower by merging)",
    "zcdp-approx": "APPROXIMATION rho ~ q^2/sigma^2 (Yu et al. 2019): may under-report",
}


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4f}"


def _build_ledger(args: argparse.Namespace) -> tuple[PrivacyLedger, str]:
    ledger = PrivacyLedger(relation=args.relation, orders=args.orders)
    how = f", sampling {args.sampling}, relation {args.relation}"
    if args.schedule == "constant":
        if args.sigma_end is not None:
            raise SystemExit("error: --sigma-end needs --schedule (linear, staircase, "
                             "exponential or cyclic); without one sigma stays --sigma")
        ledger.step(q=args.q, sigma=args.sigma, count=args.steps, sampling=args.sampling)
        return ledger, f"q={args.q:g}, sigma={args.sigma:g}, steps={args.steps}{how}"
    if args.sigma_end is None:
        raise SystemExit(f"error: --sigma-end is required for --schedule {args.schedule}")
    kwargs = {}
    if args.schedule == "staircase" and args.period is not None:
        kwargs["period"] = args.period
    if args.schedule == "cyclic":
        kwargs["cycles"] = args.cycles
    sig = schedules.schedule(args.schedule, args.sigma, args.sigma_end, args.steps, **kwargs)
    ledger.step_schedule(args.q, sig, sampling=args.sampling)
    return ledger, (f"q={args.q:g}, {args.schedule} sigma {args.sigma:g} -> {args.sigma_end:g}, "
                    f"steps={args.steps}{how}")


def _cmd_epsilon(args: argparse.Namespace) -> int:
    ledger, setting = _build_ledger(args)
    rows: list[tuple[str, float, str]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        for m in METHODS:
            if m == "prv":
                continue
            if m == "pld":
                lo, _, up = ledger.epsilon_bounds(args.delta, method="pld")
                rows.append((m, up, _NOTES[m] + f"; certified bracket [{_fmt(lo)}, {_fmt(up)}]"))
                continue
            res = ledger.epsilon_and_order(args.delta, m, optimize_order=args.optimize_order)
            note = _NOTES[m]
            if res.order is not None:
                note += f"; order {res.order:g}"
            rows.append((m, res.eps, note))
        prv = None
        if not args.no_prv:
            try:
                prv = ledger.epsilon_bounds(args.delta)
            except PRVUnavailable as exc:
                print(f"prv: unavailable ({exc})", file=sys.stderr)
            else:
                rows.append(("prv", prv[1], _NOTES["prv"] + f"; bounds [{_fmt(prv[0])}, "
                             f"{_fmt(prv[2])}]"))
        rows.append(("zcdp-approx", ledger.epsilon(args.delta, "zcdp-approx"),
                     _NOTES["zcdp-approx"]))
    if args.json:
        out = {"setting": setting, "delta": args.delta, "relation": ledger.relation,
               "sampling": args.sampling, "epsilon": {m: e for m, e, _ in rows}}
        if prv is not None:
            out["prv_bounds"] = {"lower": prv[0], "estimate": prv[1], "upper": prv[2]}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{setting}, delta={args.delta:g}")
    print(f"{'method':<12} {'epsilon':>10}  how")
    for m, e, note in rows:
        print(f"{m:<12} {_fmt(e):>10}  {note}")
    reason = ledger.why_infinite()
    if reason:
        print(f"infinite: {reason}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    sigma = calibrate_sigma(args.eps, delta=args.delta, q=args.q, steps=args.steps,
                            method=args.method, orders=args.orders)
    ledger = PrivacyLedger(orders=args.orders)
    ledger.step(q=args.q, sigma=sigma, count=args.steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        achieved = ledger.epsilon(args.delta, args.method)
    print(f"sigma={sigma:.6f}  (q={args.q:g}, steps={args.steps}, delta={args.delta:g}, "
          f"method={args.method}: eps={achieved:.6f} <= target {args.eps:g})")
    return 0


def _cmd_max_steps(args: argparse.Namespace) -> int:
    t = max_steps(args.eps, delta=args.delta, q=args.q, sigma=args.sigma, method=args.method,
                  orders=args.orders)
    print(f"steps={t}  (q={args.q:g}, sigma={args.sigma:g}, delta={args.delta:g}, "
          f"method={args.method}, eps budget {args.eps:g})")
    return 0


def _run(text: str) -> tuple[float, float, int]:
    """``q,sigma,steps`` of one DP-SGD configuration."""
    try:
        q, sigma, steps = text.split(",")
        return float(q), float(sigma), int(steps)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--run takes q,sigma,steps (e.g. 0.01,1.0,1000), "
                                         f"got {text!r}") from exc


def _grid(args: argparse.Namespace) -> list[tuple[float, float, int]]:
    """The q x sigma grid's runs (steps: --steps, or --epochs / q rounded)."""
    if not (args.grid_q or args.grid_sigma):
        return []
    if not (args.grid_q and args.grid_sigma) or (args.steps is None) == (args.epochs is None):
        raise SystemExit("error: a grid needs --grid-q, --grid-sigma and one of --steps or "
                         "--epochs")
    out = []
    for q in args.grid_q:
        if not 0.0 < q <= 1.0:
            raise SystemExit(f"error: --grid-q values must be in (0, 1], got {q!r}")
        steps = args.steps if args.steps is not None else round(args.epochs / q)
        out.extend((q, sigma, steps) for sigma in args.grid_sigma)
    return out


def _cmd_tuning(args: argparse.Namespace) -> int:
    runs: list = []
    for q, sigma, steps in [*(args.run or ()), *_grid(args)]:
        ledger = PrivacyLedger(relation=args.relation)
        ledger.step(q=q, sigma=sigma, count=steps)
        runs.append(ledger)
    for path in args.ledger or ():
        with open(path, encoding="utf-8") as fh:
            runs.append(PrivacyLedger.from_json(fh.read()))
    if not runs:
        raise SystemExit("error: give the runs with --run q,sigma,steps, --ledger FILE or "
                         "--grid-q/--grid-sigma")
    rep = procedure_epsilon(runs, args.rule, delta=args.delta, mean=args.mean,
                            shape=args.shape, chosen=args.chosen)
    if args.json:
        print(json.dumps({"delta": rep.delta, "relation": rep.relation, "rule": args.rule,
                          "runs": len(runs), "mean": rep.search.mean,
                          "procedure": {"tightest": rep.tightest, "method": rep.tightest_method,
                                        "rdp": rep.rdp},
                          "chosen": {"index": rep.chosen, "eps": rep.chosen_eps,
                                     "method": rep.chosen_method},
                          "runs_eps": list(rep.runs_eps)}, indent=1))
    else:
        print(rep.describe())
    return 0


def _tuning_parser(sub: argparse._SubParsersAction) -> None:
    from .tuning import SELECTION_RULES

    t = sub.add_parser("tuning", help="eps of a hyperparameter search beside the chosen run's")
    t.add_argument("--run", type=_run, action="append",
                   help="one configuration's Poisson DP-SGD run as q,sigma,steps (repeat)")
    t.add_argument("--ledger", action="append",
                   help="one run's ledger JSON (PrivacyLedger.to_json; repeat)")
    t.add_argument("--grid-q", type=float, nargs="+", help="a grid search: sampling rates")
    t.add_argument("--grid-sigma", type=float, nargs="+", help="a grid search: multipliers")
    t.add_argument("--steps", type=int, default=None, help="steps of every grid run")
    t.add_argument("--epochs", type=float, default=None,
                   help="epochs of every grid run (steps = epochs / q, rounded)")
    t.add_argument("--rule", default="fixed", choices=list(SELECTION_RULES),
                   help="fixed: every run once (composition); geometric, logarithmic, "
                        "negative-binomial, poisson: a random number of runs (Papernot & "
                        "Steinke 2022)")
    t.add_argument("--mean", type=float, default=None,
                   help="expected number of runs of a random rule (default: the runs given)")
    t.add_argument("--shape", type=float, default=1.0, help="eta of negative-binomial")
    t.add_argument("--chosen", type=int, default=None,
                   help="index of the published run (default: the most expensive)")
    t.add_argument("--delta", type=float, default=1e-5)
    t.add_argument("--relation", default="add-remove", choices=list(RELATIONS))
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=_cmd_tuning)


def build_parser(prog: str = "python -m accounting") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def orders_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--orders", default="default", choices=["default", "integer"],
                        help="Rényi order grid (default: 1.1..10.9, 12..64, 128, 256)")

    e = sub.add_parser("epsilon", help="eps under every accountant, side by side")
    e.add_argument("--q", type=float, required=True, help="sampling probability per step")
    e.add_argument("--sigma", type=float, required=True, help="noise multiplier (start value)")
    e.add_argument("--steps", type=int, required=True)
    e.add_argument("--delta", type=float, default=1e-5)
    e.add_argument("--schedule", default="constant", choices=list(schedules.SCHEDULES))
    e.add_argument("--sigma-end", type=float, default=None, help="final sigma of a decay")
    e.add_argument("--period", type=int, default=None, help="staircase period")
    e.add_argument("--cycles", type=int, default=4, help="cyclic restarts")
    e.add_argument("--optimize-order", action="store_true",
                   help="refine the best order continuously")
    e.add_argument("--no-prv", action="store_true", help="skip prv-accountant")
    e.add_argument("--json", action="store_true")
    e.add_argument("--relation", default="add-remove", choices=list(RELATIONS),
                   help="neighbouring relation the eps is about (default add-remove)")
    e.add_argument("--sampling", default="poisson", choices=list(GAUSSIAN_SAMPLINGS),
                   help="how each batch is drawn (default poisson; others: no amplification)")
    orders_arg(e)
    e.set_defaults(func=_cmd_epsilon)

    c = sub.add_parser("calibrate", help="smallest sigma for a target eps")
    c.add_argument("--eps", type=float, required=True)
    c.add_argument("--delta", type=float, default=1e-5)
    c.add_argument("--q", type=float, required=True)
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--method", default="rdp", choices=[m for m in METHODS if m != "prv"])
    orders_arg(c)
    c.set_defaults(func=_cmd_calibrate)

    m = sub.add_parser("max-steps", help="how many steps an eps budget allows")
    m.add_argument("--eps", type=float, required=True)
    m.add_argument("--delta", type=float, default=1e-5)
    m.add_argument("--q", type=float, required=True)
    m.add_argument("--sigma", type=float, required=True)
    m.add_argument("--method", default="rdp", choices=[m for m in METHODS if m != "prv"])
    orders_arg(m)
    m.set_defaults(func=_cmd_max_steps)
    _tuning_parser(sub)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m accounting") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
