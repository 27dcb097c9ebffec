"""Scores in, privacy lower bounds out: the statistics every audit of the project shares.

:mod:`~leakaudit.scoring.bounds` (the distinguishing game: selection split, Clopper-Pearson,
eps and mu bounds, trade-off curve points), :mod:`~leakaudit.scoring.fdp` (the f-DP one-run
bound and the mu of a Gaussian ledger) and :mod:`~leakaudit.scoring.onerun` (the one-run
bounds from the guesses on many canaries). Numpy, scipy and the accountant only: the
empirical audit, the training-run audit and record/replay (:mod:`leakaudit.interop`) all
import it, and it imports none of them.
"""

from __future__ import annotations

from .bounds import bounds_from_candidates, bounds_from_scores, gdp_epsilon
from .onerun import one_run_bound

__all__ = ["bounds_from_scores", "bounds_from_candidates", "gdp_epsilon", "one_run_bound"]
