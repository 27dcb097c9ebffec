"""Small helpers shared by the benchmark scripts: one timer, one environment line, one shape
of profile, one writer of outputs. A script opts in by importing what it uses; the Markdown
it prints is built with :class:`benchmarks._markdown.Report`."""

from __future__ import annotations

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


def best_of(fn: Callable[[], T], repeats: int = 3) -> Timing:
    """Call ``fn`` ``repeats`` times (>= 1); the best wall-clock time is the one reported (the
    least disturbed by other load on a shared machine)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    times, cpus, result = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    i = min(range(repeats), key=times.__getitem__)
    return Timing(best=times[i], cpu=cpus[i], times=tuple(times), result=result)


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def environment(packages: Sequence[str] = ("numpy", "torch")) -> str:
    """One line saying when and where a benchmark ran: date, cores, CPU, Python, the load
    average and the versions of ``packages`` (those installed)."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [now, f"{cores()} cores", f"{platform.processor() or 'CPU'} ({platform.machine()})",
             f"Python {platform.python_version()}"]
    try:
        parts.append("load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    except (AttributeError, OSError):
        pass
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


def write_outputs(out: str | Path | None, stem: str, *, markdown: str,
                  rows: Sequence[Mapping[str, Any]] | None = None,
                  figure: Any = None) -> dict[str, Path]:
    """Write ``OUT/STEM.md``, ``OUT/STEM.csv`` (``rows``, columns of the first row) and
    ``OUT/STEM.png`` (a ``matplotlib.figure.Figure``) where given; nothing when ``out`` is
    None. Returns the paths written."""
    if out is None:
        return {}
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    written = {"md": directory / f"{stem}.md"}
    written["md"].write_text(markdown if markdown.endswith("\n") else markdown + "\n")
    if rows:
        written["csv"] = directory / f"{stem}.csv"
        with written["csv"].open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]), extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    if figure is not None:
        written["png"] = directory / f"{stem}.png"
        figure.savefig(written["png"], dpi=120, bbox_inches="tight")
    return written
