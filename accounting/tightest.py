"""The tightest sound eps a ledger's events allow: "the sound eps" of every report.

The minimum of the certified upper ends of every certified accountant that supports every
event (:func:`accounting.accountants.tightest`): the exact closed form where every step is an
unsampled Gaussian, the PLD bracket's upper end, RDP (improved, classic, moments), zCDP and
basic/advanced composition. :meth:`PrivacyLedger.tightest` also names the method.
"""

from __future__ import annotations

from .ledger import PrivacyLedger

__all__ = ["tightest_epsilon"]


def tightest_epsilon(ledger: PrivacyLedger, delta: float, *, with_method: bool = False):
    """The smallest certified upper bound on eps(delta) under ``ledger.relation`` (with
    ``with_method``: ``(eps, method)``). An empty ledger released nothing: 0; a release
    without noise: inf."""
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(f"ledger must be a PrivacyLedger, got {type(ledger)!r}")
    return ledger.tightest_epsilon(delta, with_method=with_method)
