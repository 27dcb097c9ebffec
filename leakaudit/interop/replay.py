"""Record/replay of a library's own DP step: what it released, checked against what it declares.

The adapters (:func:`leakaudit.interop.opacus.audit_optimizer`,
:func:`leakaudit.interop.flower.audit_dp`) run the library's real step on canary batches, in
two neighbouring worlds (the canary in, and out under the stated relation), each run on a
seeded noise draw, and hand the recorded releases here (after dp-recorder, PETS 2026, which
records numpy/pandas mechanisms and replays them against their declared sensitivity).

Two kinds of evidence, one row per audited mechanism (:class:`ReplayReport`):

- **deterministic checks** (no statistics): run with the canary in and out *on the same
  noise*, the release moves by exactly the canary's contribution, which must not exceed
  the declared sensitivity (in the release's units: Opacus divides by its expected batch
  size, Flower's central wrappers by K); and two runs of one world on different noise
  differ by noise alone, whose std must be the one the accountant uses (within a tolerance
  of a few standard errors of the estimate over every coordinate).
- **the canary game** on the recorded releases: the white-box projection on the canary's
  contribution (the Neyman-Pearson test for a Gaussian mechanism) and the energy about the
  canary-out mean (a noise scale that differs between the worlds, Opacus #819), each turned
  into eps and mu lower bounds by :func:`game_bounds` (the distinguishing game of
  :mod:`leakaudit.empirical.stats` in its simplest form: the adapters sit apart from the
  empirical audit; Bonferroni over the two statistics), against the claimed and sound eps
  of one release.

No torch, Opacus or Flower here (numpy, scipy and the accountant only).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._jsonsafe import finite_json, from_finite_json
from ..neighbours import distance
from ..reporting import csv_table, latex_table, markdown_table, write_tables

__all__ = ["ReplayReport", "COLUMNS", "replay_row", "game_bounds", "gaussian_epsilon",
           "noise_tolerance"]

COLUMNS = ("library", "version", "mode", "relation", "trials", "contribution", "bound",
           "noise_ratio", "eps_claimed", "eps_sound", "eps_lower", "mu_claimed", "mu_lower",
           "flagged", "finding")


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else "-" if math.isnan(v) else f"{v:.3g}"
    return str(v)


@dataclass
class ReplayReport:
    """Rows of a record/replay audit, one per (library, version, mode): a
    :class:`leakaudit.reporting.Report` (rows, Markdown, CSV, JSON, LaTeX, save, from_json).

    Columns: ``contribution`` is the largest recorded move of the release by the canary on
    the same noise, in units of the declared per-example sensitivity (``bound``: 1 under
    add-remove or zero-out, 2 under replace-one); ``noise_ratio`` the measured noise std over
    the accountant's; ``eps_claimed`` / ``mu_claimed`` one release as the library accounts it
    (no sampling: the game fixes the batch), ``eps_sound`` one release as the sound ledger
    accounts it; ``eps_lower`` / ``mu_lower`` what the canary game measured (95 %);
    ``flagged`` when a check fails or the game beats the claim; ``finding`` says which.
    """

    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(dict(record))

    def rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.records]

    def flagged(self) -> list[dict[str, Any]]:
        """The rows with a finding."""
        return [dict(r) for r in self.records if r["flagged"]]

    def to_markdown(self) -> str:
        return markdown_table(COLUMNS, self.records, _fmt)

    def to_csv(self) -> str:
        return csv_table(COLUMNS, self.records, finite_json)

    def to_json(self) -> str:
        return json.dumps({"config": finite_json(self.config),
                           "rows": [finite_json(r) for r in self.records]},
                          indent=1, sort_keys=True)

    def to_latex(self) -> str:
        return latex_table(COLUMNS, self.records, _fmt)

    @classmethod
    def from_json(cls, text: str) -> ReplayReport:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError("this JSON is not a ReplayReport (no list of rows)")
        return cls(config=from_finite_json(data.get("config", {})),
                   records=[from_finite_json(r) for r in data["rows"]])

    def save(self, directory: str | Path, stem: str = "replay") -> dict[str, Path]:
        """Write Markdown, CSV, LaTeX and JSON into ``directory``; paths by extension."""
        return write_tables(self, directory, stem)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """eps(delta) of one Gaussian release with sensitivity / std = mu (Balle & Wang 2018,
    Thm 8: the exact Gaussian mechanism of ``accounting.composition``)."""
    from accounting.composition import analytic_gaussian_epsilons

    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    return float(analytic_gaussian_epsilons(np.array([1.0 / mu]), delta)[0])


def _upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 - alpha) Clopper-Pearson upper bounds on rates k / n (1 when k = n)."""
    from scipy import stats

    k = np.asarray(k, float)
    return np.where(k >= n, 1.0, stats.beta.ppf(1.0 - alpha, k + 1, np.maximum(n - k, 1)))


def _bound(fpr: np.ndarray, fnr: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """eps (Kairouz et al. 2015, Thm 2.1) and mu (Dong et al. 2019, Def. 2.6) lower bounds
    of tests with these upper bounds on their error rates, one direction."""
    from scipy import special

    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.maximum(np.log(np.maximum(1.0 - delta - fnr, 1e-300) / fpr),
                         np.log(np.maximum(1.0 - delta - fpr, 1e-300) / fnr))
    mu = special.ndtri(1.0 - np.clip(fpr, 1e-300, 1.0)) - special.ndtri(
        np.clip(fnr, 1e-300, 1.0))
    return np.maximum(np.nan_to_num(eps, nan=0.0), 0.0), np.maximum(mu, 0.0)


def game_bounds(out: np.ndarray, into: np.ndarray, *, confidence: float, delta: float,
                seed: int) -> tuple[float, float]:
    """(eps, mu) lower bounds at ``confidence`` from scores of canary-out and canary-in runs:
    a random half of each side picks the threshold and direction (the best bound there),
    the other half gives Clopper-Pearson bounds (alpha/2 per rate). The same game as
    :func:`leakaudit.empirical.stats.bounds_from_scores` in its simplest form (the adapters
    sit apart from the empirical audit)."""
    rng = np.random.default_rng(seed)
    out, into = rng.permutation(np.asarray(out, float)), rng.permutation(np.asarray(into, float))
    h0, h1 = out.size // 2, into.size // 2
    alpha = (1.0 - confidence) / 2.0
    cuts = np.unique(np.concatenate([out[:h0], into[:h1]]))
    best = (-1.0, 1, 0.0)
    for sign in (1, -1):
        fp = (sign * out[:h0, None] > sign * cuts[None, :]).sum(axis=0)
        fn = (~(sign * into[:h1, None] > sign * cuts[None, :])).sum(axis=0)
        _, mu = _bound(_upper(fp, h0, alpha), _upper(fn, h1, alpha), delta)
        j = int(np.argmax(mu))
        if mu[j] > best[0]:
            best = (float(mu[j]), sign, float(cuts[j]))
    _, sign, cut = best
    fp = int((sign * out[h0:] > sign * cut).sum())
    fn = int((~(sign * into[h1:] > sign * cut)).sum())
    eps, mu = _bound(_upper(np.array([fp]), out.size - h0, alpha / 2),
                     _upper(np.array([fn]), into.size - h1, alpha / 2), delta)
    return float(eps[0]), float(mu[0])


def noise_tolerance(pairs: int, dim: int) -> float:
    """Relative tolerance of a std estimated from ``pairs`` differences of two noise draws
    over ``dim`` coordinates: 6 standard errors (sd of a std estimate from m normal draws is
    about std / sqrt(2 m)), and at least 1e-3 for float32 rounding."""
    return max(1e-3, 6.0 / math.sqrt(2.0 * max(1, pairs * dim)))


def record(release: Any, *, trials: int, pairs: int, seed: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(out, into, paired_out, paired_in): ``release(world_in, noise_seed)`` recorded
    ``trials`` times per world on distinct seeds, then ``pairs`` times per world on shared
    seeds (row i of both on the same noise)."""
    base = 1_000_003 * (seed + 1)
    out = np.stack([release(False, base + i) for i in range(trials)])
    into = np.stack([release(True, base + trials + i) for i in range(trials)])
    p_out = np.stack([release(False, base + 2 * trials + i) for i in range(pairs)])
    p_in = np.stack([release(True, base + 2 * trials + i) for i in range(pairs)])
    return out, into, p_out, p_in


def replay_row(*, library: str, version: str, mode: str, relation: str,
               out: np.ndarray, into: np.ndarray, paired_in: np.ndarray, paired_out: np.ndarray,
               sensitivity: float, noise_std: float, mu_claimed: float, mu_sound: float,
               delta: float, confidence: float, seed: int, note: str = "") -> dict[str, Any]:
    """One report row from recorded releases (rows of flattened releases).

    Args:
        out, into: releases of the canary-out and canary-in worlds, each on its own noise.
        paired_in, paired_out: releases of both worlds on the same noise (row i on seed i).
        sensitivity: the declared per-example sensitivity in the release's units (C times
            the library's normaliser).
        noise_std: the std the accountant assumes, in the release's units.
        mu_claimed, mu_sound: sensitivity / std of one release as claimed (the library's
            accountant, its relation) and as the sound ledger has it (the game's relation).
    """
    bound = distance(relation)
    moves = np.linalg.norm(paired_in - paired_out, axis=1)
    contribution = float(moves.max()) / sensitivity if sensitivity > 0 else math.inf
    half = out.shape[0] // 2
    noise = np.concatenate([(out[:half] - out[half:2 * half]),
                            (into[:half] - into[half:2 * half])]) / math.sqrt(2.0)
    measured = float(np.sqrt(np.mean(noise ** 2)))
    ratio = measured / noise_std if noise_std > 0 else math.inf
    n_out, n_in = (float(np.sqrt(np.mean(((a[:half] - a[half:2 * half]) ** 2) / 2.0)))
                   for a in (out, into))
    tol = noise_tolerance(half, out.shape[1])
    findings = []
    if contribution > bound * (1.0 + 1e-3):
        findings.append(f"the canary moves the release by {contribution:.3g} x the declared "
                        f"sensitivity (bound {bound:g} under {relation})")
    if abs(ratio - 1.0) > tol:
        findings.append(f"noise std {ratio:.3g} x the accountant's")
    if abs(n_in / n_out - 1.0) > 2 * tol:
        findings.append(f"noise std differs between the worlds (in / out {n_in / n_out:.4g}): "
                        f"the normaliser depends on the data")
    # the game: projection on the canary's contribution (white-box) and energy, Bonferroni
    direction = (paired_in - paired_out).mean(axis=0)
    norm = float(np.linalg.norm(direction))
    direction = direction / norm if norm > 0 else direction
    centre = paired_out.mean(axis=0)  # runs apart from the game's: no bias to either world
    scores = {"projection": (out @ direction, into @ direction),
              "energy": (((out - centre) ** 2).sum(axis=1), ((into - centre) ** 2).sum(axis=1))}
    conf = 1.0 - (1.0 - confidence) / len(scores)
    best = {"eps_lower": 0.0, "mu_lower": 0.0, "statistic": "-"}
    for name, (s_out, s_in) in scores.items():
        eps, mu = game_bounds(s_out, s_in, confidence=conf, delta=delta, seed=seed)
        if eps > best["eps_lower"] or mu > best["mu_lower"]:
            best["statistic"] = name
        best["eps_lower"] = max(best["eps_lower"], eps)
        best["mu_lower"] = max(best["mu_lower"], mu)
    eps_claimed = gaussian_epsilon(mu_claimed, delta)
    eps_sound = gaussian_epsilon(mu_sound, delta)
    if best["mu_lower"] > mu_claimed or best["eps_lower"] > eps_claimed:
        findings.append(f"the game measures mu >= {best['mu_lower']:.3g} "
                        f"(eps >= {best['eps_lower']:.3g}) against the claimed "
                        f"{mu_claimed:.3g} ({eps_claimed:.3g})")
    if note:
        findings.append(f"note: {note}")
    return {"library": library, "version": version, "mode": mode, "relation": relation,
            "trials": int(out.shape[0]), "contribution": contribution, "bound": bound,
            "noise_ratio": ratio, "noise_tolerance": tol, "noise_in_out": n_in / n_out,
            "eps_claimed": eps_claimed,
            "eps_sound": eps_sound, "eps_lower": best["eps_lower"], "mu_claimed": mu_claimed,
            "mu_sound": mu_sound, "mu_lower": best["mu_lower"], "statistic": best["statistic"],
            "flagged": bool(findings) and findings != [f"note: {note}"],
            "finding": "; ".join(findings) if findings else "none", "delta": delta}
