"""Where the units of an audit run: the engines of :mod:`leakaudit.engines` (the attack
audit and the empirical audit share them), under the audit's name."""

from __future__ import annotations

from ..engines import (
    ENGINE_HELP,
    ENGINES,
    Done,
    Engine,
    EngineConfig,
    ProcessEngine,
    RayEngine,
    check_ray_address,
    env,
    execute,
    fold_engine,
    import_ray,
    make_engine,
    spawn_safe,
)

__all__ = ["ENGINES", "ENGINE_HELP", "Done", "Engine", "EngineConfig", "ProcessEngine",
           "RayEngine", "check_ray_address", "env", "execute", "fold_engine", "import_ray",
           "make_engine", "spawn_safe"]
