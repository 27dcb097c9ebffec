"""Shared by the benchmark scripts: Markdown output printed as it is produced."""

from __future__ import annotations

from collections.abc import Sequence

from leakaudit.auditing.report import markdown_table


class Report:
    """Collects Markdown lines, printing each one as it comes."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str = "") -> None:
        """Print and keep one line."""
        print(text, flush=True)
        self.lines.append(text)

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """A Markdown table (``leakaudit``'s writer) followed by a blank line."""
        for text in markdown_table(headers, [[str(v) for v in row] for row in rows]).split("\n"):
            self.line(text)
        self.line()

    def text(self) -> str:
        """Everything printed so far."""
        return "\n".join(self.lines) + "\n"
