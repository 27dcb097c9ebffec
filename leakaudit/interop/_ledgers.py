"""The (claimed, sound) pair the interop ledgers return, and what both adapters share.

No torch, Opacus or Flower here: :mod:`leakaudit.interop` imports this module.
"""

from __future__ import annotations

from accounting import PrivacyLedger
from accounting.relations import RELATIONS

from ..records import LedgerPair

__all__ = ["LedgerPair", "RELATIONS", "check_relation", "new_ledger", "multiplier"]


def check_relation(name: str, relation: object) -> str:
    """``relation`` if it is one of :data:`RELATIONS`, else a ValueError naming ``name``."""
    if relation not in RELATIONS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, RELATIONS))}, "
                         f"got {relation!r}")
    return str(relation)


def new_ledger(relation: str, orders: object = None) -> PrivacyLedger:
    """An empty ledger that states ``relation``."""
    return PrivacyLedger(relation=relation, orders=orders)


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


