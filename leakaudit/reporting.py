"""The one shape of every result: :class:`Report` (rows, Markdown, CSV, JSON, LaTeX, save,
from_json), which :class:`leakaudit.AuditReport` and :class:`leakaudit.PrivacyReport`
follow, and the writers they share. A low module (no torch): any layer may use it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["FORMATS", "Report", "latex_escape", "latex_table", "write_tables"]

#: the text formats every report writes (``save``), by file extension
FORMATS = ("md", "csv", "tex", "json")


@runtime_checkable
class Report(Protocol):
    """What every result of leakaudit offers."""

    def rows(self) -> list[dict[str, Any]]:
        """The table's rows, one dict per row (column -> value)."""

    def to_markdown(self) -> str: ...

    def to_csv(self) -> str: ...

    def to_json(self) -> str:
        """Everything ``from_json`` needs to rebuild the report."""

    def to_latex(self) -> str: ...

    def save(self, directory: str | Path, stem: str = ...) -> dict[str, Path]:
        """Write every format (and a figure where there is one) into ``directory``; returns
        the paths by extension."""

    @classmethod
    def from_json(cls, text: str) -> Report: ...


def write_tables(report: Report, directory: str | Path, stem: str,
                 figure: Callable[[Path], Path] | None = None) -> dict[str, Path]:
    """Write ``report`` as ``stem.{md,csv,tex,json}`` into ``directory`` (created), then the
    figure (``figure(path)``) as ``stem.png`` unless it raises ValueError (nothing to draw)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = {}
    for ext, text in (("md", report.to_markdown()), ("csv", report.to_csv()),
                      ("tex", report.to_latex()), ("json", report.to_json())):
        p = d / f"{stem}.{ext}"
        p.write_text(text)
        paths[ext] = p
    if figure is not None:
        try:
            paths["png"] = figure(d / f"{stem}.png")
        except ValueError:
            pass  # tabular data: no figure
    return paths


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (& % $ # _ { } ~ ^ and backslash)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def latex_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                fmt: Callable[[Any], str] = str) -> str:
    """A LaTeX tabular of ``rows`` (dicts by column), each value written by ``fmt``."""
    head = " & ".join(latex_escape(c) for c in columns)
    body = [" & ".join(latex_escape(fmt(r.get(c))) for c in columns) + r" \\" for r in rows]
    spec = "l" * len(columns)
    return "\n".join([r"\begin{tabular}{" + spec + "}", r"\hline", head + r" \\",
                      r"\hline", *body, r"\hline", r"\end{tabular}"]) + "\n"


def markdown_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                   fmt: Callable[[Any], str] = str) -> str:
    """A Markdown table of ``rows`` (dicts by column), each value written by ``fmt``."""
    head = "| " + " | ".join(columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body]) + "\n"


def csv_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
              value: Callable[[Any], Any] = lambda v: v) -> str:
    """CSV of ``rows``: ``columns`` first, then every other key (sorted); ``value`` writes
    each cell (e.g. :func:`leakaudit._jsonsafe.finite_json`)."""
    buf = io.StringIO()
    keys = list(columns) + sorted({k for r in rows for k in r} - set(columns))
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: value(r.get(k)) for k in keys})
    return buf.getvalue()
