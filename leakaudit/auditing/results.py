"""Append-only results file (JSON lines) so that a killed audit resumes where it stopped.

It lives in :mod:`leakaudit.records` (shared by every audit); this module re-exports it.
"""

from __future__ import annotations

from ..records import FORMAT, ResultsFile, fingerprint

__all__ = ["FORMAT", "ResultsFile", "fingerprint"]
