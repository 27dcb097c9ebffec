"""Typed privacy events: every release the ledger counts is one of these records.

Like dp-accounting's ``DpEvent``s, each event is a value you can print, serialise and
count; unlike a bare tuple, it says what it is ("Poisson-sampled Gaussian q=0.01
sigma=6 x 10000"). A ``note`` carries the reason a defense recorded it (e.g. "claimed only").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
from .relations import (
    ADD_REMOVE,
    ALL,
    POISSON,
    check_gaussian_pair,
    check_relation,
    check_sampling,
    describe_accounting,
)

__all__ = ["Event", "SampledGaussian", "GaussianSchedule", "Laplace", "ApproxDP", "event_from_dict",
           "register_event"]


class Event:
    """Base class: ``steps`` releases, a one-line ``describe()``, and a JSON dict form."""

    kind: ClassVar[str] = ""
    note: str
    #: how the batch or cohort was drawn (:data:`accounting.relations.SAMPLINGS`)
    sampling: str
    #: the neighbouring relation it is accounted under (:data:`~accounting.relations.RELATIONS`)
    relation: str

    @property
    def steps(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

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
            check_gaussian_pair(self.sampling, self.relation, self.q)  # type: ignore[attr-defined]
        elif check_sampling("sampling", self.sampling) != ALL:
            raise ValueError(f"sampling={self.sampling!r} cannot be accounted for a {self.kind} "
                             f"release under relation={self.relation!r}: no amplification by "
                             "sampling is implemented for it; record sampling='all'")

    def _rel_dict(self) -> dict[str, Any]:
        return {"sampling": self.sampling, "relation": self.relation}


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", check_probability("q", self.q))
        object.__setattr__(self, "sigma", check_sigma("sigma", self.sigma))
        object.__setattr__(self, "count", check_count("count", self.count))
        object.__setattr__(self, "note", str(self.note))
        self._check_relation_fields(gaussian=True)

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

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "q": self.q, "sigma": self.sigma, "count": self.count,
                "note": self.note, **self._rel_dict()}


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", check_probability("q", self.q))
        arr = check_array("sigmas", np.asarray(self.sigmas, dtype=float).ravel(), low=0.0,
                          allow_empty=False, what="noise multipliers, at least one step").copy()
        arr.setflags(write=False)
        object.__setattr__(self, "sigmas", arr)
        object.__setattr__(self, "note", str(self.note))
        self._check_relation_fields(gaussian=True)

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

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "q": self.q, "sigmas": self.sigmas.tolist(), "note": self.note,
                **self._rel_dict()}

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, GaussianSchedule) and self.q == other.q
                and self.note == other.note and np.array_equal(self.sigmas, other.sigmas)
                and (self.sampling, self.relation) == (other.sampling, other.relation))

    __hash__ = None  # type: ignore[assignment]


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "b", check_positive("b", self.b))
        object.__setattr__(self, "count", check_count("count", self.count))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))
        object.__setattr__(self, "note", str(self.note))
        self._check_relation_fields(gaussian=False)

    @property
    def steps(self) -> int:
        return self.count

    @property
    def eps(self) -> float:
        return self.sensitivity / self.b

    def describe(self) -> str:
        return (f"Laplace b={self.b:.6g} sensitivity={self.sensitivity:.6g} "
                f"(eps={self.eps:.6g}) x {self.count}{self._how()}{self._note()}")

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "b": self.b, "count": self.count,
                "sensitivity": self.sensitivity, "note": self.note, **self._rel_dict()}


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", check_eps("eps", self.eps, allow_inf=True))
        d = check_probability("delta", self.delta)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "count", check_count("count", self.count))
        object.__setattr__(self, "note", str(self.note))
        self._check_relation_fields(gaussian=False)

    @property
    def steps(self) -> int:
        return self.count

    @property
    def pure(self) -> bool:
        return self.delta == 0.0

    def describe(self) -> str:
        eps = "inf" if math.isinf(self.eps) else f"{self.eps:.6g}"
        return f"({eps}, {self.delta:.3g})-DP release x {self.count}{self._how()}{self._note()}"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "eps": self.eps, "delta": self.delta, "count": self.count,
                "note": self.note, **self._rel_dict()}


_TYPES: dict[str, type] = {
    SampledGaussian.kind: SampledGaussian,
    GaussianSchedule.kind: GaussianSchedule,
    Laplace.kind: Laplace,
    ApproxDP.kind: ApproxDP,
}


def register_event(cls: type) -> type:
    """Make ``event_from_dict`` read events of ``cls`` (keyed by ``cls.kind``); for event
    types defined in other modules (e.g. :class:`accounting.allocation.RandomAllocation`)."""
    _TYPES[cls.kind] = cls
    return cls


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output; unknown types are refused by name."""
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError(f"an event must be a dict with a 'type' key, got {data!r}")
    kind = data["type"]
    if kind not in _TYPES:
        raise ValueError(f"unknown event type {kind!r}; known: {sorted(_TYPES)}")
    fields = {k: v for k, v in data.items() if k != "type"}
    if kind == ApproxDP.kind and fields.get("eps") in ("inf", "Infinity"):
        fields["eps"] = math.inf
    try:
        return _TYPES[kind](**fields)
    except TypeError as exc:
        raise ValueError(f"bad fields for event type {kind!r}: {exc}") from exc
