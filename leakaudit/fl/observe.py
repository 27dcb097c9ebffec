"""Leak points: what an attacker sees (:class:`Observation`), and the truth kept apart.

The records live in :mod:`leakaudit.records` (a low module that neither the simulator nor the
audit owns); this module re-exports them.
"""

from __future__ import annotations

from ..records import GroundTruth, Observation, Recorder, Tap

__all__ = ["GroundTruth", "Observation", "Recorder", "Tap"]
