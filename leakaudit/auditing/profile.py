"""The protection profile: the audit's first table, one row per (defense, stage).

Each row gathers what every tool of the library says about one defense at one set of
attacked weights:

* utility: the test accuracy of the attacked weights;
* accounting: the claimed and sound eps of the defense's training run (delta, relation and
  sampling stated once in the caption);
* measured privacy: the empirical lower bound on eps of the defense's own release (the
  canary game, ``MeasuredEps``; the largest over the points where it releases);
* reconstruction: the best attack at the profile's point (:func:`protected_point`: the
  leakiest audited point the defense's noise protects), as examples rebuilt of attacked,
  with the two-sided 95 % Clopper-Pearson interval, and its mean PSNR;
* identification: the prior-aware attack's success among k candidates with its
  (Bonferroni-paid) interval, beside the reconstruction-robustness bound of the attacked
  release's sound ledger (:mod:`.identification`);
* one verdict word (:func:`verdict_word`, rule in :data:`VERDICTS`).

No cell but the defense's label (the row's name, written in full as every table of the
report writes it) is longer than :data:`CELL_LIMIT` characters; the details are footnotes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import metrics
from .identification import protected_point

__all__ = ["CELL_LIMIT", "COLUMNS", "EPS_MEANINGFUL", "VERDICTS", "profile_markdown",
           "profile_rows", "profile_table", "reconstruction_summary", "verdict_word"]

#: the longest cell of the profile table (characters)
CELL_LIMIT = 40

#: a sound eps at or below this (at the caption's delta) is a guarantee that means
#: something; above it (e.g. 54, let alone 6,500) it bounds no attack in practice
EPS_MEANINGFUL = 10.0

#: the verdict words, in the order the rule tries them (first that holds)
VERDICTS: dict[str, str] = {
    "unsound": "a measurement exceeds a sound bound (measured eps > sound eps, or the "
               "identification interval above its bound): the ledger is wrong",
    "leaks": "an attack succeeds: a reconstruction rebuilt an attacked example, or the "
             "identification interval lies above 1/2 (right more often than not)",
    "bounded": f"nothing leaks as above and the sound eps is <= {EPS_MEANINGFUL:g}: a "
               "guarantee caps every attack (the bound column)",
    "inconclusive": "nothing leaks, no meaningful guarantee, and no tier could have "
                    "succeeded on these weights without the defense's noise",
    "no guarantee": "nothing leaks at this budget, but the sound eps is above "
                    f"{EPS_MEANINGFUL:g} (or infinite): the attacks failed, no guarantee "
                    "says they must",
}

COLUMNS = ("defense", "stage", "accuracy", "claimed eps", "sound eps", "measured eps >=",
           "rebuilt [95% CI] PSNR", "identified [95% CI]", "bound", "verdict")


def verdict_word(*, sound_eps: float, measured_eps: float | None = None,
                 rebuilt: int = 0, identification: Mapping[str, Any] | None = None,
                 could_rebuild: bool | None = None) -> str:
    """The verdict of one profile row: the first word of :data:`VERDICTS` whose rule holds.

    Args:
        sound_eps: the defense's sound eps (inf without a guarantee).
        measured_eps: the measured lower bound on eps (None: not measured).
        rebuilt: attacked examples rebuilt by the best reconstruction tier.
        identification: the identification record (``success``, ``ci_low``, ``bound``,
            ``k``, ``clean``: success on the release without the defense's noise), or None.
        could_rebuild: whether a reconstruction tier rebuilt an example of these weights
            without the defense's noise (None: not known).
    """
    ident = identification or {}
    if measured_eps is not None and measured_eps > sound_eps * (1 + 1e-9):
        return "unsound"
    if ident and ident["ci_low"] > ident["bound"] + 1e-12:
        return "unsound"
    if rebuilt > 0 or (ident and ident["ci_low"] > 0.5):
        return "leaks"
    if sound_eps <= EPS_MEANINGFUL:
        return "bounded"
    could_identify = bool(ident) and ident["clean"] > 1.0 / ident["k"]
    if not could_rebuild and not could_identify:
        return "inconclusive"
    return "no guarantee"


def reconstruction_summary(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The best attack over ``cells`` (one defense, stage and point): most examples
    rebuilt, then highest mean PSNR; its counts, 95 % interval and mean PSNR."""
    by_attack: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        by_attack.setdefault(c["attack"], []).append(c)
    if not by_attack:
        return None

    def key(item: tuple[str, list[Mapping[str, Any]]]) -> tuple[int, float]:
        group = item[1]
        return sum(bool(c["success"]) for c in group), _mean_psnr(group)

    attack, group = max(by_attack.items(), key=key)
    rebuilt = sum(bool(c["success"]) for c in group)
    low, high = metrics.success_interval(rebuilt, len(group))
    return {"attack": attack, "rebuilt": rebuilt, "examples": len(group),
            "ci_low": low, "ci_high": high, "psnr": _mean_psnr(group)}


def _mean_psnr(cells: Sequence[Mapping[str, Any]]) -> float:
    values = [float(c["psnr"]) for c in cells if c.get("psnr") is not None]
    return float(np.mean(values)) if values else math.nan


def profile_rows(report: Any) -> list[dict[str, Any]]:
    """One row of raw values per (defense, stage) of an :class:`AuditReport` (the CSV and
    JSON form of the profile), in the report's order."""
    out = []
    pairs = dict.fromkeys((c["defense"], c.get("stage")) for c in report.cells)
    points = sorted({int(c["point"]) for c in report.cells}) or [2]
    for defense, stage in pairs:
        train = report.defenses.get(defense, {})
        stage_rec = report.stages.get(defense, {}).get(stage, {}) if stage else train
        point = protected_point(_Sites(train.get("sites", ())), points)
        here = [c for c in report.cells if c["defense"] == defense
                and c.get("stage") == stage]
        recon = reconstruction_summary([c for c in here if int(c["point"]) == point])
        ident = report.identification.get(defense, {}).get(stage)
        could = _could_rebuild(report, defense, stage, point, here)
        sound = _num(train.get("eps_sound"))
        measured = train.get("eps_measured")
        out.append({
            "defense": defense, "name": train.get("name", defense.split("(")[0]),
            "stage": stage, "rounds": stage_rec.get("rounds"), "point": point,
            "accuracy": _num(stage_rec.get("accuracy")),
            "eps_claimed": _num(train.get("eps_claimed")), "eps_sound": sound,
            "eps_measured": None if measured is None else _num(measured),
            "reconstruction": recon, "identification": ident, "could_rebuild": could,
            "verdict": verdict_word(sound_eps=sound,
                                    measured_eps=None if measured is None else _num(measured),
                                    rebuilt=recon["rebuilt"] if recon else 0,
                                    identification=ident, could_rebuild=could)})
    return out


class _Sites:
    """The sites a training record states (what :func:`protected_point` reads)."""

    def __init__(self, sites: Sequence[str]) -> None:
        self.sites = frozenset(sites)


def _could_rebuild(report: Any, defense: str, stage: Any, point: int,
                   here: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether an attack rebuilt an example of the same weights without the defense's
    noise: at a point the defense does not protect (a later site), or, at the initial
    weights (shared by every defense), in the undefended rows."""
    if any(c["success"] for c in here if int(c["point"]) > point):
        return True
    undefended = [k for k, v in report.defenses.items() if v.get("name") == "none"]
    if stage == "initial" or defense in undefended:
        base = [c for c in report.cells if c["defense"] in undefended
                and c.get("stage") == stage]
        return any(c["success"] for c in base) if base else None
    return None


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, str):
        return float(value.replace("Infinity", "inf"))
    return float(value)


def profile_table(rows: Sequence[Mapping[str, Any]], number: Callable[[Any, int], str]
                  ) -> list[dict[str, str]]:
    """The rows as the table's text cells, numbers written by ``number(value, digits)``
    (the report's ``format_number``); every cell but the defense's label at most
    :data:`CELL_LIMIT` characters (a ValueError names the first that is not)."""
    def _g(value: Any, digits: int = 3) -> str:
        return number(value, digits)

    out = []
    for r in rows:
        recon, ident = r["reconstruction"], r["identification"]
        cells = {
            "defense": r["defense"],
            "stage": str(r["stage"] or "-") if r["rounds"] is None
            else f"{r['stage']} ({r['rounds']} r.)",
            "accuracy": _g(r["accuracy"]),
            "claimed eps": _g(r["eps_claimed"]), "sound eps": _g(r["eps_sound"]),
            "measured eps >=": _g(r["eps_measured"]),
            "rebuilt [95% CI] PSNR": "-" if recon is None else (
                f"{recon['rebuilt']}/{recon['examples']} [{recon['ci_low']:.2f}, "
                f"{recon['ci_high']:.2f}] {_g(recon['psnr'], 2)} dB {recon['attack']}"),
            "identified [95% CI]": "-" if not ident else (
                f"{ident['success']:.2f} [{ident['ci_low']:.2f}, {ident['ci_high']:.2f}] "
                f"k={ident['k']}"),
            "bound": "-" if not ident else f"{ident['bound']:.2f}",
            "verdict": r["verdict"],
        }
        for column, text in cells.items():
            if column != "defense" and len(text) > CELL_LIMIT:
                raise ValueError(f"profile cell {column!r} of {r['defense']} is "
                                 f"{len(text)} characters (limit {CELL_LIMIT}): {text!r}")
        out.append(cells)
    return out


def profile_markdown(report: Any, table: Callable[..., str],
                     number: Callable[[Any, int], str]) -> str:
    """The profile as Markdown: caption, the table (``table(columns, rows)`` renders it,
    ``number`` writes its numbers) and its footnotes."""
    rows = profile_rows(report)
    if not rows:
        return ""
    return "\n".join([_caption(report, rows), "", table(COLUMNS, profile_table(rows, number)), "",
                      *_footnotes(report, rows), ""])


def _caption(report: Any, rows: Sequence[Mapping[str, Any]]) -> str:
    """What the eps columns are: delta, the relation and sampling of each defense group."""
    groups: dict[str, list[str]] = {}
    for key, rec in report.defenses.items():
        if rec.get("level") in (None, "none"):
            continue
        how = (f"{rec.get('relation', '?')}, {rec.get('level')} level, "
               f"{(rec.get('settings') or {}).get('client_sampling', '?')} clients")
        groups.setdefault(how, []).append(rec.get("name", key))
    stated = "; ".join(f"{', '.join(dict.fromkeys(v))}: {k}" for k, v in groups.items())
    return (f"Protection profile (eps of the whole training run at delta = "
            f"{report.delta:g}, worst client; {stated or 'no DP defense'}; claimed: the "
            "paper's accounting, sound: every release counted, tightest certified bound)")


def _footnotes(report: Any, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The details the cells leave out."""
    ident = next((r["identification"] for r in rows if r["identification"]), None)
    trials = report.config.get("empirical_trials")
    notes = [
        "- accuracy: test accuracy of the attacked weights (stage: after that many "
        "training rounds under the defense).",
        "- measured eps >=: lower bound from the canary game on the defense's own release"
        + (f" ({trials} held-out runs per side)" if trials else "")
        + ", the largest over the points where it releases; '-' when not measured.",
        "- rebuilt: examples rebuilt (MSE <= "
        f"{report.threshold:g}) of those attacked by the best attack at the row's leak "
        "point (the leakiest audited point the defense's noise protects; "
        + ", ".join(f"{r['name']} {r['point']}" for r in rows if r["stage"] == rows[0]["stage"])
        + "), two-sided 95 % Clopper-Pearson interval, its mean PSNR; every attack and "
        "point: the per-attack table.",
    ]
    if ident:
        notes.append(
            f"- identified: Hayes et al.'s prior-aware attack, {ident['trials']} releases "
            f"at the same point from these weights, target among k = {ident['k']} "
            f"candidates (blind guess 1/{ident['k']}), scored on the whole release and "
            f"per tensor; the best of the {ident['scorers']} scorers with its interval "
            "paid for by Bonferroni. bound: Phi(Phi^-1(1/k) + mu), mu of the attacked "
            "release's sound ledger (1: no bound).")
    notes.append("- verdict (first that holds): " + "; ".join(
        f"**{w}**: {why}" for w, why in VERDICTS.items()) + ".")
    return notes
