"""Audit a Flower federation: tap the uploads and the aggregate; ledgers and record/replay of
its DP wrappers.

Leak points in a Flower app (Wei et al., "Securing distributed SGD against gradient leakage
threats"): **point 1** is a client's update as it leaves the client (:class:`ClientRecorder`,
a client mod placed first in ``ClientApp(mods=[...])``); **point 0** is the aggregated update
the server publishes after the DP wrappers' noise (:class:`StrategyRecorder`, wrapping the
outermost strategy). The client's train function keeps its examples on the node with
:func:`keep_truth`; :func:`load` reads what the taps wrote, truths apart.

One job per module:

- :mod:`~leakaudit.interop.flower.taps`: the recorders, the truth and :func:`load`;
- :mod:`~leakaudit.interop.flower.dp_ledgers`: :func:`ledgers`, per-client claimed and sound
  ledgers for Flower's DP wrappers (fixed and adaptive clipping, server- or client-side) and
  ``LocalDpMod`` under one stated neighbouring relation;
- :mod:`~leakaudit.interop.flower.dp_replay`: :func:`audit_dp`, the wrapper's (or mod's) real
  code replayed on canary updates, one report row;
- :mod:`~leakaudit.interop.flower.wrappers`: the wrapper classes under both of Flower's import
  paths.

Names: like :class:`leakaudit.records.Recorder`, :class:`ClientRecorder` and
:class:`StrategyRecorder` record observations (a :class:`leakaudit.fl.Tap` is only the spec of
what to record).

Flower is imported when this package is (from a clone: ``pip install -e '.[flower]'``);
``import leakaudit`` never imports it.
"""

from .wrappers import ADAPTIVE, CENTRAL, FIXED, LOCAL  # noqa: I001 - first: Flower's message
from .dp_replay import audit_dp
from .dp_ledgers import (
    CLAIMED_RELATION,
    central_noise_multiplier,
    classical_gaussian_std,
    ledgers,
    local_dp_noise_multiplier,
    requested_noise_multiplier,
)
from .taps import (
    AGGREGATE,
    SAMPLING,
    Captured,
    ClientRecorder,
    RoundRecord,
    StrategyRecorder,
    keep_truth,
    load,
)

__all__ = ["ClientRecorder", "StrategyRecorder", "Captured", "RoundRecord", "keep_truth", "load",
           "ledgers", "audit_dp", "AGGREGATE", "SAMPLING", "CLAIMED_RELATION",
           "central_noise_multiplier", "local_dp_noise_multiplier", "classical_gaussian_std",
           "requested_noise_multiplier", "FIXED", "ADAPTIVE", "CENTRAL", "LOCAL"]
