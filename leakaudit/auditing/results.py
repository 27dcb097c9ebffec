"""Append-only results file (JSON lines) so that a killed audit resumes where it stopped.

Every finished cell is one line, written and flushed (and fsync'ed) as soon as it is done.
A rerun with the same file and the same configuration reads the finished keys and skips
them: nothing is lost and nothing is repeated. A line cut short by a kill is ignored.
Only the audit's own process writes the file, whatever engine runs the cells (worker
processes and Ray tasks send their results back to it), so there is one writer.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ResultsFile", "fingerprint"]

FORMAT = "leakaudit.results/1"


def fingerprint(config: dict[str, Any]) -> str:
    """A short stable hash of a configuration (sorted JSON)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ResultsFile:
    """Records keyed by (kind, key) under a configuration fingerprint; None: in memory only."""

    def __init__(self, path: str | Path | None, config: dict[str, Any]) -> None:
        self.path = None if path is None else Path(path)
        self.config = config
        self.run_id = fingerprint(config)
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        if self.path is not None:
            if self.path.exists() and self.path.is_dir():
                raise ValueError(f"results path {str(self.path)!r} is a directory, not a file")
            if not self.path.parent.exists():
                raise ValueError(f"results directory {str(self.path.parent)!r} does not exist")
            for rec in self._read():
                if rec.get("run") == self.run_id:
                    self._records[(rec["kind"], rec["key"])] = rec["data"]

    def _read(self) -> Iterator[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return
        with self.path.open() as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill: that cell simply reruns
                if isinstance(rec, dict) and rec.get("format") == FORMAT and "kind" in rec:
                    yield rec

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        return self._records.get((kind, key))

    def has(self, kind: str, key: str) -> bool:
        return (kind, key) in self._records

    def put(self, kind: str, key: str, data: dict[str, Any]) -> None:
        """Store one finished cell, durably, before returning."""
        self._records[(kind, key)] = data
        if self.path is None:
            return
        line = json.dumps({"format": FORMAT, "run": self.run_id, "kind": kind, "key": key,
                           "data": data})
        with self.path.open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def items(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(k, v) for (kd, k), v in self._records.items() if kd == kind]
