"""Measured privacy: empirical lower bounds on epsilon from a canary distinguishing game.

``privacy_audit`` runs, for each defense and leak point, the defense's own code on one
release with and without a canary and turns the error rates of the best test into a
Clopper-Pearson lower bound on eps, next to the claimed and sound eps of that release.
"""

from __future__ import annotations

from .api import STATISTICS, audit_release, privacy_audit, release_epsilon
from .onerun import privacy_audit_training
from .report import COLUMNS, PrivacyReport

__all__ = ["privacy_audit", "audit_release", "release_epsilon", "PrivacyReport", "COLUMNS",
           "STATISTICS", "privacy_audit_training"]
