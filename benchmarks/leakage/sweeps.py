"""The noise sweeps (adaptive sigma grid per line) and the rows they give: one CSV row per
cell, the best attack per sigma of each line, where a line stops leaking, and the rows
measured above their bound."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks.leakage.jobs import execute, sweep_jobs
from benchmarks.leakage.profile import COLUMNS, ID_CONFIDENCE, Profile
from leakaudit.auditing.results import ResultsFile
from leakaudit.engines import EngineConfig
from leakaudit.scoring.bounds import clopper_pearson_lower


def leak_levels(rows: list[dict[str, Any]]) -> dict[float, float]:
    """sigma -> success of one line: the best over attacks and points of max(ASR,
    identification)."""
    out: dict[float, float] = {}
    for r in rows:
        level = max(r["asr"], r.get("identification", 0.0))
        out[r["sigma"]] = max(out.get(r["sigma"], 0.0), level)
    return out


def refine_sigmas(levels: dict[float, float]) -> list[float]:
    """New sigmas: geometric midpoints of the gaps (last fully leaking, next) and (last
    leaking, first resisting) of one line; a gap narrower than x1.5 is left alone."""
    grid = sorted(levels)
    new = set()
    full = [i for i, s in enumerate(grid) if levels[s] >= 1.0]
    some = [i for i, s in enumerate(grid) if levels[s] > 0.0]
    for idx in ({full[-1]} if full else set()) | ({some[-1]} if some else set()):
        if idx + 1 >= len(grid):
            continue
        a, b = grid[idx], grid[idx + 1]
        if a > 0 and b / a < 1.5:
            continue
        mid = math.sqrt(a * b) if a > 0 else b / math.sqrt(10.0)
        new.add(float(f"{mid:.3g}"))
    return sorted(new - set(grid))



def run_sweeps(prof: Profile, seed: int, weights: dict[tuple[str, str], Any],
               kappas: dict[str, float], store: ResultsFile, engine: EngineConfig,
               first: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The base pass (with ``first``, the grid and eps jobs, in one pool), then
    ``prof.refine`` passes adding the midpoints of every line's gaps."""
    lines = [(d, b) for d in prof.sweep_defenses for b, _ in prof.sweep_attacks]
    sigmas = {line: list(prof.sigmas) for line in lines}
    jobs = [j for line in lines for j in sweep_jobs(prof, seed, weights, kappas, *line,
                                                    sigmas[line])]
    execute(first + jobs, store, engine)
    for _ in range(prof.refine):
        new = []
        for line in lines:
            mine = [r for k, j in jobs if (j["defense"], j["batch_size"]) == line
                    for r in _rows_with_sigma(store, k, j)]
            extra = refine_sigmas(leak_levels(mine))
            sigmas[line] += extra
            new += list(sweep_jobs(prof, seed, weights, kappas, *line, extra))
        if not new:
            break
        execute(new, store, engine)
        jobs += new
    return jobs


def _rows_with_sigma(store: ResultsFile, key: str, job: dict[str, Any]
                     ) -> list[dict[str, Any]]:
    return [{**r, "sigma": job["sigma"]} for r in store.get("job", key)["rows"]]


def collect(jobs: list[tuple[str, dict[str, Any]]], store: ResultsFile) -> list[dict[str, Any]]:
    """One CSV row per (defense, sigma, point, attack, model, stage, B, L), averaged over
    the batches of the cell (ASR and identification over all their images)."""
    eps = {(j["defense"], j["sigma"]): store.get("job", k)["rows"][0]["eps_sound"]
           for k, j in jobs if j["kind"] == "eps"}
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for key, job in jobs:
        if job["kind"] in ("eps", "identify"):
            continue
        for r in store.get("job", key)["rows"]:
            cell = (job["defense"], r["point"], r["attack"], job["model"], job["stage"],
                    job["batch_size"], job["local_steps"], job["sigma"])
            cells.setdefault(cell, []).append(r)
    rows = []
    for cell, rs in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0][:7]))
                           + (kv[0][7],)):
        defense, sigma = cell[0], cell[7]
        rows.append(dict(zip(COLUMNS, (
            *cell, rs[0].get("eps_release", math.inf),
            math.inf if defense == "none" or sigma == 0 else eps.get((defense, sigma),
                                                                     math.nan),
            rs[0].get("mu", math.inf), _share(rs, "asr"), _mean(rs, "psnr"),
            _mean(rs, "ssim"), _share(rs, "identification"), rs[0].get("bound_asr", 1.0),
            rs[0].get("bound_id", 1.0), _mean(rs, "label_accuracy"))),
            images=sum(r["images"] for r in rs)))
    return rows


def _share(rs: list[dict[str, Any]], name: str) -> float:
    """Image-weighted mean of a per-batch share."""
    return sum(r.get(name, math.nan) * r["images"] for r in rs) / sum(r["images"] for r in rs)


def _mean(rs: list[dict[str, Any]], name: str) -> float:
    return float(np.mean([r.get(name, math.nan) for r in rs]))



def above_bound(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose measured success exceeds its reconstruction bound by more than its
    interval: the two-sided 95 % Clopper-Pearson lower end of the image count (``images``;
    a row without it counts as one image per unit of share, i.e. no interval) above the
    bound."""
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
