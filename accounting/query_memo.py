"""One computation per ledger state: the answers of the expensive queries (the PLD and PRV
brackets, the tightest eps) kept while the ledger's history is unchanged.

A :class:`QueryMemo` belongs to one ledger. :meth:`QueryMemo.answers` takes the ledger's
state (relation, orders, the recorded event objects in order) and returns the dict of
answers computed for exactly that state, emptied when the state differs: any mutation
(``step``, ``record``, a merged count, a new event type's own recording call) replaces or
appends an event object, so the identity check sees it without any hook in the recording
code. The memo holds the event objects it compared, so their ids cannot be reused by new
objects while it does. Keys are chosen by the accountants (``(method, delta, options)``);
a stored exception (a named refusal) is raised again, not recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["QueryMemo", "memoised"]


class QueryMemo:
    """Answers of one ledger state (module doc)."""

    def __init__(self) -> None:
        self._relation: str | None = None
        self._orders: bytes = b""
        self._events: tuple = ()
        self._answers: dict = {}

    def answers(self, relation: str, orders_key: bytes, events: Sequence[object]) -> dict:
        """The answers dict of this state (a fresh one when the state changed)."""
        same = (relation == self._relation and orders_key == self._orders
                and len(events) == len(self._events)
                and all(a is b for a, b in zip(events, self._events)))
        if not same:
            self._relation, self._orders = relation, orders_key
            self._events, self._answers = tuple(events), {}
        return self._answers


def memoised(memo: dict | None, key: tuple, compute: Callable[[], Any]) -> Any:
    """``memo[key]`` if present (an exception stored there is raised again), else
    ``compute()`` stored under ``key``; no memo: ``compute()``."""
    if memo is None:
        return compute()
    if key not in memo:
        try:
            memo[key] = compute()
        except ValueError as exc:  # a named refusal is an answer of this state too
            memo[key] = exc
    got = memo[key]
    if isinstance(got, ValueError):
        raise got
    return got
