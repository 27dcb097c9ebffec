"""PrivacyReport: claimed, sound and measured epsilon per defense and leak point.

A :class:`leakaudit.reporting.Report`, as :class:`leakaudit.AuditReport` is: rows,
Markdown, CSV, JSON, LaTeX (the shared :func:`~leakaudit.reporting.latex_table`), ``save``
(the shared :func:`~leakaudit.reporting.write_tables`, plus a PNG drawn on a
``matplotlib.figure.Figure``, no pyplot state) and ``from_json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._jsonsafe import finite_json, from_finite_json
from ..reporting import csv_table, latex_table, markdown_table, write_tables

__all__ = ["PrivacyReport", "COLUMNS"]

COLUMNS = ("defense", "point", "trials", "canary", "statistic", "eps_claimed", "eps_sound",
           "eps_lower", "mu_sound", "mu_lower", "eps_lower_gdp", "claim_violated",
           "sound_violated", "violated_by", "reason")


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        if math.isnan(v):
            return "-"
        return f"{v:.3g}"
    return str(v)


@dataclass
class PrivacyReport:
    """Rows of :func:`leakaudit.privacy_audit`, one per (defense, leak point)."""

    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(dict(record))

    def rows(self) -> list[dict[str, Any]]:
        """One dict per audited release with the :data:`COLUMNS` (and a few details)."""
        return [dict(r) for r in self.records]

    def violations(self) -> list[dict[str, Any]]:
        """Rows whose sound eps is below the measured lower bound (a ledger is wrong)."""
        return [r for r in self.records if r["sound_violated"]]

    def to_markdown(self) -> str:
        return markdown_table(COLUMNS, self.records, _fmt)

    def to_csv(self) -> str:
        return csv_table(COLUMNS, self.records, finite_json)

    def to_json(self) -> str:
        data = {"config": self.config,
                "rows": [finite_json(r) for r in self.records]}
        return json.dumps(data, indent=1, sort_keys=True)

    def to_latex(self) -> str:
        return latex_table(COLUMNS, self.records, _fmt)

    @classmethod
    def from_json(cls, text: str) -> PrivacyReport:
        """The report ``to_json`` wrote."""
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError("this JSON is not a PrivacyReport (no list of rows)")
        return cls(config=from_finite_json(data.get("config", {})),
                   records=[from_finite_json(r) for r in data["rows"]])

    def figure(self) -> Any:
        """Claimed, sound and measured eps per row on a log scale (inf drawn at the top);
        ValueError when there is no row to draw."""
        from matplotlib.figure import Figure

        rows = self.records
        if not rows:
            raise ValueError("the report has no rows to draw")
        fig = Figure(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.2), layout="constrained")
        ax = fig.add_subplot()
        finite = [v for r in rows for v in (r["eps_claimed"], r["eps_sound"], r["eps_lower"])
                  if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
        top = 10 ** math.ceil(math.log10(max(finite + [10.0]) * 3))
        x = list(range(len(rows)))
        for dx, key, marker, label in ((-0.2, "eps_claimed", "s", "claimed eps"),
                                       (0.0, "eps_sound", "D", "sound eps (inf at top)"),
                                       (0.2, "eps_lower", "o", "measured eps >= (95%)")):
            ys = [top if math.isinf(r[key]) else max(r[key], 1e-3) for r in rows]
            ax.scatter([i + dx for i in x], ys, marker=marker, label=label, zorder=3)
        for i, r in enumerate(rows):
            if r["sound_violated"] or r["claim_violated"]:
                ax.annotate("!" if r["sound_violated"] else "c", (i, top / 3), ha="center",
                            color="red" if r["sound_violated"] else "orange")
        ax.set_yscale("log")
        ax.set_ylim(1e-3, top * 2)
        ax.set_xticks(x, [f"{r['defense']} p{r['point']}" for r in rows], rotation=60,
                      ha="right", fontsize=7)
        ax.set_ylabel(f"epsilon (delta = {self.config.get('delta', 1e-5):g})")
        ax.legend(fontsize=7, loc="lower left")
        ax.set_title("claimed vs sound vs measured (c: claim violated, !: sound violated)",
                     fontsize=9)
        return fig

    def save_figure(self, path: str | Path) -> Path:
        path = Path(path)
        self.figure().savefig(path, dpi=120)
        return path

    def save(self, directory: str | Path, stem: str = "privacy") -> dict[str, Path]:
        """Write Markdown, CSV, LaTeX, JSON and the PNG (when there are rows) into
        ``directory``; returns the paths by extension."""
        return write_tables(self, directory, stem, figure=self.save_figure)
