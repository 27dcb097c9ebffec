"""Where the units of an audit run: this process ("serial"), a local process pool
("process") or Ray tasks ("ray", a local instance or a cluster: ``ray_address`` or
``RAY_ADDRESS``).

A *unit* is any picklable object with a ``run()`` method returning its record: an attack
cell, a training under a defense, one seed of a one-run audit, one training of a multi-run
game. A unit carries everything it reads, its seeded generator included, and runs on one
torch thread (:func:`execute`), so its record does not depend on the engine, the worker or
the order of the units. Every engine yields :class:`Done` (key, record, CPU seconds) as each
unit finishes, to the one process that writes the results file; :func:`run_units` is that
process's loop (keyed units, each stored as it finishes and skipped on resume, one progress
bar, one cost line)."""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from ._validate import check_int
from .grads import torch_threads

__all__ = ["ENGINES", "ENGINE_HELP", "Done", "Engine", "EngineConfig", "ProcessEngine",
           "RayEngine", "Unit",
           "check_ray_address", "env", "execute", "fold_engine", "import_ray", "make_engine",
           "pool_context", "spawn_safe", "PRELOAD"]

#: where the units run (``audit(engine=...)``), with what each means (the CLI's help)
ENGINES = ("process", "serial", "ray")
ENGINE_HELP = {"process": "a local pool of worker processes",
               "serial": "this process, one unit after another",
               "ray": "Ray tasks, on a local Ray or a cluster (pip install 'leakaudit[ray]')"}


class Unit(Protocol):
    """A unit of work: a picklable object whose ``run()`` gives its record (a pure function
    of the object: its own seeds, no global state)."""

    def run(self) -> Any: ...


Jobs = Sequence[tuple[str, Unit]]


class Done(NamedTuple):
    """A finished unit: its key, its record and the CPU seconds it took."""

    key: str
    record: Any
    cpu: float


def execute(unit: Unit) -> tuple[Any, float]:
    """Run ``unit`` on one torch thread (float results depend on how a reduction is split
    between threads; one thread is what a worker process or a Ray task has), with the CPU
    seconds it took."""
    with torch_threads(1):
        t0 = time.process_time()
        record = unit.run()
        return record, time.process_time() - t0


class Engine:
    """Runs units; ``run`` yields :class:`Done` as each unit finishes. The base class runs
    them in this process, one after another ("serial")."""

    def run(self, jobs: Jobs) -> Iterator[Done]:
        for key, unit in jobs:
            yield Done(key, *execute(unit))

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


#: what the fork server imports once, before it forks the pool's workers
PRELOAD = ("torch", "leakaudit.engines", "leakaudit.auditing")


def pool_context() -> multiprocessing.context.BaseContext:
    """The start method of the local pool: ``forkserver`` where the platform has it (a
    single-threaded server process imports :data:`PRELOAD` once and forks each worker from
    it: no worker re-imports torch, and later pools of the same process start at once),
    else ``spawn``. Never plain ``fork``: forking a process whose torch threads have
    started can hang. Both start each worker as spawn does (the ``__main__`` script is
    imported, its guarded code not run: :func:`spawn_safe`)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # no effect once the server runs
    return context


class ProcessEngine(Engine):
    """A local pool of worker processes (:func:`pool_context`); if they fail, the rest runs
    in this process. Called from a script's module code without a main guard
    (:func:`spawn_safe`), it says so in one line and runs the units in this process."""

    def __init__(self, workers: int) -> None:
        self.pool = None
        if workers > 1 and not spawn_safe():
            print("leakaudit: running the units in this process: the script calls "
                  "the audit outside `if __name__ == \"__main__\":`, where worker processes "
                  "cannot start (put the call under that guard to use them)", file=sys.stderr)
            workers = 1
        if workers > 1:
            self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=pool_context(),
                                            initializer=_worker_init)

    def run(self, jobs: Jobs) -> Iterator[Done]:
        if self.pool is None:
            yield from super().run(jobs)
            return
        done: set[str] = set()
        try:
            futures = {self.pool.submit(execute, job): ck for ck, job in jobs}
            for fut in as_completed(futures):
                rec, cpu = fut.result()
                done.add(futures[fut])
                yield Done(futures[fut], rec, cpu)
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
    """One Ray task per unit; the driver collects results as they finish (``ray.wait``)."""

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
                    # Ray sizes and places its object store by /dev/shm; the units are small
                    kwargs.update(object_store_memory=256 * 2**20,
                                  _plasma_directory=tempfile.gettempdir())
            # no usage statistics sent anywhere; the caller's own setting wins
            with env(RAY_USAGE_STATS_ENABLED="0"):
                ray.init(address=address, **kwargs)
            self.started = True
        self.task = ray.remote(num_cpus=1)(execute)  # a unit: one CPU

    def run(self, jobs: Jobs) -> Iterator[Done]:
        ray = self.ray
        keys = {self.task.remote(job): ck for ck, job in jobs}
        pending = list(keys)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    yield Done(keys[ref], *ray.get(ref))
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
    """Where the units of an audit run: ``name`` (:data:`ENGINES`), ``workers``
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
                                 f"serial engine runs every unit in this process), got "
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
