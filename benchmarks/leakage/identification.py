"""Section (d): Hayes et al.'s prior-aware attack against fed-cdp and fed-sdp-client at
B = 1, L = 1, leak point 1, next to its bound Phi(Phi^-1(1/k) + mu): the cells, their jobs,
the table, the figure and the CSV."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from benchmarks._common import Report
from benchmarks.leakage.profile import (
    ID_COLUMNS,
    ID_CONFIDENCE,
    Profile,
    csv_rows,
    load_dataset,
)
from leakaudit import data, grads, metrics, models
from leakaudit import defenses as D
from leakaudit.auditing import identification


def identification_cell(defense: Any, ds: data.Dataset, model: torch.nn.Module,
                        ks: Sequence[int], trials: int, pool: int, lr: float, seed: int
                        ) -> list[dict[str, Any]]:
    """Hayes et al.'s prior-aware attack against one defense at B = 1, L = 1, leak point 1,
    one :func:`leakaudit.auditing.identification.identification` per k: ``trials``
    releases each, of a target drawn uniformly from a pool of ``pool`` training images,
    among k candidates (kappa = 1 / k), every release with a noise draw of its own (per
    defense, sigma, k and trial: no two cells share one); scored on the whole release and
    on each tensor, the best scorer with its Bonferroni interval. Bound: Phi(Phi^-1(1/k) +
    mu), mu the attacked release's add/remove mu from its sound ledger."""
    out = []
    for k in ks:
        budget = identification.IdentificationBudget(k=k, trials=trials, pool=pool,
                                                     confidence=ID_CONFIDENCE)
        r = identification.identification(model, ds, defense, point=1, budget=budget,
                                          lr=lr, seed=seed, cell=f"k={k}")
        out.append({"defense": defense.name, "sigma": float(defense.params()["sigma"]),
                    **{c: r[c] for c in ("k", "trials", "successes", "success", "ci_low",
                                         "ci_high", "mu", "bound", "scorer")},
                    "kappa": metrics.prior_success_identification(k),
                    "ratio": r["success"] / r["bound"]})
    return out


def identification_model(ds: data.Dataset, seed: int) -> torch.nn.Module:
    """The model of the identification cells: a ReLU MLP with one hidden layer of 100 units
    (untrained, PyTorch's default initialisation), whose per-example gradients of different
    digits are far from parallel (untrained LeNet-Sigmoid maps two digits of one label to
    gradients of cosine ~0.99, which no attack can tell apart)."""
    gen = torch.Generator().manual_seed(seed)
    return models.mlp(int(np.prod(ds.input_shape)), ds.num_classes, (100,), "relu",
                      generator=gen)


def identification_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    ds = load_dataset(job["dataset"], job["seed"])
    defense = D.get(job["defense"], clip=job["clip"], sigma=job["sigma"])
    with grads.torch_threads(1):
        return identification_cell(defense, ds, identification_model(ds, job["seed"]),
                                   job["ks"], job["trials"], job["pool"], job["lr"],
                                   job["seed"])


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


def write_id_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Section (d)'s cells as CSV (columns ``ID_COLUMNS``)."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ID_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(csv_rows(rows))
