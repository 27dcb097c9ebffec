"""Typed privacy events: every release the ledger counts is one of these records.

Like dp-accounting's ``DpEvent``s, each event is a value you can print, serialise and
count; unlike a bare tuple, it says what it is ("Poisson-sampled Gaussian q=0.01
sigma=6 x 10000"). A ``note`` carries the reason a defense recorded it (e.g. "claimed only").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

from ._validate import (
    check_array,
    check_count,
    check_eps,
    check_positive,
    check_probability,
    check_sigma,
)
from .registry import DPPart, GaussianPart, LaplacePart, event_class, register_event
from .relations import (
    ADD_REMOVE,
    ALL,
    POISSON,
    REPLACE_ONE,
    check_gaussian_pair,
    check_relation,
    check_sampling,
    converted_note,
    describe_accounting,
    gaussian_lower,
    gaussian_upper,
    group_privacy_2,
    uses_group_privacy,
)

__all__ = ["Event", "SampledGaussian", "GaussianSchedule", "Laplace", "ApproxDP", "event_from_dict",
           "register_event"]


class Event:
    """Base class: ``steps`` releases, a one-line ``describe()``, and a JSON dict form.

    A subclass is a frozen dataclass that states its parameters as fields, names a checker
    per field in ``checks`` (``name -> check(name, value) -> normalised value``), says in
    ``gaussian`` whether it is a Gaussian step (its sampling/relation pair is checked as
    such) and implements ``steps`` and ``describe``. Validation, ``to_dict`` and
    ``from_dict`` are shared here; accounting is wired in :mod:`accounting.registry`.
    """

    kind: ClassVar[str] = ""
    checks: ClassVar[dict[str, Callable[[str, Any], Any]]] = {}
    gaussian: ClassVar[bool] = False
    note: str
    #: how the batch or cohort was drawn (:data:`accounting.relations.SAMPLINGS`)
    sampling: str
    #: the neighbouring relation it is accounted under (:data:`~accounting.relations.RELATIONS`)
    relation: str

    def __post_init__(self) -> None:
        for name, check in self.checks.items():
            object.__setattr__(self, name, check(name, getattr(self, name)))
        object.__setattr__(self, "note", str(self.note))
        self._check_relation_fields(self.gaussian)

    @property
    def steps(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """``{"type": kind, field: value, ...}`` (arrays as lists); read by
        :func:`event_from_dict`."""
        out: dict[str, Any] = {"type": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.tolist() if isinstance(value, np.ndarray) else value
        return out

    def _note(self) -> str:
        return f"  [{self.note}]" if self.note else ""

    def _how(self) -> str:
        """" [fixed-size, replace-one: ...]" where not the default Poisson add/remove."""
        if self.sampling in (POISSON, ALL) and self.relation == ADD_REMOVE:
            return ""
        how = describe_accounting(self.sampling, self.relation)
        return f" ({self.sampling}, {self.relation}{': ' + how if how else ''})"

    def _check_relation_fields(self, gaussian: bool) -> None:
        object.__setattr__(self, "relation", check_relation("relation", self.relation))
        if gaussian:
            check_gaussian_pair(self.sampling, self.relation, self.q)
        elif check_sampling("sampling", self.sampling) != ALL:
            raise ValueError(f"sampling={self.sampling!r} cannot be accounted for a {self.kind} "
                             f"release under relation={self.relation!r}: no amplification by "
                             "sampling is implemented for it; record sampling='all'")


def _sigmas(name: str, value: object) -> np.ndarray:
    arr = check_array(name, np.asarray(value, dtype=float).ravel(), low=0.0,
                      allow_empty=False, what="noise multipliers, at least one step").copy()
    tiny = arr[(arr > 0) & (arr < np.finfo(float).tiny)]
    if tiny.size:
        raise ValueError(f"{name} holds {tiny.size} subnormal value(s) (e.g. {tiny[0]!r}, "
                         f"below {np.finfo(float).tiny:.3g}): use 0 or a normal float")
    arr.setflags(write=False)
    return arr


def _inf_eps(name: str, value: object) -> float:
    return check_eps(name, value, allow_inf=True)


@dataclass(frozen=True)
class SampledGaussian(Event):
    """``count`` steps of the Poisson-sampled Gaussian mechanism (q, noise multiplier sigma)."""

    q: float
    sigma: float
    count: int = 1
    note: str = ""
    sampling: str = POISSON
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "sampled_gaussian"
    checks: ClassVar[dict] = {"q": check_probability, "sigma": check_sigma,
                              "count": check_count}
    gaussian: ClassVar[bool] = True

    @property
    def steps(self) -> int:
        return self.count

    def describe(self) -> str:
        if self.sampling == POISSON:
            what = "Gaussian" if self.q == 1 else f"Poisson-sampled Gaussian q={self.q:.6g}"
        elif self.sampling == ALL:
            what = "Gaussian (every record)"
        else:
            what = f"{self.sampling} batches (B/n={self.q:.6g}) Gaussian"
        return f"{what} sigma={self.sigma:.6g} x {self.count}{self._how()}{self._note()}"


@dataclass(frozen=True, eq=False)
class GaussianSchedule(Event):
    """One Poisson-sampled Gaussian step per entry of ``sigmas`` (a noise schedule), same q.

    Stored as an array so that a million-step schedule costs one object, not a million.
    """

    q: float
    sigmas: np.ndarray = field(repr=False)
    note: str = ""
    sampling: str = POISSON
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "gaussian_schedule"
    checks: ClassVar[dict] = {"q": check_probability, "sigmas": _sigmas}
    gaussian: ClassVar[bool] = True

    @property
    def steps(self) -> int:
        return int(self.sigmas.size)

    def describe(self) -> str:
        s = self.sigmas
        distinct = np.unique(s).size
        what = ("Poisson-sampled" if self.sampling == POISSON else self.sampling)
        return (f"{what} Gaussian q={self.q:.6g} sigma schedule {s[0]:.6g} -> "
                f"{s[-1]:.6g} (min {s.min():.6g}) x {s.size} steps, {distinct} distinct"
                f"{self._how()}{self._note()}")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, GaussianSchedule) and self.q == other.q
                and self.note == other.note and np.array_equal(self.sigmas, other.sigmas)
                and (self.sampling, self.relation) == (other.sampling, other.relation))

    __hash__ = None


@dataclass(frozen=True)
class Laplace(Event):
    """``count`` releases of the Laplace mechanism, scale b, L1 sensitivity (pure eps = sens/b)."""

    b: float
    count: int = 1
    sensitivity: float = 1.0
    note: str = ""
    sampling: str = ALL
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "laplace"
    checks: ClassVar[dict] = {"b": check_positive, "count": check_count,
                              "sensitivity": check_positive}

    @property
    def steps(self) -> int:
        return self.count

    @property
    def eps(self) -> float:
        return self.sensitivity / self.b

    def describe(self) -> str:
        return (f"Laplace b={self.b:.6g} sensitivity={self.sensitivity:.6g} "
                f"(eps={self.eps:.6g}) x {self.count}{self._how()}{self._note()}")


@dataclass(frozen=True)
class ApproxDP(Event):
    """``count`` releases known only as (eps, delta)-DP (delta = 0: pure eps-DP)."""

    eps: float
    delta: float = 0.0
    count: int = 1
    note: str = ""
    sampling: str = ALL
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "approx_dp"
    checks: ClassVar[dict] = {"eps": _inf_eps, "delta": check_probability, "count": check_count}

    @property
    def steps(self) -> int:
        return self.count

    @property
    def pure(self) -> bool:
        return self.delta == 0.0

    def describe(self) -> str:
        eps = "inf" if math.isinf(self.eps) else f"{self.eps:.6g}"
        return f"({eps}, {self.delta:.3g})-DP release x {self.count}{self._how()}{self._note()}"


# ---------------------------------------------------------------- wiring (the registry)
def _gaussian_pairs(e: Event, q: float, sigmas: np.ndarray, counts: np.ndarray,
                   side: str) -> list:
    """The Poisson add/remove pairs that account the steps under their sampling and relation
    (:func:`accounting.relations.gaussian_upper` / ``gaussian_lower``)."""
    mapping = gaussian_upper if side == "upper" else gaussian_lower
    qa, s = mapping(q, sigmas, e.sampling, e.relation)
    return [GaussianPart(qa, s, counts.astype(np.int64),
                         uses_group_privacy(e.sampling, e.relation, q))]


def _any_relation(e: Event, source: str, target: str) -> Event:
    """Mechanism-level parameters: only the relation changes (the accountant recomputes the
    sensitivity)."""
    return replace(e, relation=target, note=converted_note(e, source, target))


def _laplace_to(e: Laplace, source: str, target: str) -> Laplace | None:
    if target != REPLACE_ONE:
        return None
    return replace(e, sensitivity=2.0 * e.sensitivity, relation=target,
                   note=converted_note(e, source, target))


def _approx_to(e: ApproxDP, source: str, target: str) -> ApproxDP | None:
    if target != REPLACE_ONE:
        return None
    eps, delta = group_privacy_2(e.eps, e.delta)
    return replace(e, eps=eps, delta=delta, relation=target,
                   note=converted_note(e, source, target))


register_event(SampledGaussian, convert=_any_relation, **{"*": lambda e, side: _gaussian_pairs(
    e, e.q, np.array([e.sigma]), np.array([e.count]), side)})
register_event(GaussianSchedule, convert=_any_relation, **{"*": lambda e, side: _gaussian_pairs(
    e, e.q, *np.unique(e.sigmas, return_counts=True), side)})
register_event(Laplace, convert=_laplace_to,
               **{"*": lambda e, side: [LaplacePart(e.b, e.sensitivity, e.count)]})
register_event(ApproxDP, convert=_approx_to,
               **{"*": lambda e, side: [DPPart(e.eps, e.delta, e.count)]})


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output; unknown types are refused by name."""
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError(f"an event must be a dict with a 'type' key, got {data!r}")
    cls = event_class(data["type"])
    fields_ = {k: v for k, v in data.items() if k != "type"}
    if fields_.get("eps") in ("inf", "Infinity"):
        fields_["eps"] = math.inf
    try:
        return cls(**fields_)
    except TypeError as exc:
        raise ValueError(f"bad fields for event type {data['type']!r}: {exc}") from exc
