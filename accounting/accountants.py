"""Accountants: one small class per method, each stating which events it supports.

Every accountant has a ``name`` (the ``method=`` string of :class:`PrivacyLedger`), a family
(the rules it reads from :mod:`accounting.registry`) and the mechanism forms it computes.
``supports(event)`` says whether it can account an event; ``epsilon(events, delta)`` refuses
any other with :class:`~accounting.registry.UnsupportedEventError` (event, method, why),
before any work. There is one RDP sum (:func:`rdp_curve`), used by every RDP method and by
the PLD accountant where its discretisation gives up; no accountant falls back silently.

:func:`tightest` is the minimum of the certified upper ends of every certified accountant
that supports every event, and names the method that gave it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import composition as comp
from ._grid import Groups, rounded_groups
from ._validate import check_delta
from .conversions import (
    DPResult,
    NoPrivacyWarning,
    OrderGridWarning,
    log_moments,
    moments_epsilon,
    optimize_order,
    rdp_to_dp,
)
from .rdp import DEFAULT_ORDERS, rdp_laplace_sum, rdp_pure_dp, rdp_sgm_many
from .registry import (
    ACCOUNTANTS,
    DPPart,
    GaussianPart,
    LaplacePart,
    PLDPart,
    RDPPart,
    UnsupportedEventError,
    gaussian_groups,
    memo_key,
    parts,
    pure_total,
    register_accountant,
    why_infinite,
    why_unsupported,
)
from .relations import ADD_REMOVE, convert_event, group_privacy_2

__all__ = ["Accountant", "ACCOUNTANTS", "CERTIFIED", "UNCERTIFIED", "bracketed", "certified",
           "accountant", "register_accountant", "supporting", "epsilon", "tightest", "Tightest",
           "rdp_curve", "why_infinite", "group_privacy_epsilon", "UnsupportedEventError"]

_BASIC_FORMS = (GaussianPart, LaplacePart, DPPart)
#: Above this many distinct (q, sigma) rows the RDP sum rounds sigmas down onto the grid
#: (1 + 5e-4)^k: a valid upper bound, O(grid points) instead of O(steps) (10^6 distinct
#: sigmas took 256 s and 7.5 GB).
_MAX_ROWS = 20_000
#: Distinct Laplace and (eps, delta) releases the PLD accepts (1,000: 11 s of CPU).
_MAX_PLD_RELEASES = 2_000


# ---------------------------------------------------------------- the one RDP sum
def rdp_curve(items: Sequence[object], orders: np.ndarray,
              cache: dict | None = None) -> np.ndarray:
    """Composed RDP at ``orders`` of the parts ``items``: Gaussian rows (memoised per (q,
    sigma) in ``cache``, computed in one vectorised batch), Laplace curves (Mironov 2017,
    Table II) and pure-DP curves; (eps, delta > 0) parts have none (see :func:`approx_spent`)."""
    qs, sigmas, counts = gaussian_groups(items)
    if qs.size > _MAX_ROWS:  # sigmas rounded DOWN (less noise: eps only grows), regrouped
        qs, sigmas, counts = rounded_groups(Groups(qs, sigmas, counts), 5e-4, "down")
    total = np.zeros(orders.size)
    if qs.size:
        if cache is None:
            per = rdp_sgm_many(qs, sigmas, orders)
        else:
            keys = list(zip(qs.tolist(), sigmas.tolist()))
            missing = [i for i, k in enumerate(keys) if k not in cache]
            if missing:
                for row, i in zip(rdp_sgm_many(qs[missing], sigmas[missing], orders), missing):
                    cache[keys[i]] = row
            per = np.stack([cache[k] for k in keys])
        with np.errstate(invalid="ignore"):
            total = (per * counts[:, None].astype(float)).sum(axis=0)
    laplace = [p for p in items if isinstance(p, LaplacePart)]
    if laplace:
        total = total + rdp_laplace_sum(np.array([p.eps for p in laplace]),
                                        np.array([p.count for p in laplace], dtype=float), orders)
    for p in items:
        if isinstance(p, DPPart) and p.pure:
            total = total + (np.inf if math.isinf(p.eps) else p.count * rdp_pure_dp(p.eps, orders))
        elif isinstance(p, RDPPart):
            total = total + p.count * np.asarray(p.rdp(orders), dtype=float)
    return np.where(np.isnan(total), np.inf, total)


def approx_spent(items: Sequence[object]) -> tuple[float, float]:
    """(sum eps, sum delta) of the (eps, delta > 0) parts, added by basic composition."""
    approx = [p for p in items if isinstance(p, DPPart) and not p.pure]
    return (sum(p.count * p.eps for p in approx), sum(p.count * p.delta for p in approx))


def group_privacy_epsilon(eps_at: Callable[[float], float], delta: float,
                          points: int = 48) -> float:
    """eps at distance 2 from an eps(delta) curve at distance 1: min over a fixed grid of
    delta_1 in delta * [1e-6, 1/2] of 2 eps(delta_1) where delta_1 (1 + e^eps(delta_1)) <= delta
    (:func:`accounting.relations.group_privacy_2`; every grid point is a valid bound, the
    grid does not depend on the data). inf when no grid point qualifies."""
    best = math.inf
    for d1 in delta * np.geomspace(1e-6, 0.5, points):
        e = float(eps_at(float(d1)))
        e2, d2 = group_privacy_2(e, float(d1))
        if d2 <= delta:
            best = min(best, e2)
    return best


# ---------------------------------------------------------------- the protocol
class Accountant:
    """One accounting method: ``supports(event)``; ``epsilon(events, delta, **opts)``."""

    name: str = ""
    family: str = "rdp"
    forms: tuple[type, ...] = _BASIC_FORMS
    #: the value is a proven upper bound (approximations and estimates are not)
    certified: bool = True

    def why_not(self, event: object) -> str | None:
        """Why this accountant cannot account ``event`` (None: it can)."""
        return why_unsupported(event, self.family, self.forms)

    def supports(self, event: object) -> bool:
        return self.why_not(event) is None

    def check(self, events: Sequence[object]) -> None:
        """Refuse, by name, the first event this accountant cannot account."""
        seen: set = set()
        for e in events:
            key = memo_key(e)  # equal events: one answer (10^6 interleaved releases)
            if key is not None and key in seen:
                continue
            why = self.why_not(e)
            if why is not None:
                raise UnsupportedEventError(e, self.name, why)
            if key is not None:
                seen.add(key)

    def parts(self, events: Sequence[object], side: str = "upper") -> list:
        self.check(events)
        return parts(events, self.family, self.name, side)

    def epsilon(self, events: Sequence[object], delta: float, **opts: Any) -> DPResult:
        raise NotImplementedError  # pragma: no cover

    def __repr__(self) -> str:
        return f"<accountant {self.name!r} ({self.family})>"


class RDPAccountant(Accountant):
    """Rényi DP (improved conversion, Balle et al. 2020; classic, Mironov 2017; or the
    moments accountant view of Abadi et al. 2016); Poisson steps under replace-one also get
    group privacy 2 of their add/remove accounting (the smaller bound is kept)."""

    forms = _BASIC_FORMS + (RDPPart,)

    def __init__(self, name: str, conversion: str) -> None:
        self.name, self.conversion = name, conversion

    def _eps(self, items: list, delta: float, orders: np.ndarray, cache: dict | None,
             optimize: bool, warn: bool) -> DPResult:
        approx_eps, approx_delta = approx_spent(items)
        rem = delta - approx_delta
        if rem <= 0:
            if warn:
                warnings.warn(f"eps is infinite: the recorded (eps, delta) releases already "
                              f"spend delta={approx_delta:.3g} >= target {delta:.3g}",
                              NoPrivacyWarning, stacklevel=4)
            return DPResult(math.inf, None)
        curve = rdp_curve(items, orders, cache)
        with warnings.catch_warnings():
            if optimize or not warn:
                warnings.simplefilter("ignore", OrderGridWarning)
            if self.conversion == "moments":
                lm, lam = log_moments(curve, orders)
                r = moments_epsilon(lm, lam, rem, warn_edge=warn and not optimize)
                res = DPResult(r.eps, None if r.order is None else r.order + 1.0)
            else:
                res = rdp_to_dp(curve, orders, rem, self.conversion)
        if optimize and res.order is not None and self.conversion != "moments":
            idx = int(np.searchsorted(orders, res.order))
            lo = orders[idx - 1] if idx > 0 else 1.0 + (orders[0] - 1.0) / 100.0
            hi = orders[idx + 1] if idx + 1 < orders.size else orders[-1] * 4.0
            cont = optimize_order(lambda a: rdp_curve(items, np.atleast_1d(a)), rem,
                                  self.conversion, bracket=(float(lo), float(hi)))
            res = cont if cont.eps < res.eps else res
        pure = pure_total(items)
        if pure is not None and pure < res.eps:  # order inf: the summed pure eps
            res = DPResult(pure, math.inf)
        return DPResult(res.eps + approx_eps, res.order)

    def epsilon(self, events: Sequence[object], delta: float, *, orders: np.ndarray | None = None,
                cache: dict | None = None, optimize_order: bool = False, warn: bool = True,
                **_: Any) -> DPResult:
        orders = DEFAULT_ORDERS if orders is None else orders
        items = self.parts(events)
        res = self._eps(items, delta, orders, cache, optimize_order, warn)
        gauss = [p for p in items if isinstance(p, GaussianPart)]
        if len(gauss) == len(items) and any(p.group_privacy for p in gauss):
            try:
                converted = [convert_event(e, ADD_REMOVE) for e in events]
            except ValueError:  # a step with no add-remove form (a shuffle): no alternative
                return res
            alt, rows = parts(converted, self.family, self.name), {}  # rows: one curve, 48 deltas
            gp = group_privacy_epsilon(
                lambda d: self._eps(alt, d, orders, rows, False, False).eps, delta)
            if gp < res.eps:
                res = DPResult(gp, None)
        return res


class ZCDPAccountant(Accountant):
    """zCDP (Bun & Steinke 2016): 1/(2 sigma^2) per Gaussian step with q > 0, sampling
    ignored (zCDP has no general amplification: an upper bound); eps^2/2 per pure or
    Laplace release; (eps, delta > 0) releases by basic composition. ``approximate``: Yu et
    al. 2019's q^2/sigma^2 per step (labelled, may under-report)."""

    def __init__(self, name: str, approximate: bool) -> None:
        self.name, self.approximate = name, approximate
        self.family, self.certified = "zcdp", not approximate

    def epsilon(self, events: Sequence[object], delta: float, **_: Any) -> DPResult:
        items = self.parts(events)
        approx_eps, approx_delta = approx_spent(items)
        if delta - approx_delta <= 0:
            return DPResult(math.inf, None)
        qs, sigmas, counts = gaussian_groups(items)
        keep = qs > 0
        if self.approximate:
            per = np.array([comp.zcdp_sampled_gaussian_approx(q, s)
                            for q, s in zip(qs[keep], sigmas[keep])])
        else:
            per = np.array([comp.zcdp_gaussian(s) for s in sigmas[keep]])
        rho = float((per * counts[keep]).sum()) if per.size else 0.0
        rho += sum(p.count * p.eps**2 / 2.0 for p in items
                   if isinstance(p, LaplacePart) or (isinstance(p, DPPart) and p.pure))
        return DPResult(comp.zcdp_to_dp(rho, delta - approx_delta).eps + approx_eps, None)


class CompositionAccountant(Accountant):
    """Basic or advanced composition (Dwork, Rothblum, Vadhan 2010) of per-release
    (eps, delta), Gaussian steps calibrated per step (analytic, Balle & Wang 2018, or the
    classical Dwork & Roth Thm A.1) and amplified by sampling
    (:func:`accounting.composition.composition_epsilon`)."""

    def __init__(self, name: str) -> None:
        self.name, self.family = name, "composition"

    def epsilon(self, events: Sequence[object], delta: float, *, gaussian: str = "analytic",
                **_: Any) -> DPResult:
        items = self.parts(events)
        others = [(p.eps, p.delta, p.count) for p in items if not isinstance(p, GaussianPart)]
        groups = gaussian_groups(items)
        if groups[0].size > _MAX_ROWS:  # one root search per row: sigmas rounded DOWN (valid)
            groups = tuple(rounded_groups(Groups(*groups), 5e-4, "down"))
        eps = comp.composition_epsilon(groups, others, delta, self.name, gaussian)
        return DPResult(eps, None)


def _own(opts: dict) -> dict:
    """``opts`` without the ledger-wide ones (orders, memos, warnings, RDP/composition knobs)."""
    return {k: v for k, v in opts.items()
            if k not in ("orders", "cache", "warn", "optimize_order", "gaussian", "memo")}


def _bracket_key(method: str, delta: float, opts: dict) -> tuple | None:
    """The memo key of a bracket query (None where an option is not hashable)."""
    key = (method, float(delta), tuple(sorted(opts.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _bracket(method: str, events: Sequence[object], delta: float, memo: dict | None,
             opts: dict, compute: Callable[[], Any]) -> Any:
    """``compute()``, shared through the ledger's per-state ``memo``
    (:mod:`accounting.query_memo`): one computation per (method, delta, options)."""
    from .query_memo import memoised

    key = _bracket_key(method, delta, opts)
    return memoised(memo if key is not None else None, key or (), compute)


class PLDAccountant(Accountant):
    """The certified upper end of the privacy-loss-distribution bracket
    (:func:`accounting.pld_epsilon`): the tightest sound method."""

    name, family, forms = "pld", "pld", _BASIC_FORMS + (PLDPart,)

    def epsilon(self, events: Sequence[object], delta: float, **opts: Any) -> DPResult:
        return DPResult(self.bounds(events, delta, memo=opts.get("memo"),
                                    **_own(opts)).upper, None)

    def bounds(self, events: Sequence[object], delta: float, memo: dict | None = None,
               **opts: Any):
        """The certified (lower, estimate, upper) bracket; ``memo``: the ledger's answers of
        this state (one computation for epsilon, epsilon_bounds, tightest and reports)."""
        return _bracket(self.name, events, delta, memo, opts,
                        lambda: self._bounds(events, delta, **opts))

    def _bounds(self, events: Sequence[object], delta: float, **opts: Any):
        """pld_epsilon's bracket, tightened by each part's own certified function
        (:mod:`accounting.part_bounds`)."""
        from .part_bounds import tightened
        from .pld import PLDBounds, pld_epsilon

        self.check(events)
        releases = sum(isinstance(p, (LaplacePart, DPPart)) for p in self.parts(events))
        if releases > _MAX_PLD_RELEASES:  # a named refusal before minutes of work
            raise ValueError(f"{releases} distinct Laplace/(eps, delta) releases are beyond the "
                             f"PLD's budget ({_MAX_PLD_RELEASES}; 10^5 took 97 s); use "
                             "method='rdp' (tightest_epsilon falls back to the others)")
        b = pld_epsilon(events, delta, **opts)
        lower, upper = tightened(tuple(events), delta, b.lower, b.upper, opts)
        if (lower, upper) == (b.lower, b.upper):
            return b
        return PLDBounds(lower, upper if math.isinf(upper) else (lower + upper) / 2.0, upper)


class PRVAccountant(Accountant):
    """prv-accountant's estimate (Gopi, Lee, Wutschitz 2021): a peer's cross-check, not a
    certified value of ours (:meth:`bounds` gives its error bracket)."""

    name, family, certified = "prv", "prv", False

    def epsilon(self, events: Sequence[object], delta: float, **opts: Any) -> DPResult:
        return DPResult(self.bounds(events, delta, memo=opts.get("memo"),
                                    **_own(opts)).estimate, None)

    def bounds(self, events: Sequence[object], delta: float, memo: dict | None = None,
               **opts: Any):
        """prv-accountant's (lower, estimate, upper); ``memo`` as for the PLD's."""
        from .prv import prv_epsilon

        self.check(events)
        return _bracket(self.name, events, delta, memo, opts,
                        lambda: prv_epsilon(events, delta, **opts))


class ExactGaussianAccountant(Accountant):
    """Closed form when every release is a Gaussian step accounted at q = 1 (or q = 0): the
    steps compose into one Gaussian with multiplier (sum c / sigma^2)^(-1/2), exact eps by
    Balle & Wang 2018, Thm 8."""

    name, forms = "gaussian-exact", (GaussianPart,)

    def why_not(self, event: object) -> str | None:
        why = super().why_not(event)
        if why is None and not all(np.all((p.qs == 0) | (p.qs == 1))
                                   for p in parts([event], self.family, self.name)):
            why = "a sampled step (0 < q < 1) has no closed form; use 'pld' or 'rdp'"
        return why

    def epsilon(self, events: Sequence[object], delta: float, **_: Any) -> DPResult:
        qs, sigmas, counts = gaussian_groups(self.parts(events))
        full = qs == 1.0
        if not full.any():
            return DPResult(0.0, None)
        inv = float((counts[full] / sigmas[full] ** 2).sum())
        return DPResult(float(comp.analytic_gaussian_epsilons(np.array([inv**-0.5]),
                                                              delta)[0]), None)


for _acc in (RDPAccountant("rdp", "improved"), RDPAccountant("rdp-classic", "classic"),
             RDPAccountant("moments", "moments"), ZCDPAccountant("zcdp", False),
             CompositionAccountant("advanced"), CompositionAccountant("basic"), PRVAccountant(),
             PLDAccountant(), ZCDPAccountant("zcdp-approx", True), ExactGaussianAccountant()):
    register_accountant(_acc)


def certified() -> tuple[str, ...]:
    """The certified methods tightest() takes the minimum over: every registered accountant
    whose value is a proven upper bound (those registered by other modules included)."""
    return tuple(n for n, a in ACCOUNTANTS.items() if a.certified)


#: The certified methods of this module (:func:`certified` also lists later registrations).
CERTIFIED = certified()
#: The registered methods whose value is an estimate or an approximation (never a budget).
UNCERTIFIED = tuple(n for n, a in ACCOUNTANTS.items() if not a.certified)


def bracketed() -> tuple[str, ...]:
    """The registered accountants that give a (lower, estimate, upper) bracket
    (a ``bounds`` method)."""
    return tuple(n for n, a in ACCOUNTANTS.items() if callable(getattr(a, "bounds", None)))


def accountant(method: str) -> Accountant:
    """The accountant registered as ``method`` (ValueError naming the known ones)."""
    if not isinstance(method, str) or method not in ACCOUNTANTS:
        raise ValueError(f"method must be one of {tuple(ACCOUNTANTS)}, got {method!r}")
    return ACCOUNTANTS[method]


def supporting(events: Sequence[object], certified_only: bool = False) -> tuple[str, ...]:
    """The methods whose accountant supports every one of ``events``."""
    return tuple(n for n, a in ACCOUNTANTS.items()
                 if (a.certified or not certified_only) and all(a.supports(e) for e in events))


def epsilon(events: Sequence[object], delta: float, method: str = "rdp", *,
            warn: bool = True, **opts: Any) -> DPResult:
    """eps of ``events`` at ``delta`` by ``method``: the one dispatch. Unsupported events
    are refused by name first; no event: 0 (nothing was released); a release without noise:
    inf (with a :class:`NoPrivacyWarning` when ``warn``)."""
    acc = accountant(method)
    delta = check_delta("delta", delta)
    acc.check(events)
    if not events:
        return DPResult(0.0, None)
    reason = why_infinite(events)
    if reason is not None:
        if warn:
            warnings.warn(f"eps is infinite: {reason}", NoPrivacyWarning, stacklevel=3)
        return DPResult(math.inf, None)
    return acc.epsilon(events, delta, warn=warn, **opts)


def delta_upper(events: Sequence[object], eps: float, method: str, orders: np.ndarray,
                cache: dict | None = None) -> float:
    """Smallest delta with (eps, delta)-DP, an upper bound: "rdp"/"rdp-classic" (the
    inverse conversions, (eps, delta > 0) releases added by basic composition) or "pld"
    (the certified upper end, :func:`accounting.pld_delta`)."""
    from ._validate import check_choice, check_eps
    from .conversions import dp_delta
    from .pld import pld_delta

    eps = check_eps("eps", eps)
    check_choice("method", method, ("rdp", "rdp-classic", "pld"))
    acc = accountant(method)
    acc.check(events)
    if not events:
        return 0.0
    if why_infinite(events) is not None:
        return 1.0
    if method == "pld":
        return pld_delta(events, eps, with_lower=False)[1]
    items = acc.parts(events)
    approx_eps, approx_delta = approx_spent(items)
    if eps < approx_eps:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        res = dp_delta(rdp_curve(items, orders, cache), orders, eps - approx_eps,
                       "classic" if method == "rdp-classic" else "improved")
    return float(min(1.0, res.delta + approx_delta))


class Tightest(NamedTuple):
    """The smallest certified upper bound, the method that gave it, and every candidate
    (method -> eps, or the reason it was not used)."""

    eps: float
    method: str
    candidates: dict


def tightest(events: Sequence[object], delta: float, *, orders: np.ndarray | None = None,
             cache: dict | None = None, memo: dict | None = None) -> Tightest:
    """min over the certified accountants that support every event of their upper ends
    (``memo``: the ledger's answers of this state, shared with its other queries).

    Basic and advanced composition join when there are at most 64 distinct Gaussian rows
    (their per-step calibration costs one root search per row; they never beat RDP on long
    compositions). A PLD beyond its memory budget is recorded as such (the others remain).
    """
    delta = check_delta("delta", delta)
    if not events:
        return Tightest(0.0, "none", {})
    if why_infinite(events) is not None:
        return Tightest(math.inf, "none", {})
    cands: dict[str, float | str] = {}
    for name in certified():
        acc = ACCOUNTANTS[name]
        try:
            acc.check(events)
            why = None
        except UnsupportedEventError as exc:
            why = exc.why
        if why is None and name in ("basic", "advanced") and sum(
                p.qs.size for p in parts(events, acc.family, name)
                if isinstance(p, GaussianPart)) > 64:
            why = "more than 64 distinct Gaussian rows: skipped for cost"
        if why is not None:
            cands[name] = f"refused: {why}"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cands[name] = float(acc.epsilon(events, delta, orders=orders, cache=cache,
                                                memo=memo, warn=False).eps)
        except UnsupportedEventError as exc:
            cands[name] = f"refused: {exc.why}"
        except ValueError as exc:  # e.g. beyond the PLD's memory budget
            cands[name] = f"failed: {exc}"
    numbers = {k: v for k, v in cands.items() if isinstance(v, float)}
    if not numbers:
        raise UnsupportedEventError(events[0], "tightest", "no certified accountant supports "
                                    f"every event ({cands})")
    best = min(numbers, key=numbers.__getitem__)
    return Tightest(numbers[best], best, cands)
