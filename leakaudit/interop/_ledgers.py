"""The (claimed, sound) pair the interop ledgers return, and what both adapters share.

No torch, Opacus or Flower here: :mod:`leakaudit.interop` imports this module.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from accounting import PrivacyLedger

__all__ = ["LedgerPair", "RELATIONS", "check_relation", "new_ledger", "multiplier"]

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


class LedgerPair(tuple):
    """``(claimed, sound)``: what a framework claims and what the code that ran allows.

    Unpacks as a pair (``claimed, sound = ledgers(...)``) and names its parts:

    - ``claimed``, ``sound``: ledgers (or, for Flower, one ledger per client);
    - ``relation`` / ``sampling``: the neighbouring relation and the sampling the sound
      ledger accounts (``claimed_relation`` / ``claimed_sampling``: the claim's);
    - ``reason``: why sound differs from claimed ("" where they are the same events).
    """

    relation: str
    sampling: str
    claimed_relation: str
    claimed_sampling: str
    reason: str

    def __new__(cls, claimed: Any, sound: Any, *, relation: str, sampling: str,
                claimed_relation: str, claimed_sampling: str, reason: str) -> LedgerPair:
        pair = super().__new__(cls, (claimed, sound))
        pair.__dict__.update(relation=relation, sampling=sampling,
                             claimed_relation=claimed_relation,
                             claimed_sampling=claimed_sampling, reason=reason)
        return pair

    @property
    def claimed(self) -> Any:
        return self[0]

    @property
    def sound(self) -> Any:
        return self[1]

    def __getnewargs_ex__(self) -> tuple[tuple[Any, Any], dict[str, str]]:
        return (self[0], self[1]), dict(self.__dict__)

    def __repr__(self) -> str:
        return (f"LedgerPair(claimed={self[0]!r}, sound={self[1]!r}, "
                f"relation={self.relation!r}, sampling={self.sampling!r})")

    def describe(self, delta: float, eps: Any = None) -> str:
        """Claimed and sound eps at ``delta`` with their relation and sampling, and why.

        ``eps(ledger, delta)`` computes each (default :func:`accounting.tightest_epsilon`);
        for per-client dicts the largest over the clients is shown.
        """
        if eps is None:
            from accounting import tightest_epsilon as eps
        values = []
        for part in self:
            ledgers = part.values() if isinstance(part, dict) else [part]
            values.append(max((eps(lg, delta) if lg.steps else 0.0 for lg in ledgers),
                              default=0.0))
        text = (f"claimed eps {_fmt(values[0])} ({self.claimed_sampling}, "
                f"{self.claimed_relation}); sound eps {_fmt(values[1])} ({self.sampling}, "
                f"{self.relation}); delta {delta:g}")
        return text + (f"\n  why: {self.reason}" if self.reason else "")


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"
