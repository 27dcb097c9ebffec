"""Argument checks shared by the simulator, data, models and attacks: ValueError naming
the argument, before any work starts."""

from __future__ import annotations

import numpy as np

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """An integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)
