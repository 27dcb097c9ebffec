"""The driver's side of an audit's units: one engine, started at the first pending unit;
keyed units stored in the results file as each finishes and skipped on resume; one
progress bar over all of them; one line of cost at the end.

The bar starts at the units already in the results file, so its rate and its ETA are this
run's (a resumed run does not count what it reused as work done fast). The cost line says
how many units ran, their CPU seconds (measured where each ran: a worker process or a Ray
task), and how many were reused: from the results file, or from a unit of the same content
in this run (an attack cell whose observation another point or defense shares).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm

from .engines import Done, Engine, EngineConfig, Jobs
from .records import ResultsFile

__all__ = ["Workload"]


class Workload:
    """The units of one audit: ``total`` of them, ``done`` already in the results file;
    where they run (``engine``); the bar (``progress``) and the cost line."""

    def __init__(self, engine: EngineConfig, *, total: int, done: int, desc: str,
                 progress: bool = True) -> None:
        self.config = engine
        self.engine: Engine | None = None
        self.ran = 0
        self.cpu = 0.0
        self.stored = done
        self.advanced = 0
        self.progress = progress
        self.bar = tqdm(total=total, initial=done, disable=not progress, desc=desc)

    def describe(self, text: str) -> None:
        """What runs now, on the bar."""
        self.bar.set_description(text)

    def run(self, jobs: Jobs) -> Iterator[Done]:
        """Run ``jobs`` (key, unit) on the engine (started now if not yet), yielding each
        as it finishes; counts them and their CPU time (the caller advances the bar)."""
        if not jobs:
            return
        if self.engine is None:
            self.engine = self.config.start()
        for done in self.engine.run(jobs):
            self.ran += 1
            self.cpu += done.cpu
            yield done

    def advance(self, n: int = 1) -> None:
        """``n`` more units finished (run or reused in this run)."""
        self.advanced += n
        self.bar.update(n)

    def units(self, store: ResultsFile, kind: str, jobs: Jobs) -> dict[str, Any]:
        """The records of ``jobs`` (key, unit): those of ``kind`` in ``store`` as they are,
        the others run now, each stored as it finishes."""
        pending = [(k, u) for k, u in jobs if not store.has(kind, k)]
        for done in self.run(pending):
            store.put(kind, done.key, done.record)
            self.advance()
        return {k: store.get(kind, k) for k, _ in jobs}

    def summary(self) -> str:
        """The cost line: units run, their CPU time, units reused."""
        shared = self.advanced - self.ran
        return (f"leakaudit: {self.ran} units run ({self.cpu:.1f} s CPU), {self.stored} "
                f"reused from the results file, {shared} from a unit of the same content")

    def close(self) -> None:
        """Stop the engine (after an interrupt too), close the bar, print the cost line."""
        try:
            if self.engine is not None:
                self.engine.close()
                self.engine = None
        finally:
            self.bar.close()
            if self.progress:
                print(self.summary(), file=sys.stderr)

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
