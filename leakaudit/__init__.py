"""leakaudit: audit differentially private federated-learning defenses.

``leakaudit.audit(...)`` trains under each defense, taps the leak points, runs the
gradient-leakage attacks and returns an :class:`~leakaudit.auditing.report.AuditReport`.
The layers, bottom to top: :mod:`leakaudit.grads` (the loss, per-example gradients),
:mod:`leakaudit.data`, :mod:`leakaudit.models`, :mod:`leakaudit.optim`,
:mod:`leakaudit.metrics`; :mod:`leakaudit.defenses`; :mod:`leakaudit.fl` (simulator and
taps); :mod:`leakaudit.attacks`; :mod:`leakaudit.auditing` (the audit);
:mod:`leakaudit.empirical` (``leakaudit.privacy_audit``: measured lower bounds on eps of each
defense's releases), siblings that never import each other; :mod:`leakaudit.interop`;
:mod:`leakaudit.api` (the calls that wire the siblings) and the CLI. What every layer above
the bottom one shares (observations, the truth, taps, the results file) is
:mod:`leakaudit.records`. The privacy accountant is the sibling package :mod:`accounting`.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["audit", "audit_observations", "AttackBudget", "AuditPlan", "AuditReport",
           "EngineConfig", "FLConfig", "privacy_audit", "PrivacyReport", "privacy_audit_training",
           "__version__"]


def __getattr__(name: str) -> Any:
    # lazy: `import leakaudit` (e.g. for the accountant CLI) does not import torch
    if name == "audit":
        from .api import audit

        return audit
    if name == "audit_observations":
        from .auditing.observations import audit_observations

        return audit_observations
    if name in ("AuditReport", "AuditPlan", "AttackBudget", "EngineConfig"):
        from . import auditing

        return getattr(auditing, name)
    if name == "FLConfig":
        from .fl import FLConfig

        return FLConfig
    if name in ("privacy_audit", "PrivacyReport", "privacy_audit_training"):
        from . import empirical

        return getattr(empirical, name)
    raise AttributeError(f"module 'leakaudit' has no attribute {name!r}")
