"""Argument checks shared by the simulator, data, models and attacks: ValueError naming
the argument, before any work starts."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["check_device", "check_int"]


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
