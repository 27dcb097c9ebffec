"""leakaudit: audit differentially private federated-learning defenses.

``leakaudit.audit(...)`` trains under each defense, taps the leak points, runs the
gradient-leakage attacks and returns an :class:`~leakaudit.report.AuditReport`. The pieces:
:mod:`leakaudit.data`, :mod:`leakaudit.models`, :mod:`leakaudit.fl` (simulator and taps),
:mod:`leakaudit.defenses`, :mod:`leakaudit.attacks`, :mod:`leakaudit.metrics`; the privacy
accountant is the sibling package :mod:`accounting`. ``leakaudit.privacy_audit(...)``
measures lower bounds on eps of each defense's releases (:mod:`leakaudit.empirical`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["audit", "AuditReport", "privacy_audit", "PrivacyReport", "__version__"]


def __getattr__(name: str) -> Any:
    # lazy: `import leakaudit` (e.g. for the accountant CLI) does not import torch
    if name == "audit":
        from .auditor import audit

        return audit
    if name == "AuditReport":
        from .report import AuditReport

        return AuditReport
    if name in ("privacy_audit", "PrivacyReport"):
        from . import empirical

        return getattr(empirical, name)
    raise AttributeError(f"module 'leakaudit' has no attribute {name!r}")
