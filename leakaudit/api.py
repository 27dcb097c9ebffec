"""The public calls that wire the sibling packages together (the top layer, beside the CLI).

The attack audit (:mod:`leakaudit.auditing`) and the empirical privacy audit
(:mod:`leakaudit.empirical`) never import each other; ``leakaudit.audit(empirical=True)``
gives the first a measurer from the second (:class:`EmpiricalEps`) here.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ._validate import Moved, check_int, legacy_call
from .auditing import auditor
from .auditing.report import AuditReport

__all__ = ["EmpiricalEps", "audit"]


class EmpiricalEps:
    """The empirical audit's lower bound on eps of a defense's releases at the audited points
    (:func:`leakaudit.empirical.audit_release`, ``trials`` runs per side): the largest over
    the points where the defense releases, 0 where it releases nothing."""

    def __init__(self, trials: int = 2000) -> None:
        self.trials = check_int("empirical_trials", trials, 100)

    def __call__(self, defense: Any, points: Sequence[int], *, delta: float,
                 seed: int) -> float:
        from .empirical import audit_release, game

        bounds = [audit_release(defense, point=p, trials=self.trials, delta=delta,
                                seed=seed).rows()[0]["eps_lower"]
                  for p in points if game.releases_at(defense, p)]
        return max(bounds, default=0.0)


def _fold_trials(empirical: bool | int | None, old: dict[str, Any]) -> bool | int:
    """``empirical_trials=n`` (the old keyword) as ``empirical=n`` where it was switched on."""
    return old["empirical_trials"] if empirical else False


@legacy_call(**auditor.MOVED, empirical=Moved(names=("empirical_trials",), fold=_fold_trials,
                                              how=""))
def audit(defenses: Sequence[Any] = auditor.DEFAULT_DEFENSES, *, empirical: bool | int = False,
          **options: Any) -> AuditReport:
    """:func:`leakaudit.auditing.audit` (every keyword of it), and with ``empirical`` a
    measured lower bound on eps of each defense's release at each audited point
    (``leakaudit.privacy_audit``; ``empirical=True``: 2000 runs per side, or that many
    runs, ``empirical=5000``): the defense table gains a "measured eps >=" column (the
    largest over the points)."""
    if "measure" in options:
        raise TypeError("audit() got an unexpected keyword argument 'measure' (use "
                        "empirical=True, or leakaudit.auditing.audit(measure=...))")
    if not isinstance(empirical, (bool, int)):
        raise ValueError(f"empirical must be True, False or a number of trials, got "
                         f"{empirical!r}")
    measure = None
    if empirical is not False:
        measure = EmpiricalEps(2000 if empirical is True else empirical)
    return auditor.audit(defenses, measure=measure, **options)


def _signature() -> inspect.Signature:
    """audit()'s signature as help() shows it: auditing.audit's, ``measure`` replaced."""
    sig = inspect.signature(auditor.audit)
    params = [p for p in sig.parameters.values() if p.name != "measure"]
    params += [inspect.Parameter("empirical", inspect.Parameter.KEYWORD_ONLY, default=False,
                                 annotation="bool | int")]
    return sig.replace(parameters=params)


audit.__signature__ = _signature()
