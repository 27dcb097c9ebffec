"""Null audits of every shipped defense whose sound eps is finite, at a stated budget.

For each registered defense (``leakaudit.defenses.available()``, the papers' parameters) and
each leak point where it releases something it protects, the release's sound ledger is read
once (:func:`leakaudit.empirical.game.probe`, the Dirac canary on the mutation suite's
``SHAPES`` with 8 background examples). A pair whose sound eps is infinite is written as a
skipped line with the ledger's own reason (nothing can violate an infinite eps). Every other
pair is audited as the sweeps' shipped-defense test audits it::

    audit_release(defense, point=p, trials=N, seed=s, shapes=SHAPES, background=8)

(every canary, world and statistic), and one JSON line per (defense, point) is appended to
``--out`` as it finishes; a rerun skips the lines already written (resumable). A correct
defense must never be ``sound_violated``.

Usage::

    python -m benchmarks.null_audits --trials 2000 --seed 0 --out results/null_2000_s0.jsonl
    python -m benchmarks.null_audits --trials 100 --defenses fed-cdp --points 2 --out /tmp/x
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

import leakaudit.defenses as D
from leakaudit.empirical import audit_release, game
from leakaudit.empirical.api import release_epsilon
from leakaudit.empirical.mutants import SHAPES

BACKGROUND = 8
DELTA = 1e-5

#: the fields of an audited row written to the JSON line
FIELDS = ("defense", "point", "trials", "seed", "eps_claimed", "eps_sound", "eps_lower",
          "mu_lower", "mu_sound", "mu_claimed", "eps_lower_gdp", "canary", "statistic",
          "mu_canary", "mu_statistic", "claim_violated", "sound_violated", "violated_by",
          "fpr_ub", "fnr_ub", "adjacency", "replaced", "reason")


def sound_eps(defense: D.Defense, point: int) -> tuple[float, str]:
    """The sound eps (at :data:`DELTA`) of one release with the Dirac canary, and the
    ledger's reason when it is infinite."""
    gen = torch.Generator().manual_seed(0)
    setup = game.make_setup(defense, point, SHAPES, BACKGROUND, 0.05, 2, gen)
    probe = game.probe(defense, setup, gen)
    eps = release_epsilon(probe.sound, DELTA)
    why = ""
    if math.isinf(eps):
        notes = [str(getattr(e, "note", "")) for e in probe.sound.events]
        why = "; ".join(n for n in notes if n) or probe.sound.why_infinite() or (
            "the release recorded nothing in its ledger" if not probe.sound.events else "")
    return eps, why


def _json(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def done_keys(path: Path) -> set[tuple[str, int, int, int]]:
    """(defense, point, trials, seed) of the lines already in ``path``."""
    if not path.exists():
        return set()
    keys = set()
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            keys.add((r["defense"], int(r["point"]), int(r["trials"]), int(r["seed"])))
    return keys


def audit_pair(name: str, point: int, trials: int, seed: int) -> dict[str, Any]:
    """One JSON line: skipped (infinite sound eps, with why) or the audit's row."""
    defense = D.get(name)
    eps, why = sound_eps(defense, point)
    base = {"defense": name, "point": point, "trials": trials, "seed": seed}
    if math.isinf(eps):
        return {**base, "skipped": f"sound eps inf: {why}", "eps_sound": "inf"}
    w, c = time.perf_counter(), time.process_time()
    row = audit_release(defense, point=point, trials=trials, seed=seed, shapes=SHAPES,
                        background=BACKGROUND).rows()[0]
    out = {k: _json(row[k]) for k in FIELDS if k in row}
    out.update(base, wall_s=round(time.perf_counter() - w, 1),
               cpu_s=round(time.process_time() - c, 1),
               loadavg=Path("/proc/loadavg").read_text().split()[:3]
               if os.path.exists("/proc/loadavg") else None)
    return out


def _g(v: Any) -> str:
    if isinstance(v, str) and v in ("inf", "nan"):
        return v
    return f"{float(v):.3g}" if isinstance(v, float) else str(v)


def table(paths: list[str]) -> str:
    """The Markdown table of the audited lines of ``paths`` (one file per seed), then the
    skipped pairs with their reasons."""
    rows, skipped = [], {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if "skipped" in r:
                skipped.setdefault(r["defense"], {})[r["point"]] = r["skipped"]
            else:
                rows.append(r)
    out = ["| defense | point | seed | eps_lower | mu_lower | sound eps | sound mu | flagged "
           "| eps: world / statistic | mu: world / statistic |", "|---" * 10 + "|"]
    for r in sorted(rows, key=lambda r: (r["defense"], -r["point"], r["seed"])):
        flag = f"**yes** ({r['violated_by']})" if r["sound_violated"] else "no"
        out.append(f"| {r['defense']} | {r['point']} | {r['seed']} | {_g(r['eps_lower'])} | "
                   f"{_g(r['mu_lower'])} | {_g(r['eps_sound'])} | {_g(r['mu_sound'])} | "
                   f"{flag} | {r['canary']} / {r['statistic']} | "
                   f"{r['mu_canary']} / {r['mu_statistic']} |")
    out.append("")
    for name, points in sorted(skipped.items()):
        out.append(f"- {name} (points {', '.join(map(str, sorted(points)))}): "
                   f"{sorted(set(points.values()))}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--points", default="0,1,2")
    p.add_argument("--defenses", default="", help="comma-separated; default every registered")
    p.add_argument("--out", required=True, help="JSON-lines file (appended, resumable)")
    p.add_argument("--table", nargs="*", help="print the Markdown table of these files")
    a = p.parse_args(argv)
    if a.table:
        print(table(a.table))
        return
    torch.set_num_threads(1)
    names = a.defenses.split(",") if a.defenses else D.available()
    points = [int(x) for x in a.points.split(",")]
    path = Path(a.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = done_keys(path)
    for name in names:
        for point in points:
            if (name, point, a.trials, a.seed) in done or not game.releases_at(D.get(name),
                                                                               point):
                continue
            line = audit_pair(name, point, a.trials, a.seed)
            with path.open("a") as f:
                f.write(json.dumps(line) + "\n")
            print(json.dumps({k: line.get(k) for k in ("defense", "point", "eps_lower",
                                                       "mu_lower", "eps_sound",
                                                       "sound_violated", "skipped",
                                                       "wall_s")}), flush=True)


if __name__ == "__main__":
    main()
