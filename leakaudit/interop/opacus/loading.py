"""Opacus, imported on first use, and the plain module under its wrappers."""

from __future__ import annotations

from typing import Any

from torch import nn


def import_opacus() -> Any:
    try:
        import opacus
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise ImportError("leakaudit.interop.opacus needs Opacus: "
                          "pip install -e '.[opacus]' (from a clone of leakaudit)") from exc
    return opacus


def plain_module(model: nn.Module) -> nn.Module:
    """The user's module inside Opacus's GradSampleModule wrapper (names without ``_module.``)."""
    inner = getattr(model, "_module", None)
    return inner if isinstance(inner, nn.Module) else model
