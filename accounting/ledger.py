"""The privacy ledger: history + neighbouring relation + dispatch to the accountants.

A :class:`PrivacyLedger` holds typed events (:mod:`accounting.events`) under one relation and
asks the accountant registered for a method (:mod:`accounting.accountants`) for eps; the
accountant refuses, by name, an event it cannot account. RDP values are memoised per
distinct (q, sigma) pair. Opacus users find ``step(noise_multiplier=, sample_rate=)`` and
``get_epsilon(delta)``.
"""

from __future__ import annotations

import copy as _copy
import warnings
from collections.abc import Iterable
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

from ._grid import Groups, group_pairs, sgm_groups
from ._validate import check_choice, check_count, check_eps, check_orders
from .accountants import (
    ACCOUNTANTS,
    CERTIFIED,
    UNCERTIFIED,
    Tightest,
    accountant,
    bracketed,
    certified,
    delta_upper,
    epsilon,
    group_privacy_epsilon,
    rdp_curve,
    tightest,
    why_infinite,
)
from .conversions import DPResult
from .events import Event
from .ledger_io import LEDGER_FORMAT, LedgerJSON
from .query_memo import QueryMemo
from .recording import LedgerRecording
from .relations import ADD_REMOVE, POISSON, check_relation, convert_event
from .reports import (
    ConservativeEpsilon,
    EpsilonReport,
    conservative_epsilon,
    report,
    resolve_orders,
)

__all__ = ["PrivacyLedger", "METHODS", "APPROXIMATE_METHODS", "LEDGER_FORMAT", "group_pairs",
           "EpsilonReport", "ConservativeEpsilon", "group_privacy_epsilon", "parallel_epsilon"]

#: Sound methods, from the accountant registry: each returns a proven upper bound on eps.
METHODS = CERTIFIED
#: Estimates and labelled approximations (PRV, zCDP-approx): may under-report, never used
#: for a budget decision.
APPROXIMATE_METHODS = UNCERTIFIED


def _same_but_count(a: Event, b: Event) -> bool:
    """Two events of one type equal in every field but ``count`` (which both have)."""
    names = _FIELDS.get(type(a))
    if names is None:
        names = _FIELDS[type(a)] = tuple(f.name for f in fields(a)) if is_dataclass(a) else ()
    return "count" in names and all(getattr(a, k) == getattr(b, k) for k in names
                                    if k != "count")


_FIELDS: dict[type, tuple[str, ...]] = {}


class PrivacyLedger(LedgerRecording, LedgerJSON):
    """Every data-dependent release of one party (a client, a model), and its privacy.

    One ledger, one neighbouring relation: an event of another relation is refused (convert
    it with :meth:`converted` / :func:`accounting.relations.convert_event` where valid).

    Args:
        relation: "add-remove" (default), "replace-one" or "zero-out".
        orders: Rényi orders of the RDP methods: None/"default"
            (:data:`~accounting.rdp.DEFAULT_ORDERS`), "integer" ({2..64}) or numbers > 1.

    Example:
        >>> ledger = PrivacyLedger()
        >>> ledger.step(q=0.01, sigma=4.0, count=10_000)
        >>> round(ledger.epsilon(1e-5), 3)   # doctest: +SKIP
    """

    def __init__(self, relation: str = ADD_REMOVE, orders: object = None) -> None:
        if orders is None and (not isinstance(relation, str) or relation in ("default",
                                                                             "integer")):
            relation, orders = ADD_REMOVE, relation  # PrivacyLedger(orders): the old signature
        self.relation = check_relation("relation", relation)
        self.orders = resolve_orders(orders)
        self._events: list[Event] = []
        self._cache: dict[tuple[float, float], np.ndarray] = {}
        self._memo = QueryMemo()  # answers of the expensive queries for this history

    def _check_event_relation(self, event: Event) -> None:
        rel = getattr(event, "relation", ADD_REMOVE)
        if rel != self.relation:
            raise ValueError(
                f"this ledger accounts relation={self.relation!r} but the event is stated under "
                f"relation={rel!r}: one ledger keeps one relation; convert explicitly with "
                f"accounting.relations.convert_event(event, {self.relation!r}) where valid")

    def _append(self, event: Event) -> None:
        self._check_event_relation(event)
        last = self._events[-1] if self._events else None
        if type(last) is type(event) and _same_but_count(last, event):
            # the same release again: one event with the summed count (10^6 calls, 1 event)
            merged = _copy.copy(last)
            object.__setattr__(merged, "count", check_count("count", last.count + event.count))
            self._events[-1] = merged
        else:
            self._events.append(event)

    def record(self, event: Event) -> None:
        """Record an already-built event (any registered event type)."""
        if not isinstance(event, Event):
            raise ValueError(f"event must be an accounting.events.Event, got {type(event)!r}")
        self._check_event_relation(event)
        if event.steps:
            self._append(event)

    @classmethod
    def from_events(cls, events: Iterable[Event], relation: str = ADD_REMOVE,
                    orders: object = None) -> PrivacyLedger:
        """A ledger holding exactly ``events``, in order (nothing merged or dropped; each
        checked against ``relation``): how a stored or converted history is rebuilt."""
        new = cls(relation=relation, orders=orders)
        for event in events:
            if not isinstance(event, Event):
                raise ValueError(f"events must be accounting.events.Event, got {type(event)!r}")
            new._check_event_relation(event)
            new._events.append(event)
        return new

    def converted(self, relation: str) -> PrivacyLedger:
        """A new ledger of ``relation`` holding this ledger's events, each converted where a
        valid conversion exists (:func:`accounting.relations.convert_event`), else ValueError."""
        relation = check_relation("relation", relation)
        return PrivacyLedger.from_events((convert_event(e, relation) for e in self._events),
                                         relation=relation, orders=self.orders)

    @property
    def events(self) -> tuple[Event, ...]:
        """The recorded events, in order."""
        return tuple(self._events)

    @property
    def steps(self) -> int:
        """Total number of releases recorded."""
        return sum(e.steps for e in self._events)

    __len__ = steps.fget

    def __repr__(self) -> str:
        return (f"PrivacyLedger({len(self._events)} events, {self.steps} steps, "
                f"relation={self.relation!r})")

    @property
    def samplings(self) -> tuple[str, ...]:
        """The distinct sampling schemes of the recorded events, in order of appearance."""
        return tuple(dict.fromkeys(e.sampling for e in self._events))

    def describe(self) -> str:
        """A header with the relation, then one line per event (like dp-accounting's tree)."""
        if not self._events:
            return f"(empty ledger, relation {self.relation})"
        head = f"neighbouring relation: {self.relation}; sampling: {', '.join(self.samplings)}"
        return "\n".join([head] + [e.describe() for e in self._events])

    __str__ = describe

    def sgm_groups(self) -> Groups:
        """Distinct (q, sigma) pairs of the Gaussian steps (as accounted) with step counts."""
        return sgm_groups(self._events)

    def why_infinite(self) -> str | None:
        """Why eps is unbounded, or None when every release has noise."""
        return why_infinite(self._events)

    # ---------------------------------------------------------------- one computation per state
    def _answers(self) -> dict:
        """The memo of this history's answers (:mod:`accounting.query_memo`): emptied by any
        change of the events, the relation or the orders."""
        return self._memo.answers(self.relation, self.orders.tobytes(), self._events)

    def supported_methods(self) -> tuple[str, ...]:
        """The methods whose accountant supports every recorded event."""
        return tuple(n for n, a in ACCOUNTANTS.items() if all(map(a.supports, self._events)))

    def rdp(self, orders: object = None) -> np.ndarray:
        """Composed RDP at each order (the ledger's orders unless given); (eps, delta > 0)
        releases have no curve (the RDP methods add them by basic composition)."""
        o = self.orders if orders is None else check_orders("orders", orders)
        items = accountant("rdp").parts(self._events)
        return rdp_curve(items, o, self._cache if orders is None else None)

    def epsilon(self, delta: float, method: str = "rdp", *, optimize_order: bool = False,
                gaussian: str = "analytic", warn: bool = True) -> float:
        """eps for ``delta`` by ``method`` (:data:`METHODS`, "zcdp-approx" (labelled
        approximation) or any registered accountant); ``optimize_order`` refines the RDP
        order; ``gaussian``: per-step calibration of "basic"/"advanced" ("analytic" or
        "classical"). ``math.inf`` when no finite bound exists (:meth:`why_infinite`);
        :class:`~accounting.registry.UnsupportedEventError` for an event the method cannot
        account."""
        return self.epsilon_and_order(delta, method, optimize_order=optimize_order,
                                      gaussian=gaussian, warn=warn).eps

    def epsilon_and_order(self, delta: float, method: str = "rdp", *,
                          optimize_order: bool = False, gaussian: str = "analytic",
                          warn: bool = True) -> DPResult:
        """Like :meth:`epsilon`, also returning the optimal order (None where meaningless)."""
        check_choice("gaussian", gaussian, ("analytic", "classical"))
        return epsilon(self._events, delta, method, orders=self.orders, cache=self._cache,
                       optimize_order=optimize_order, gaussian=gaussian, warn=warn,
                       memo=self._answers())

    def tightest(self, delta: float) -> Tightest:
        """(eps, method, candidates): the smallest certified upper end over every accountant
        that supports every event (:func:`accounting.accountants.tightest`); computed once
        per history and delta, its PLD bracket shared with :meth:`epsilon_bounds`."""
        memo = self._answers()
        key = ("tightest", float(delta) if isinstance(delta, (int, float)) else delta)
        try:
            res = memo.get(key)
        except TypeError:  # an unhashable delta: refused by name below
            key, res = None, None
        if res is None:
            res = tightest(self._events, delta, orders=self.orders, cache=self._cache,
                           memo=memo)
            if key is not None:
                memo[key] = res
        return res._replace(candidates=dict(res.candidates))

    def tightest_epsilon(self, delta: float, with_method: bool = False) -> Any:
        """The tightest certified eps (with ``with_method``: ``(eps, method)``)."""
        res = self.tightest(delta)
        return (res.eps, res.method) if with_method else res.eps

    def epsilon_conservative(self, delta: float, resolution: float = 1e-3,
                             method: str = "rdp") -> ConservativeEpsilon:
        """Fast RDP upper bound on sigmas rounded onto a grid, with its excess
        (:func:`accounting.reports.conservative_epsilon`)."""
        return conservative_epsilon(self._events, delta, self.orders, resolution, method)

    def get_epsilon(self, delta: float) -> float:
        """Opacus-style: :meth:`epsilon` with the default (improved RDP) method."""
        return self.epsilon(delta)

    def get_privacy_spent(self, delta: float) -> tuple[float, float | None]:
        """Opacus-style (eps, best order) with the improved RDP conversion."""
        res = self.epsilon_and_order(delta)
        return res.eps, res.order

    def epsilon_bounds(self, delta: float, method: str = "prv",
                       **kwargs: Any) -> tuple[float, float, float]:
        """(lower, estimate, upper) eps: "prv" (prv-accountant's own error bounds) or "pld"
        (both ends certified); ``kwargs`` go to :func:`accounting.prv_epsilon` /
        :func:`accounting.pld_epsilon`."""
        check_choice("method", method, bracketed())
        return ACCOUNTANTS[method].bounds(self._events, delta, memo=self._answers(), **kwargs)

    def epsilon_report(self, delta: float, *, prv: bool = True) -> EpsilonReport:
        """Every sound method that supports the events side by side (and the PRV bounds)."""
        return EpsilonReport(report(self._events, delta, self.orders, self._cache, prv,
                                    memo=self._answers()),
                             delta=delta, relation=self.relation, samplings=self.samplings)

    def delta(self, eps: float, method: str = "rdp") -> float:
        """Smallest delta for which the ledger is (eps, delta)-DP: an upper bound from "rdp",
        "rdp-classic" or "pld" (:func:`accounting.accountants.delta_upper`)."""
        return delta_upper(self._events, eps, method, self.orders, self._cache)

    def would_exceed(self, eps_budget: float, delta: float, q: float | None = None,
                     sigma: float | None = None, count: int = 1, *, method: str = "rdp",
                     sampling: str = POISSON) -> bool:
        """Would ``count`` more (q, sigma) steps push eps above ``eps_budget``? No mutation.
        Without q and sigma: is the budget already exceeded? Approximations are refused."""
        eps_budget = check_eps("eps_budget", eps_budget)
        if not accountant(method).certified:
            raise ValueError(f"method must be a certified method {certified()}, got {method!r} "
                             "(estimates and approximations may under-report and never decide "
                             "a budget)")
        trial = self.copy()
        if q is not None or sigma is not None:
            trial.step(q=q, sigma=sigma, count=count, sampling=sampling)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return trial.epsilon(delta, method) > eps_budget

    def copy(self) -> PrivacyLedger:
        """An independent ledger with the same history (shares only the pure RDP memo)."""
        new = PrivacyLedger(relation=self.relation, orders=self.orders)
        new._events, new._cache = list(self._events), self._cache
        return new

    def merge(self, other: PrivacyLedger) -> PrivacyLedger:
        """Sequential composition: a new ledger with both histories (this ledger's orders)."""
        if not isinstance(other, PrivacyLedger):
            raise ValueError(f"other must be a PrivacyLedger, got {type(other)!r}")
        if other.relation != self.relation:
            raise ValueError(
                f"cannot compose a ledger of relation={self.relation!r} with one of "
                f"relation={other.relation!r}: convert one explicitly first "
                f"(other.converted({self.relation!r}) where a valid conversion exists)")
        new = self.copy()
        new._cache = dict(self._cache) if np.array_equal(self.orders, other.orders) else {}
        for e in other._events:
            new._append(e)
        return new

    __add__ = merge

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PrivacyLedger) and self.relation == other.relation
                and np.array_equal(self.orders, other.orders) and self._events == other._events)

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> PrivacyLedger:
        new = self.copy()
        new._cache = _copy.copy(self._cache)
        return new


def parallel_epsilon(ledgers: Iterable[PrivacyLedger], delta: float,
                     method: str = "rdp", *, warn: bool = True) -> float:
    """Parallel composition over disjoint data: the worst (max) eps over the ledgers."""
    values = [lg.epsilon(delta, method, warn=warn) for lg in ledgers]
    return max(values) if values else 0.0

