"""What every benchmark script shares: one timer (:func:`best_of`, :class:`Stopwatch`), one
environment line, one shape of profile (a dict name -> dataclass or dict of sizes, always with
a ``tiny`` entry, chosen with :func:`profile`), one command line (:func:`parser`: --profile,
--tiny, --out), the Markdown printed as it is produced (:class:`Report`) and one writer of
outputs (:func:`write_outputs`). Nothing here imports torch or leakaudit, so ``--help`` and the
accountant benchmarks start fast."""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """Best and all wall-clock times (``time.perf_counter``, seconds) of repeated calls, the
    CPU time (``time.process_time``) of the best one, and the last call's result."""

    best: float
    cpu: float
    times: tuple[float, ...]
    result: Any = field(repr=False, default=None)


def best_of(fn: Callable[[], T], repeats: int = 3, *, warmup: int = 0) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times (>= 1); the best wall-clock
    time is the one reported (the least disturbed by other load on a shared machine)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    for _ in range(warmup):
        fn()
    times, cpus, result = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    i = min(range(repeats), key=times.__getitem__)
    return Timing(best=times[i], cpu=cpus[i], times=tuple(times), result=result)


class Stopwatch:
    """Wall-clock (``time.perf_counter``) and CPU (``time.process_time``) seconds since it was
    made: the time of a whole section or run, where :func:`best_of` times repeated calls."""

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    @property
    def seconds(self) -> float:
        """Wall-clock seconds so far."""
        return time.perf_counter() - self.wall0

    @property
    def cpu(self) -> float:
        """CPU seconds of this process so far."""
        return time.process_time() - self.cpu0


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load() -> str:
    """The load average (1/5/15 min), or '' where the system has none."""
    try:
        return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except (AttributeError, OSError):
        return ""


def version(dist: str) -> str:
    """The installed version of ``dist``, or 'not installed'."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def today() -> str:
    """Today's date (UTC), as the first line of every output states it."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")


def environment(packages: Sequence[str] = ("numpy", "torch")) -> str:
    """One line saying when and where a benchmark ran: date, cores, CPU, Python, the load
    average and the versions of ``packages`` (those installed)."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [now, f"{cores()} cores", f"{platform.processor() or 'CPU'} ({platform.machine()})",
             f"Python {platform.python_version()}"]
    if load():
        parts.append(load())
    for name in packages:
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(parts)


def profile(profiles: Mapping[str, T], name: str) -> T:
    """The profile called ``name``, or a ValueError naming ``--profile`` and the choices."""
    if name not in profiles:
        raise ValueError(f"--profile must be one of {sorted(profiles)}, got {name!r}")
    return profiles[name]


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (the flag is named by argparse)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") \
                from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return parse


def parser(doc: str | None, profiles: Mapping[str, Any], *, out: str | Path | None = None,
           default: str = "quick", out_help: str = "write the outputs into this directory"
           ) -> argparse.ArgumentParser:
    """The command line every benchmark starts from: ``--profile`` (the names of
    ``profiles``, default ``default``), ``--tiny`` (``--profile tiny``: seconds, for the tests;
    where ``profiles`` has one) and ``--out DIR`` (default ``out``; None: print only). The
    description is the first paragraph of ``doc`` (the script's docstring)."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0].strip() or None)
    p.add_argument("--profile", choices=sorted(profiles), default=default,
                   help=f"sizes of the run (default {default})")
    if "tiny" in profiles:
        p.add_argument("--tiny", dest="profile", action="store_const", const="tiny",
                       help="the same as --profile tiny: the smallest sizes (seconds; the "
                       "numbers are then noise), for the tests")
    p.add_argument("--out", type=Path, default=None if out is None else Path(out),
                   help=out_help)
    return p


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table of text cells (values written with ``str``)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class Report:
    """Collects Markdown lines, printing each one as it comes (a long run shows its progress
    and a killed one has printed what it had)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str = "") -> None:
        """Print and keep one line."""
        print(text, flush=True)
        self.lines.append(text)

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """A Markdown table followed by a blank line."""
        for text in markdown_table(headers, rows).split("\n"):
            self.line(text)
        self.line()

    def text(self) -> str:
        """Everything printed so far."""
        return "\n".join(self.lines) + "\n"


def write_outputs(out: str | Path | None, stem: str, *, markdown: str,
                  rows: Sequence[Mapping[str, Any]] | None = None,
                  columns: Sequence[str] | None = None, figure: Any = None,
                  dpi: int = 120, extra: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
                  ) -> dict[str, Path]:
    """Write ``OUT/STEM.md`` (``markdown``), ``OUT/STEM.csv`` (``rows`` under ``columns``,
    default the keys of the first row; with ``columns`` a header is written even for no rows),
    ``OUT/STEM_<name>.csv`` for each ``extra`` table and ``OUT/STEM.png`` (a
    ``matplotlib.figure.Figure``, or a callable writing the PNG to the path it is given)
    where given; nothing when ``out`` is None. Returns the paths written, by extension (and
    by name for ``extra``)."""
    if out is None:
        return {}
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    written = {"md": directory / f"{stem}.md"}
    written["md"].write_text(markdown if markdown.endswith("\n") else markdown + "\n")
    tables = {"csv": (directory / f"{stem}.csv", rows, columns)}
    for name, extra_rows in (extra or {}).items():
        tables[name] = (directory / f"{stem}_{name}.csv", extra_rows, None)
    for key, (path, table, cols) in tables.items():
        if not table and cols is None:
            continue
        fields = list(cols if cols is not None else table[0])
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(table or [])
        written[key] = path
    if figure is not None:
        written["png"] = directory / f"{stem}.png"
        if callable(figure) and not hasattr(figure, "savefig"):
            figure(written["png"])
        else:
            figure.savefig(written["png"], dpi=dpi, bbox_inches="tight")
    return written
