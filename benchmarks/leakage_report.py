"""The report of the leakage-curves benchmark: CSV rows, the above-bound check, the
transitions along the noise axis, the figures and the Markdown sections."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from benchmarks._common import (
    Report,
    Stopwatch,
)
from benchmarks.leakage_cells import (
    ID_CONFIDENCE,
    SWEEP_DEFENSES,
    Profile,
    batch_indices,
    build_model,
    load_dataset,
)
from leakaudit import attacks, fl, metrics
from leakaudit.auditing.results import ResultsFile


def csv_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The CSV's rows: floats with 6 significant digits."""
    return [{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}
            for row in rows]


def above_bound(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose measured success exceeds its reconstruction bound by more than its
    interval: the two-sided 95 % Clopper-Pearson lower end of the image count (``images``;
    a row without it counts as one image per unit of share, i.e. no interval) above the
    bound."""
    from leakaudit.scoring.bounds import clopper_pearson_lower

    alpha = (1.0 - ID_CONFIDENCE) / 2
    out = []
    for r in rows:
        if r["defense"] == "none":
            continue
        n = int(r.get("images", 0))
        for share, bound in ((r["identification"], r["bound_id"]), (r["asr"], r["bound_asr"])):
            low = clopper_pearson_lower(round(share * n), n, alpha) if n else share
            if low > bound + 1e-12:
                out.append(r)
                break
    return out


def lines_at(rows: list[dict[str, Any]], batch_size: int
             ) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(defense, point) -> per sigma (sorted) the best attack's numbers at B: success
    (max of ASR and identification), identification, ASR and PSNR (max over attacks), with
    the release's eps, eps of the standard run and the bounds."""
    best: dict[tuple[str, int, float], dict[str, Any]] = {}
    for r in rows:
        if r["defense"] == "none" or r["batch_size"] != batch_size:
            continue
        key = (r["defense"], r["point"], r["sigma"])
        old = best.get(key)
        cur = {"sigma": r["sigma"], "eps_release": r["eps_release"],
               "eps_train": r["eps_train"], "bound_id": r["bound_id"],
               "bound_asr": r["bound_asr"], "identification": r["identification"],
               "asr": r["asr"], "psnr": r["psnr"], "ssim": r["ssim"],
               "attack": r["attack"], "images": int(r.get("images", 0))}
        if old is not None:
            cur["attack"] = old["attack"] if old["psnr"] >= r["psnr"] else r["attack"]
            for k in ("identification", "asr", "psnr", "ssim"):
                cur[k] = max(old[k], r[k])
        cur["success"] = max(cur["identification"], cur["asr"])
        best[key] = cur
    lines: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for (d, p, _), v in sorted(best.items()):
        lines.setdefault((d, p), []).append(v)
    return lines


def transition(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Where one line stops leaking: sigmas strictly between all and nothing (success in
    (0, 1)); the best PSNR from the last fully leaking sigma to the first resisting one
    (after which nothing leaks) and whether it strictly decreases."""
    partial = [p["sigma"] for p in points if 0.0 < p["success"] < 1.0]
    full = [i for i, p in enumerate(points) if p["success"] >= 1.0]
    lo = full[-1] if full else 0
    zero = [i for i in range(lo, len(points))
            if all(q["success"] == 0.0 for q in points[i:])]
    hi = zero[0] if zero else len(points) - 1
    span = [p["psnr"] for p in points[lo:hi + 1]]
    return {"partial": partial, "psnr_span": span,
            "psnr_decreasing": len(span) >= 3 and all(a > b for a, b in zip(span, span[1:])),
            "last_full": points[lo]["sigma"] if full else None,
            "first_resisting": points[hi]["sigma"] if zero else None}


def plot(rows: list[dict[str, Any]], batch_sizes: Sequence[int], path: Path) -> None:
    """Per batch size: identification (solid, filled markers, 95 % Clopper-Pearson bars over
    the cell's images) and ASR at 20 dB (dotted) of the best attack against sigma (symlog:
    sigma 0 on the left) and against the sound eps of the release the attack sees (log; inf
    left out); each defense's identification bound as open markers at the sigmas where it
    was computed (no line between them: a bound is not interpolated); the best mean PSNR
    against sigma. One colour per defense; the legend sits outside the panels."""
    from leakaudit.scoring.bounds import clopper_pearson_lower, clopper_pearson_upper

    alpha = (1.0 - ID_CONFIDENCE) / 2
    fig = Figure(figsize=(17, 4.4 * len(batch_sizes)), layout="constrained")
    axes = fig.subplots(len(batch_sizes), 3, squeeze=False)
    colours = {d: f"C{i}" for i, d in enumerate(SWEEP_DEFENSES)}
    markers = {0: "o", 1: "s", 2: "^"}
    images = {(r["defense"], r["point"], r["sigma"], r["batch_size"]): r.get("images", 0)
              for r in rows}
    for (ax_s, ax_e, ax_p), b in zip(axes, batch_sizes):
        for (d, p), pts in lines_at(rows, b).items():
            c, mk = colours.get(d, "k"), markers[p]
            sig = [q["sigma"] for q in pts]
            ident = [q["identification"] for q in pts]
            n = [int(images.get((d, p, q["sigma"], b), 0)) for q in pts]
            lo = [clopper_pearson_lower(round(v * m), m, alpha) if m else v
                  for v, m in zip(ident, n)]
            hi = [clopper_pearson_upper(round(v * m), m, alpha) if m else v
                  for v, m in zip(ident, n)]
            ax_s.errorbar(sig, ident, yerr=[np.subtract(ident, lo), np.subtract(hi, ident)],
                          color=c, marker=mk, markersize=4, capsize=2, linewidth=1,
                          label=f"{d} type {p}: identified (95 % CI)")
            ax_s.plot(sig, [q["asr"] for q in pts], color=c, linestyle=":", linewidth=1,
                      label=f"{d} type {p}: ASR 20 dB")
            ax_s.plot(sig, [q["bound_id"] for q in pts], color=c, linestyle="none",
                      marker=mk, markerfacecolor="none", markersize=9,
                      label=f"{d} type {p}: bound (computed sigmas)")
            fin = [q for q in pts if math.isfinite(q["eps_release"]) and q["eps_release"] > 0]
            if fin:
                eps = [q["eps_release"] for q in fin]
                ax_e.plot(eps, [q["identification"] for q in fin], color=c, marker=mk,
                          markersize=4)
                ax_e.plot(eps, [q["bound_id"] for q in fin], color=c, linestyle="none",
                          marker=mk, markerfacecolor="none", markersize=9)
            ax_p.plot(sig, [q["psnr"] for q in pts], color=c, marker=mk, markersize=4)
        ax_s.set_xscale("symlog", linthresh=1e-5)
        ax_e.set_xscale("log")
        ax_p.set_xscale("symlog", linthresh=1e-5)
        ax_p.axhline(metrics.SUCCESS_PSNR, color="grey", linewidth=0.8, linestyle=":")
        for ax, xl, yl in ((ax_s, "noise multiplier sigma", "success share"),
                           (ax_e, "sound eps of the attacked release (delta 1e-5)",
                            "identified share"),
                           (ax_p, "noise multiplier sigma", "best mean PSNR (dB)")):
            ax.set_xlabel(xl)
            ax.set_ylabel(yl)
            ax.grid(alpha=0.3)
        for ax in (ax_s, ax_e):
            ax.set_ylim(-0.05, 1.05)
        ax_s.set_title(f"B = {b}: identified (bars: 95 % CI), ASR (dotted), bound (open)")
        ax_e.set_title(f"B = {b}: identified against eps, bound (open)")
        ax_p.set_title(f"B = {b}: PSNR of the best attack (20 dB line)")
        ax_p.legend(*ax_s.get_legend_handles_labels(), fontsize=7, loc="upper left",
                    bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("Where gradient leakage stops: measured success and the reconstruction "
                 "bound no attack can beat (Hayes et al. 2023)")
    fig.savefig(path, dpi=90)


def plot_reconstructions(jobs: list[tuple[str, dict[str, Any]]], store: ResultsFile,
                         rows: list[dict[str, Any]], path: Path) -> None:
    """One row per sigma, one column per (defense, attack, leak point) of the B = 1 sweeps,
    the true image in the first column: the first image's reconstruction with its PSNR.
    A cell that was not run is marked "not run" (never a blank image)."""
    thumbs: dict[tuple[str, str, int], dict[float, Any]] = {}
    truth = None
    for key, job in jobs:
        if job["kind"] != "sweep" or job["batch_size"] != 1 or job["example"] != 0:
            continue
        for r in store.get("job", key)["rows"]:
            if "image" in r:
                line = (job["defense"], job["attack"], r["point"])
                thumbs.setdefault(line, {})[job["sigma"]] = r
                truth = r["truth"]
    if not thumbs:
        return
    sigmas = sorted({s for v in thumbs.values() for s in v})
    lines = sorted(thumbs)
    fig = Figure(figsize=(1.9 * (len(lines) + 1) + 0.6, 1.9 * len(sigmas) + 1.0),
                 layout="constrained")
    axes = fig.subplots(len(sigmas), len(lines) + 1, squeeze=False)
    for row, s in zip(axes, sigmas):
        row[0].imshow(np.array(truth), cmap="gray", vmin=0, vmax=255)
        row[0].set_ylabel(f"sigma = {s:.3g}", fontsize=11)
        for ax, line in zip(row[1:], lines):
            r = thumbs[line].get(s)
            if r is None:
                ax.set_facecolor("#f3d9d9")
                ax.text(0.5, 0.5, "not run", ha="center", va="center", fontsize=11,
                        transform=ax.transAxes, color="#8b0000")
            else:
                ax.imshow(np.array(r["image"]), cmap="gray", vmin=0, vmax=255)
                ax.text(0.03, 0.03, f"{r['psnr']:.1f} dB", transform=ax.transAxes,
                        fontsize=10, color="yellow", va="bottom",
                        bbox={"facecolor": "black", "alpha": 0.6, "pad": 1})
        for ax in row:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0][0].set_title("truth", fontsize=11)
    for ax, (d, a, p) in zip(axes[0][1:], lines):
        ax.set_title(f"{d}\n{a}, type {p}", fontsize=10)
    fig.suptitle("Reconstructions by sigma\n(B = 1, first image; PSNR in dB)", fontsize=11)
    fig.savefig(path, dpi=80)


def label_section(report: Report, dataset: str, seed: int, batches: int) -> None:
    """(c) Multiset accuracy of the label counts on untrained LeNet-Sigmoid, real data."""
    from leakaudit.attacks.labels import labels_from_last_layer

    ds = load_dataset(dataset, seed)
    rows = []
    for b in (8, 32):
        ours, sign = [], []
        for t in range(batches):
            model = build_model("lenet", ds, seed + 1000 + t)
            idx = batch_indices(len(ds.y_train), b, 1000 + t, seed)
            x, y = ds.x_train[idx], ds.y_train[idx]
            grads = fl.batch_gradient(model, x, y)
            labels, _ = attacks.infer_labels(model, grads, b, ds.num_classes)
            ours.append(metrics.label_accuracy(labels, y))
            old, _ = labels_from_last_layer(grads[-2].double(), b)
            sign.append(metrics.label_accuracy(old, y))
        rows.append([str(b), str(batches), f"{np.mean(ours):.3f}", f"{min(ours):.3f}",
                     f"{np.mean(sign):.3f}"])
    report.line("## (c) Label counts (untrained LeNet-Sigmoid, real images)")
    report.line()
    report.table(["B", "batches", "multiset accuracy", "worst batch", "sign rule (before)"],
                 rows)


def grid_section(report: Report, rows: list[dict[str, Any]], prof: Profile) -> dict[str, Any]:
    """(a) tables and the checks of the issues; returns the checks."""
    grid = [r for r in rows if r["defense"] == "none"]
    cell = {(r["model"], r["stage"], r["attack"], r["local_steps"], r["batch_size"]): r
            for r in grid}
    report.line("## (a) Undefended: identified share / ASR / mean PSNR (dB) by batch size B "
                "and local steps L")
    report.line()
    for m in prof.models:
        for stage in prof.stages:
            report.line(f"Model {m}, stage {stage} (leak point 1, the client update):")
            report.line()
            body = [[a, str(steps)] + [
                "{identification:.2f} / {asr:.2f} / {psnr:.1f}".format(
                    **cell[(m, stage, a, steps, b)]) for b in prof.batch_sizes]
                for a in prof.grid_attacks for steps in prof.local_steps]
            report.table(["attack", "L"] + [f"B={b}" for b in prof.batch_sizes], body)
    m, stage = prof.models[0], prof.stages[0]
    b_lo, b_hi = prof.batch_sizes[0], prof.batch_sizes[-1]
    best = {b: max(cell[(m, stage, a, steps, b)]["asr"] for a in prof.grid_attacks
                   for steps in prof.local_steps) for b in (b_lo, b_hi)}
    ident = {b: max((cell[(m, stage, a, 1, b)]["identification"], a)
                    for a in prof.grid_attacks) for b in (b_lo, b_hi)}
    steps_hi = prof.local_steps[-1]
    mean = {a: float(np.mean([cell[(m, stage, a, steps_hi, b)]["psnr"]
                              for b in prof.batch_sizes])) for a in ("ig", "fedavg")
            if a in prof.grid_attacks}
    checks = {"asr_falls": best[b_lo] > best[b_hi], "asr_b_lo": best[b_lo],
              "asr_b_hi": best[b_hi], "fedavg_vs_ig": mean, "steps": steps_hi,
              "ident_b_hi": ident[b_hi], "b_hi": b_hi}
    report.line(f"- Best ASR (20 dB) over attacks and L: {best[b_lo]:.2f} at B = {b_lo}, "
                f"{best[b_hi]:.2f} at B = {b_hi}.")
    report.line(f"- Identified share at L = 1 (the nearest of the {prof.dataset} training "
                f"images is the true one; a blind guess: 1/N): best {ident[b_hi][0]:.2f} "
                f"at B = {b_hi} ({ident[b_hi][1]}), {ident[b_lo][0]:.2f} at B = {b_lo}.")
    if len(mean) == 2:
        report.line(f"- Mean PSNR over B at L = {steps_hi}: fedavg {mean['fedavg']:.2f} dB, "
                    f"naive ig {mean['ig']:.2f} dB.")
    report.line()
    return checks


def _interval(share: float, n: int) -> str:
    """The two-sided 95 % Clopper-Pearson interval of ``share`` of ``n`` images."""
    from leakaudit.scoring.bounds import clopper_pearson_lower, clopper_pearson_upper

    if n <= 0:
        return "-"
    k, alpha = round(share * n), (1.0 - ID_CONFIDENCE) / 2
    return (f"[{clopper_pearson_lower(k, n, alpha):.2f}, "
            f"{clopper_pearson_upper(k, n, alpha):.2f}] (n = {n})")


def _fmt(v: float, spec: str = ".3g") -> str:
    return "inf" if v == math.inf else ("-" if isinstance(v, float) and math.isnan(v)
                                        else format(v, spec))


def sweep_section(report: Report, rows: list[dict[str, Any]], prof: Profile) -> dict[str, Any]:
    """(b) one table per line (defense, B, point): the best attack at each sigma next to
    the bound; the transition checks."""
    report.line("## (b) Noise sweeps (L = 1): the best attack at each sigma and the bound")
    report.line()
    checks: dict[str, Any] = {"lines": {}}
    for b, _ in prof.sweep_attacks:
        for (d, p), pts in lines_at(rows, b).items():
            tr = transition(pts)
            checks["lines"][(d, b, p)] = tr
            report.line(f"{d}, B = {b}, leak point {p}: partial success (0 < s < 1) at "
                        f"{len(tr['partial'])} sigma(s) {[f'{s:g}' for s in tr['partial']]};"
                        f" best PSNR from the last fully leaking sigma "
                        f"({tr['last_full']}) to the first resisting one "
                        f"({tr['first_resisting']}): "
                        f"{', '.join(f'{v:.1f}' for v in tr['psnr_span'])} dB (strictly "
                        f"decreasing: {tr['psnr_decreasing']}).")
            report.line()
            report.table(
                ["sigma", "eps release", "eps run", "identified", "95 % CI", "bound",
                 "measured / bound", "ASR", "ASR bound", "PSNR", "SSIM", "best attack"],
                [[f"{q['sigma']:g}", _fmt(q["eps_release"]), _fmt(q["eps_train"]),
                  f"{q['identification']:.2f}", _interval(q["identification"], q["images"]),
                  f"{q['bound_id']:.3g}", f"{q['identification'] / q['bound_id']:.2f}",
                  f"{q['asr']:.2f}", f"{q['bound_asr']:.3g}", f"{q['psnr']:.1f}",
                  f"{q['ssim']:.2f}", q["attack"]] for q in pts])
    noisy = [r for r in rows if r["defense"] != "none" and r["sigma"] > 0]
    checks["bound_everywhere"] = all(not math.isnan(r["bound_id"]) for r in noisy)
    checks["above"] = above_bound(rows)
    report.line(f"- Every noisy row has its bound: {checks['bound_everywhere']}; rows whose "
                f"measured success exceeds the bound: {len(checks['above'])}.")
    report.line()
    return checks


#: published calibration points (attack success at the papers' own settings)
LITERATURE = (
    ("iDLG (Zhao et al. 2020), its README", "MNIST, LeNet-Sigmoid, B = 1, L = 1",
     "iDLG ~88% of images rebuilt, DLG ~76%"),
    ("Geiping et al. 2020, Sec. 6 (FedAvg)", "CIFAR-10, ResNet, 1-5 epochs of 8-100 images",
     "recognisable images from a multi-step update by simulating the local steps"),
    ("Dimitrov et al. 2022", "FEMNIST, the CNN of models.relu_cnn, several epochs",
     "simulating the local epochs beats the naive gradient (their Table 2)"),
    ("Hayes, Mahloujifar, Balle, NeurIPS 2023", "DP-SGD, mu-GDP release",
     "reconstruction success <= Phi(Phi^-1(kappa) + mu)"),
)


def reading_section(report: Report, grid: dict[str, Any], sweep: dict[str, Any],
                    prof: Profile, kappas: dict[str, float]) -> None:
    """The literature's calibration points next to ours."""
    report.line("## Calibration points from the literature")
    report.line()
    report.table(["source", "setting", "reported"], [list(r) for r in LITERATURE])
    report.line(f"Prior success of a blind guess per guess (kappa; B guesses at batch size "
                f"B, capped at 1): identification {kappas['id']:.2g} (1 / training-set "
                f"size), PSNR >= 20 dB {kappas['asr']:.2g} (certified: the largest share of "
                "the training set within MSE 4 x 0.01 of one training image bounds what any "
                "guess in [0, 1]^d, or outside, rebuilds: `metrics.certified_prior_psnr`). "
                "Bounds use the attacked release's add/remove mu (Hayes et al. compare the "
                "release with and without the target), or its certified PLD (eps, delta) "
                "pair where the ledger is not Gaussian.")
    report.line()


def run_summary(report: Report, prof: Profile, busy: float, args: argparse.Namespace,
                argv: Sequence[str] | None, clock: Stopwatch) -> None:
    train = dict(prof.train)
    report.line(f"Standard training run behind eps run and stages: N = {train['clients']}, "
                f"K = {train['clients_per_round']}, T = {train['rounds']}, L = "
                f"{train['local_steps']}, B = {train['batch_size']}, {train['optimizer']}"
                f" lr {train['lr']}; attacked clients: SGD lr {prof.client_lr}, "
                f"{prof.examples} batch(es) per grid cell, {prof.sweep_examples} per sweep "
                f"cell; attack steps {dict(prof.iterations)} (x factor at batch size: "
                f"{dict(prof.budget_scale)}), options "
                f"{ {a: dict(o) for a, o in prof.options} }, restarts {prof.restarts} (best "
                f"by the attack's own loss); job time summed over workers {busy:.0f} s.")
    report.line(f"Command: `python -m benchmarks.leakage_curves {' '.join(argv or sys.argv[1:])}`"
                f" ({clock.seconds:.0f} s, {args.workers} worker(s)).")
