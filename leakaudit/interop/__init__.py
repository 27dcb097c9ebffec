"""Audit what people already train: Opacus (DP-SGD) runs and Flower federations.

- :mod:`leakaudit.interop.opacus`: ``Tap(optimizer, model)`` records type-2 observations at
  each ``DPOptimizer`` step; ``ledger_from_accountant`` reads an Opacus accountant's history.
- :mod:`leakaudit.interop.flower`: a client mod tapping each client's upload (point 1), a
  strategy wrapper tapping the aggregated update (point 0), and ledgers for Flower's DP
  wrappers.

Neither Opacus nor Flower is imported by ``import leakaudit`` or by this package: import the
submodule you need (``pip install 'leakaudit[opacus]'`` / ``'leakaudit[flower]'``). Audit the
observations with :func:`leakaudit.audit_observations`.
"""
