"""Where the attack cells run: this process ("serial"), a local process pool ("process") or
Ray tasks ("ray", a local instance or a cluster). Every engine yields (cell key, record) as
each cell finishes, to the one process that writes the results file."""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._validate import check_int
from .cells import CellJob, run_cell

__all__ = ["ENGINES", "ENGINE_HELP", "Engine", "EngineConfig", "check_ray_address", "env",
           "fold_engine", "import_ray", "make_engine", "spawn_safe"]

#: where the attack cells run (``audit(engine=...)``), with what each means (the CLI's help)
ENGINES = ("process", "serial", "ray")
ENGINE_HELP = {"process": "a local pool of worker processes",
               "serial": "this process, one cell after another",
               "ray": "Ray tasks (pip install 'leakaudit[ray]')"}

Jobs = list[tuple[str, CellJob]]


class Engine:
    """Runs attack cells; ``run`` yields (cell key, record) as each cell finishes. The base
    class runs them in this process, one after another ("serial")."""

    def run(self, jobs: Jobs) -> Iterator[tuple[str, dict[str, Any]]]:
        for ck, job in jobs:
            yield ck, run_cell(job)

    def close(self) -> None:
        pass


def _worker_init() -> None:
    torch.set_num_threads(1)  # one process per core; no oversubscription
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the audit's to handle, once


def spawn_safe() -> bool:
    """Whether spawned worker processes may start: False when this call comes from module
    code of the ``__main__`` script outside ``if __name__ == "__main__":`` (each spawned
    worker re-runs that code on import, as multiprocessing's spawn does: it would start the
    audit again). Scripts run with ``-m pkg`` (a package's ``__main__``), interactive
    sessions and notebooks are safe."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name == "__main__" or spec.name.endswith(".__main__")):
        return True  # multiprocessing does not re-run a package's __main__
    path = getattr(main, "__file__", None)
    line = None
    frame = sys._getframe(1)
    while frame is not None:  # the outermost frame running __main__'s module code
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            line = frame.f_lineno
        frame = frame.f_back
    if not path or line is None:
        return True
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return True
    return any(isinstance(node, ast.If) and _is_main_guard(node.test)
               and node.lineno <= line <= (node.end_lineno or node.lineno)
               for node in tree.body)


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    return sides in ({"__name__", "'__main__'"}, {"__name__", '"__main__"'})


class ProcessEngine(Engine):
    """A local pool of spawned processes; if they fail, the rest runs in this process. Called
    from a script's module code without a main guard (:func:`spawn_safe`), it says so in one
    line and runs the cells in this process."""

    def __init__(self, workers: int) -> None:
        self.pool = None
        if workers > 1 and not spawn_safe():
            print("leakaudit: running the attack cells in this process: the script calls "
                  "the audit outside `if __name__ == \"__main__\":`, where worker processes "
                  "cannot start (put the call under that guard to use them)", file=sys.stderr)
            workers = 1
        if workers > 1:  # spawn: fork after torch threads start can hang
            self.pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init)

    def run(self, jobs: Jobs) -> Iterator[tuple[str, dict[str, Any]]]:
        if self.pool is None:
            yield from super().run(jobs)
            return
        done: set[str] = set()
        try:
            futures = {self.pool.submit(run_cell, job): ck for ck, job in jobs}
            for fut in as_completed(futures):
                rec = fut.result()
                done.add(futures[fut])
                yield futures[fut], rec
        except BrokenProcessPool as exc:
            # e.g. audit() called from a script without `if __name__ == "__main__":`
            # (spawned workers re-run it): finish in this process, nothing is lost
            warnings.warn(f"worker processes failed ({exc}); continuing in this process",
                          RuntimeWarning, stacklevel=3)
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
            yield from super().run([(ck, job) for ck, job in jobs if ck not in done])

    def close(self) -> None:
        if self.pool is not None:  # after an interrupt too: drop what has not started
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None


def check_ray_address(address: str | None, timeout: float = 3.0) -> None:
    """A ValueError (one line, before any work) when ``address`` names a host:port where
    nothing answers; "auto", "local" and None are left to Ray."""
    if address is None or address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ray_address must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got "
                         f"{address!r}")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ValueError(f"ray_address {address!r}: nothing answers at {host}:{port} "
                         f"({exc.strerror or exc}); start the cluster (ray start --head) or "
                         f"leave the address out for a local Ray") from None


def import_ray() -> Any:
    """Ray, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("engine='ray' needs Ray, which is not installed: "
                          "pip install 'leakaudit[ray]'") from exc
    return ray


@contextlib.contextmanager
def env(**values: str) -> Iterator[None]:
    """Set environment variables for the duration (those the caller set are kept)."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)


class RayEngine(Engine):
    """One Ray task per cell; the driver collects results as they finish (``ray.wait``)."""

    def __init__(self, workers: int, address: str | None) -> None:
        ray = self.ray = import_ray()
        self.started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {}
            if address is None and not os.environ.get("RAY_ADDRESS"):
                # a local single-node instance with `workers` CPUs (with RAY_ADDRESS set,
                # ray.init joins that cluster, which takes no num_cpus)
                kwargs.update(num_cpus=workers, include_dashboard=False)
                if sys.platform.startswith("linux") and not os.path.isdir("/dev/shm"):
                    # Ray sizes and places its object store by /dev/shm; the cells are small
                    kwargs.update(object_store_memory=256 * 2**20,
                                  _plasma_directory=tempfile.gettempdir())
            # no usage statistics sent anywhere; the caller's own setting wins
            with env(RAY_USAGE_STATS_ENABLED="0"):
                ray.init(address=address, **kwargs)
            self.started = True
        self.task = ray.remote(num_cpus=1)(run_cell)  # a cell: one CPU

    def run(self, jobs: Jobs) -> Iterator[tuple[str, dict[str, Any]]]:
        ray = self.ray
        keys = {self.task.remote(job): ck for ck, job in jobs}
        pending = list(keys)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    yield keys[ref], ray.get(ref)
        finally:
            for ref in pending:  # an error or an interrupt: stop what has not finished
                with contextlib.suppress(Exception):
                    ray.cancel(ref)

    def close(self) -> None:
        if self.started:  # never shut down a Ray the caller started
            self.ray.shutdown()
            self.started = False


@dataclass(frozen=True)
class EngineConfig:
    """Where the attack cells of an audit run: ``name`` (:data:`ENGINES`), ``workers``
    (processes of "process", CPUs of a local Ray; None: the CPU count, at most 4) and, for
    "ray", the cluster's ``ray_address`` (None: a local Ray). Build it with :meth:`make`,
    the one check of these settings (the audits and the CLI use it)."""

    name: str = "process"
    workers: int | None = None
    ray_address: str | None = None

    @classmethod
    def make(cls, name: str = "process", *, workers: int | None = None,
             ray_address: str | None = None) -> EngineConfig:
        """Check the settings before any work (ValueError naming the argument): a known
        engine, workers >= 1 and only where they are used, an address only for Ray, Ray
        installed and something answering at the address."""
        if not isinstance(name, str) or name not in ENGINES:
            raise ValueError(f"engine must be one of {list(ENGINES)}, got {name!r}")
        if workers is not None:
            check_int("workers", workers, 1)
            if name == "serial" and workers > 1:
                raise ValueError(f"workers is only used with engine='process' or 'ray' (the "
                                 f"serial engine runs every cell in this process), got "
                                 f"workers={workers}")
        if ray_address is not None and name != "ray":
            raise ValueError(f"ray_address is only used with engine='ray', got "
                             f"engine={name!r}")
        if name == "ray":
            import_ray()  # fail before any work if Ray is missing
            check_ray_address(ray_address)  # or nothing answers at the address
        return cls(name=name, workers=workers, ray_address=ray_address)

    @classmethod
    def of(cls, engine: str | EngineConfig | None) -> EngineConfig:
        """``engine`` as an EngineConfig (a name is checked with :meth:`make`)."""
        if isinstance(engine, EngineConfig):
            return engine
        return cls.make("process" if engine is None else engine)

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` (``name``, ``workers``, ``ray_address``), checked again."""
        now = {"name": self.name, "workers": self.workers, "ray_address": self.ray_address}
        unknown = sorted(set(changes) - set(now))
        if unknown:
            raise ValueError(f"{unknown[0]} is not a setting of EngineConfig")
        now.update(changes)
        return EngineConfig.make(now.pop("name"), **now)

    @property
    def worker_count(self) -> int:
        """The workers to start: ``workers``, else the CPU count (at most 4)."""
        return self.workers if self.workers is not None else min(4, os.cpu_count() or 1)

    def start(self) -> Engine:
        """The engine, started."""
        return make_engine(self.name, self.worker_count, self.ray_address)


def fold_engine(given: str | EngineConfig | None, old: dict[str, Any]) -> EngineConfig:
    """``engine`` with the old keywords ``workers`` and ``ray_address`` set (the audits'
    deprecated form)."""
    return EngineConfig.of(given).replace(**old)


def make_engine(engine: str, workers: int, ray_address: str | None) -> Engine:
    """The engine named ``engine`` ("serial", "process" or "ray")."""
    if engine == "serial":
        return Engine()
    if engine == "ray":
        return RayEngine(workers, ray_address)
    return ProcessEngine(workers)
