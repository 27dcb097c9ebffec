"""Section (d) of the leakage-curves benchmark: the prior-aware attack against its bound
(:mod:`benchmarks.leakage_curves` documents the setting)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from benchmarks._common import (
    Report,
)
from benchmarks.leakage_cells import (
    Profile,
    engine_of,
    execute,
    store_config,
)
from benchmarks.leakage_report import (
    csv_rows,
)
from leakaudit.auditing.results import ResultsFile


def write_id_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Section (d)'s cells as CSV (columns ``ID_COLUMNS``)."""
    import csv

    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ID_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(csv_rows(rows))


def identification_main(report: Report, prof: Profile, args: argparse.Namespace) -> int:
    """Only section (d) (``--identification-only``): its table, figure and CSV."""
    store = ResultsFile(args.out / "leakage_curves.jsonl", store_config(prof, args))
    ident = identification_jobs(prof, args.seed)
    execute(ident, store, engine_of(args))
    rows = [r for k, _ in ident for r in store.get("job", k)["rows"]]
    idc = identification_section(report, rows)
    plot_identification(rows, args.out / "leakage_identification.png")
    write_id_csv(rows, args.out / "leakage_identification.csv")
    for r in idc["fails"]:
        print(f"MEASURED ABOVE BOUND: {r}", file=sys.stderr)
    return 1 if idc["fails"] else 0


# ------------------------------------------------------------------ (d) prior-aware attack
#: what one identification cell runs: defense x sigma, every k on the same releases
ID_COLUMNS = ("defense", "sigma", "k", "trials", "successes", "success", "ci_low",
              "ci_high", "kappa", "mu", "bound", "ratio", "scorer")


def identification_jobs(prof: Profile, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """(key, job) per (defense, sigma) of section (d)."""
    out = []
    for d in prof.id_defenses:
        for s in prof.id_sigmas:
            job = {"kind": "identify", "dataset": prof.dataset, "seed": seed,
                   "defense": d, "sigma": s, "clip": prof.id_clip, "ks": prof.id_ks,
                   "trials": prof.id_trials, "pool": prof.id_pool, "lr": 1.0}
            out.append((f"identify|{d}|{s:g}|{prof.id_ks}|{prof.id_trials}|"
                        f"{prof.id_pool}|{prof.id_clip:g}", job))
    return out


def identification_failures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cells whose measured success is above the bound by more than its interval (the
    Clopper-Pearson lower end above the bound): a bug in the defense's ledger, the bound or
    the release model."""
    return [r for r in rows if r["ci_low"] > r["bound"] + 1e-12]


def identification_section(report: Report, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """(d) The prior-aware attack next to its bound, per cell: measured / bound and the
    interval and its checks."""
    report.line("## (d) Prior-aware identification against its bound (B = 1, L = 1, leak "
                "point 1)")
    report.line()
    report.line("Hayes, Mahloujifar, Balle (NeurIPS 2023): the attacker knows k candidates "
                "(the target among them, uniformly: a blind guess succeeds with 1/k), the "
                "model and the defense's public noise parameters, and picks the candidate "
                "that makes the release most likely. Bound: Phi(Phi^-1(1/k) + mu), mu the "
                "release's add/remove mu. Interval: two-sided 95 % Clopper-Pearson.")
    report.line()
    report.table(["defense", "sigma", "k", "trials", "measured", "95 % interval", "bound",
                  "measured / bound", "verdict"],
                 [[r["defense"], f"{r['sigma']:g}", str(r["k"]), str(r["trials"]),
                   f"{r['success']:.3f}", f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
                   f"{r['bound']:.3f}", f"{r['ratio']:.2f}", _id_verdict(r)] for r in rows])
    fails = identification_failures(rows)
    near = [r for r in rows if r["ratio"] >= 0.8 or r["ci_high"] >= r["bound"]]
    report.line()
    report.line(f"- Cells above the bound beyond their interval: {len(fails)} of {len(rows)}; "
                f"cells at >= 80 % of the bound or whose interval reaches it: {len(near)} of "
                f"{len(rows)}.")
    report.line()
    return {"fails": fails, "near": len(near), "cells": len(rows)}


def _id_verdict(r: dict[str, Any]) -> str:
    if r["ci_low"] > r["bound"] + 1e-12:
        return "ABOVE THE BOUND"
    if r["ci_high"] >= r["bound"]:
        return "meets the bound"
    return ">= 80 % of it" if r["ratio"] >= 0.8 else "below 80 % of it"


def plot_identification(rows: list[dict[str, Any]], path: Path) -> None:
    """Measured success (markers, 95 % Clopper-Pearson bars) and the bound (open markers at
    the computed sigmas only, no lines between them) against sigma, one panel per defense,
    one colour per k; legends outside the data."""
    defenses = list(dict.fromkeys(r["defense"] for r in rows))
    if not defenses:
        return
    fig = Figure(figsize=(5.2 * len(defenses) + 2.2, 4.4), layout="constrained")
    axes = fig.subplots(1, len(defenses), squeeze=False)[0]
    ks = sorted({r["k"] for r in rows})
    for ax, d in zip(axes, defenses):
        for i, k in enumerate(ks):
            pts = sorted((r for r in rows if r["defense"] == d and r["k"] == k),
                         key=lambda r: r["sigma"])
            sig = np.array([r["sigma"] for r in pts])
            shift = sig * (1 + 0.04 * (i - 1))
            y = np.array([r["success"] for r in pts])
            err = np.array([[r["success"] - r["ci_low"] for r in pts],
                            [r["ci_high"] - r["success"] for r in pts]])
            ax.errorbar(shift, y, yerr=err, fmt="o", color=f"C{i}", capsize=3,
                        label=f"k = {k}: measured (n = {pts[0]['trials']})")
            ax.plot(shift, [r["bound"] for r in pts], linestyle="none", marker="_",
                    markersize=18, markeredgewidth=2.2, color=f"C{i}",
                    label=f"k = {k}: bound")
            ax.plot(shift, [r["kappa"] for r in pts], linestyle="none", marker=".",
                    markersize=5, color=f"C{i}", alpha=0.5, label=f"k = {k}: prior 1/k")
        ax.set_xscale("log")
        ax.set_xticks(sorted({r["sigma"] for r in rows}))
        ax.set_xticklabels([f"{s:g}" for s in sorted({r["sigma"] for r in rows})])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("noise multiplier sigma")
        ax.set_ylabel("identification success")
        ax.set_title(f"{d}, B = 1: prior-aware attack vs bound")
        ax.grid(alpha=0.3)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    fig.savefig(path, dpi=110)
