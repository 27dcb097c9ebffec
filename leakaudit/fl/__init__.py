"""Federated simulation: settings (:mod:`.config`), leak-point taps and what they record
(:mod:`.observe`), the simulator (:mod:`.simulate`) and its result (:mod:`.run`).

``from leakaudit import fl``;
``run = fl.simulate(None, dataset="digits", defense="fed-cdp", taps=[fl.Tap(2)])``.
Gradients, ``LocalBatch`` and the numeric contexts live one layer down, in
:mod:`leakaudit.grads`; they are re-exported here for convenience.
"""

from __future__ import annotations

from ..grads import LocalBatch, NonFiniteGradientError, batch_gradient, per_example_gradients
from .config import FLConfig, resolve_defense, resolve_defenses
from .observe import GroundTruth, Observation, Tap
from .run import Run, accuracy_within
from .simulate import simulate

__all__ = ["FLConfig", "GroundTruth", "LocalBatch", "NonFiniteGradientError", "Observation",
           "Run", "Tap", "accuracy_within", "batch_gradient", "per_example_gradients",
           "resolve_defense", "resolve_defenses", "simulate"]
