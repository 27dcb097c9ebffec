"""The audit report: first the protection profile (:mod:`.profile`: one row per defense
and stage, one verdict word), then per defense x stage x leak point x attack the metric
columns (docs/glossary.md), and per defense the training run's accuracy and why claimed and
sound eps differ; Markdown, CSV, LaTeX, JSON and a PNG (:mod:`.figure`; the per-point
verdict sentences of :meth:`AuditReport.summary_rows` stay available to callers)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._jsonsafe import finite_json
from .._jsonsafe import number as _num
from ..reporting import latex_escape, latex_table, write_tables
from .figure import save_profile_figure
from .profile import profile_markdown, profile_rows

__all__ = ["AuditReport", "CELL_COLUMNS", "DEFENSE_COLUMNS", "latex_escape", "markdown_table"]

CELL_COLUMNS = ("defense", "point", "attack", "resilient", "mse", "rmse", "psnr", "ssim",
                "asr", "tau", "label_accuracy", "examples")
DEFENSE_COLUMNS = ("defense", "accuracy", "eps_claimed", "eps_sound", "reason")
#: column of audit(empirical=True): the largest measured lower bound on eps over the points
MEASURED = "measured eps >="


def format_number(v: Any, digits: int = 4) -> str:
    """A table cell: yes/no, "-" for missing, integers as they are, floats to ``digits``."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, str) and v not in ("inf", "-inf", "nan"):
        return v
    x = _num(v)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "-"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e4):
        return f"{x:.2e}"
    return f"{x:.{digits}g}"


@dataclass
class AuditReport:
    """Results of :func:`leakaudit.audit`, a :class:`leakaudit.reporting.Report`. Resilient
    means no attacked example was rebuilt (ASR = 0 at the MSE threshold)."""

    config: dict[str, Any] = field(default_factory=dict)
    threshold: float = 0.01
    delta: float = 1e-5
    defenses: dict[str, dict[str, Any]] = field(default_factory=dict)
    cells: list[dict[str, Any]] = field(default_factory=list)
    #: defense -> stage -> the attacked weights' record (rounds trained, test accuracy, the
    #: claimed and sound eps spent by those rounds); cells then carry their "stage"
    stages: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: defense -> stage -> the identification record (:mod:`.identification`)
    identification: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def add_defense(self, key: str, name: str, record: dict[str, Any]) -> None:
        self.defenses[key] = dict(record, name=name)

    def add_stage(self, key: str, stage: str, record: dict[str, Any]) -> None:
        self.stages.setdefault(key, {})[stage] = dict(record)

    def add_cell(self, record: dict[str, Any]) -> None:
        self.cells.append(record)

    def add_identification(self, key: str, stage: str, record: dict[str, Any]) -> None:
        self.identification.setdefault(key, {})[stage] = dict(record)

    def profile_rows(self) -> list[dict[str, Any]]:
        """The protection profile's rows, raw values (:mod:`.profile`)."""
        return profile_rows(self)

    # ------------------------------------------------------------------ tables
    def rows(self) -> list[dict[str, Any]]:
        """One row per (defense, [stage,] point, attack), aggregated over the attacked
        examples (a "stage" column when the cells have stages)."""
        groups: dict[tuple[str, Any, int, str], list[dict[str, Any]]] = defaultdict(list)
        order: list[tuple[str, Any, int, str]] = []
        for c in self.cells:
            k = (c["defense"], c.get("stage"), int(c["point"]), c["attack"])
            if k not in groups:
                order.append(k)
            groups[k].append(c)
        out = []
        for k in order:
            g = groups[k]
            mses = [_num(c["mse"]) for c in g]
            asr = float(np.mean([bool(c["success"]) for c in g]))
            ssims = [_num(c["ssim"]) for c in g if c.get("ssim") is not None]
            out.append({
                "defense": k[0], **({"stage": k[1]} if k[1] is not None else {}),
                "point": k[2], "attack": k[3], "resilient": asr == 0.0,
                "mse": float(np.mean(mses)), "rmse": float(np.mean(np.sqrt(mses))),
                "psnr": float(np.mean([_num(c["psnr"]) for c in g])),
                "ssim": float(np.mean(ssims)) if ssims else math.nan,
                "asr": asr, "tau": float(np.mean([_num(c["tau"]) for c in g])),
                "label_accuracy": float(np.mean([_num(c["label_accuracy"]) for c in g])),
                "examples": len(g),
            })
        return out

    def defense_rows(self) -> list[dict[str, Any]]:
        return [{"defense": k, "accuracy": _num(v.get("accuracy")),
                 "eps_claimed": _num(v.get("eps_claimed")), "eps_sound": _num(v.get("eps_sound")),
                 "reason": v.get("reason", "") if _num(v.get("eps_claimed")) !=
                 _num(v.get("eps_sound")) or v.get("level") == "none" else "",
                 **({MEASURED: _num(v["eps_measured"])} if "eps_measured" in v else {})}
                for k, v in self.defenses.items()]

    def _cell_columns(self) -> tuple[str, ...]:
        """CELL_COLUMNS, with "stage" after the defense when the cells have stages."""
        if any(c.get("stage") is not None for c in self.cells):
            return (CELL_COLUMNS[0], "stage", *CELL_COLUMNS[1:])
        return CELL_COLUMNS

    def _defense_columns(self) -> tuple[str, ...]:
        """DEFENSE_COLUMNS, with "measured eps >=" when the audit measured it."""
        if any("eps_measured" in v for v in self.defenses.values()):
            return (*DEFENSE_COLUMNS[:-1], MEASURED, DEFENSE_COLUMNS[-1])
        return DEFENSE_COLUMNS

    def summary_rows(self) -> list[dict[str, str]]:
        """defense [x stage] x leak point: "resilient (MSE m)" or "leaks: ASR a%, tau
        DLG/iDLG/CPL t1/t2/t3" (over the attacks that were run), with accuracy and eps (the
        README's table). With stages, a row per (defense, stage): "stage" says how many
        training rounds the attacked weights had, accuracy is theirs and eps what those
        rounds spent; without, the training run's accuracy and eps."""
        rows = self.rows()
        points = sorted({r["point"] for r in rows})
        drows = {d["defense"]: d for d in self.defense_rows()}
        # the undefended baseline is the "none" defense only: a defense without a DP
        # guarantee (random noise, pruning) is still a defense whose failure says nothing
        # about the attacks' budget
        undefended = {k for k, v in self.defenses.items() if v.get("name") == "none"}
        # stage -> (point, attack) -> whether the attack rebuilt an undefended example here
        # (at the same stage's weights): the sanity check that it could have succeeded at
        # this budget and threshold
        baselines: dict[Any, dict[tuple[int, str], bool]] = {}
        for r in rows:
            if r["defense"] in undefended:
                baseline = baselines.setdefault(r.get("stage"), {})
                key = (r["point"], r["attack"])
                baseline[key] = baseline.get(key, False) or not r["resilient"]
        image = any(c.get("ssim") is not None for c in self.cells)
        out = []
        for defense, stage in dict.fromkeys((r["defense"], r.get("stage")) for r in rows):
            row = {"defense": defense}
            d: dict[str, Any] = drows.get(defense, {})
            if stage is not None:
                d = self.stages.get(defense, {}).get(stage, {})
                rounds = d.get("rounds")
                row["stage"] = stage if rounds is None else f"{stage} ({rounds} rounds)"
            for p in points:
                here = [r for r in rows if r["defense"] == defense and r["point"] == p
                        and r.get("stage") == stage]
                row[f"type {p}"] = verdict(here, self.threshold, baselines.get(stage, {}),
                                           defense in undefended, image) if here else "-"
            row.update({"accuracy": format_number(_num(d.get("accuracy")), 3),
                        "claimed eps": format_number(_num(d.get("eps_claimed")), 3),
                        "sound eps": format_number(_num(d.get("eps_sound")), 3)})
            out.append(row)
        return out

    def resilience(self) -> dict[str, dict[int, bool]]:
        """defense -> point -> resilient against every attack run."""
        out: dict[str, dict[int, bool]] = defaultdict(dict)
        for r in self.rows():
            prev = out[r["defense"]].get(r["point"], True)
            out[r["defense"]][r["point"]] = prev and r["resilient"]
        return dict(out)

    # ------------------------------------------------------------------ renderings
    def summary_markdown(self) -> str:
        """The compact defense x type 0/1/2 table alone."""
        rows = self.summary_rows()
        cols = tuple(rows[0]) if rows else ("defense",)
        return markdown_table(cols, rows) + "\n"

    def setting_line(self) -> str:
        """The attacked clients' setting: B, L, stage and device."""
        c = self.config
        return (f"Attacked clients: batch size {c['batch_size']}, {c['local_steps']} local "
                f"step(s), stage {c['stage']}, attacks on {c.get('device') or 'cpu'}.\n")

    def _summary_caption(self) -> str:
        """What the summary's accuracy and eps columns are."""
        if not self.stages:
            return "accuracy: test accuracy after training"
        return ("one row per defense and attacked stage (the weights after that many training "
                "rounds under the defense); accuracy: test accuracy of those weights; eps: "
                "spent by those rounds")

    def to_markdown(self) -> str:
        """The setting, the protection profile (the first table), then per defense, stage,
        leak point and attack the metrics, and the training runs' accuracy and eps."""
        lines = [self.setting_line()] if "batch_size" in self.config else []
        lines += [profile_markdown(self, markdown_table, format_number),
                 f"Per attack (succeeds when MSE <= {self.threshold:g}; resilient = no "
                 "attacked example rebuilt; tau = L-BFGS steps to success, else the limit)",
                 "", markdown_table(self._cell_columns(), self.rows()), "",
                 f"Accuracy and privacy of the training run (eps at delta = {self.delta:g}, "
                 "worst client)", "",
                 markdown_table(self._defense_columns(), self.defense_rows())]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        buf = io.StringIO()
        cols = list(self._cell_columns()) + ["accuracy", "eps_claimed", "eps_sound"]
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        drows = {d["defense"]: d for d in self.defense_rows()}
        for r in self.rows():
            d = drows.get(r["defense"], {})
            w.writerow({**r, "accuracy": d.get("accuracy"), "eps_claimed": d.get("eps_claimed"),
                        "eps_sound": d.get("eps_sound")})
        return buf.getvalue()

    def to_latex(self) -> str:
        return latex_table(self._cell_columns(), self.rows(), format_number)

    def to_json(self) -> str:
        payload = {
            "config": self.config, "threshold": self.threshold, "delta": self.delta,
            "rows": finite_json(self.rows()),
            "defenses": finite_json(self.defense_rows()),
            # the records behind the defense table (from_json rebuilds the report from them)
            "defense_records": finite_json(self.defenses),
            "stage_records": finite_json(self.stages),
            "identification_records": finite_json(self.identification),
            "profile": finite_json(self.profile_rows()),
            "cells": [{k: v for k, v in c.items() if k not in ("truth", "reconstruction")}
                      for c in self.cells],
        }
        return json.dumps(payload, indent=1)

    @classmethod
    def from_json(cls, text: str) -> AuditReport:
        """The report ``to_json`` wrote (its tables; the images are not in the JSON)."""
        data = json.loads(text)
        if "defense_records" not in data:
            raise ValueError("this JSON has no defense records (written by leakaudit < 0.2): "
                             "rerun the audit with its results file to rebuild the report")
        return cls(config=data["config"], threshold=data["threshold"], delta=data["delta"],
                   defenses=data["defense_records"], cells=data["cells"],
                   stages=data.get("stage_records", {}),
                   identification=data.get("identification_records", {}))

    def save_figure(self, path: str | Path) -> Path:
        """The PNG of the protection profile (:func:`.figure.save_profile_figure`): eps
        claimed, sound and measured; identification against its bound; the undefended
        and the best-protected defense's reconstructions beside the truth."""
        return save_profile_figure(self, path)

    def save(self, directory: str | Path, stem: str = "audit") -> dict[str, Path]:
        """Write Markdown, CSV, LaTeX, JSON and the PNG grid into ``directory``."""
        return write_tables(self, directory, stem, figure=self.save_figure)


def markdown_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any] | Sequence[Any]]
                   ) -> str:
    """A Markdown table; rows are dicts (by column) or sequences (in column order); numbers
    are formatted as the report's (4 significant digits, inf, '-' for missing or NaN), text
    is kept as it is."""
    head = "| " + " | ".join(columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in (
        [r.get(c) for c in columns] if isinstance(r, Mapping) else r)) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def _cell(value: Any) -> str:
    """Text as it is; numbers, booleans and missing values as :func:`format_number` writes them."""
    return value if isinstance(value, str) else format_number(value)


def _summary_cell(rows: list[dict[str, Any]]) -> str:
    """The verdict without the sanity checks (kept for old callers): :func:`verdict`."""
    return verdict(rows, math.nan, {}, False, False)


#: attacks with no optimiser (a closed form or a scoring): their tier
_TIERS = {"exact": "exact", "rgap": "analytic", "prior-aware": "identification"}


def tiers(rows: Sequence[Mapping[str, Any]]) -> str:
    """The tiers tried at one leak point: "exact" (optimiser-free reconstruction),
    "identification" (prior-aware) and "optimiser (names)" for the gradient-matching
    attacks; "exact not run" when the exact tier is absent (it needs a biased linear first
    layer: ``leakaudit.attacks.exact.applicable``)."""
    names = list(dict.fromkeys(r["attack"] for r in rows))
    found = [t for a, t in _TIERS.items() if a in names]
    opt = [a for a in names if a not in _TIERS]
    if opt:
        found.append(f"optimiser ({', '.join(opt)})")
    if "exact" not in names:
        found.append("exact not run")
    return ", ".join(found)


def verdict(rows: list[dict[str, Any]], threshold: float,
            baseline: Mapping[tuple[int, str], bool], undefended: bool, image: bool) -> str:
    """One leak point of one defense over its attacks: "leaks: ASR a%, tau ..."
    when an attack succeeded; "resilient (MSE m; tiers ...)" only when it could have
    succeeded; otherwise "inconclusive: why (tiers ...)":

    * the threshold is outside (0, 1), the range of MSEs between [0, 1] images (image data;
      for other data only <= 0 is refused): nothing, or everything, succeeds;
    * the defense is undefended and no attack rebuilt its examples (the attack failed, not
      a defense);
    * an undefended baseline in the same report at this leak point was rebuilt by none of
      the attacks run here (the budget or the threshold is out of the attacks' reach).

    Without an undefended baseline in the report the verdict says "unchecked". A NaN
    ``threshold`` skips the checks."""
    tried = tiers(rows)
    if not math.isnan(threshold) and (threshold <= 0 or (image and threshold >= 1)):
        return (f"inconclusive: threshold {threshold:g} outside (0, 1), the MSE range of "
                f"[0, 1] images (tiers {tried})")
    if all(r["resilient"] for r in rows):
        mse = format_number(float(np.mean([r["mse"] for r in rows])), 2)
        if math.isnan(threshold):
            return f"resilient (MSE {mse})"
        if undefended:
            return (f"inconclusive: no attack rebuilt an undefended example (MSE {mse}; "
                    f"budget or threshold too small; tiers {tried})")
        checked = [baseline[(r["point"], r["attack"])] for r in rows
                   if (r["point"], r["attack"]) in baseline]
        if not checked:
            return f"resilient (MSE {mse}; unchecked: no undefended baseline; tiers {tried})"
        if not any(checked):
            return (f"inconclusive: the attacks rebuilt no undefended example at this "
                    f"budget and threshold (MSE {mse}; tiers {tried})")
        return f"resilient (MSE {mse}; tiers {tried})"
    asr = max(r["asr"] for r in rows)
    taus = "/".join(format_number(r["tau"], 3) for r in rows)
    names = "/".join(_ATTACK_NAMES.get(r["attack"], r["attack"]) for r in rows)
    return f"leaks: ASR {asr:.0%}, tau {names} {taus}"


_ATTACK_NAMES = {"dlg": "DLG", "idlg": "iDLG", "cpl": "CPL", "ig": "IG"}
