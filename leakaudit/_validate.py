"""Argument checks for the whole ``leakaudit`` package: ValueError naming the argument, before
any work starts. (``accounting`` keeps its own, ``accounting._validate``: it must not import
this package.)"""

from __future__ import annotations

import math

import numpy as np
import torch

from accounting._validate import keywords_after_first  # one deprecation shim for both packages

__all__ = ["keywords_after_first", "check_bool", "check_device", "check_fraction", "check_int",
           "check_nonneg", "check_number", "check_positive", "check_probability", "is_number"]



def is_number(value: object) -> bool:
    """A real number that is not a bool (Python or numpy)."""
    return not isinstance(value, bool) and isinstance(
        value, (int, float, np.integer, np.floating))


def check_int(name: str, value: object, minimum: int) -> int:
    """An integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_device(name: str, value: object) -> torch.device | None:
    """A torch device: None (leave tensors where they are), "auto" (CUDA when present, else
    the CPU), or a CPU/CUDA device name or ``torch.device``; CUDA must be available."""
    if value is None:
        return None
    if isinstance(value, str) and value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(value, (str, torch.device)):
        raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda[:i]' or a torch.device, "
                         f"got {value!r}")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{name}: unknown device {value!r} ({exc})") from exc
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} must be a CPU or CUDA device, got {value!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name} is {value!r} but CUDA is not available here")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{name} is {value!r} but only {torch.cuda.device_count()} CUDA "
                             "devices exist")
    return device


def check_number(name: str, value: object, *, minimum: float | None = None,
                 open_min: bool = False, maximum: float | None = None,
                 open_max: bool = False) -> float:
    """A finite real number (not a bool) in the given range; returns it as a float.

    The message names the argument and the range, e.g. "lr must be a finite number > 0".
    """
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if open_min else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"{'<' if open_max else '<='} {maximum:g}")
    wanted = f"{name} must be a finite number" + (" " + " and ".join(parts) if parts else "")
    if not is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{wanted}, got {value!r}")
    x = float(value)
    if minimum is not None and (x < minimum or (open_min and x == minimum)):
        raise ValueError(f"{wanted}, got {value!r}")
    if maximum is not None and (x > maximum or (open_max and x == maximum)):
        raise ValueError(f"{wanted}, got {value!r}")
    return x


def check_probability(name: str, value: object, *, what: str = "in (0, 1)") -> float:
    """A number strictly between 0 and 1 (a delta, a confidence, a rate)."""
    if not is_number(value) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return float(value)


def check_positive(name: str, value: object) -> float:
    """A finite number > 0."""
    return check_number(name, value, minimum=0.0, open_min=True)


def check_nonneg(name: str, value: object) -> float:
    """A finite number >= 0."""
    return check_number(name, value, minimum=0.0)


def check_fraction(name: str, value: object) -> float:
    """A number in [0, 1)."""
    return check_number(name, value, minimum=0.0, maximum=1.0, open_max=True)


def check_bool(name: str, value: object) -> bool:
    """True or False (not a number that could be read as one)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)
