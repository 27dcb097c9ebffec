"""The privacy ledger: the one stateful object of the accountant.

A :class:`PrivacyLedger` holds a list of typed events (:mod:`accounting.events`) and answers
questions about them with the pure functions of :mod:`accounting.rdp`,
:mod:`accounting.conversions` and :mod:`accounting.composition`. Its only state is the
history; RDP values are memoised per distinct (q, sigma) pair, computed lazily and in one
vectorised batch, so a 10,000-step schedule with a different sigma every step costs one
call, and recording a step costs nothing.

Opacus users find ``step(noise_multiplier=, sample_rate=)`` and ``get_epsilon(delta)``.
"""

from __future__ import annotations

import copy as _copy
import json
import math
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from . import composition as comp
from ._grid import Groups, group_pairs, no_privacy_reason, round_sigmas, rounded_groups, sgm_groups
from ._validate import check_choice, check_count, check_delta, check_eps, check_orders
from .conversions import (
    DPResult,
    NoPrivacyWarning,
    OrderGridWarning,
    dp_delta,
    log_moments,
    moments_epsilon,
    optimize_order,
    rdp_to_dp,
)
from .events import ApproxDP, Event, GaussianSchedule, Laplace, SampledGaussian, event_from_dict
from .pld import pld_delta, pld_epsilon
from .prv import PRVUnavailable, prv_epsilon
from .rdp import DEFAULT_ORDERS, INTEGER_ORDERS, rdp_laplace, rdp_pure_dp, rdp_sgm_many
from .relations import (
    ADD_REMOVE,
    ALL,
    POISSON,
    check_relation,
    convert_event,
    group_privacy_2,
    uses_group_privacy,
)

__all__ = ["PrivacyLedger", "METHODS", "APPROXIMATE_METHODS", "LEDGER_FORMAT", "group_pairs",
           "EpsilonReport", "group_privacy_epsilon"]

#: Sound methods: each returns an upper bound on eps (PRV: its estimate; see epsilon_bounds).
#: "pld": the certified upper end of the privacy-loss-distribution bracket (the tightest).
METHODS = ("rdp", "rdp-classic", "moments", "zcdp", "advanced", "basic", "prv", "pld")
#: Labelled approximations: may under-report, never used for a budget decision.
APPROXIMATE_METHODS = ("zcdp-approx",)
LEDGER_FORMAT = "leakaudit.ledger/1"

_ADVANCED_SPLITS = np.linspace(0.05, 0.95, 19)


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


def group_privacy_epsilon(eps_at, delta: float, points: int = 48) -> float:
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


class ConservativeEpsilon(NamedTuple):
    """A fast upper bound on eps and a bound on how much it exceeds the exact value."""

    eps: float
    max_excess: float
    resolution: float


def _resolve_orders(orders: object) -> np.ndarray:
    if orders is None or (isinstance(orders, str) and orders == "default"):
        return DEFAULT_ORDERS.copy()
    if isinstance(orders, str):
        if orders == "integer":
            return INTEGER_ORDERS.copy()
        raise ValueError(f"orders must be 'default', 'integer' or a sequence, got {orders!r}")
    return np.unique(check_orders("orders", orders))


class PrivacyLedger:
    """Every data-dependent release of one party (a client, a model), and its privacy.

    One ledger, one neighbouring relation: every event it records is accounted under
    ``relation``; an event or a ledger of another relation is refused (convert it
    explicitly with :meth:`converted` / :func:`accounting.relations.convert_event` where a
    valid conversion exists). Every Gaussian step says how its batch was drawn
    (``sampling``); non-Poisson samplings are accounted without amplification at the
    sensitivity the relation gives (:mod:`accounting.relations`).

    Args:
        relation: "add-remove" (default), "replace-one" or "zero-out".
        orders: Rényi orders used by the RDP methods: None/"default" for
            :data:`~accounting.rdp.DEFAULT_ORDERS`, "integer" for {2..64} (the seed papers'
            grid), or any sequence of numbers > 1.

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
        self.orders = _resolve_orders(orders)
        self._events: list[Event] = []
        self._cache: dict[tuple[float, float], np.ndarray] = {}
        self._groups: Groups | None = None

    # ------------------------------------------------------------------ recording
    def _check_event_relation(self, event: Event) -> None:
        rel = getattr(event, "relation", ADD_REMOVE)
        if rel != self.relation:
            raise ValueError(
                f"this ledger accounts relation={self.relation!r} but the event is stated under "
                f"relation={rel!r}: one ledger keeps one relation; convert explicitly with "
                f"accounting.relations.convert_event(event, {self.relation!r}) where valid")

    def _append(self, event: Event) -> None:
        self._check_event_relation(event)
        self._groups = None
        last = self._events[-1] if self._events else None
        key = ("q", "sigma", "note", "sampling", "relation")
        if (
            isinstance(event, SampledGaussian)
            and isinstance(last, SampledGaussian)
            and all(getattr(last, k) == getattr(event, k) for k in key)
        ):
            self._events[-1] = SampledGaussian(last.q, last.sigma, last.count + event.count,
                                               last.note, last.sampling, last.relation)
        else:
            self._events.append(event)

    def step(
        self,
        q: float | None = None,
        sigma: float | None = None,
        count: int = 1,
        *,
        noise_multiplier: float | None = None,
        sample_rate: float | None = None,
        note: str = "",
        sampling: str = POISSON,
    ) -> None:
        """Record ``count`` Gaussian steps (rate q, noise multiplier sigma) drawn by ``sampling``.

        ``sampling``: "poisson" (default; q the inclusion probability), "fixed-size" or
        "shuffle" (q = B/n is recorded, no amplification is claimed), "all" (q = 1; may be
        left out). sigma is the noise std over the per-record bound C; the ledger's relation
        sets the sensitivity (:mod:`accounting.relations`). A sampling the relation cannot be
        accounted with is refused before anything is recorded.
        ``noise_multiplier`` / ``sample_rate`` are Opacus's names for sigma / q.
        """
        if noise_multiplier is not None:
            if sigma is not None:
                raise ValueError("give sigma or noise_multiplier, not both")
            sigma = noise_multiplier
        if sample_rate is not None:
            if q is not None:
                raise ValueError("give q or sample_rate, not both")
            q = sample_rate
        if q is None and sampling == ALL:
            q = 1.0
        if q is None:
            raise ValueError("q (sampling probability in [0, 1]) is required")
        if sigma is None:
            raise ValueError("sigma (noise multiplier >= 0) is required")
        count = check_count("count", count)
        event = SampledGaussian(q=q, sigma=sigma, count=max(count, 1), note=note,
                                sampling=sampling, relation=self.relation)
        if count:
            self._append(event)

    def step_schedule(self, q: float, sigmas: Iterable[float], *, note: str = "",
                      sampling: str = POISSON) -> None:
        """Record one Gaussian step per sigma in ``sigmas`` (a noise schedule), same q and
        ``sampling`` (as in :meth:`step`)."""
        self._append(GaussianSchedule(q=q, sigmas=np.asarray(list(sigmas) if not isinstance(
            sigmas, np.ndarray) else sigmas, dtype=float), note=note, sampling=sampling,
            relation=self.relation))

    def laplace(self, b: float, count: int = 1, *, sensitivity: float = 1.0,
                note: str = "") -> None:
        """Record ``count`` Laplace releases of scale ``b`` and L1 ``sensitivity``."""
        count = check_count("count", count)
        event = Laplace(b=b, count=max(count, 1), sensitivity=sensitivity, note=note,
                        relation=self.relation)
        if count:
            self._append(event)

    def dp_step(self, eps: float, delta: float = 0.0, count: int = 1, *, note: str = "") -> None:
        """Record ``count`` releases known only to be (eps, delta)-DP (delta=0: pure DP)."""
        count = check_count("count", count)
        event = ApproxDP(eps=eps, delta=delta, count=max(count, 1), note=note,
                         relation=self.relation)
        if count:
            self._append(event)

    def allocate(self, sigma: float, steps: int, selected: int = 1, epochs: int = 1, *,
                 note: str = "") -> None:
        """Record ``epochs`` epochs of random allocation ("balls in bins"): every example in
        ``selected`` of the ``steps`` steps of an epoch, Gaussian noise multiplier ``sigma``
        (:class:`accounting.allocation.RandomAllocation`; certified by method="pld", the
        RDP methods count it without amplification)."""
        from .allocation import RandomAllocation

        self._append(RandomAllocation(sigma, steps, selected, epochs, note=note,
                                      relation=self.relation))

    def _allocations(self) -> list[Any]:
        """The random-allocation events (duck-typed: they build their own PLDs)."""
        return [e for e in self._events if callable(getattr(e, "pld_parts", None))]

    def record(self, event: Event) -> None:
        """Record an already-built event."""
        if not isinstance(event, Event):
            raise ValueError(f"event must be an accounting.events.Event, got {type(event)!r}")
        self._check_event_relation(event)
        if event.steps:
            self._append(event)

    def converted(self, relation: str) -> PrivacyLedger:
        """A new ledger of ``relation`` holding this ledger's events, each converted where a
        valid conversion exists (:func:`accounting.relations.convert_event`), else ValueError."""
        relation = check_relation("relation", relation)
        new = PrivacyLedger(relation=relation, orders=self.orders)
        new._events = [convert_event(e, relation) for e in self._events]
        return new

    # ------------------------------------------------------------------ views
    @property
    def events(self) -> tuple[Event, ...]:
        """The recorded events, in order."""
        return tuple(self._events)

    @property
    def steps(self) -> int:
        """Total number of releases recorded."""
        return sum(e.steps for e in self._events)

    def __len__(self) -> int:
        return self.steps

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
        """Distinct (q, sigma) pairs of all Gaussian steps with their step counts.

        Sorted by (q, sigma); memoised until the next recorded event.
        """
        if self._groups is None:
            self._groups = sgm_groups(self._events)
        return self._groups

    def _other(self, cls: type) -> list[Any]:
        return [e for e in self._events if isinstance(e, cls)]

    def why_infinite(self) -> str | None:
        """Why eps is unbounded, or None when every release has noise."""
        return no_privacy_reason(self.sgm_groups(), self._events)

    # ------------------------------------------------------------------ RDP
    def _sgm_rdp(self, orders: np.ndarray, use_cache: bool = True) -> np.ndarray:
        qs, sigmas, counts = self.sgm_groups()
        if qs.size == 0:
            return np.zeros(orders.size)
        if not use_cache:
            per = rdp_sgm_many(qs, sigmas, orders)
        else:
            cache = self._cache if np.array_equal(orders, self.orders) else {}
            keys = list(zip(qs.tolist(), sigmas.tolist()))
            missing = [i for i, k in enumerate(keys) if k not in cache]
            if missing:
                new = rdp_sgm_many(qs[missing], sigmas[missing], orders)
                for row, i in zip(new, missing):
                    cache[keys[i]] = row
            per = np.stack([cache[k] for k in keys])
        with np.errstate(invalid="ignore"):
            out = (per * counts[:, None]).sum(axis=0)
        return np.where(np.isnan(out), np.inf, out)

    def _rdp_at(self, orders: np.ndarray, use_cache: bool = True) -> np.ndarray:
        total = self._sgm_rdp(orders, use_cache)
        for e in self._other(Laplace):
            total = total + e.count * rdp_laplace(e.b, orders, e.sensitivity)
        for e in self._allocations():  # sound without amplification: k Gaussians per epoch
            total = total + e.epochs * e.selected * orders / (2.0 * e.sigma**2)
        for e in self._other(ApproxDP):
            if e.pure:
                if math.isinf(e.eps):
                    total = total + np.inf
                else:
                    total = total + e.count * rdp_pure_dp(e.eps, orders)
        return total

    def rdp(self, orders: object = None) -> np.ndarray:
        """Composed RDP at each order (the ledger's orders unless given).

        Gaussian and Laplace steps and pure-DP releases have RDP curves and add up;
        (eps, delta>0) releases have none and are added afterwards by basic composition.
        """
        o = self.orders if orders is None else check_orders("orders", orders)
        return self._rdp_at(o, use_cache=orders is None)

    def _approx_spent(self) -> tuple[float, float]:
        """(sum eps, sum delta) of the (eps, delta>0) releases."""
        approx = [e for e in self._other(ApproxDP) if not e.pure]
        eps = sum(e.count * e.eps for e in approx)
        delta = sum(e.count * e.delta for e in approx)
        return eps, delta

    # ------------------------------------------------------------------ epsilon
    def epsilon(
        self,
        delta: float,
        method: str = "rdp",
        *,
        optimize_order: bool = False,
        gaussian: str = "analytic",
        warn: bool = True,
    ) -> float:
        """eps for the target delta under one accountant.

        Args:
            delta: target delta in (0, 1).
            method: one of :data:`METHODS` ("rdp": improved conversion, the default;
                "rdp-classic"; "moments" (Abadi et al. 2016, same value as rdp-classic);
                "zcdp" (subsampling ignored: conservative); "advanced"; "basic"; "prv": the
                PRV estimate, see :meth:`epsilon_bounds`; "pld": the certified upper bound
                from privacy loss distributions, :func:`accounting.pld_epsilon`, the
                tightest sound method) or the labelled approximation
                "zcdp-approx" (Yu et al. 2019, rho ~ q^2/sigma^2; may under-report).
            optimize_order: for the RDP methods, refine the best grid order by a bounded
                continuous search (never worse than the grid).
            gaussian: per-step Gaussian eps for "basic"/"advanced": "analytic" (exact, Balle &
                Wang 2018) or "classical" (Dwork & Roth Thm A.1, warns outside eps < 1).
            warn: emit :class:`OrderGridWarning` / :class:`NoPrivacyWarning`.

        Returns:
            eps (``math.inf`` when no finite bound exists; :meth:`why_infinite` says why).
        """
        return self.epsilon_and_order(delta, method, optimize_order=optimize_order,
                                      gaussian=gaussian, warn=warn).eps

    def epsilon_and_order(
        self,
        delta: float,
        method: str = "rdp",
        *,
        optimize_order: bool = False,
        gaussian: str = "analytic",
        warn: bool = True,
    ) -> DPResult:
        """Like :meth:`epsilon`, also returning the optimal order (None where meaningless)."""
        delta = check_delta("delta", delta)
        check_choice("method", method, METHODS + APPROXIMATE_METHODS)
        check_choice("gaussian", gaussian, ("analytic", "classical"))
        if not self._events:
            return DPResult(0.0, None)
        reason = self.why_infinite()
        if reason is not None:
            if warn:
                warnings.warn(f"eps is infinite: {reason}", NoPrivacyWarning, stacklevel=3)
            return DPResult(math.inf, None)
        if self._allocations() and method in ("basic", "advanced", "prv", "zcdp-approx"):
            raise ValueError(f"method={method!r} cannot account random allocation "
                             "(ledger.allocate): use method='pld' (certified bracket) or the "
                             "RDP methods (no amplification)")
        if method in ("basic", "advanced"):
            return DPResult(self._composition_eps(delta, method, gaussian), None)
        if method == "prv":
            return DPResult(prv_epsilon(self._events, delta).estimate, None)
        if method == "pld":
            return DPResult(pld_epsilon(self._events, delta).upper, None)
        res = self._epsilon_direct(delta, method, optimize_order, warn)
        alt = self._group_add_remove()
        if alt is not None and method in ("rdp", "rdp-classic", "moments"):
            # Poisson steps under replace-one: group privacy 2 of the add/remove accounting
            gp = group_privacy_epsilon(lambda d: alt.epsilon(d, method, warn=False), delta)
            if gp < res.eps:
                return DPResult(gp, None)
        return res

    def _group_add_remove(self) -> PrivacyLedger | None:
        """This ledger restated under add/remove when some Poisson step (0 < q < 1) is under
        replace-one and every release is Gaussian (their add/remove meaning is known), for
        the group-privacy bound; else None."""
        if not any(isinstance(e, (SampledGaussian, GaussianSchedule))
                   and uses_group_privacy(e.sampling, e.relation, e.q) for e in self._events):
            return None
        if not all(isinstance(e, (SampledGaussian, GaussianSchedule)) for e in self._events):
            return None
        return self.converted(ADD_REMOVE)

    def _epsilon_direct(self, delta: float, method: str, optimize_order: bool,
                        warn: bool) -> DPResult:
        approx_eps, approx_delta = self._approx_spent()
        rem = delta - approx_delta
        if rem <= 0:
            if warn:
                warnings.warn(
                    f"eps is infinite: the recorded (eps, delta) releases already spend "
                    f"delta={approx_delta:.3g} >= target {delta:.3g}",
                    NoPrivacyWarning, stacklevel=3)
            return DPResult(math.inf, None)
        if method in ("zcdp", "zcdp-approx"):
            rho = self._zcdp_rho(approximate=method == "zcdp-approx")
            res = comp.zcdp_to_dp(rho, rem)
            return DPResult(res.eps + approx_eps, None)
        curve = self.rdp()
        if method == "moments":
            lm, lam = log_moments(curve, self.orders)
            res = moments_epsilon(lm, lam, rem, warn_edge=warn)
            res = self._with_pure(DPResult(res.eps, None if res.order is None
                                           else res.order + 1.0))
            return DPResult(res.eps + approx_eps, res.order)
        conversion = "classic" if method == "rdp-classic" else "improved"
        with warnings.catch_warnings():
            if optimize_order or not warn:
                warnings.simplefilter("ignore", OrderGridWarning)
            res = rdp_to_dp(curve, self.orders, rem, conversion)
        if optimize_order and res.order is not None:
            res = self._refine_order(curve, rem, conversion, res)
        res = self._with_pure(res)
        return DPResult(res.eps + approx_eps, res.order)

    def _with_pure(self, res: DPResult) -> DPResult:
        """Order alpha = inf: with only pure-DP/Laplace releases the RDP curve tends to their
        summed eps, an exact (eps, 0) guarantee that no finite order can beat."""
        pure_total = self._pure_total()
        if pure_total is not None and pure_total < res.eps:
            return DPResult(pure_total, math.inf)
        return res

    def _pure_total(self) -> float | None:
        """Sum of pure eps when every release is pure DP or Laplace, else None."""
        total = 0.0
        for e in self._events:
            if isinstance(e, Laplace):
                total += e.count * e.eps
            elif isinstance(e, ApproxDP) and e.pure:
                total += e.count * e.eps
            elif isinstance(e, ApproxDP):
                continue
            else:
                return None
        return total

    def _refine_order(self, curve: np.ndarray, delta: float, conversion: str,
                      grid: DPResult) -> DPResult:
        orders = self.orders
        idx = int(np.searchsorted(orders, grid.order))
        lo = orders[idx - 1] if idx > 0 else 1.0 + (orders[0] - 1.0) / 100.0
        hi = orders[idx + 1] if idx + 1 < orders.size else orders[-1] * 4.0
        cont = optimize_order(lambda a: self._rdp_at(a, use_cache=False), delta, conversion,
                              bracket=(float(lo), float(hi)))
        return cont if cont.eps < grid.eps else grid

    def _zcdp_rho(self, approximate: bool) -> float:
        """Total rho. Sound: 1/(2 sigma^2) per Gaussian step with q > 0 (no amplification);
        eps^2/2 per pure-DP or Laplace release (Bun & Steinke 2016, Prop. 3.3)."""
        qs, sigmas, counts = self.sgm_groups()
        rho = 0.0
        for q, s, c in zip(qs, sigmas, counts):
            if q == 0:
                continue
            per = (comp.zcdp_sampled_gaussian_approx(q, s) if approximate
                   else comp.zcdp_gaussian(s))
            rho += c * per
        for e in self._other(Laplace):
            rho += e.count * e.eps**2 / 2.0
        for e in self._allocations():
            rho += e.epochs * e.selected / (2.0 * e.sigma**2)
        for e in self._other(ApproxDP):
            if e.pure:
                rho += e.count * e.eps**2 / 2.0
        return rho

    def _per_step_dp(self, delta_per_step: float, gaussian: str) -> tuple[np.ndarray, ...]:
        """(eps_i, delta_i, count_i) of every release; each Gaussian step is calibrated so
        that its delta after amplification by sampling is ``delta_per_step``."""
        qs, sigmas, counts = self.sgm_groups()
        keep = qs > 0
        qs, sigmas, counts = qs[keep], sigmas[keep], counts[keep]
        d_step = np.minimum(delta_per_step / np.maximum(qs, 1e-300), 0.5)
        if gaussian == "analytic":
            e0 = comp.analytic_gaussian_epsilons(sigmas, d_step)
        else:
            with np.errstate(divide="ignore"):
                e0 = np.sqrt(2.0 * np.log(1.25 / d_step)) / sigmas
            if (e0 >= 1).any():
                warnings.warn("the classical Gaussian calibration (Dwork & Roth Thm A.1) is "
                              "used outside eps < 1 for some steps: not a proven bound",
                              comp.RangeWarning, stacklevel=4)
        with np.errstate(over="ignore"):
            amp = np.where(np.isinf(e0), np.inf,
                           np.log1p(qs * np.expm1(np.minimum(e0, 700.0))))
        big = np.isfinite(e0) & (e0 > 700.0)
        amp[big] = e0[big] + np.log(qs[big])  # log(1 + q(e^e - 1)) ~ e + log q for huge e
        eps_l = [amp]
        del_l = [qs * d_step]
        cnt_l = [counts.astype(float)]
        for e in self._other(Laplace):
            eps_l.append(np.array([e.eps]))
            del_l.append(np.array([0.0]))
            cnt_l.append(np.array([float(e.count)]))
        for e in self._other(ApproxDP):
            eps_l.append(np.array([e.eps]))
            del_l.append(np.array([e.delta]))
            cnt_l.append(np.array([float(e.count)]))
        return np.concatenate(eps_l), np.concatenate(del_l), np.concatenate(cnt_l)

    def _composition_eps(self, delta: float, method: str, gaussian: str) -> float:
        """Basic / advanced composition with a sound split of delta.

        Delta split: the (eps, delta>0) releases keep their own delta; what remains, R, goes
        to the Gaussian steps. basic: each of the T Gaussian steps gets R/T after
        amplification (per-step delta R/(T q) before it). advanced: a share f R is the
        slack delta' and each step gets (1-f) R / T; f is chosen from a fixed grid
        {0.05, ..., 0.95} (data-independent, so the minimum over it is still a valid bound).
        """
        _, approx_delta = self._approx_spent()
        rem = delta - approx_delta
        if rem <= 0:
            return math.inf
        qs, _, counts = self.sgm_groups()
        n_gauss = int(counts[qs > 0].sum()) if qs.size else 0
        if method == "basic":
            e, d, c = self._per_step_dp(rem / max(n_gauss, 1), gaussian)
            return float(np.sum(e * c)) if e.size else 0.0
        best = math.inf
        for f in _ADVANCED_SPLITS:
            e, d, c = self._per_step_dp((1.0 - f) * rem / max(n_gauss, 1), gaussian)
            if e.size == 0:
                return 0.0
            if np.isinf(e).any():
                return math.inf
            total = math.sqrt(2.0 * math.log(1.0 / (f * rem)) * float(np.sum(c * e * e)))
            total += float(np.sum(c * e * np.expm1(e)))
            best = min(best, total)
        return best

    def epsilon_conservative(
        self, delta: float, resolution: float = 1e-3, method: str = "rdp"
    ) -> ConservativeEpsilon:
        """Fast upper bound: every sigma rounded DOWN onto the grid (1 + resolution)^k.

        Less noise can only increase eps, so the result is a valid upper bound; the same
        computation with sigmas rounded UP is a lower bound on the exact RDP value, so
        ``max_excess = upper - lower`` bounds how much the fast answer overstates. Costs
        O(distinct grid points x orders), independent of the number of steps.
        """
        delta = check_delta("delta", delta)
        check_choice("method", method, ("rdp", "rdp-classic", "moments"))
        groups = self.sgm_groups()
        sig0 = groups.sigmas
        if 2 * np.unique(round_sigmas(sig0, resolution, "down")).size > np.unique(sig0).size:
            # the grid does not halve the distinct sigmas: two rounded passes would cost
            # more than the exact answer, so give that (excess 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ConservativeEpsilon(self.epsilon(delta, method), 0.0, resolution)
        bounds = []
        for direction in ("down", "up"):
            trial = self._with_groups(rounded_groups(groups, resolution, direction))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bounds.append(trial.epsilon(delta, method))
        upper, lower = bounds
        return ConservativeEpsilon(upper, max(0.0, upper - lower), resolution)

    def _with_groups(self, groups: Groups) -> PrivacyLedger:
        """A ledger whose Gaussian steps are ``groups`` and whose other releases are this
        ledger's (same orders, sharing the pure RDP memo)."""
        trial = PrivacyLedger(orders=self.orders)
        for q, s, c in zip(*groups):  # already the accounted Poisson add/remove pairs
            trial._events.append(SampledGaussian(q, s, int(c)))
        for e in self._events:
            if not isinstance(e, (SampledGaussian, GaussianSchedule)):
                trial._events.append(e)
        trial._cache = self._cache
        return trial

    def get_epsilon(self, delta: float) -> float:
        """Opacus-style alias of :meth:`epsilon` with the default (improved RDP) method."""
        return self.epsilon(delta)

    def get_privacy_spent(self, delta: float) -> tuple[float, float | None]:
        """Opacus-style (eps, best order) with the improved RDP conversion."""
        res = self.epsilon_and_order(delta)
        return res.eps, res.order

    def epsilon_bounds(self, delta: float, method: str = "prv",
                       **kwargs: Any) -> tuple[float, float, float]:
        """(lower, estimate, upper) eps: "prv" from prv-accountant (:func:`accounting.prv_epsilon`,
        its own error bounds) or "pld" (:func:`accounting.pld_epsilon`, both ends certified).
        ``kwargs`` go to that function."""
        check_choice("method", method, ("prv", "pld"))
        if method == "prv" and self._allocations():
            raise ValueError("prv-accountant cannot account random allocation "
                             "(ledger.allocate): use method='pld'")
        if method == "pld":
            return pld_epsilon(self._events, delta, **kwargs)  # a (lower, estimate, upper) tuple
        return prv_epsilon(self._events, delta, **kwargs)

    def epsilon_report(self, delta: float, *, prv: bool = True) -> EpsilonReport:
        """Every sound method side by side (and the PRV bounds when ``prv``), as an
        :class:`EpsilonReport` (a dict of floats carrying delta, relation and samplings)."""
        out: dict[str, float] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OrderGridWarning)
            for m in METHODS:
                if m == "prv" or (self._allocations() and m in ("basic", "advanced")):
                    continue
                out[m] = self.epsilon(delta, m)
            if prv and not self._allocations():
                try:
                    lo, est, up = self.epsilon_bounds(delta)
                except PRVUnavailable:
                    pass  # the peer's limitation: the report simply has no PRV entries
                else:
                    out.update({"prv-lower": lo, "prv": est, "prv-upper": up})
        return EpsilonReport(out, delta=delta, relation=self.relation, samplings=self.samplings)

    def delta(self, eps: float, method: str = "rdp") -> float:
        """Smallest delta for which the ledger is (eps, delta)-DP: an upper bound from "rdp",
        "rdp-classic" or "pld" (the certified upper end, :func:`accounting.pld_delta`)."""
        eps = check_eps("eps", eps)
        check_choice("method", method, ("rdp", "rdp-classic", "pld"))
        if not self._events:
            return 0.0
        if self.why_infinite() is not None:
            return 1.0
        if method == "pld":
            return pld_delta(self._events, eps, with_lower=False)[1]
        approx_eps, approx_delta = self._approx_spent()
        if eps < approx_eps:
            return 1.0
        conversion = "classic" if method == "rdp-classic" else "improved"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OrderGridWarning)
            res = dp_delta(self.rdp(), self.orders, eps - approx_eps, conversion)
        return float(min(1.0, res.delta + approx_delta))

    # ------------------------------------------------------------------ budgets
    def would_exceed(
        self,
        eps_budget: float,
        delta: float,
        q: float | None = None,
        sigma: float | None = None,
        count: int = 1,
        *,
        method: str = "rdp",
        sampling: str = POISSON,
    ) -> bool:
        """Would ``count`` more (q, sigma) steps push eps above ``eps_budget``? No mutation.

        Without q and sigma: is the budget already exceeded? Approximations are refused.
        """
        eps_budget = check_eps("eps_budget", eps_budget)
        if method not in METHODS:
            raise ValueError(f"method must be a sound method {METHODS}, got {method!r} "
                             "(approximations may under-report and never decide a budget)")
        trial = self.copy()
        if q is not None or sigma is not None:
            trial.step(q=q, sigma=sigma, count=count, sampling=sampling)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return trial.epsilon(delta, method) > eps_budget

    # ------------------------------------------------------------------ composition
    def copy(self) -> PrivacyLedger:
        """An independent ledger with the same history (shares only the pure RDP memo)."""
        new = PrivacyLedger(relation=self.relation, orders=self.orders)
        new._events = list(self._events)
        new._cache = self._cache
        new._groups = self._groups
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

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": LEDGER_FORMAT,
            "relation": self.relation,
            "orders": self.orders.tolist(),
            "events": [e.to_dict() for e in self._events],
        }

    def to_json(self, **kwargs: Any) -> str:
        """The full per-step history as JSON (floats round-trip exactly)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
            raise ValueError(f"not a ledger: expected format {LEDGER_FORMAT!r}")
        ledger = cls(relation=data.get("relation", ADD_REMOVE), orders=data.get("orders"))
        events = data.get("events", [])
        if not isinstance(events, list):
            raise ValueError("ledger 'events' must be a list")
        for item in events:
            event = event_from_dict(item)
            ledger._check_event_relation(event)
            ledger._events.append(event)
        ledger._groups = None
        return ledger

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"text is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=1))

    @classmethod
    def load(cls, path: str | Path) -> PrivacyLedger:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"path {str(p)!r} does not exist or is not a file")
        return cls.from_json(p.read_text())

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PrivacyLedger) and self.relation == other.relation
                and np.array_equal(self.orders, other.orders) and self._events == other._events)

    def __copy__(self) -> PrivacyLedger:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> PrivacyLedger:
        new = self.copy()
        new._cache = _copy.copy(self._cache)
        return new


def parallel_epsilon(ledgers: Iterable[PrivacyLedger], delta: float,
                     method: str = "rdp", *, warn: bool = True) -> float:
    """Parallel composition over disjoint data: the worst (max) eps over the ledgers."""
    values = [lg.epsilon(delta, method, warn=warn) for lg in ledgers]
    return max(values) if values else 0.0
