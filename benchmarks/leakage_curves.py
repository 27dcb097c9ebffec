"""Leakage at the settings people train with: batch size, local steps, training
stage and noise, with the bound no attack can beat on the same axes.

(a) Undefended: batch size B x local steps L x attacks (ig, fedavg, idlg, fedavg-l2). A
    client holds B examples and takes L full-batch SGD steps (``fl.simulate``, one client,
    one round); the attacks see its update (leak point 1): ig and idlg as the gradient
    g = -dW / (lr L), fedavg and fedavg-l2 (the same matched iDLG's way) by simulating the L
    steps (they are told L, lr, B and the optimizer).
(b) Noise sweeps: sigma x defenses x B, L = 1, the profile's leak points. The sigma grid is
    dense where curves change (down to 1e-5) and refined adaptively: after each pass the
    geometric midpoints of the gaps (last fully leaking, next) and (last leaking, first
    resisting) of every line are added (``Profile.refine`` passes). Each row carries the
    reconstruction-robustness bound of the release the attack sees (Hayes, Mahloujifar,
    Balle, NeurIPS 2023; :func:`leakaudit.metrics.rero_bound_gdp`): its mu comes from the
    attacked run's sound ledger (Gaussian steps at q = 1: the add/remove mu = sqrt(sum 1 /
    sigma^2), the relation the theorem uses; any other ledger: the (eps, delta) pair of
    ``Run.epsilon`` at delta 1e-5), its kappa is B / N for identification (B guesses) and
    the certified :func:`leakaudit.metrics.certified_prior_psnr` (times B) for PSNR >= 20
    dB; a leak point the defense does not protect (its noise acts later) gets 1. A measured
    success above its bound beyond its 95 % Clopper-Pearson interval makes the run exit 1.
(c) Label counts: multiset accuracy of the inferred labels at B = 8 and 32 on real data.
(d) The prior-aware attack (Hayes et al. 2023; :class:`leakaudit.attacks.CandidateScorer`)
    against fed-cdp and fed-sdp-client at B = 1, L = 1, leak point 1: per (defense, sigma)
    ``id_trials`` releases of a target drawn from a pool of ``id_pool`` training digits,
    candidate sets of k in ``id_ks`` (kappa = 1/k), every release with a noise draw of its
    own (per defense, sigma, k and trial), scored on the whole release and on each tensor
    (:mod:`leakaudit.auditing.identification`), the best scorer with its Bonferroni-paid
    Clopper-Pearson interval next to Phi(Phi^-1(1/k) + mu); a cell above the bound beyond
    its interval makes the run
    exit 1 (``--identification-only`` runs this section alone). Model: a ReLU MLP with one
    hidden layer of 100 (see :func:`benchmarks.leakage_cells.identification_model`), clip
    0.5 (below every per-example gradient norm, so every candidate has norm C), client lr 1.

Scoring per image (the scorer alone sees the truth): Hungarian matching, then PSNR, SSIM
(skimage), success = PSNR >= 20 dB (ASR), and identification: the training image nearest
to the reconstruction is the true one (``metrics.identified``; a blind guess succeeds with
kappa = 1 / N). Outputs under ``--out``: leakage_curves.csv (columns ``COLUMNS``), .md, .png
(identification and PSNR against sigma and against the release's sound eps, with the bound
curve), leakage_reconstructions.png (reconstructions along the noise axis) and the resumable
results file leakage_curves.jsonl; section (d): leakage_identification.csv (``ID_COLUMNS``) and
.png.

Profiles: ``quick`` (digits, untrained LeNet-Sigmoid, B in {1, 4, 8}, L in {1, 2}; sweeps
at B = 1, leak point 1, fed-cdp / fed-sdp-client / fed-alpha-cdp, 3 images per cell, ig
(300 signed-Adam steps, cosine schedule, TV 0.01), on fed-alpha-cdp idlg-layer (20 L-BFGS
steps) instead; the standard-run eps at sigma 1 only (23 s per run); B in {1, 8} for the
grid (idlg 50, fedavg-l2 30 L-BFGS steps, x4 at B = 8: ``budget_scale``); section (d) at
sigma 0.5 / 1 / 2, k 2 / 10 / 100, 300 trials per cell),
``full`` (Fashion-MNIST, LeNet and the ReLU CNN, stages initial / round1 / round5, L up to
10, sweeps at B in {1, 4, 8} and every leak point, 2000-step attacks with 2 restarts;
many CPU hours: not run on the shared 2-core machine), ``tiny`` (``--tiny``: the quick
profile shrunk to a smoke run of seconds, for the tests).

Usage::

    nice python -m benchmarks.leakage_curves --profile quick --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Report,
    Stopwatch,
    at_least,
    parser,
    profile,
    today,
    write_outputs,
)
from benchmarks.leakage_cells import (
    COLUMNS,
    PROFILES,
    TINY,
    Profile,
    build_model,
    collect,
    engine_of,
    identification_cell,
    identification_model,
    load_dataset,
    plan,
    refine_sigmas,
    release_bound,
    run_sweeps,
    stage_weights,
    store_config,
)
from benchmarks.leakage_identification import (
    identification_failures,
    identification_jobs,
    identification_main,
    identification_section,
    plot_identification,
    write_id_csv,
)
from benchmarks.leakage_report import (
    above_bound,
    csv_rows,
    grid_section,
    label_section,
    plot,
    plot_reconstructions,
    reading_section,
    run_summary,
    sweep_section,
    transition,
)
from leakaudit import data, metrics
from leakaudit.auditing.identification import release_mu
from leakaudit.auditing.results import ResultsFile
from leakaudit.engines import ENGINE_HELP, ENGINES

#: the benchmark's names, wherever they live (tests and users import them from here)
__all__ = [
    'COLUMNS', 'PROFILES', 'Profile', 'TINY', 'above_bound', 'build_model', 'collect',
    'csv_rows', 'engine_of', 'grid_section', 'identification_cell',
    'identification_failures', 'identification_jobs', 'identification_main',
    'identification_model', 'identification_section', 'label_section', 'load_dataset',
    'main', 'plan', 'plot', 'plot_identification', 'plot_reconstructions',
    'reading_section', 'refine_sigmas', 'release_bound', 'release_mu', 'run_summary',
    'run_sweeps', 'stage_weights', 'store_config', 'sweep_section', 'transition',
    'write_id_csv',
]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1 when a measured success
    exceeds its bound)."""
    ap = parser(__doc__, PROFILES, out="results/benchmarks",
                out_help="directory for leakage_curves.{md,csv,png,jsonl} and "
                "leakage_reconstructions.png")
    ap.add_argument("--data", default=None, help="dataset (default: the profile's)")
    ap.add_argument("--workers", type=at_least(1), default=2)
    ap.add_argument("--engine", default="process", choices=ENGINES,
                    help="where the jobs run: " + "; ".join(f"{k}: {v}" for k, v in
                                                         ENGINE_HELP.items()))
    ap.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="with --engine ray: the cluster (default: RAY_ADDRESS, else a "
                    "local Ray)")
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--labels-only", action="store_true", help="only section (c)")
    ap.add_argument("--identification-only", action="store_true",
                    help="only section (d), the prior-aware attack against its bound")
    args = ap.parse_args(argv)
    if args.out is None:
        ap.error("--out is required (the resumable results file lives there)")
    prof = profile(PROFILES, args.profile)
    if args.data:
        prof = dataclasses.replace(prof, dataset=args.data)
    try:
        ds = load_dataset(prof.dataset, args.seed)
    except (FileNotFoundError, OSError, ValueError) as exc:
        ap.error(f"cannot load {prof.dataset!r} ({exc}); give --data")
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report()
    report.line(f"# Leakage curves ({today()}, profile {args.profile}, {ds.name})")
    report.line()
    clock = Stopwatch()
    if args.identification_only:
        status = identification_main(report, prof, args)
        report.line(f"Command: `python -m benchmarks.leakage_curves "
                    f"{' '.join(argv or sys.argv[1:])}` ({clock.seconds:.0f} s, "
                    f"{args.workers} worker(s)).")
        write_outputs(args.out, "leakage_identification", markdown=report.text())
        return status
    label_section(report, prof.dataset, args.seed, prof.label_batches)
    status, rows, figure = 0, None, None
    if not args.labels_only:
        status, rows, figure = curves(report, prof, ds, args)
        busy = sum(r.get("seconds", 0.0) for _, rec in
                   ResultsFile(args.out / "leakage_curves.jsonl", store_config(prof, args))
                   .items("job") for r in rec["rows"])
        run_summary(report, prof, busy, args, argv, clock)
    write_outputs(args.out, "leakage_curves", markdown=report.text(),
                  rows=None if rows is None else csv_rows(rows),
                  columns=None if rows is None else COLUMNS, figure=figure)
    return status


def curves(report: Report, prof: Profile, ds: data.Dataset, args: argparse.Namespace
           ) -> tuple[int, list[dict[str, Any]], Callable[[Path], None]]:
    """Sections (a) and (b) and the reconstructions figure; returns the status (1 when a
    measured success exceeds its bound), the CSV's rows and the drawer of the main figure."""
    store = ResultsFile(args.out / "leakage_curves.jsonl", store_config(prof, args))
    kappas = {"id": metrics.prior_success_identification(len(ds.x_train)),
              "asr": metrics.certified_prior_psnr(ds.x_train)}
    weights = stage_weights(prof, ds, args.seed)
    ident = identification_jobs(prof, args.seed)
    first = list(plan(prof, args.seed, weights, kappas)) + ident
    jobs = first + run_sweeps(prof, args.seed, weights, kappas, store, engine_of(args),
                              first)
    rows = collect(jobs, store)
    sweep_b = [b for b, _ in prof.sweep_attacks]

    def figure(path: Path) -> None:
        plot(rows, sweep_b, path)

    plot_reconstructions(jobs, store, rows, args.out / "leakage_reconstructions.png")
    grid = grid_section(report, rows, prof)
    sweep = sweep_section(report, rows, prof)
    id_rows = [r for k, _ in ident for r in store.get("job", k)["rows"]]
    idc = identification_section(report, id_rows)
    plot_identification(id_rows, args.out / "leakage_identification.png")
    write_id_csv(id_rows, args.out / "leakage_identification.csv")
    reading_section(report, grid, sweep, prof, kappas)
    above = sweep["above"] + idc["fails"]
    if above:
        for r in above:
            print(f"MEASURED ABOVE BOUND: {r}", file=sys.stderr)
        report.line(f"**FAILED: {len(above)} row(s) measured above the bound beyond their "
                    "95 % interval.**")
        return 1, rows, figure
    return 0, rows, figure


if __name__ == "__main__":
    sys.exit(main())
