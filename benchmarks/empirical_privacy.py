"""Measured privacy: claimed vs sound vs measured eps of every registered defense.

For each defense of ``leakaudit.defenses.available()`` (the papers' parameters) and each leak
point where it releases something it protects, ``leakaudit.privacy_audit`` plays the canary
distinguishing game on ONE release (``leakaudit.empirical.game``: LeNet-shaped gradients, a
background of 32 per-example gradients of norm 0.05 C, a Dirac canary at the clip bound,
add/remove of one example, or of one client for client-level defenses at points 1 and 0)
and prints the claimed and sound eps of exactly that release (q = 1) next to the
Clopper-Pearson lower bound (95 %, delta = 1e-5). A sound eps below the measured bound is a
wrong ledger; a claimed eps below it is a false claim.

Five more sections: tightness (fed-cdp, C = 1, sigma = 1, one step: a Gaussian mechanism
with mu = 1, eps = 4.38; 10,000 held-out runs per side), exposure (a user's DP-SGD dividing
by the realised batch size, next to the shipped fed-cdp), the simulator's aggregate (the
global model after one round with a canary client in and out, every defense with a finite
sound eps and both client samplings, next to fed-sdp with FedAvg's realised mean;
``leakaudit.fl.canary``), speed (a whole audit of one LeNet-sized fed-cdp release at
20,000 runs per side, every canary and statistic) and the mutation suite (each broken
mechanism of ``leakaudit.empirical.mutants`` at its budget).

Usage::

    python -m benchmarks.empirical_privacy                    # quick profile (minutes)
    python -m benchmarks.empirical_privacy --profile full     # 10,000 runs per side
    python -m benchmarks.empirical_privacy --defenses fed-cdp,fed-alpha-cdp --points 2 \\
        --trials 2000 --out results --results results/privacy_audit.jsonl
    python -m benchmarks.empirical_privacy --tiny   # seconds, small shapes (the tests)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import leakaudit.defenses as D
from benchmarks._common import (
    Report,
    Stopwatch,
    at_least,
    load,
    parser,
    profile,
    today,
    write_outputs,
)
from leakaudit.defenses import ClientContext, Defense, RoundContext
from leakaudit.empirical import PrivacyReport, privacy_audit, stats
from leakaudit.empirical.mutants import SHAPES as SMALL_SHAPES

#: runs per side of each section; ``game``: the release's shapes (None: LeNet's, else the
#: small shapes of the mutation suite with 8 background examples)
PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(trials=500, tight_trials=10_000, exposure_trials=500, game_trials=500,
                  speed_trials=20_000, mutant_seeds=(0,), mutant_budget=None, shapes=None),
    "full": dict(trials=10_000, tight_trials=10_000, exposure_trials=1000, game_trials=500,
                 speed_trials=20_000, mutant_seeds=(0, 1, 2), mutant_budget=None,
                 shapes=None),
    "tiny": dict(trials=100, tight_trials=200, exposure_trials=100, game_trials=8,
                 speed_trials=200, mutant_seeds=(0,), mutant_budget=100, shapes="small"),
}


def game_options(prof: dict[str, Any]) -> dict[str, Any]:
    """The canary game's options of ``privacy_audit`` for a profile (shapes, background)."""
    return {} if prof["shapes"] is None else dict(shapes=SMALL_SHAPES, background=8)


class RealisedBatchCDP(Defense):
    """DP-SGD that divides the noisy sum by the REALISED batch size (the pattern fed-cdp had)."""

    name = "realised-batch-cdp"
    sites = frozenset({"example"})
    level = "instance"
    batched_trials = False   # noise drawn with torch.randn: one run per trial

    def __init__(self, clip: float = 4.0, sigma: float = 6.0) -> None:
        self.clip, self.sigma = clip, sigma

    def audit_bound(self) -> float:
        return self.clip

    def privatize_batch(self, grads: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)
        factor = (self.clip / flat.norm(dim=1).clamp(min=1e-12)).clamp(max=1.0)
        sums = [torch.einsum("b,b...->...", factor, g) for g in grads]
        noise = [torch.randn(s.shape, generator=ctx.generator) * self.sigma * self.clip
                 for s in sums]
        for ledger in (ctx.sound, ctx.claimed):
            ledger.step(q=ctx.batch_rate, sigma=self.sigma, note="DP-SGD, realised batch size")
        return [(s + n) / grads[0].shape[0] for s, n in zip(sums, noise)]


def _f(v: Any) -> str:
    if isinstance(v, bool):
        return "**yes**" if v else "no"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.3g}"
    return str(v)


def sweep(names: Sequence[str], points: Sequence[int], trials: int, seed: int,
          results: str | None, out: Report, **options: Any) -> PrivacyReport:
    """All (defense, point) pairs where the defense releases something."""
    clock = Stopwatch()
    report = privacy_audit(list(names), points=list(points), trials=trials, seed=seed,
                           results=results, skip_silent=True, progress=False, **options)
    out.line(f"## Claimed vs sound vs measured ({trials:,} held-out runs per side, seed {seed}, "
             f"{clock.seconds:.0f} s)")
    out.line()
    cols = ("defense", "point", "adjacency", "eps_claimed", "eps_sound", "eps_lower",
            "statistic", "mu_lower", "eps_lower_gdp", "claim_violated", "sound_violated")
    out.table(["defense", "point", "neighbours", "claimed eps", "sound eps", "measured eps >=",
               "statistic", "mu >=", "eps >= if GDP", "claim false", "sound violated"],
              [[_f(r[c]) for c in cols] for r in report.rows()])
    notes: dict[str, list[str]] = {}
    for r in report.rows():
        if r["reason"]:
            notes.setdefault(r["reason"], []).append(f"{r['defense']} ({r['point']})")
    for reason, where in notes.items():
        out.line(f"- {', '.join(where)}: {reason}")
    out.line()
    return report


def release(defense: Defense, trials: int, seed: int, **options: Any) -> dict[str, Any]:
    """The audit of one release at point 2 (``privacy_audit``'s one row)."""
    (row,) = privacy_audit(defense, points=2, trials=trials, seed=seed, **options).rows()
    return row


def tightness(trials: int, seed: int, out: Report) -> None:
    out.line(f"## Tightness: fed-cdp C = 1, sigma = 1, point 2 ({trials:,} held-out runs per side)")
    out.line()
    rows = []
    for s, stat in ((seed, "projection"), (seed + 1, "projection"), (seed, None)):
        clock = Stopwatch()
        r = release(D.get("fed-cdp", clip=1.0, sigma=1.0), trials, s, statistic=stat)
        rows.append([str(s), stat or "all three (Bonferroni)", _f(r["eps_sound"]),
                     _f(r["eps_lower"]), _f(r["mu_lower"]), _f(r["eps_lower_gdp"]),
                     f"{clock.seconds:.1f}"])
    out.table(["seed", "statistics", "eps (true, mu = 1)", "eps >= (Clopper-Pearson)",
               "mu >=", "eps >= if GDP", "seconds"], rows)


def exposure(trials: int, seed: int, out: Report, **options: Any) -> None:
    shapes = "small shapes" if options else "LeNet shapes"
    out.line(f"## Exposure: a data-dependent normaliser ({shapes}, C = 4, sigma = 6)")
    out.line()
    report = privacy_audit([RealisedBatchCDP(), "fed-cdp"], points=2, trials=trials, seed=seed,
                           **options)
    out.table(["defense", "sound eps", "measured eps >=", "statistic", "sound violated"],
              [[r["defense"], _f(r["eps_sound"]), _f(r["eps_lower"]), r["statistic"],
                _f(r["sound_violated"])] for r in report.rows()])


class RealisedMeanSDP(D.FedSDP):
    """fed-sdp with the realised mean: the whole noise on EVERY client's update, FedAvg's
    mean over the realised participants, accounted as Poisson steps with q = K/N."""

    fixed_denominator = False

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        return self.whole_noise(update, ctx) if self.where == "client" else update

    def sanitize_update(self, update: list[torch.Tensor],
                        ctx: ClientContext) -> list[torch.Tensor]:
        return self.whole_noise(update, ctx) if self.where == "server" else update

    def whole_noise(self, update: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        """Clip to C and add the round's whole noise N(0, sigma^2 C^2) to this update."""
        norm = float(torch.sqrt(sum((u ** 2).sum() for u in update)))
        factor = min(1.0, self.clip / (norm + 1e-12))
        noise = [torch.randn(u.shape, generator=ctx.generator) * self.sigma * self.clip
                 for u in update]
        return [u * factor + n for u, n in zip(update, noise)]

    def claimed_round(self, ctx: RoundContext) -> None:
        for c in range(ctx.clients):
            for ledger in (ctx.claimed[c], ctx.sound[c]):
                ledger.step(q=ctx.client_rate, sigma=self.sigma, note="q=K/N")


#: client sampling of the simulator-level game: K = 3 of 4 (5 with the canary), q = 0.6
_SAMPLINGS = {"fixed K=3": dict(clients_per_round=3), "Poisson q=0.6": dict(client_fraction=0.6),
              "every client": dict()}


def game_bound(runs: dict[str, list[dict[str, float]]], seed: int, alpha: float = 0.05
               ) -> tuple[float, str]:
    """Best eps lower bound over the statistics, each through the auditor's
    ``stats.bounds_from_scores`` (threshold chosen on half the runs, Clopper-Pearson on the
    other half) at confidence 1 - alpha / (number of statistics) (Bonferroni)."""
    out_runs, in_runs = runs.values()
    keys = list(in_runs[0])
    best, name = 0.0, keys[0]
    for k in keys:
        o, i = np.array([r[k] for r in out_runs]), np.array([r[k] for r in in_runs])
        got = stats.bounds_from_scores(o, i, confidence=1.0 - alpha / len(keys), delta=1e-5,
                                       select_fraction=0.5, seed=seed)
        if got["eps_lower"] > best:
            best, name = got["eps_lower"], k
    return best, name


def simulator_game(names: Sequence[str], trials: int, seed: int, out: Report) -> None:
    """The released global model after one round, a canary client in and out."""
    from leakaudit.fl.canary import CanaryGame, worlds

    cg = CanaryGame()
    defenses: list[tuple[str, Defense]] = [("fed-sdp (realised mean)", RealisedMeanSDP())]
    for name in names:
        d = D.get(name)
        if math.isfinite(cg.run(d, "in", 0).epsilon(1e-5)):
            defenses.append((name, d))
    defenses.append(("fed-sdp-server(sigma=1)", D.FedSDP(clip=4.0, sigma=1.0)))
    defenses.append(("quantile-clip(z=0.5, sigma_b=0.5)",
                     D.QuantileClip(clip=4.0, noise_multiplier=0.5, sigma_b=0.5)))
    rows = []
    for label, d in defenses:
        for sampling, kw in _SAMPLINGS.items():
            if label.startswith("fed-sdp (before") and sampling != "every client":
                continue
            runs, sound = cg.play(d, trials, seed, 1e-5, **kw)
            eps, stat = game_bound(runs, seed)
            world_out, _ = worlds(d)
            relation = "add-remove" if world_out == "out" else "zero-out"
            rows.append([label, sampling, relation, _f(sound), _f(eps), stat,
                         _f(eps > sound)])
    out.line("## The simulator's aggregate: a canary client, one round")
    out.line()
    out.line(f"`leakaudit.fl.canary.CanaryGame`: {cg.background} background clients of "
             f"{cg.per_client} examples and a canary client whose example's gradient is far "
             "above the clip (a bias-free linear model, 1,024 parameters); the canary client "
             "added to the population (add-remove) or, where the ledger's relation is "
             "zero-out / instance level, present with a zero example; the released global "
             "model after one round; statistics projection, energy and quantile-clip's next "
             f"clip; {trials:,} runs per side, threshold on a random half, Clopper-Pearson "
             "(95 %, Bonferroni over the statistics) on the other half "
             "(`leakaudit.empirical.stats.bounds_from_scores`); sound = "
             "`Run.epsilon(1e-5, 'sound')`.")
    out.line()
    out.table(["defense", "client sampling", "game", "sound eps", "measured eps >=",
               "statistic", "sound violated"], rows)
    out.line()


def speed(trials: int, seed: int, out: Report) -> None:
    """Wall time of one whole audit of a LeNet-sized fed-cdp release: every canary (dirac,
    large, large@k for 8 tensors) and statistic, ``trials`` held-out runs per side."""
    before = load()
    clock = Stopwatch()
    r = release(D.get("fed-cdp"), trials, seed)
    wall = clock.seconds
    out.line("## Speed: one LeNet-sized fed-cdp release (13,426 values), all canaries and "
             "statistics, noise drawn for 512 runs per call")
    out.line()
    out.table(["runs per side", "canaries", "seconds (whole audit)", "torch threads",
               "load average (1 min)"],
              [[f"{trials:,}", str(len(r["selection"])), f"{wall:.1f}",
                str(torch.get_num_threads()), (before.split() or ["-", "-"])[1]]])


def mutants(seeds: Sequence[int], out: Report, budget: int | None = None) -> None:
    """The mutation suite: each mutant at its budget on every seed; the catch rate."""
    import warnings

    from leakaudit.empirical.mutants import MUTANTS

    out.line("## Mutation suite (leakaudit/empirical/mutants, point 2, clip 1, sigma 2 "
             f"unless stated, seeds {', '.join(map(str, seeds))})")
    out.line()
    rows, caught, total = [], 0, 0
    for name, m in MUTANTS.items():
        n = budget or m.budget
        flags, winners = [], set()
        for s in seeds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                r = release(m.factory(), n, s, shapes=SMALL_SHAPES, background=8)
            flags.append(r["sound_violated"])
            winners.add(f"{r['canary']}/{r['statistic']} ({r['violated_by'].split(' ')[0]})")
        caught += sum(flags)
        total += len(flags)
        rows.append([name, m.bug, f"{n:,}", f"{sum(flags)}/{len(flags)}",
                     ", ".join(sorted(winners))])
    out.table(["mutant", "bug", "held-out runs per side", "flagged", "canary/statistic (test)"],
              rows)
    out.line(f"Catch rate: {caught}/{total}.")
    out.line()


SECTIONS = ("tight", "exposure", "aggregate", "speed", "mutants")


def main(argv: Sequence[str] | None = None) -> PrivacyReport:
    ap = parser(__doc__, PROFILES, out_help="write empirical_privacy.{md,csv,json,png} here")
    ap.add_argument("--defenses", default=None, help="comma-separated (default: all)")
    ap.add_argument("--points", default="2,1,0")
    ap.add_argument("--trials", type=at_least(100), default=None,
                    help="held-out runs per side of the sweep (default: the profile's); "
                    "the exposure and aggregate sections then use min(trials, 1000 / 500)")
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--results", default=None, help="resumable JSON-lines results file")
    ap.add_argument("--skip", default="", help="sections to skip: " + ",".join(SECTIONS))
    args = ap.parse_args(argv)
    prof = dict(profile(PROFILES, args.profile))
    if args.trials is not None:
        prof.update(trials=args.trials, exposure_trials=min(args.trials, 1000),
                    game_trials=min(args.trials, 500))
    names = D.available() if args.defenses is None else args.defenses.split(",")
    try:
        points = [int(p) for p in args.points.split(",")]
    except ValueError:
        ap.error(f"--points must be comma-separated integers, got {args.points!r}")
    skip = set(filter(None, args.skip.split(",")))
    if skip - set(SECTIONS):
        ap.error(f"--skip: unknown section(s) {', '.join(sorted(skip - set(SECTIONS)))}; "
                 f"choose from {', '.join(SECTIONS)}")
    options = game_options(prof)
    out = Report()
    out.line(f"# Measured privacy ({today()}, profile {args.profile}, delta = 1e-5, "
             "95 % confidence)")
    out.line()
    if options:
        out.line("Profile tiny: the release has the small shapes of the mutation suite "
                 f"({', '.join('x'.join(map(str, s)) for s in SMALL_SHAPES)}) with 8 "
                 "background examples, not LeNet's.")
        out.line()
    report = sweep(names, points, prof["trials"], args.seed, args.results, out, **options)
    if "tight" not in skip:
        tightness(prof["tight_trials"], args.seed, out)
    if "exposure" not in skip:
        exposure(prof["exposure_trials"], args.seed, out, **options)
    if "aggregate" not in skip:
        simulator_game(names, prof["game_trials"], args.seed, out)
    if "speed" not in skip:
        speed(prof["speed_trials"], args.seed, out)
    if "mutants" not in skip:
        mutants(prof["mutant_seeds"], out, budget=prof["mutant_budget"])
    if args.out:
        paths = report.save(args.out, stem="empirical_privacy")
        # the whole printed page, not the table alone
        paths.update(write_outputs(args.out, "empirical_privacy", markdown=out.text()))
        print("wrote", ", ".join(str(p) for p in paths.values()))
    return report


if __name__ == "__main__":
    main()
