"""Where the attack cells run: this process ("serial"), a local process pool ("process") or
Ray tasks ("ray", a local instance or a cluster). Every engine yields (cell key, record) as
each cell finishes, to the one process that writes the results file."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import torch

from .cells import CellJob, run_cell

__all__ = ["ENGINES", "Engine", "make_engine", "import_ray", "env"]

#: where the attack cells run (``audit(engine=...)``)
ENGINES = ("process", "serial", "ray")

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


class ProcessEngine(Engine):
    """A local pool of spawned processes; if they fail, the rest runs in this process."""

    def __init__(self, workers: int) -> None:
        self.pool = None
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
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None


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


def make_engine(engine: str, workers: int, ray_address: str | None) -> Engine:
    """The engine named ``engine`` ("serial", "process" or "ray")."""
    if engine == "serial":
        return Engine()
    if engine == "ray":
        return RayEngine(workers, ray_address)
    return ProcessEngine(workers)
