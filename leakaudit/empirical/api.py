"""privacy_audit: claimed, sound and measured epsilon of one release per defense and point.

The game is described in :mod:`leakaudit.empirical.game`; scores become bounds in
:mod:`leakaudit.scoring.bounds` (the engine every audit shares). Per (defense, point):

1. for each canary (:func:`game.canaries`: at the clip, 100 C spread, 100 C in one tensor at a
   time), canary-out reference runs give the mean and per-coordinate deviation the
   statistics are taken around (:func:`game.statistics`);
2. a selection split (``select_fraction * trials`` runs per side and canary) scores every
   (canary, statistic) by the mu bound its best threshold is predicted to give; the best
   one (the first by a :data:`MARGIN`) is chosen for eps and for mu, each with its own
   threshold (the report names the canary and statistic that won); past
   :data:`PILOT_MIN` runs per side every game plays a pilot share first and only the
   first game and the :data:`FINALISTS` best by the pilot play the rest;
3. the release is run once with the winning canary to read the defense's own ledgers of
   exactly that release (q = 1): eps_claimed, eps_sound, and mu where a ledger is a
   composition of Gaussians (mu-GDP);
4. ``trials`` held-out runs per side test only the chosen rules: Clopper-Pearson upper
   bounds on FPR and FNR, alpha/2 each, alpha = (1 - confidence) / (number of tests), the
   tests being eps at delta, mu, and for a finite ledger that is not mu-GDP its trade-off
   curve at several false-positive levels and deltas (:data:`CURVE_DELTAS`);
5. a ledger is violated when eps_lower > eps, mu_lower > mu (mu-GDP ledgers) or a tested
   point lies outside its (eps(delta), delta) region; ``violated_by`` says which.
   eps_lower_gdp converts mu_lower through the Gaussian trade-off curve (valid only if the
   mechanism is mu-GDP).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from accounting import PrivacyLedger, tightest_epsilon

from .. import defenses as defense_registry
from .._jsonsafe import finite_json
from .._validate import check_int, check_number, check_probability, keywords_after_first
from ..defenses import Defense
from ..grads import torch_threads
from ..records import ResultsFile
from ..scoring import bounds as stats
from ..scoring import fdp
from . import game
from .report import PrivacyReport
from .whitebox import runs_for, whitebox_check

__all__ = ["privacy_audit", "audit_release", "release_epsilon", "ledger_mu", "STATISTICS",
           "ledger_curve", "outside_curve"]

STATISTICS = ("projection", "energy", "llr", "tensor", "coordinate", "subspace", "lattice")


def release_epsilon(ledger: PrivacyLedger, delta: float) -> float:
    """eps of the recorded release, with the tightest method available
    (:func:`accounting.tightest_epsilon`: exact Gaussian at q = 1, else min(PLD, RDP)).

    The audited release did happen: a ledger with nothing in it did not pay for it, so its
    eps is inf (no claim survives), not the 0 of a ledger whose data was never used."""
    if not ledger.events:
        return math.inf
    return tightest_epsilon(ledger, delta)


def ledger_mu(ledger: PrivacyLedger) -> float | None:
    """mu of a ledger that is a composition of Gaussian mechanisms without sampling (q = 1),
    each step at its sensitivity (2C for fixed-size batches and replace-one): see
    :func:`leakaudit.scoring.fdp.ledger_mu`; None if it records anything else."""
    return fdp.ledger_mu(ledger)


#: at most this many selection runs per side and candidate game
MAX_SELECTION = 2000

#: a candidate game or statistic replaces an earlier one (the plain canaries and the
#: projection first) only when its predicted bound is this much larger (relative): with
#: dozens of candidates of equal power the largest prediction is luck
#: (:func:`leakaudit.scoring.bounds.select`)
MARGIN = 0.1

#: the selection runs every game plays first (the pilot): this share of them, at least
#: :data:`PILOT_MIN` per side; only the first game (the pre-registered preference) and the
#: :data:`FINALISTS` games whose pilot predicts the largest mu bound play the rest. With
#: PILOT_MIN runs or fewer per side, or few games, every game plays them all.
PILOT = 0.25
PILOT_MIN = 500
FINALISTS = 3

#: deltas at which a general (eps, delta) ledger's curve is tested, besides the row's delta
CURVE_DELTAS = (1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.2, 0.3)


def _check(trials: int, confidence: float, delta: float, statistics: Sequence[str],
           point: int, select_fraction: float, canaries: Sequence[str] | None = None) -> None:
    check_int("trials", trials, 100)
    check_probability("confidence", confidence)
    check_probability("delta", delta)
    if point not in game.POINTS:
        raise ValueError(f"points: each must be one of {game.POINTS}, got {point!r}")
    if not statistics:
        raise ValueError("statistic must name at least one statistic")
    for s in statistics:
        if s not in STATISTICS:
            raise ValueError(f"statistic must be among {STATISTICS}, got {s!r}")
    check_number("select_fraction", select_fraction, minimum=0.05, maximum=1.0)
    if canaries is not None:
        if isinstance(canaries, str) or not canaries:
            raise ValueError(f"canaries must be a non-empty list of names, got {canaries!r}")
        for c in canaries:
            name, _, background = str(c).partition("+")
            if (name not in ("dirac", "large", "lattice") and not name.startswith("large@")) or \
                    (background and background not in game.BACKGROUNDS):
                raise ValueError("canaries must be among dirac, large, large@<k>, lattice, each "
                                 f"optionally +<background> ({', '.join(game.BACKGROUNDS)}), "
                                 f"got {c!r}")


def _computed(wanted: Sequence[str]) -> tuple[str, ...]:
    """The statistics :func:`game.statistics` computes for ``wanted`` (llr: from the
    projection and the energy)."""
    need = set(wanted) - {"llr"}
    if "llr" in wanted:
        need |= {"projection", "energy"}
    return tuple(sorted(need))


class _Canary:
    """One canary's game: its setup, reference, selection runs and (later) held-out runs."""

    def __init__(self, template: Defense, setup: game.GameSetup, n_ref: int, n_sel: int,
                 generator: torch.Generator, vectorise: bool, chunk: int,
                 wanted: Sequence[str]) -> None:
        self.template, self.setup, self.generator = template, setup, generator
        self.vectorise, self.chunk, self.wanted = vectorise, chunk, wanted
        space = game.make_subspace(setup, n_ref) if "subspace" in wanted else None
        ref = game.run_trials(template, setup, False, n_ref, None, generator, chunk, vectorise,
                              subspace=space)
        sub = None if space is None else (space, ref.sub_total, ref.sub_sq)
        self.reference = game.Reference.from_sums(ref.total, ref.total_sq, n_ref, sub,
                                                  setup.direction)
        self.sel = [self._stats(side, n_sel, _computed(wanted)) for side in (False, True)]
        self.fit: dict[str, float] = {}
        self._fit_llr(self.sel)
        self.eval: list[dict[str, np.ndarray]] | None = None

    def _fit_llr(self, splits: list[dict[str, np.ndarray]], refit: bool = True) -> None:
        """The llr of every run of ``splits`` (fitted on the selection split if ``refit``)."""
        if "llr" not in self.wanted:
            return
        dims = self.reference.mean.numel()
        if refit:
            self.fit = game.fit_llr(self.sel[0]["projection"], self.sel[0]["energy"],
                                    self.sel[1]["projection"], self.sel[1]["energy"], dims)
        for s in splits:
            s["llr"] = game.log_likelihood_ratio(s["projection"], s["energy"], self.fit, dims)

    def _stats(self, side: bool, n: int, wanted: Sequence[str]) -> dict[str, np.ndarray]:
        return dict(game.run_trials(self.template, self.setup, side, n, self.reference,
                                    self.generator, self.chunk, self.vectorise,
                                    wanted=wanted).stats)

    def extend(self, n: int) -> None:
        """n more selection runs per side (a finalist of the pilot), the llr refitted on all."""
        more = [self._stats(side, n, _computed(self.wanted)) for side in (False, True)]
        self.sel = [{k: np.concatenate([s[k], m[k]]) for k in m} for s, m in zip(self.sel, more)]
        self._fit_llr(self.sel)

    def held_out(self, n: int, wanted: Sequence[str]) -> list[dict[str, np.ndarray]]:
        """n held-out runs per side, with (at least) the ``wanted`` statistics; drawn once."""
        if self.eval is None:
            self.eval = [self._stats(side, n, _computed(wanted)) for side in (False, True)]
            if "llr" in wanted:
                self._fit_llr(self.eval, refit=False)
        return self.eval


def _select(games: dict[str, _Canary], wanted: Sequence[str], alpha: float, delta: float,
            n_eval: int) -> tuple[dict[str, tuple[str, str, stats.Threshold]], dict]:
    """Per target, the (canary, statistic, threshold) with the best bound on the selection
    split (:func:`leakaudit.scoring.bounds.select` over every (canary, statistic)), and
    every candidate's selection score (for eps)."""
    candidates = {(name, stat): (g.sel[0][stat], g.sel[1][stat])
                  for name, g in games.items() for stat in wanted}
    winners, scores = stats.select(candidates, alpha, delta, (n_eval, n_eval), margin=MARGIN,
                                   by="mu")
    table: dict[str, dict[str, float]] = {}
    for (name, stat), score in scores.items():
        table.setdefault(name, {})[stat] = score
    return {t: (*w.key, w.rule) for t, w in winners.items()}, table


def _finalists(games: dict[str, _Canary], wanted: Sequence[str], alpha: float, delta: float,
               n_eval: int) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The games that play the rest of the selection split after the pilot: the first and
    the :data:`FINALISTS` others whose best statistic predicts the largest mu bound on the
    pilot runs (:func:`leakaudit.scoring.bounds.best_rule`, the judge of :func:`_select`),
    in their given order; and every candidate's predicted eps bound on the pilot (the
    report's selection score of a game that did not go on)."""
    best: dict[str, float] = {}
    table: dict[str, dict[str, float]] = {}
    for name, g in games.items():
        for stat in wanted:
            out, into = g.sel[0][stat], g.sel[1][stat]
            mu = stats.best_rule(out, into, alpha, delta, "mu", (n_eval, n_eval))[1]
            eps = stats.best_rule(out, into, alpha, delta, "eps", (n_eval, n_eval))[1]
            best[name] = max(best.get(name, -math.inf), mu)
            table.setdefault(name, {})[stat] = round(eps, 4)
    order = list(games)
    top = set(sorted(order[1:], key=lambda k: -best[k])[:FINALISTS])
    return [order[0], *(k for k in order[1:] if k in top)], table


def _choose(games: dict[str, _Canary], wanted: Sequence[str], alpha: float, delta: float,
            trials: int, rest: int
            ) -> tuple[dict[str, tuple[str, str, stats.Threshold]], dict, dict[str, tuple]]:
    """:func:`_select` among the games, after ``rest`` more selection runs per side of the
    :func:`_finalists` (all games when ``rest`` is 0): the winners, every candidate's
    selection score, and per winning game the statistics its held-out runs need."""
    keep, pilot = list(games), {}
    if rest > 0:
        keep, pilot = _finalists(games, wanted, alpha, delta, trials)
        for name in keep:
            games[name].extend(rest)
    winners, chosen = _select({k: games[k] for k in keep}, wanted, alpha, delta, trials)
    held: dict[str, set[str]] = {}
    for name, stat, _ in winners.values():
        held.setdefault(name, set()).add(stat)
    return (winners, {k: chosen.get(k, pilot.get(k, {})) for k in games},
            {k: tuple(sorted(v)) for k, v in held.items()})


def _test_held_out(games: dict[str, _Canary],
                   winners: dict[str, tuple[str, str, stats.Threshold]],
                   held: dict[str, tuple], trials: int, total: float, delta: float,
                   general: bool) -> tuple[dict[str, stats.Tested], list[tuple[float, float]]]:
    """The winners' rules tested on ``trials`` held-out runs per side at level ``total``
    split (Bonferroni) between eps, mu and, for a ``general`` ledger, its curve points."""
    # Bonferroni: eps gets 0.8 (its bound is decided in the tails, where few runs count), mu
    # 0.2 (decided in the middle); a general ledger's curve takes a third from both
    share = {"eps": 0.8 * total, "mu": 0.2 * total}
    if general:
        share = {k: v * 2.0 / 3.0 for k, v in share.items()}
    got: dict[str, stats.Tested] = {}
    for target, (name, stat, rule) in winners.items():
        e_out, e_in = (s[stat] for s in games[name].held_out(trials, held[name]))
        got[target] = stats.test_rule(e_out, e_in, rule, share[target], delta, target)
    curve_points: list[tuple[float, float]] = []
    if general:
        name, stat, rule = winners["eps"]
        e_out, e_in = (s[stat] for s in games[name].held_out(trials, held[name]))
        curve_points = stats.curve_points(stats.curve_rules(games[name].sel[0][stat],
                                                            rule.sign), e_out, e_in, total / 3.0)
    return got, curve_points


def ledger_curve(ledger: PrivacyLedger, delta: float, eps: float) -> list[tuple[float, float]]:
    """(delta, eps(delta)) points of a ledger's privacy curve: ``eps`` (the tightest) at the
    row's delta, RDP at the others (an upper bound on the ledger's eps there, so a point
    outside its region is outside the tight one too; PLD costs seconds per delta)."""
    return sorted({(delta, eps), *((d, ledger.epsilon(d)) for d in CURVE_DELTAS
                                   if d != delta)})


def outside_curve(points: list[tuple[float, float]], curve: list[tuple[float, float]]
             ) -> str | None:
    """The first (FPR, FNR) upper-bound pair outside the (eps(delta), delta) region, named."""
    for fpr, fnr in points:
        for d, eps in curve:
            if math.isfinite(eps) and stats.eps_lower_bound(fpr, fnr, d) > eps:
                return f"FPR<={fpr:.3g}, FNR<={fnr:.3g} outside ({eps:.3g}, {d:g})-DP"
    return None


def _verdict(ledger: PrivacyLedger, eps: float, eps_lower: float, mu_lower: float,
             curve_points: list[tuple[float, float]], delta: float
             ) -> tuple[bool, str, float | None]:
    """(violated, by which test, mu of the ledger if mu-GDP) for one ledger."""
    mu = ledger_mu(ledger)
    if eps_lower > eps:
        return True, "eps", mu
    if mu is not None and mu_lower > mu:
        return True, "mu", mu
    if mu is None and curve_points and math.isfinite(eps):
        where = outside_curve(curve_points, ledger_curve(ledger, delta, eps))
        if where:
            return True, f"curve ({where})", mu
    return False, "", mu


def _reason(defense: Defense, eps_claimed: float, eps_sound: float, probe: game.Probe,
            delta: float) -> str:
    parts = []
    why = None
    if math.isinf(eps_sound):
        why = probe.sound.why_infinite() or (
            "the release recorded nothing in its ledger" if not probe.sound.events else None)
    if why:
        parts.append(f"sound inf: {why}")
    for label, ledger in probe.extra.items():
        if isinstance(ledger, PrivacyLedger):
            eps_side = release_epsilon(ledger, delta)
            text = "sound only if S were public" if label == "if_public" else label
            parts.append(f"{text}: eps {eps_side:.3g}")
    if eps_claimed != eps_sound and defense.claimed_vs_sound:
        parts.append(defense.claimed_vs_sound)
    return "; ".join(parts)


@keywords_after_first("point", "trials")
def audit_release(defense: Defense, *, point: int = 2, trials: int = 2000,
                  delta: float = 1e-5, confidence: float = 0.95, seed: int = 0,
                  statistic: str | Sequence[str] | None = None,
                  canaries: Sequence[str] | None = None,
                  shapes: Sequence[Sequence[int]] = game.LENET_SHAPES, background: int = 32,
                  background_scale: float = 0.05, local_steps: int = 2,
                  select_fraction: float = 0.2, vectorise: bool | None = None,
                  chunk: int = 512) -> PrivacyReport:
    """Audit one release of ``defense`` at ``point``: a :class:`PrivacyReport` of one row
    (``report.rows()[0]``). Every argument after ``defense`` is keyword-only (``point`` and
    ``trials`` given by position, the old form, still work and warn).

    Every canary (:func:`game.canaries`) and, for instance-level releases, every worst-case
    dataset or call (:data:`game.SCENARIOS`, named ``canary+background``), or the named
    ``canaries``, plays the game on its own reference and selection runs (``select_fraction *
    trials`` per side, at most :data:`MAX_SELECTION`); an empty batch the defense's code
    cannot take is replaced by one zero gradient (named in the row's ``replaced``), any
    other game it cannot run is a ValueError naming it. A defense whose batching declaration is
    inherited past a hook it overrides, or whose two trials in one call do not come back as
    two, runs one trial per call, with a warning (never refused). The canary,
    statistic and threshold with the largest bound on the selection split are chosen for
    eps and for mu, and only they are tested on ``trials`` held-out runs per side, so the
    choice costs no confidence. The confidence is split (Bonferroni) between the tests the
    verdict uses: eps at ``delta``, mu, and, for a finite ledger that is not mu-GDP, its
    whole curve at several false-positive levels (each level and delta corrected for).
    """
    wanted = STATISTICS if statistic is None else (
        (statistic,) if isinstance(statistic, str) else tuple(statistic))
    _check(trials, confidence, delta, wanted, point, select_fraction, canaries)
    if not game.releases_at(defense, point):
        raise ValueError(f"point {point}: defense {defense.name!r} releases nothing it "
                         f"protects there (sites {sorted(defense.sites)})")
    # here, so that an undeclared defense's warning points at the caller's line
    vec = game.vectorisable(defense, point) if vectorise is None else bool(vectorise)
    with torch_threads(1):   # chunks of a few hundred runs: a second thread costs more CPU
        row = _release_row(defense, point, trials, delta=delta, confidence=confidence, seed=seed,
                           wanted=wanted, canaries=canaries, shapes=shapes, background=background,
                           background_scale=background_scale, local_steps=local_steps,
                           select_fraction=select_fraction, vec=vec, chunk=chunk)
    config = {"trials": trials, "delta": delta, "confidence": confidence, "seed": seed,
              "statistic": list(wanted)}
    return PrivacyReport(config=config, records=[row])


def _pool(defense: Defense, setup: game.GameSetup, shapes: tuple[tuple[int, ...], ...],
          generator: torch.Generator) -> dict[str, game.GameSetup]:
    """Every game the audit may choose: each canary against the random background and, for
    instance-level releases, each worst-case dataset or call (:data:`game.SCENARIOS`)."""
    bound = game.canary_bound(defense)
    found = game.canaries(shapes, bound)
    pool = {c: game.with_canary(setup, c, v) for c, v in found.items() if c != "lattice"}
    if setup.adjacency == "instance":   # a client-level game has no background to choose
        for c, b in game.SCENARIOS:
            pool[game.scenario_name(c, b)] = game.with_scenario(
                setup, c, found[c], b, bound, generator, pristine=defense)
    return pool


def _play(defense: Defense, pool: dict[str, game.GameSetup], names: Sequence[str],
          setup: game.GameSetup, n_ref: int, n_sel: int, generator: torch.Generator,
          vec: bool, chunk: int, wanted: Sequence[str]) -> tuple[dict[str, _Canary], list[str]]:
    """The reference and selection runs of every game named; an empty batch the code cannot
    take is replaced by one zero gradient (named in the second value); any other game that
    cannot run is a ValueError naming it and why."""
    games: dict[str, _Canary] = {}
    replaced: list[str] = []
    for c in names:
        try:
            games[c] = _Canary(defense, pool[c], n_ref, n_sel, generator, vec, chunk, wanted)
        except Exception as err:  # noqa: BLE001 - named below, never silently dropped
            why = f"{type(err).__name__}: {str(err)[:120]}"
            if not c.endswith("+empty"):
                raise ValueError(f"defense {defense.name!r} cannot run the audit's game {c!r} "
                                 f"({why})") from err
            canary = c.split("+")[0]
            alt = game.scenario_name(canary, "zero-row")
            games[alt] = _Canary(defense, game.with_scenario(
                setup, canary, pool[c].canary, "zero-row", game.canary_bound(defense),
                generator), n_ref, n_sel, generator, vec, chunk, wanted)
            replaced.append(f"{c} -> {alt} ({why})")
    return games, replaced


def _release_row(defense: Defense, point: int, trials: int, *, delta: float,
                 confidence: float, seed: int, wanted: Sequence[str],
                 canaries: Sequence[str] | None, shapes: Sequence[Sequence[int]],
                 background: int, background_scale: float, local_steps: int,
                 select_fraction: float, vec: bool, chunk: int) -> dict[str, Any]:
    """The row of :func:`audit_release` (arguments checked there; ``vec``: many trials per
    call)."""
    generator = torch.Generator().manual_seed(int(seed))
    defense = copy.deepcopy(defense)   # one working copy for every run (never the caller's)
    shapes_t = tuple(tuple(int(x) for x in s) for s in shapes)
    setup = game.make_setup(defense, point, shapes_t, background, background_scale,
                            local_steps, generator)
    pool = _pool(defense, setup, shapes_t, generator)
    names = list(pool) if canaries is None else list(canaries)
    for c in names:
        if c not in pool:
            raise ValueError(f"canaries: {c!r} is not among {sorted(pool)}")
    if vec:
        why = game.batches_as_declared(defense, pool[names[0]], seed)
        if why:
            warnings.warn(f"defense {defense.name!r} declares audit_batched but two trials in "
                          f"one call did not come back as two ({why}): the empirical audit "
                          "runs one trial per call (slow)", stacklevel=3)
            vec = False
    if vec and canaries is None:     # a batched call is a fresh copy already
        names = [c for c in names if not c.endswith("+fresh")]
    # past a few thousand runs per side a choice among the candidates no longer improves
    n_sel = max(20, min(int(round(select_fraction * trials)), MAX_SELECTION))
    n_ref = max(50, min(1000, trials // 10))
    n_pilot = n_sel if n_sel <= PILOT_MIN or len(names) <= FINALISTS + 1 else \
        max(PILOT_MIN, int(round(PILOT * n_sel)))
    games, skipped = _play(defense, pool, names, setup, n_ref, n_pilot, generator, vec, chunk,
                           wanted)
    winners, selection, held = _choose(games, wanted, (1.0 - confidence) / 3.0, delta, trials,
                                       n_sel - n_pilot)
    probe = game.probe(defense, games[winners["eps"][0]].setup, generator)
    eps_claimed = release_epsilon(probe.claimed, delta)
    eps_sound = release_epsilon(probe.sound, delta)
    general = any(ledger_mu(led) is None and math.isfinite(release_epsilon(led, delta))
                  for led in (probe.claimed, probe.sound))
    got, curve_points = _test_held_out(games, winners, held, trials, 1.0 - confidence, delta,
                                       general)
    eps_lower, mu_lower = got["eps"][0], got["mu"][0]
    claim_v, claim_by, mu_claimed = _verdict(probe.claimed, eps_claimed, eps_lower, mu_lower,
                                             curve_points, delta)
    sound_v, sound_by, mu_sound = _verdict(probe.sound, eps_sound, eps_lower, mu_lower,
                                           curve_points, delta)
    white = whitebox_check(defense, setup, shapes_t, delta=delta, seed=seed, vec=vec,
                           chunk=chunk, n=runs_for(trials))
    return {"defense": defense.name, "params": defense.describe(), "point": point,
            "trials": trials, "canary": winners["eps"][0], "statistic": winners["eps"][1],
            "eps_claimed": eps_claimed, "eps_sound": eps_sound, "eps_lower": eps_lower,
            "mu_lower": mu_lower, "mu_canary": winners["mu"][0],
            "mu_statistic": winners["mu"][1],
            "mu_claimed": math.nan if mu_claimed is None else mu_claimed,
            "mu_sound": math.nan if mu_sound is None else mu_sound,
            "eps_lower_gdp": stats.gdp_epsilon(mu_lower, delta),
            "claim_violated": claim_v or white["whitebox_claim"],
            "sound_violated": sound_v or white["whitebox_sound"],
            "violated_by": sound_by or claim_by or (
                "white-box" if white["whitebox_claim"] or white["whitebox_sound"] else ""),
            **white,
            "fpr_ub": got["eps"].fpr, "fnr_ub": got["eps"].fnr,
            "adjacency": setup.adjacency, "level": defense.level,
            "reason": _reason(defense, eps_claimed, eps_sound, probe, delta),
            "noise_floor": games[winners["eps"][0]].reference.noise_floor,
            "replaced": "; ".join(skipped),
            "selection": selection, "seed": seed, "confidence": confidence, "delta": delta}


def _resolve(spec: str | Defense, defense_params: dict[str, dict[str, Any]]) -> Defense:
    if isinstance(spec, Defense):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"defenses must be names or Defense objects, got {spec!r}")
    return defense_registry.get(spec, **defense_params.get(spec, {}))


#: the options privacy_audit passes on to audit_release (its ``game_options``)
GAME_OPTIONS = ("canaries", "background", "background_scale", "local_steps", "shapes",
                "select_fraction", "vectorise", "chunk")


def _check_mappings(specs: Sequence[str | Defense], params: Any,
                    game_options: dict[str, Any]) -> None:
    """A name in a mapping argument that names nothing is refused, naming it (a misspelled
    defense in ``defense_params`` used to audit the defaults silently)."""
    if not isinstance(params, dict):
        raise ValueError(f"defense_params must be a dict of name -> dict, got {params!r}")
    names = {s for s in specs if isinstance(s, str)}
    for key, value in params.items():
        if key not in names:
            known = sorted(defense_registry.available())
            hint = "" if key in known else f" (registered: {', '.join(known)})"
            raise ValueError(f"defense_params: {key!r} names no defense being audited "
                             f"(audited by name: {sorted(names)}){hint}")
        if not isinstance(value, dict):
            raise ValueError(f"defense_params[{key!r}] must be a dict of parameters, "
                             f"got {value!r}")
    for key in game_options:
        if key not in GAME_OPTIONS:
            raise ValueError(f"privacy_audit: unknown option {key!r} (game options: "
                             f"{', '.join(GAME_OPTIONS)})")


def _restore(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row with "inf"/"nan" strings turned back into floats."""
    return {k: float(v) if v in ("inf", "-inf", "nan") else v for k, v in row.items()}


def privacy_audit(defenses: Sequence[str | Defense] | str | Defense, *,
                  points: int | Sequence[int] = 2, trials: int = 10_000, delta: float = 1e-5,
                  confidence: float = 0.95,
                  seed: int = 0, defense_params: dict[str, dict[str, Any]] | None = None,
                  statistic: str | Sequence[str] | None = None, progress: bool = False,
                  results: str | None = None, skip_silent: bool = False,
                  **game_options: Any) -> PrivacyReport:
    """Measured lower bounds on eps next to the claimed and sound eps of each defense.

    Args:
        defenses: registered names (the papers' parameters unless ``defense_params`` says
            otherwise) or :class:`~leakaudit.defenses.Defense` objects (a user's own subclass
            with its own ``privatize_batch`` works: it is run as training runs it).
        points: the leak point(s) whose release is audited: 2, 1 or 0 (the name of
            :func:`leakaudit.audit` and of the CLI).
        trials: held-out runs with the canary, and as many without (>= 100), on which the
            bounds are computed; ``select_fraction`` (default 0.2) times as many further runs
            per side (at most :data:`MAX_SELECTION`) choose the thresholds, and up to 1,000
            canary-out runs the reference, for each canary and worst-case dataset.
        delta, confidence: the delta of every eps; the confidence of every bound.
        statistic: one of :data:`STATISTICS`, a list of them, or None for all.
        results: a JSON-lines file; a rerun with the same arguments skips finished rows.
        skip_silent: leave out (defense, point) pairs where the defense releases nothing,
            instead of raising ValueError.
        game_options: passed to :func:`audit_release` (:data:`GAME_OPTIONS`: canaries,
            background, background_scale, local_steps, shapes, select_fraction, vectorise,
            chunk); an unknown one, or a name in ``defense_params`` that is not among the
            defenses audited by name, is a ValueError naming it.
    """
    specs = [defenses] if isinstance(defenses, (str, Defense)) else list(defenses)
    points = [points] if isinstance(points, int) else list(points)
    params = defense_params or {}
    wanted = STATISTICS if statistic is None else (
        (statistic,) if isinstance(statistic, str) else tuple(statistic))
    for p in points:
        _check(trials, confidence, delta, wanted, p, game_options.get("select_fraction", 0.2),
               game_options.get("canaries"))
    if not specs:
        raise ValueError("defenses must name at least one defense")
    _check_mappings(specs, params, game_options)
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
            row = audit_release(d, point=p, trials=trials, delta=delta, confidence=confidence,
                                seed=seed, statistic=wanted, **game_options).rows()[0]
            store.put("release", key, finite_json(row))
        report.add(dict(row, defense=labels[id(d)]))  # the registered name, when given
    return report
