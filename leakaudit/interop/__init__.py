"""Audit what people already train: Opacus (DP-SGD) runs and Flower federations.

- :mod:`leakaudit.interop.opacus`: ``Recorder(optimizer, model)`` records type-2 observations
  at each ``DPOptimizer`` step; ``ledgers(engine, data_loader=...)`` gives Opacus's claimed ledger
  and the sound one of the loader that ran.
- :mod:`leakaudit.interop.flower`: a client mod recording each client's upload (point 1,
  ``ClientRecorder``), a strategy wrapper recording the aggregated update (point 0,
  ``StrategyRecorder``), and per-client ledgers for Flower's DP wrappers under one stated
  neighbouring relation.

- :mod:`leakaudit.interop.library_accountants`: the libraries' own accountants (Flower's
  ``RdpAccountant``, Opacus's) read into claimed and sound ledgers, with named findings, and
  the eps of a hyperparameter search over such runs.
- :mod:`leakaudit.interop.replay`: record/replay of the libraries' own DP step
  (``opacus.audit_optimizer``, ``flower.audit_dp``), checked against the declared
  sensitivity and the accountant's noise, and the canary game on the recorded releases.

Both ``ledgers`` return a :class:`LedgerPair`: ``claimed, sound = ...`` unpacks it, and it
names the relation and sampling of each and why they differ.

Neither Opacus nor Flower is imported by ``import leakaudit`` or by this package: import the
submodule you need (from a clone: ``pip install -e '.[opacus]'`` / ``'.[flower]'``). Audit the
observations with :func:`leakaudit.audit_observations`.
"""

from ._ledgers import LedgerPair

__all__ = ["LedgerPair"]
