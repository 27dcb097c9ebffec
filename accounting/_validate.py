"""Input validation shared by every public function (SPEC-accounting section 7).

Each check raises ``ValueError`` naming the argument and the allowed range, before any
work starts. ``bool`` is refused where a number is expected (``True`` is not a rate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Real

import numpy as np

__all__ = [
    "check_real",
    "check_probability",
    "check_sigma",
    "check_delta",
    "check_eps",
    "check_count",
    "check_orders",
    "check_positive",
    "check_nonnegative",
    "check_factor",
]


def check_real(name: str, value: object) -> float:
    """Return ``value`` as a float, refusing non-numbers, bools and NaN."""
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating, np.integer)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must not be NaN")
    return out


def check_probability(name: str, value: object) -> float:
    """A sampling rate: a real number in [0, 1]."""
    out = check_real(name, value)
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {out!r}")
    return out


def check_sigma(name: str, value: object) -> float:
    """A noise multiplier: a finite real number >= 0 (0 means no noise: infinite eps)."""
    out = check_real(name, value)
    if out < 0.0 or math.isinf(out):
        raise ValueError(f"{name} must be a finite number >= 0, got {out!r}")
    return out


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A strictly positive real number."""
    out = check_real(name, value)
    if out <= 0.0 or (math.isinf(out) and not allow_inf):
        raise ValueError(f"{name} must be a finite number > 0, got {out!r}")
    return out


def check_nonnegative(name: str, value: object) -> float:
    """A real number >= 0 (finite)."""
    out = check_real(name, value)
    if out < 0.0 or math.isinf(out):
        raise ValueError(f"{name} must be a finite number >= 0, got {out!r}")
    return out


def check_factor(name: str, value: object) -> float:
    """A multiplicative decay factor in (0, 1]."""
    out = check_real(name, value)
    if not 0.0 < out <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {out!r}")
    return out


def check_delta(name: str, value: object) -> float:
    """A target delta: a real number in the open interval (0, 1)."""
    out = check_real(name, value)
    if not 0.0 < out < 1.0:
        raise ValueError(f"{name} must be in the open interval (0, 1), got {out!r}")
    return out


def check_eps(name: str, value: object, *, allow_inf: bool = False) -> float:
    """An epsilon: a real number >= 0."""
    out = check_real(name, value)
    if out < 0.0 or (math.isinf(out) and not allow_inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {out!r}")
    return out


def check_count(name: str, value: object, *, minimum: int = 0) -> int:
    """A step count: an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    out = int(value)
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {out!r}")
    return out


def check_orders(name: str, orders: Iterable[float] | float) -> np.ndarray:
    """Rényi orders: a non-empty 1-D array of finite reals > 1."""
    try:
        arr = np.atleast_1d(np.asarray(orders, dtype=float))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of real numbers > 1") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of numbers > 1")
    if np.isnan(arr).any() or np.isinf(arr).any():
        raise ValueError(f"{name} must be finite numbers > 1 (got NaN or inf)")
    if (arr <= 1.0).any():
        raise ValueError(f"{name} must all be > 1, got min {arr.min()!r}")
    return arr
