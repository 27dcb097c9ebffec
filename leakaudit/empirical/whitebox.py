"""The white-box check of one release: its own code run on the same noise in both worlds.

The checks of record/replay (:mod:`leakaudit.scoring.whitebox`) on the game's release: the
release is run with the canary in and out on identically seeded generators (the defense
draws its noise from the generator of its context, :func:`game.releases`), for three
canaries: ``dirac`` and ``large`` (:func:`game.canaries`) and ``dense`` (:data:`game.LARGE`
x C spread evenly over every coordinate: the largest L1 norm an L2 clip lets through, so an
L1 / L2 confusion shows its sqrt(d) size, which no two-sample test of a few thousand runs
can). The difference is the noise-free move Delta when the noise is additive and drawn only
from that generator; this is verified first (the same world twice on one seed gives the
same release, and Delta is the same on every seed), else the check is *not applicable*,
with the reason, never a flag (correct user code may draw from torch's global generator).

The move is measured in the norm of the ledger's noise (L1 for a Laplace ledger, L2 for a
Gaussian one, read through the event registry; a ledger of mixed or other kinds: not
applicable), the noise scale per parameter tensor from runs on distinct seeds, and the
ledger's own eps recomputed from them (``eps_whitebox``, under the ledger's noise family:
for Gaussian ledgers the eps at delta of the measured mu). A ledger is violated when the
measured eps (Laplace) or mu (Gaussian) exceeds the ledger's beyond the tolerance of the
scale estimates. In an audit of T held-out runs per side the check plays
:func:`runs_for` (T) = min(T, 256) runs per world.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from accounting import PrivacyLedger

from ..defenses import Defense
from ..scoring import whitebox as wb
from ..scoring.bounds import gdp_epsilon
from . import game

__all__ = ["dense_canary", "out_world_runs", "same_noise_runs", "whitebox_check",
           "runs_for", "RUNS", "CANARIES"]

#: runs per world at most (pairs on the same noise; their noise measures the scale)
RUNS = 256
#: canaries the check moves the release with
CANARIES = ("dirac", "large", "dense")


def dense_canary(shapes: tuple[tuple[int, ...], ...], bound: float) -> list[torch.Tensor]:
    """:data:`game.LARGE` x ``bound`` spread evenly over every coordinate of every tensor."""
    d = sum(math.prod(s) for s in shapes)
    value = game.LARGE * bound / math.sqrt(d)
    return [torch.full(s, value) for s in shapes]


def runs_for(trials: int) -> int:
    """Runs per world of the check in an audit of ``trials`` held-out runs per side (an
    audit has at least 100): as many, at most :data:`RUNS`. The scale estimates pool every
    coordinate of a tensor (:func:`leakaudit.scoring.whitebox.release_value`), so fewer runs
    widen the tolerance a little; the check costs at most 4 x ``trials`` + 8 releases, not a
    fixed 1,032 whatever the audit's budget."""
    return min(RUNS, int(trials))


def _runs(defense: Defense, setup: game.GameSetup, canary_in: bool, n: int, seed: int,
          vec: bool, chunk: int) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    rows = game.releases(copy.deepcopy(defense), setup, canary_in, n, chunk, generator, vec)
    return torch.cat(list(rows)).double().numpy()


def out_world_runs(defense: Defense, setup: game.GameSetup, n: int, seed: int, vec: bool,
                   chunk: int) -> np.ndarray | str:
    """``n`` canary-out runs on ``seed`` (they do not depend on which canary the setup holds,
    only on its shapes), or why the same world on one seed is not reproducible."""
    again = [_runs(defense, setup, False, 4, seed + 1, vec, chunk) for _ in range(2)]
    if not np.array_equal(*again):
        return "the same world on the same seed gave different releases (noise not drawn " \
               "only from the context's generator)"
    return _runs(defense, setup, False, n, seed, vec, chunk)


def same_noise_runs(defense: Defense, setup: game.GameSetup, n: int, seed: int, vec: bool,
                    chunk: int, out: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray] | str:
    """(out, into): ``n`` runs per world, row i of both on the same noise (one generator
    seeded alike per world); or why the same-noise difference is not the noise-free move.
    ``out``: :func:`out_world_runs` of the same defense, shapes, ``n`` and ``seed``, when the
    caller already has them (the check moves the release with several canaries)."""
    if out is None:
        out = out_world_runs(defense, setup, n, seed, vec, chunk)
        if isinstance(out, str):
            return out
    into = _runs(defense, setup, True, n, seed, vec, chunk)
    moves = into - out
    mean = moves.mean(axis=0)
    spread = float(np.max(np.linalg.norm(moves - mean, axis=1)))
    noise = wb.world_std(out) * math.sqrt(out.shape[1])
    if spread > 1e-3 * float(np.linalg.norm(mean)) + 1e-5 * noise:
        return f"the same-noise difference varies with the seed (by {spread:.3g}; norm " \
               f"{float(np.linalg.norm(mean)):.3g}): the noise is not additive"
    return out, into


def _ledger_check(ledger: PrivacyLedger, measured: dict[str, tuple[float, float]],
                  delta: float) -> dict[str, Any]:
    """The measured value under the ledger's family against the ledger's own."""
    got = wb.ledger_noise(ledger)
    if isinstance(got, str):
        return {"applicable": False, "why": got}
    family, stated = got
    value, tol = measured[family]
    eps = value if family == "laplace" else gdp_epsilon(value, delta)
    factor = value / stated if stated > 0 else math.inf
    return {"applicable": True, "family": family, "value": value, "stated": stated,
            "eps": eps, "factor": factor, "tol": tol,
            "violated": bool(value > stated * (1.0 + tol))}


def whitebox_check(defense: Defense, setup: game.GameSetup,
                   shapes: tuple[tuple[int, ...], ...], *, delta: float, seed: int,
                   vec: bool, chunk: int, n: int = RUNS) -> dict[str, Any]:
    """Row columns of the white-box check (module docstring): ``eps_whitebox`` (nan when not
    applicable), ``whitebox_factor`` (measured / the sound ledger's eps or mu),
    ``whitebox`` (what was measured, or why not applicable) and the verdicts
    ``whitebox_claim`` / ``whitebox_sound``."""
    bound = game.canary_bound(defense)
    found = game.canaries(shapes, bound)
    found["dense"] = dense_canary(shapes, bound)
    base = replace(setup, declared=None, round=0, pristine=None)
    best: dict[str, tuple[float, float, str]] = {}
    run_seed = 1_000_003 * (seed + 1)
    setups = {name: game.with_canary(base, name, found[name]) for name in CANARIES}
    out_runs = out_world_runs(defense, setups[CANARIES[0]], n, run_seed, vec, chunk)
    if isinstance(out_runs, str):
        return _not_applicable(f"{CANARIES[0]}: {out_runs}")
    for name, s in setups.items():
        got = same_noise_runs(defense, s, n, run_seed, vec, chunk, out=out_runs)
        if isinstance(got, str):
            return _not_applicable(f"{name}: {got}")
        out, into = got
        move = (into - out).mean(axis=0)
        for family in wb.FAMILIES:
            value, tol = wb.release_value(move, out, s.slices, family)
            if family not in best or value > best[family][0]:
                best[family] = (value, tol, name)
    probe = game.probe(defense, game.with_canary(base, "dense", found["dense"]),
                       torch.Generator().manual_seed(seed))
    measured = {f: (v, t) for f, (v, t, _) in best.items()}
    sound = _ledger_check(probe.sound, measured, delta)
    claim = _ledger_check(probe.claimed, measured, delta)
    if not sound["applicable"]:
        out = _not_applicable(f"sound ledger: {sound['why']}")
        out["whitebox_claim"] = claim.get("violated", False)
        return out
    fam = sound["family"]
    unit = "eps" if fam == "laplace" else "mu"
    text = (f"{fam}: {unit} {sound['value']:.4g} measured (L{1 if fam == 'laplace' else 2} "
            f"move / noise scale, canary {best[fam][2]}) vs {sound['stated']:.4g} stated "
            f"(x{sound['factor']:.3g}, tolerance {sound['tol']:.2g})")
    return {"eps_whitebox": sound["eps"], "whitebox_factor": sound["factor"],
            "whitebox": text, "whitebox_claim": claim.get("violated", False),
            "whitebox_sound": sound["violated"]}


def _not_applicable(why: str) -> dict[str, Any]:
    return {"eps_whitebox": math.nan, "whitebox_factor": math.nan,
            "whitebox": f"not applicable: {why}", "whitebox_claim": False,
            "whitebox_sound": False}
