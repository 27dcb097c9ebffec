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
  canary-out mean (a noise scale that differs between the worlds, Opacus #819), turned into
  eps and mu lower bounds by the engine every audit shares (:func:`game_bounds`:
  :func:`leakaudit.scoring.bounds.bounds_from_candidates`, half the runs choose the
  statistic and threshold per target, the other half test it), against the claimed and
  sound eps of one release.

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
from ..scoring.bounds import bounds_from_candidates, gdp_epsilon
from ..scoring.whitebox import contribution as same_noise_contribution
from ..scoring.whitebox import noise_std as pooled_noise_std
from ..scoring.whitebox import noise_tolerance, world_std

__all__ = ["ReplayReport", "COLUMNS", "replay_row", "game_bounds",
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


def game_bounds(scores: dict[str, tuple[np.ndarray, np.ndarray]], *, confidence: float,
                delta: float, seed: int) -> dict[str, Any]:
    """eps and mu lower bounds at ``confidence`` from the statistics' scores of canary-out
    and canary-in runs (name -> (out, into)): the empirical audit's game
    (:func:`leakaudit.scoring.bounds.bounds_from_candidates`, half the runs select)."""
    return bounds_from_candidates(scores, confidence=confidence, delta=delta,
                                  select_fraction=0.5, seed=seed)


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
               delta: float, confidence: float, seed: int, note: str = "",
               findings: list[str] | None = None) -> dict[str, Any]:
    """One report row from recorded releases (rows of flattened releases).

    Args:
        out, into: releases of the canary-out and canary-in worlds, each on its own noise.
        paired_in, paired_out: releases of both worlds on the same noise (row i on seed i).
        sensitivity: the declared per-example sensitivity in the release's units (C times
            the library's normaliser).
        noise_std: the std the accountant assumes, in the release's units.
        mu_claimed, mu_sound: sensitivity / std of one release as claimed (the library's
            accountant, its relation) and as the sound ledger has it (the game's relation).
        findings: what the adapter found in the setup before any release (a sampler the
            accountant does not assume, parameters trained outside the DP step): flagged.
    """
    bound = distance(relation)
    findings = list(findings or [])
    contribution = same_noise_contribution(paired_in, paired_out, sensitivity)
    half = out.shape[0] // 2
    measured = pooled_noise_std(out, into)
    ratio = measured / noise_std if noise_std > 0 else math.inf
    n_out, n_in = world_std(out), world_std(into)
    tol = noise_tolerance(half, out.shape[1])
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
    got = game_bounds(scores, confidence=confidence, delta=delta, seed=seed)
    best = {"eps_lower": got["eps_lower"], "mu_lower": got["mu_lower"],
            "statistic": got["eps_candidate"]}
    eps_claimed = gdp_epsilon(mu_claimed, delta)
    eps_sound = gdp_epsilon(mu_sound, delta)
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
