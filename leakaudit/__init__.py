"""leakaudit: audit differentially private federated learning defenses.

This release ships the accountant (:mod:`accounting`) and the command line; the federated
simulator, defenses, attacks and the audit build on it (see the README's status table).
"""

__version__ = "0.1.0"
