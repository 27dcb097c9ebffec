"""The one dispatch: which event types exist, what each one is made of for each family of
accountants, and which accountant (method) supports which event.

An event type is registered once, with its *rules*: for every family of accountants that can
account it, a function ``rule(event, side) -> list of parts``, where a part is one of the few
mechanism forms that the accountants compute with (:class:`GaussianPart`, :class:`LaplacePart`,
:class:`DPPart`, :class:`PLDPart`). ``side`` is ``"upper"`` (the parts bound the event from
above) or ``"lower"`` (the parts are dominated by it: a valid lower bound).

Families (:data:`FAMILIES`): ``"rdp"`` (the RDP, classic RDP and moments accountants),
``"zcdp"``, ``"composition"`` (basic and advanced composition), ``"pld"`` and ``"prv"``; the
rule under the key ``"*"`` serves every family without its own rule. An accountant supports
an event exactly when the event's type has a rule for the accountant's family and every part
it gives is a form the accountant computes; anything else is refused by name with
:class:`UnsupportedEventError` (no silent fallback).

Adding an event type = one module of ``accounting/`` with the class (its fields' checkers in
``checks``) and one call::

    register_event(MyEvent, rdp=my_rdp_rule, pld=my_pld_rule)

``import accounting`` imports every module of the package (:func:`import_submodules`), so
the type is registered whichever module a user imports first. The accountants without a
rule refuse it by name; the contract suite (``tests/accounting/test_contracts.py``)
enumerates :func:`event_types` and every accountant, drawing each type from the domains its
fields' checkers declare (:class:`accounting._validate.Domain`).
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = ["UnsupportedEventError", "GaussianPart", "LaplacePart", "DPPart", "PLDPart", "RDPPart",
           "FAMILIES", "register_event", "unregister_event", "event_types", "registered_types",
           "event_class", "rules_of", "parts",
           "why_unsupported", "merge_repeats", "gaussian_groups", "no_privacy_reason",
           "group_pairs", "why_infinite", "pure_total", "converter", "ACCOUNTANTS",
           "register_accountant", "import_submodules"]

#: Families of accountants; an event type gives its parts per family.
FAMILIES = ("rdp", "zcdp", "composition", "pld", "prv")


class UnsupportedEventError(ValueError):
    """An accountant (``method``) cannot account ``event``; ``why`` says why.

    A ValueError, so existing ``except ValueError`` callers keep working."""

    def __init__(self, event: object, method: str, why: str) -> None:
        self.event = event
        self.method = method
        self.why = why
        what = getattr(event, "describe", None)
        text = what() if callable(what) else repr(event)
        super().__init__(f"method={method!r} cannot account the event {text!r}: {why}")


# ---------------------------------------------------------------- parts (mechanism forms)
@dataclass(frozen=True, eq=False)
class GaussianPart:
    """Poisson-sampled Gaussian steps under add/remove: distinct (q, sigma) rows and their
    counts. ``group_privacy``: the event is a Poisson step under replace-one, for which group
    privacy of the add/remove accounting is a second valid bound for the RDP accountant (the
    PLD accountant gets such steps as the +-1 pair instead, a :class:`PLDPart`; see
    :mod:`accounting.relations`)."""

    qs: np.ndarray
    sigmas: np.ndarray
    counts: np.ndarray
    group_privacy: bool = False


@dataclass(frozen=True)
class LaplacePart:
    """``count`` Laplace releases of privacy parameter eps = sensitivity / b."""

    b: float
    sensitivity: float
    count: int

    @property
    def eps(self) -> float:
        return self.sensitivity / self.b

    delta = 0.0


@dataclass(frozen=True)
class DPPart:
    """``count`` releases known only as (eps, delta)-DP (delta = 0: pure)."""

    eps: float
    delta: float
    count: int

    @property
    def pure(self) -> bool:
        return self.delta == 0.0


@dataclass(frozen=True, eq=False)
class RDPPart:
    """A mechanism that states its own per-release RDP upper bound ``rdp(orders)`` (e.g.
    sampling without replacement, Wang, Balle, Kasiviswanathan 2019), ``count`` times.
    ``key``: hashable parameters that determine ``rdp`` (parts with equal keys are merged,
    see :func:`merge_repeats`); None: never merged."""

    rdp: Callable[[np.ndarray], np.ndarray]
    count: int
    key: Any = None


@dataclass(frozen=True, eq=False)
class PLDPart:
    """An event that builds its own discrete PLDs (``pld_parts(h, direction, upper)``,
    ``pld_loss_variance()`` and ``count``), e.g. random allocation."""

    event: Any

    @property
    def count(self) -> int:
        return int(self.event.count)


Rule = Callable[[Any, str], list]
Converter = Callable[[Any, str, str], Any]
_TYPES: dict[str, type] = {}
_RULES: dict[type, dict[str, Rule]] = {}
_CONVERTERS: dict[type, Converter] = {}


def register_event(cls: type, convert: Converter | None = None, **rules: Rule) -> type:
    """Register event type ``cls`` (keyed by ``cls.kind`` for JSON) with its ``rules``
    (family -> ``rule(event, side)``; ``"*"`` via ``**{"*": rule}``) and optionally its
    relation converter ``convert(event, source, target)`` (the event restated under
    ``target``, or None where no valid conversion exists). Calling again adds rules."""
    kind = getattr(cls, "kind", "")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"an event type needs a non-empty class attribute 'kind', got {cls!r}")
    old = _TYPES.get(kind)
    if old is not None and old is not cls and (old.__module__, old.__qualname__) != (
            cls.__module__, cls.__qualname__):
        raise ValueError(f"event kind {kind!r} is already registered for {old.__module__}."
                         f"{old.__qualname__}: choose another kind")
    for family in rules:
        if family != "*" and family not in FAMILIES:
            raise ValueError(f"rule family must be one of {FAMILIES} or '*', got {family!r}")
    _TYPES[kind] = cls
    _RULES.setdefault(cls, {}).update(rules)
    if convert is not None:
        _CONVERTERS[cls] = convert
    return cls


def unregister_event(cls: type) -> None:
    """Remove event type ``cls``, its rules and its converter from the registry (a no-op where
    it is not registered): for a type defined for a while, e.g. by a test."""
    if _TYPES.get(getattr(cls, "kind", None)) is cls:
        del _TYPES[cls.kind]
    _RULES.pop(cls, None)
    _CONVERTERS.pop(cls, None)


def converter(cls: type) -> Converter | None:
    """The relation converter registered for ``cls`` or its nearest registered base."""
    return next((_CONVERTERS[b] for b in cls.__mro__ if b in _CONVERTERS), None)


def event_types() -> tuple[type, ...]:
    """Every registered event type (the contract suite enumerates these)."""
    return tuple(_TYPES.values())


def registered_types() -> Mapping[str, type]:
    """Every registered event type by its ``kind``: a read-only view of the registry."""
    return MappingProxyType(_TYPES)


def event_class(kind: str) -> type:
    """The registered event type of ``kind`` (ValueError naming the known ones)."""
    if kind not in _TYPES:
        raise ValueError(f"unknown event type {kind!r}; known: {sorted(_TYPES)}")
    return _TYPES[kind]


def rules_of(cls: type) -> Mapping[str, Rule]:
    """The rules registered for ``cls`` itself, family -> rule (read-only; empty where none)."""
    return MappingProxyType(dict(_RULES.get(cls, {})))


def _rules(cls: type) -> dict[str, Rule] | None:
    """The rules of ``cls`` or of its nearest registered base (a subclass, e.g. a variant
    built for a retry, is accounted as its base unless registered itself)."""
    for base in cls.__mro__:
        if base in _RULES:
            return _RULES[base]
    return None


def rule_for(event: object, family: str) -> Rule | None:
    rules = _rules(type(event)) or {}
    return rules.get(family, rules.get("*"))


def why_unsupported(event: object, family: str, forms: tuple[type, ...]) -> str | None:
    """Why the family's accountants cannot account ``event`` (None: they can)."""
    rule = rule_for(event, family)
    known = _rules(type(event))
    if known is None:
        return f"{type(event).__name__} is not a registered event type"
    if rule is None:
        return (f"no {family!r} rule is registered for {type(event).__name__} "
                f"(it has rules for {sorted(known) or 'no family'})")
    try:
        got = rule(event, "upper")
    except UnsupportedEventError as exc:
        return exc.why
    bad = [type(p).__name__ for p in got if not isinstance(p, forms)]
    if bad:
        return f"its {family!r} parts {bad} are not forms this accountant computes"
    return None


def _repeat_key(part: object) -> tuple | None:
    """What makes two parts the same release (None: not merged here; Gaussian rows are
    grouped by :func:`gaussian_groups`, PLD parts build their own distributions)."""
    if isinstance(part, LaplacePart):
        return (LaplacePart, part.b, part.sensitivity)
    if isinstance(part, DPPart):
        return (DPPart, part.eps, part.delta)
    if isinstance(part, RDPPart) and part.key is not None:
        return (RDPPart, part.key)
    return None


def merge_repeats(items: Iterable[object]) -> list:
    """``items`` with equal Laplace, (eps, delta) and keyed RDP parts merged into one part
    whose count is the sum (at the first one's place). Sequential composition commutes
    (the composed PLD is a convolution, the composed RDP a sum), so the accounted value
    is unchanged; the cost becomes that of the distinct releases (10^6 interleaved Laplace
    releases were 10^6 RDP curves and 10^6 PLDs)."""
    out: list = []
    where: dict[tuple, int] = {}
    extra: dict[int, int] = {}
    for p in items:
        key = _repeat_key(p)
        if key is None:
            out.append(p)
        elif key in where:
            i = where[key]
            extra[i] = extra.get(i, 0) + int(p.count)
        else:
            where[key] = len(out)
            out.append(p)
    for i, more in extra.items():
        out[i] = replace(out[i], count=int(out[i].count) + more)
    return out


def memo_key(event: object) -> object:
    """``event`` itself where hashable (equal events have equal parts), else None."""
    try:
        hash(event)
    except TypeError:
        return None
    return (type(event), event)


def parts(events: Iterable[object], family: str, method: str, side: str = "upper") -> list:
    """The parts of every event for ``family`` (refused by name where there is no rule),
    equal releases merged (:func:`merge_repeats`)."""
    out: list = []
    memo: dict = {}
    for e in events:
        key = memo_key(e)
        got = memo.get(key) if key is not None else None
        if got is None:
            rule = rule_for(e, family)
            if rule is None:
                raise UnsupportedEventError(e, method, why_unsupported(e, family, ()) or "")
            got = rule(e, side)
            if key is not None:
                memo[key] = got
        out.extend(got)
    return merge_repeats(out)


def group_pairs(
    qs: np.ndarray, sigmas: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge equal (q, sigma) pairs, summing their counts; sorted by (q, sigma)."""
    if qs.size == 0:
        return qs, sigmas, counts
    order = np.lexsort((sigmas, qs))
    qs, sigmas, counts = qs[order], sigmas[order], counts[order]
    new = np.ones(qs.size, dtype=bool)
    new[1:] = (qs[1:] != qs[:-1]) | (sigmas[1:] != sigmas[:-1])
    starts = np.flatnonzero(new)
    return qs[starts], sigmas[starts], np.add.reduceat(counts, starts)


def gaussian_groups(items: Iterable[object]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge the :class:`GaussianPart` rows among ``items`` into distinct (q, sigma) groups
    (sorted by (q, sigma), counts summed)."""
    gs = [p for p in items if isinstance(p, GaussianPart)]
    if not gs:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    return group_pairs(np.concatenate([g.qs for g in gs]),
                       np.concatenate([g.sigmas for g in gs]),
                       np.concatenate([g.counts for g in gs]).astype(np.int64))


def no_privacy_reason(items: Iterable[object]) -> str | None:
    """Why the parts ``items`` give no finite eps (a noiseless sampled Gaussian step, an
    eps = inf release), or None."""
    reasons = []
    items = list(items)
    noiseless = sum(int(c) for g in items if isinstance(g, GaussianPart)
                    for q, s, c in zip(g.qs, g.sigmas, g.counts) if s == 0 and q > 0)
    if noiseless:
        reasons.append(f"{noiseless} Gaussian step(s) with sigma=0 and q>0: no noise, so the "
                       "release is not private at all")
    inf = sum(int(p.count) for p in items if isinstance(p, DPPart) and math.isinf(p.eps))
    if inf:
        reasons.append(f"{inf} release(s) recorded with eps=inf")
    return "; ".join(reasons) or None


def why_infinite(events: Iterable[object]) -> str | None:
    """Why eps of ``events`` is unbounded, or None: each event read through the first family
    that has a rule for it (every rule states the same noise)."""
    items: list = []
    for e in events:
        for family in FAMILIES:
            rule = rule_for(e, family)
            if rule is not None:
                items.extend(rule(e, "upper"))
                break
    return no_privacy_reason(items)


def pure_total(items: Iterable[object]) -> float | None:
    """Summed eps when every part is Laplace or pure DP (an exact (eps, 0) guarantee)."""
    items = list(items)
    if not all(isinstance(p, LaplacePart) or (isinstance(p, DPPart) and p.pure)
               for p in items):
        return None
    return float(sum(p.count * p.eps for p in items))


#: The accountants by method name (filled by :mod:`accounting.accountants`; looked up at run
#: time, so that the PLD and PRV modules reach the RDP accountant without importing it).
ACCOUNTANTS: dict[str, Any] = {}


def register_accountant(acc: Any) -> Any:
    """Make ``acc`` available as ``method=acc.name``."""
    ACCOUNTANTS[acc.name] = acc
    return acc


def import_submodules(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> list[str]:
    """Import every module and subpackage of ``package`` (its ``__path__`` is ``path``) but
    those named in ``skip`` (last component, e.g. ``"__main__"``), so that every event type
    and accountant they define is registered by importing the package; the names imported."""
    skip = set(skip)
    names = [info.name for info in pkgutil.walk_packages(path, package + ".")
             if info.name.rsplit(".", 1)[-1] not in skip]
    for name in names:
        importlib.import_module(name)
    return names
