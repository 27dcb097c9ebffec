"""The audit's figure, read at a glance (``matplotlib.figure.Figure``; the caller's backend is
never touched): per defense, sound against measured eps on a log axis; per (defense, stage),
identification success with its interval against its bound; and the reconstructions of the
undefended model and of the best-protected defense beside the truth."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FIGURE_EXAMPLES", "FRAME", "best_protected", "save_profile_figure", "strip",
           "to_image"]

#: at most this many attacked examples in a row of reconstructions
FIGURE_EXAMPLES = 8
#: frame of an example: rebuilt, not rebuilt, ground truth
FRAME = {True: (0.15, 0.65, 0.25), False: (0.85, 0.25, 0.2), None: (0.6, 0.6, 0.6)}
#: where an infinite eps is drawn, relative to the largest finite one on the axis
_INF_FACTOR = 10.0


def best_protected(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The defense whose guarantee is strongest: the least finite sound eps among the DP
    defenses (None when none has one)."""
    finite = [r for r in rows if math.isfinite(r["eps_sound"]) and r["eps_sound"] > 0]
    return min(finite, key=lambda r: r["eps_sound"])["defense"] if finite else None


def save_profile_figure(report: Any, path: str | Path) -> Path:
    """Three panels (left to right): eps, identification, reconstructions; ValueError when
    the report has no rows."""
    from matplotlib.figure import Figure

    rows = report.profile_rows()
    if not rows:
        raise ValueError("the report has no profile rows to draw")
    fig = Figure(figsize=(15, 0.45 * len(rows) + 3.2), dpi=100, layout="constrained")
    ax_eps, ax_id, ax_rec = fig.subplots(1, 3, width_ratios=[1.1, 1.1, 1.0])
    _eps_panel(ax_eps, rows, report.delta)
    _identification_panel(ax_id, rows)
    _reconstruction_panel(ax_rec, report, rows)
    fig.suptitle(f"Protection profile ({report.config.get('dataset', 'data')}): "
                 "guarantee vs measurement, identification vs its bound, reconstructions",
                 fontsize=10)
    out = Path(path)
    fig.savefig(out)
    return out


def _eps_panel(ax: Any, rows: Sequence[Mapping[str, Any]], delta: float) -> None:
    """Per defense: claimed (x), sound (filled) and measured lower bound (open) eps."""
    defenses = list(dict.fromkeys(r["defense"] for r in rows))
    first = {r["defense"]: r for r in reversed(rows)}
    values = [v for r in first.values() for v in (r["eps_sound"], r["eps_claimed"],
                                                  r["eps_measured"] or math.nan)
              if v is not None and math.isfinite(v) and v > 0]
    top = max(values, default=1.0) * _INF_FACTOR
    for y, d in enumerate(defenses):
        r = first[d]
        for value, style in ((r["eps_claimed"], dict(marker="x", color="0.4")),
                             (r["eps_sound"], dict(marker="o", color="C0")),
                             (r["eps_measured"], dict(marker="o", mfc="white", color="C3"))):
            if value is None or math.isnan(value) or value <= 0:
                continue
            ax.plot([min(value, top)], [y], linestyle="none", markersize=8, **style)
            if math.isinf(value):
                ax.annotate("inf", (top, y), xytext=(6, -3), textcoords="offset points",
                            fontsize=7, color=style["color"])
    ax.set_xscale("log")
    ax.set_yticks(range(len(defenses)), [_short(d) for d in defenses], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(10.0, color="0.7", linestyle=":", linewidth=1)
    ax.set_xlabel(f"eps at delta = {delta:g} (log; inf drawn at the right edge)",
                  fontsize=8)
    ax.set_title("claimed (x), sound (filled), measured >= (open)", fontsize=9)
    ax.grid(alpha=0.3, axis="x")


def _identification_panel(ax: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Per (defense, stage): success with its interval, the bound (bar), the prior 1/k."""
    shown = [r for r in rows if r["identification"]]
    for y, r in enumerate(shown):
        i = r["identification"]
        colour = "C3" if r["verdict"] in ("leaks", "unsound") else "C0"
        ax.errorbar([i["success"]], [y], xerr=[[i["success"] - i["ci_low"]],
                                               [i["ci_high"] - i["success"]]],
                    fmt="o", color=colour, capsize=3)
        ax.plot([i["bound"]], [y], marker="|", markersize=16, markeredgewidth=2.5,
                color="k", linestyle="none")
        ax.plot([1.0 / i["k"]], [y], marker=".", color="0.5", linestyle="none")
    ax.set_yticks(range(len(shown)),
                  [f"{_short(r['defense'])}, {r['stage']}: {r['verdict']}" for r in shown],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.02)
    k = shown[0]["identification"]["k"] if shown else "k"
    ax.set_xlabel(f"identification success among k = {k} (95 % interval)", fontsize=8)
    ax.set_title("measured (dot, red: leaks), bound (|), blind guess (grey)", fontsize=9)
    ax.grid(alpha=0.3, axis="x")


def _reconstruction_panel(ax: Any, report: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Truth, the undefended model's best attack and the best-protected defense's, at the
    first stage (where the undefended model is rebuilt), framed green when rebuilt."""
    ax.set_xticks([])
    ax.set_yticks([])
    stage = rows[0]["stage"]
    picks = [r for r in rows if r["stage"] == stage]
    chosen = [next((r for r in picks if r["name"] == "none"), None)]
    protected = best_protected(picks)
    chosen.append(next((r for r in picks if r["defense"] == protected), None))
    lines, labels = [], []
    for r in [c for c in chosen if c is not None and c["reconstruction"]]:
        cells = sorted((c for c in report.cells if c["defense"] == r["defense"]
                        and c.get("stage") == stage and int(c["point"]) == r["point"]
                        and c["attack"] == r["reconstruction"]["attack"]
                        and "reconstruction" in c), key=lambda c: int(c["example"]))
        cells = cells[:FIGURE_EXAMPLES]
        if not cells:
            continue
        if not lines:
            lines.append(strip([c["truth"] for c in cells], [None] * len(cells)))
            labels.append("truth")
        lines.append(strip([c["reconstruction"] for c in cells],
                           [bool(c["success"]) for c in cells]))
        labels.append(f"{_short(r['defense'])} ({r['reconstruction']['attack']}, "
                      f"point {r['point']})")
    if not lines:
        ax.set_title("no reconstructions kept", fontsize=9)
        return
    width = max(line.shape[1] for line in lines)
    padded = [np.pad(line, ((0, 1), (0, width - line.shape[1]), (0, 0)),
                     constant_values=1.0) for line in lines]
    ax.imshow(np.concatenate(padded), interpolation="nearest")
    step = padded[0].shape[0]
    ax.set_yticks([step * i + step / 2 for i in range(len(labels))], labels, fontsize=7)
    ax.set_title(f"reconstructions at {stage} weights (green: rebuilt)", fontsize=9)


def _short(defense: str) -> str:
    return defense if len(defense) <= 28 else defense[:27] + "…"


def strip(images: Sequence[Any], rebuilt: Sequence[bool | None]) -> np.ndarray:
    """The images side by side (RGB), each in a one-pixel frame of its :data:`FRAME`
    colour, one white pixel apart."""
    tiles = []
    for values, ok in zip(images, rebuilt):
        img = to_image(values)
        rgb = img if img.ndim == 3 else np.repeat(img[..., None], 3, axis=2)
        framed = np.empty((rgb.shape[0] + 2, rgb.shape[1] + 2, 3))
        framed[:] = FRAME[ok]
        framed[1:-1, 1:-1] = rgb
        tiles += [framed, np.ones((framed.shape[0], 1, 3))]
    return np.concatenate(tiles[:-1], axis=1)


def to_image(values: Any) -> np.ndarray:
    """An example as an image in [0, 1]: (C, H, W) to (H, W[, 3]); a flat vector padded to a
    square and rescaled."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim == 4 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim == 3 and arr.shape[0] in (1, 3):
        arr = arr[0] if arr.shape[0] == 1 else np.transpose(arr, (1, 2, 0))
    elif arr.ndim == 1:
        side = int(math.ceil(math.sqrt(arr.size)))
        arr = np.pad(arr, (0, side * side - arr.size)).reshape(side, side)
        arr = (arr - arr.min()) / (np.ptp(arr) or 1.0)
    return np.clip(arr, 0, 1)
