"""What a ledger reports besides one eps: every method side by side, and the fast
conservative RDP bound with its excess. Pure functions of events (no ledger state)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ._grid import Groups, round_sigmas
from ._validate import check_choice, check_delta, check_orders, check_positive
from .accountants import ACCOUNTANTS, accountant, epsilon
from .rdp import DEFAULT_ORDERS, INTEGER_ORDERS
from .registry import GaussianPart, gaussian_groups

__all__ = ["EpsilonReport", "ConservativeEpsilon", "conservative_epsilon", "resolve_orders"]


class EpsilonReport(dict):
    """``{method: eps}`` (floats, as before) that also says what the numbers are about:
    ``delta``, the neighbouring ``relation`` and the ``samplings`` of the ledger's events."""

    def __init__(self, values: dict[str, float], *, delta: float, relation: str,
                 samplings: tuple[str, ...]) -> None:
        super().__init__(values)
        self.delta = delta
        self.relation = relation
        self.samplings = samplings

    def describe(self) -> str:
        head = (f"eps at delta={self.delta:.3g}, relation {self.relation}, sampling "
                f"{'/'.join(self.samplings) or '-'}")
        return "\n".join([head] + [f"  {k:<12} {v:.6g}" for k, v in self.items()])


class ConservativeEpsilon(NamedTuple):
    """A fast upper bound on eps and a bound on how much it exceeds the exact value."""

    eps: float
    max_excess: float
    resolution: float


def resolve_orders(orders: object) -> np.ndarray:
    """None/"default": :data:`DEFAULT_ORDERS`; "integer": {2..64}; else checked, sorted."""
    if orders is None or (isinstance(orders, str) and orders == "default"):
        return DEFAULT_ORDERS.copy()
    if isinstance(orders, str):
        if orders == "integer":
            return INTEGER_ORDERS.copy()
        raise ValueError(f"orders must be 'default', 'integer' or a sequence, got {orders!r}")
    return np.unique(check_orders("orders", orders))


def conservative_epsilon(events: Sequence[object], delta: float, orders: np.ndarray,
                         resolution: float = 1e-3, method: str = "rdp") -> ConservativeEpsilon:
    """Fast RDP upper bound: every sigma rounded DOWN onto the grid (1 + resolution)^k.

    Less noise can only increase eps, so the result is a valid upper bound; the same
    computation with sigmas rounded UP is a lower bound on the exact RDP value, so
    ``max_excess = upper - lower`` bounds how much the fast answer overstates. Costs
    O(distinct grid points x orders), independent of the number of steps.
    """
    delta = check_delta("delta", delta)
    resolution = check_positive("resolution", resolution)
    check_choice("method", method, ("rdp", "rdp-classic", "moments"))
    acc = accountant(method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = epsilon(events, delta, method, orders=orders).eps
    if not events or math.isinf(exact):
        return ConservativeEpsilon(exact, 0.0, resolution)
    items = acc.parts(events)
    qs, sig, counts = gaussian_groups(items)
    if 2 * np.unique(round_sigmas(sig, resolution, "down")).size > np.unique(sig).size:
        return ConservativeEpsilon(exact, 0.0, resolution)  # no saving: the exact answer
    rest = [p for p in items if not isinstance(p, GaussianPart)]
    bounds = []
    for direction in ("down", "up"):
        g = Groups(qs, round_sigmas(sig, resolution, direction), counts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bounds.append(acc._eps(rest + [GaussianPart(*g)], delta, orders, None, False,
                                   False).eps)
    upper, lower = bounds
    return ConservativeEpsilon(upper, max(0.0, upper - lower), resolution)


def report(events: Sequence[object], delta: float, orders: np.ndarray, cache: dict,
           prv: bool, memo: dict | None = None) -> dict[str, float]:
    """Every sound method that supports every event, and the PRV bracket when ``prv``
    (``memo``: the ledger's answers of this history, shared with its other queries)."""
    from .prv import PRVUnavailable

    out: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, acc in ACCOUNTANTS.items():
            if name in ("prv", "zcdp-approx", "gaussian-exact") or not all(
                    map(acc.supports, events)):
                continue
            out[name] = epsilon(events, delta, name, orders=orders, cache=cache, warn=False,
                                memo=memo).eps
        if prv and all(map(ACCOUNTANTS["prv"].supports, events)):
            try:
                lo, est, up = ACCOUNTANTS["prv"].bounds(events, delta, memo=memo)
            except PRVUnavailable:
                pass  # the peer's limitation: the report simply has no PRV entries
            else:
                out.update({"prv-lower": lo, "prv": est, "prv-upper": up})
    return out

