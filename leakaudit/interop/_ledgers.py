"""The (claimed, sound) pair the interop ledgers return, and what both adapters share.

No torch, Opacus or Flower here: :mod:`leakaudit.interop` imports this module.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from typing import Any

from accounting import PrivacyLedger

from ..records import LedgerPair

__all__ = ["LedgerPair", "RELATIONS", "check_relation", "new_ledger", "multiplier",
           "old_positional_order"]

try:  # the accountant's constants, once it has them
    from accounting.relations import RELATIONS  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the accountant's version
    RELATIONS = ("add-remove", "replace-one", "zero-out")


def check_relation(name: str, relation: object) -> str:
    """``relation`` if it is one of :data:`RELATIONS`, else a ValueError naming ``name``."""
    if relation not in RELATIONS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, RELATIONS))}, "
                         f"got {relation!r}")
    return str(relation)


def old_positional_order(call: str, names: Sequence[str], legacy: tuple[Any, ...],
                         given: dict[str, Any]) -> dict[str, Any]:
    """The old positional form of an interop call: ``legacy`` (what came after the first
    argument by position) taken as ``names`` in order, with a DeprecationWarning; ``given``
    (the keyword values, None where not given) completed and returned."""
    if not legacy:
        return given
    if len(legacy) > len(names):
        raise TypeError(f"{call}() takes 1 positional argument but {1 + len(legacy)} were "
                        f"given")
    out = dict(given)
    for name, value in zip(names, legacy):
        if out.get(name) is not None:
            raise TypeError(f"{call}() got multiple values for argument {name!r}")
        out[name] = value
    warnings.warn(f"pass the arguments after the first by keyword: {call}(..., "
                  f"{', '.join(f'{n}=...' for n in names[:len(legacy)])})",
                  DeprecationWarning, stacklevel=3)
    return out


def new_ledger(relation: str, orders: object = None) -> PrivacyLedger:
    """An empty ledger that states ``relation`` where the accountant can (``relation=``)."""
    if "relation" in inspect.signature(PrivacyLedger).parameters:
        return PrivacyLedger(relation=relation, orders=orders)  # type: ignore[call-arg]
    return PrivacyLedger(orders=orders)


def multiplier(sigma: float, relation: str, multiplicity: int = 1) -> float:
    """Noise multiplier of a Gaussian of std ``sigma C`` on a sum of clipped contributions.

    One person's ``multiplicity`` contributions (each in the C-ball) move the sum by at most
    ``multiplicity C`` when they are zeroed ("zero-out") and by ``2 multiplicity C`` when
    they are replaced by others ("replace-one"; and "add-remove" where adding or removing a
    person changes who else is in the batch or cohort, as with fixed-size draws): the
    multiplier is sigma over the sensitivity in units of C.
    """
    sensitivity = multiplicity * (1 if relation == "zero-out" else 2)
    return sigma / sensitivity


