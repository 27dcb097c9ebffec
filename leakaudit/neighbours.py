"""The two worlds of a canary game under each neighbouring relation, decided once.

A canary game compares a run with the canary's unit (an example or a client) holding the
canary ("in") against its neighbour under the relation the sound ledger states ("out"):

* "add-remove": the unit is absent;
* "zero-out": the unit takes part with a zero contribution;
* "replace-one": the unit takes part with another contribution, chosen by the game: zero
  (a contribution at distance C of the canary's) or the canary's opposite (2C, the worst
  case of two contributions of norm at most C).

The simulator's games (:mod:`leakaudit.fl.canary`, the one-run audit's canary clients, the
release game of :mod:`leakaudit.empirical.game`) and the adapters' record/replay
(:mod:`leakaudit.interop`) read the out world from :func:`canary_out`.
"""

from __future__ import annotations

__all__ = ["OUT_WORLDS", "canary_out", "distance"]

#: relation -> what the canary's unit is in the out world
OUT_WORLDS = {"add-remove": "absent", "zero-out": "zero", "replace-one": "replaced"}


def canary_out(relation: str) -> str:
    """"absent", "zero" or "replaced": the canary's unit in the out world of ``relation``."""
    if relation not in OUT_WORLDS:
        raise ValueError(f"relation must be one of {', '.join(map(repr, OUT_WORLDS))}, "
                         f"got {relation!r}")
    return OUT_WORLDS[relation]


def distance(relation: str) -> float:
    """The largest distance between the in and out contributions of the canary's unit, in
    units of the contribution bound C: 2 where it is replaced, 1 where it is absent or
    zero."""
    return 2.0 if canary_out(relation) == "replaced" else 1.0
