"""privacy_audit: claimed, sound and measured epsilon of one release per defense and point.

The game is described in :mod:`leakaudit.empirical.game`; the bounds in
:mod:`leakaudit.empirical.stats`. Per (defense, point):

1. the release is run once with the canary to read the defense's own ledgers of exactly that
   release (q = 1): eps_claimed, eps_sound;
2. ``reference`` canary-out runs give a reference mean for the energy statistic;
3. a selection split (``select_fraction * trials`` further runs per side) chooses, for each
   statistic, the threshold and direction that maximise the bound (one for eps, one for mu);
4. ``trials`` held-out runs per side (the evaluation split) give Clopper-Pearson upper
   bounds on FPR and FNR, one
   sided at alpha/2 each, alpha = (1 - confidence) / (number of statistics) (Bonferroni over
   the statistics: one test per statistic and bound on the held-out split);
5. eps_lower and mu_lower are the best over the statistics; eps_lower_gdp converts mu_lower
   through the Gaussian trade-off curve (valid only if the mechanism is mu-GDP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from accounting import PrivacyLedger, tightest_epsilon

from .. import defenses as defense_registry
from .._jsonsafe import finite_json
from .._validate import check_int, check_number, check_probability
from ..defenses import Defense
from ..records import ResultsFile
from . import game, stats
from .report import PrivacyReport

__all__ = ["privacy_audit", "audit_release", "release_epsilon", "STATISTICS"]

STATISTICS = ("projection", "energy", "llr")


def release_epsilon(ledger: PrivacyLedger, delta: float) -> float:
    """eps of the recorded release, with the tightest method available
    (:func:`accounting.tightest_epsilon`: exact Gaussian at q = 1, else min(PLD, RDP))."""
    return tightest_epsilon(ledger, delta)


def _check(trials: int, confidence: float, delta: float, statistics: Sequence[str],
           point: int, select_fraction: float) -> None:
    check_int("trials", trials, 100)
    check_probability("confidence", confidence)
    check_probability("delta", delta)
    if point not in game.POINTS:
        raise ValueError(f"point must be one of {game.POINTS}, got {point!r}")
    if not statistics:
        raise ValueError("statistic must name at least one statistic")
    for s in statistics:
        if s not in STATISTICS:
            raise ValueError(f"statistic must be among {STATISTICS}, got {s!r}")
    check_number("select_fraction", select_fraction, minimum=0.05, maximum=1.0)


def _statistic_columns(template: Defense, setup: game.GameSetup, n_sel: int, n_eval: int,
                       n_ref: int, generator: torch.Generator, vectorise: bool,
                       wanted: Sequence[str], chunk: int) -> dict[str, tuple[np.ndarray, ...]]:
    """(selection out, selection in, evaluation out, evaluation in) per statistic."""
    *_, ref_sum = game.run_trials(template, setup, False, n_ref, None, generator, chunk,
                                  vectorise)
    ref = ref_sum / n_ref
    runs = {}
    for split, n in (("sel", n_sel), ("eval", n_eval)):
        for side in (False, True):
            runs[(split, side)] = game.run_trials(template, setup, side, n, ref, generator,
                                                  chunk, vectorise)[:2]
    dims = ref.numel()
    fit = game.fit_llr(*runs[("sel", False)], *runs[("sel", True)], dims=dims)
    cols: dict[str, tuple[np.ndarray, ...]] = {}
    order = [("sel", False), ("sel", True), ("eval", False), ("eval", True)]
    if "projection" in wanted:
        cols["projection"] = tuple(runs[k][0] for k in order)
    if "energy" in wanted:
        cols["energy"] = tuple(runs[k][1] for k in order)
    if "llr" in wanted:
        cols["llr"] = tuple(game.log_likelihood_ratio(*runs[k], fit, dims) for k in order)
    return cols


def _bounds(cols: dict[str, tuple[np.ndarray, ...]], alpha: float, delta: float
            ) -> dict[str, Any]:
    """Best eps_lower and mu_lower over the statistics, each from its own held-out test."""
    best: dict[str, Any] = {"eps_lower": 0.0, "statistic": None, "mu_lower": 0.0,
                            "mu_statistic": None, "per_statistic": {}}
    for name, (s_out, s_in, e_out, e_in) in cols.items():
        n_eval = (e_out.size, e_in.size)
        got = {}
        for target in ("eps", "mu"):
            rule = stats.choose_threshold(s_out, s_in, alpha, delta, target, n_eval)
            fp, fn = stats.error_counts(e_out, e_in, rule)
            fpr = stats.clopper_pearson_upper(fp, n_eval[0], alpha / 2)
            fnr = stats.clopper_pearson_upper(fn, n_eval[1], alpha / 2)
            got[target] = (stats.eps_lower_bound(fpr, fnr, delta) if target == "eps"
                           else stats.gdp_mu_lower(fpr, fnr), fpr, fnr)
        best["per_statistic"][name] = {"eps_lower": got["eps"][0], "mu_lower": got["mu"][0],
                                       "fpr_ub": got["eps"][1], "fnr_ub": got["eps"][2]}
        if got["eps"][0] > best["eps_lower"] or best["statistic"] is None:
            best["eps_lower"], best["statistic"] = got["eps"][0], name
        if got["mu"][0] > best["mu_lower"] or best["mu_statistic"] is None:
            best["mu_lower"], best["mu_statistic"] = got["mu"][0], name
    return best


def _reason(defense: Defense, eps_claimed: float, eps_sound: float, probe: game.Probe,
            delta: float) -> str:
    parts = []
    why = probe.sound.why_infinite() if math.isinf(eps_sound) else None
    if why:
        parts.append(f"sound inf: {why}")
    if "if_public" in probe.extra:
        eps_pub = release_epsilon(probe.extra["if_public"], delta)
        parts.append(f"sound only if S were public: eps {eps_pub:.3g}")
    if eps_claimed != eps_sound and defense.claimed_vs_sound:
        parts.append(defense.claimed_vs_sound)
    return "; ".join(parts)


def audit_release(defense: Defense, point: int = 2, trials: int = 2000, *,
                  delta: float = 1e-5, confidence: float = 0.95, seed: int = 0,
                  statistic: str | Sequence[str] | None = None,
                  shapes: Sequence[Sequence[int]] = game.LENET_SHAPES, background: int = 32,
                  background_scale: float = 0.05, local_steps: int = 2,
                  select_fraction: float = 0.2, vectorise: bool | None = None,
                  chunk: int = 512) -> dict[str, Any]:
    """Audit one release of ``defense`` at ``point``: one row of the report."""
    wanted = STATISTICS if statistic is None else (
        (statistic,) if isinstance(statistic, str) else tuple(statistic))
    _check(trials, confidence, delta, wanted, point, select_fraction)
    if not game.releases_at(defense, point):
        raise ValueError(f"point {point}: defense {defense.name!r} releases nothing it "
                         f"protects there (sites {sorted(defense.sites)})")
    generator = torch.Generator().manual_seed(int(seed))
    setup = game.make_setup(defense, point, tuple(tuple(s) for s in shapes), background,
                            background_scale, local_steps, generator)
    template = defense
    probe = game.probe(template, setup, generator)
    eps_claimed = release_epsilon(probe.claimed, delta)
    eps_sound = release_epsilon(probe.sound, delta)
    n_sel = max(20, int(round(select_fraction * trials)))
    n_ref = max(50, min(1000, trials // 10))
    vec = game.vectorisable(defense, point) if vectorise is None else bool(vectorise)
    cols = _statistic_columns(template, setup, n_sel, trials, n_ref, generator, vec,
                              wanted, chunk)
    alpha = (1.0 - confidence) / len(wanted)
    best = _bounds(cols, alpha, delta)
    eps_lower = best["eps_lower"]
    return {"defense": defense.name, "params": defense.describe(), "point": point,
            "trials": trials, "statistic": best["statistic"], "eps_claimed": eps_claimed,
            "eps_sound": eps_sound, "eps_lower": eps_lower, "mu_lower": best["mu_lower"],
            "mu_statistic": best["mu_statistic"],
            "eps_lower_gdp": stats.gdp_epsilon(best["mu_lower"], delta),
            "claim_violated": bool(eps_lower > eps_claimed),
            "sound_violated": bool(eps_lower > eps_sound),
            "adjacency": setup.adjacency, "level": defense.level,
            "reason": _reason(defense, eps_claimed, eps_sound, probe, delta),
            "per_statistic": best["per_statistic"], "seed": seed,
            "confidence": confidence, "delta": delta}


def _resolve(spec: str | Defense, defense_params: dict[str, dict[str, Any]]) -> Defense:
    if isinstance(spec, Defense):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"defenses must be names or Defense objects, got {spec!r}")
    return defense_registry.get(spec, **defense_params.get(spec, {}))


def _restore(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row with "inf"/"nan" strings turned back into floats."""
    return {k: float(v) if v in ("inf", "-inf", "nan") else v for k, v in row.items()}


def privacy_audit(defenses: Sequence[str | Defense] | str | Defense, point: int | Sequence[int] = 2,
                  trials: int = 10_000, *, delta: float = 1e-5, confidence: float = 0.95,
                  seed: int = 0, defense_params: dict[str, dict[str, Any]] | None = None,
                  statistic: str | Sequence[str] | None = None, progress: bool = False,
                  results: str | None = None, skip_silent: bool = False,
                  **game_options: Any) -> PrivacyReport:
    """Measured lower bounds on eps next to the claimed and sound eps of each defense.

    Args:
        defenses: registered names (the papers' parameters unless ``defense_params`` says
            otherwise) or :class:`~leakaudit.defenses.Defense` objects (a user's own subclass
            with its own ``privatize_batch`` works: it is run as training runs it).
        point: the leak point(s) whose release is audited: 2, 1 or 0.
        trials: held-out runs with the canary, and as many without (>= 100), on which the
            bounds are computed; ``select_fraction`` (default 0.2) times as many further runs
            per side choose the thresholds, and up to 1,000 canary-out runs the reference.
        delta, confidence: the delta of every eps; the confidence of every bound.
        statistic: one of :data:`STATISTICS`, a list of them, or None for all.
        results: a JSON-lines file; a rerun with the same arguments skips finished rows.
        skip_silent: leave out (defense, point) pairs where the defense releases nothing,
            instead of raising ValueError.
        game_options: passed to :func:`audit_release` (background, background_scale,
            local_steps, shapes, select_fraction, vectorise).
    """
    specs = [defenses] if isinstance(defenses, (str, Defense)) else list(defenses)
    points = [point] if isinstance(point, int) else list(point)
    params = defense_params or {}
    wanted = STATISTICS if statistic is None else (
        (statistic,) if isinstance(statistic, str) else tuple(statistic))
    for p in points:
        _check(trials, confidence, delta, wanted, p, game_options.get("select_fraction", 0.2))
    if not specs:
        raise ValueError("defenses must name at least one defense")
    built = [_resolve(s, params) for s in specs]
    labels = {id(d): s if isinstance(s, str) else d.name for s, d in zip(specs, built)}
    pairs = []
    for d in built:
        for p in points:
            if game.releases_at(d, p):
                pairs.append((d, p))
            elif not skip_silent:
                raise ValueError(f"point {p}: defense {d.name!r} releases nothing it protects "
                                 f"there (sites {sorted(d.sites)})")
    config = {"trials": trials, "delta": delta, "confidence": confidence, "seed": seed,
              "statistic": list(wanted), **{k: str(v) for k, v in game_options.items()}}
    store = ResultsFile(results, {"kind": "privacy_audit", **config})
    report = PrivacyReport(config=config)
    iterator: Any = pairs
    if progress:
        from tqdm.auto import tqdm
        iterator = tqdm(pairs, desc="privacy audit")
    for d, p in iterator:
        key = f"{d.describe()}|{p}"
        row = store.get("release", key)
        if row is not None:
            row = _restore(row)
        else:
            row = audit_release(d, p, trials, delta=delta, confidence=confidence, seed=seed,
                                statistic=wanted, **game_options)
            store.put("release", key, finite_json(row))
        report.add(dict(row, defense=labels[id(d)]))  # the registered name, when given
    return report
