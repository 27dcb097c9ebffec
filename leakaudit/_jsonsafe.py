"""JSON has no inf/NaN: the one place that turns them into strings (and back)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["finite_json", "number"]


def finite_json(value: Any) -> Any:
    """``value`` with non-finite floats as "inf"/"-inf"/"nan" and numpy scalars as Python
    numbers, recursively through dicts and lists."""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    return value


def number(value: Any) -> float:
    """A number stored by :func:`finite_json` (None reads as NaN)."""
    if isinstance(value, str):
        return float(value)  # "inf", "-inf", "nan"
    return math.nan if value is None else float(value)


def from_finite_json(value: Any) -> Any:
    """The inverse of :func:`finite_json` on what it wrote: "inf"/"-inf"/"nan" strings are
    floats again (recursively through dicts and lists)."""
    if isinstance(value, dict):
        return {k: from_finite_json(x) for k, x in value.items()}
    if isinstance(value, list):
        return [from_finite_json(x) for x in value]
    return number(value) if isinstance(value, str) and value in ("inf", "-inf", "nan") \
        else value
