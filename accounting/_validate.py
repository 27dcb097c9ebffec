"""Input validation shared by every public function (docs/accounting.md).

Each check raises ``ValueError`` naming the argument and the allowed range, before any
work starts. ``bool`` is refused where a number is expected (``True`` is not a rate).

A scalar check used as an event field's checker (``Event.checks``) also declares its
:class:`Domain`, the values worth trying for such a field (read by :func:`domain_of`): the
contract suite draws a new event type from the domains of its fields' checkers, so a field
checker of one's own declares one too (:func:`declare_domain`).
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Real
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "Domain",
    "declare_domain",
    "domain_of",
    "keywords_after_first",
    "check_real",
    "check_probability",
    "check_sigma",
    "check_delta",
    "check_eps",
    "check_count",
    "check_orders",
    "check_positive",
    "check_nonnegative",
    "check_factor",
    "check_choice",
    "check_array",
    "check_same_length",
    "check_instances",
]


_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Domain:
    """The values of a field checker worth trying: a range ``[low, high]`` (integers where
    ``integer``) plus ``extremes`` always tried, or a fixed set of ``choices``; every value
    is one the checker accepts. ``example``: one typical value. Declarative only: tests draw
    from it (the library draws nothing)."""

    low: float
    high: float
    example: Any
    extremes: tuple = ()
    integer: bool = False
    choices: tuple = ()


def declare_domain(domain: Domain) -> Callable[[_F], _F]:
    """Decorator: ``check`` accepts (at least) ``domain`` (read back by :func:`domain_of`)."""
    def wrap(check: _F) -> _F:
        check.domain = domain
        return check
    return wrap


def domain_of(check: object) -> Domain | None:
    """The :class:`Domain` a checker declares, or None."""
    out = getattr(check, "domain", None)
    return out if isinstance(out, Domain) else None


def check_real(name: str, value: object) -> float:
    """Return ``value`` as a float, refusing non-numbers, bools and NaN."""
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating, np.integer)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must not be NaN")
    return out


@declare_domain(Domain(1e-5, 1.0, 0.01, extremes=(1e-9, 1e-7, 0.999999, 1.0)))
def check_probability(name: str, value: object) -> float:
    """A sampling rate: a real number in [0, 1]."""
    out = check_real(name, value)
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {out!r}")
    return out


def _not_subnormal(name: str, out: float) -> float:
    """Refuse a subnormal float (0 < |x| < 2.2e-308): its reciprocal and square overflow or
    lose every digit, so no accountant can answer it honestly."""
    if 0.0 < abs(out) < sys.float_info.min:
        raise ValueError(f"{name}={out!r} is subnormal (below {sys.float_info.min:.3g}): "
                         "use 0 where allowed or a normal float")
    return out


@declare_domain(Domain(0.3, 50.0, 1.0, extremes=(0.01, 0.05, 0.1, 1e3, 1e4)))
def check_sigma(name: str, value: object) -> float:
    """A noise multiplier: a finite real number >= 0 (0 means no noise: infinite eps), not
    subnormal."""
    out = check_real(name, value)
    if out < 0.0 or math.isinf(out):
        raise ValueError(f"{name} must be a finite number >= 0, got {out!r}")
    return _not_subnormal(name, out)


@declare_domain(Domain(0.05, 100.0, 2.0, extremes=(1e-3, 1e6)))
def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A strictly positive real number (not subnormal)."""
    out = check_real(name, value)
    if out <= 0.0 or (math.isinf(out) and not allow_inf):
        raise ValueError(f"{name} must be a finite number > 0, got {out!r}")
    return _not_subnormal(name, out)


@declare_domain(Domain(0.0, 100.0, 1.0, extremes=(1e6,)))
def check_nonnegative(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A real number >= 0 (finite unless ``allow_inf``)."""
    out = check_real(name, value)
    if out < 0.0 or (math.isinf(out) and not allow_inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {out!r}")
    return out


@declare_domain(Domain(1e-3, 1.0, 0.5, extremes=(1e-9, 1.0)))
def check_factor(name: str, value: object) -> float:
    """A multiplicative decay factor in (0, 1]."""
    out = check_real(name, value)
    if not 0.0 < out <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {out!r}")
    return out


@declare_domain(Domain(1e-12, 1e-3, 1e-6, extremes=(1e-15, 0.1)))
def check_delta(name: str, value: object) -> float:
    """A target delta: a real number in the open interval (0, 1)."""
    out = check_real(name, value)
    if not 0.0 < out < 1.0:
        raise ValueError(f"{name} must be in the open interval (0, 1), got {out!r}")
    return out


@declare_domain(Domain(0.0, 5.0, 1.0, extremes=(30.0,)))
def check_eps(name: str, value: object, *, allow_inf: bool = False) -> float:
    """An epsilon: a real number >= 0."""
    out = check_real(name, value)
    if out < 0.0 or (math.isinf(out) and not allow_inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {out!r}")
    return out


#: Largest step count accepted (2^53: every count and sum of counts is exact in a float64
#: and an int64; 10^20 steps used to overflow deep inside numpy).
MAX_COUNT = 2**53
#: Largest Rényi order accepted: beyond it the RDP sums cost memory linear in the order
#: (10^8 took 4 GB) and no conversion at a realistic delta picks such an order.
MAX_ORDER = 1e5


@declare_domain(Domain(1, 1000, 100, extremes=(10**6,), integer=True))
def check_count(name: str, value: object, *, minimum: int = 0) -> int:
    """A step count: an integer >= ``minimum`` and <= :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    out = int(value)
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {out!r}")
    if out > MAX_COUNT:
        raise ValueError(f"{name} must be <= 2**53 ({MAX_COUNT}), got {out!r}: counts beyond "
                         "it are not exact in floating point")
    return out


def check_orders(name: str, orders: Iterable[float] | float) -> np.ndarray:
    """Rényi orders: a non-empty 1-D array of finite reals > 1."""
    try:
        arr = np.atleast_1d(np.asarray(orders, dtype=float))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of real numbers > 1") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of numbers > 1")
    if np.isnan(arr).any() or np.isinf(arr).any():
        raise ValueError(f"{name} must be finite numbers > 1 (got NaN or inf)")
    if (arr <= 1.0).any():
        raise ValueError(f"{name} must all be > 1, got min {arr.min()!r}")
    if (arr > MAX_ORDER).any():
        raise ValueError(f"{name} must all be <= {MAX_ORDER:g} (absurd orders cost memory "
                         f"linear in the order and are never optimal), got {arr.max()!r}")
    return arr


def check_choice(name: str, value: object, allowed: Iterable[object]) -> object:
    """One of a fixed set of names (a method, a direction, a conversion)."""
    allowed = tuple(allowed)
    if isinstance(value, (list, dict, set)) or value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_array(
    name: str,
    values: object,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
    allow_empty: bool = True,
    what: str = "",
) -> np.ndarray:
    """A 1-D float array (scalars become length 1) with every entry in the given range.

    ``what`` names the quantity in the message (e.g. "noise multipliers").
    """
    try:
        arr = np.atleast_1d(np.asarray(values, dtype=float))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of real numbers") from exc
    lo_s = ("> " if low_open else ">= ") + f"{low:g}" if math.isfinite(low) else ""
    hi_s = ("< " if high_open else "<= ") + f"{high:g}" if math.isfinite(high) else ""
    rng = " and ".join(x for x in (lo_s, hi_s) if x)
    desc = f"{name} must be a 1-D sequence of {'' if allow_inf else 'finite '}numbers" + (
        f" {rng}" if rng else "") + (f" ({what})" if what else "")
    if arr.ndim != 1 or (arr.size == 0 and not allow_empty):
        raise ValueError(desc)
    bad = np.isnan(arr) | (arr < low) | (arr > high)
    if low_open:
        bad |= arr == low
    if high_open:
        bad |= arr == high
    if not allow_inf:
        bad |= np.isinf(arr)
    if bad.any():
        raise ValueError(f"{desc}; got {arr[bad][0]!r}")
    return arr


def check_same_length(names: tuple[str, str], a: np.ndarray, b: np.ndarray) -> None:
    """Two sequences that must pair up element by element."""
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} must have the same length, "
                         f"got {a.size} and {b.size}")


def check_instances(name: str, items: object, cls: type) -> tuple:
    """A sequence whose items are all ``cls`` (e.g. events: pass ``ledger.events``)."""
    try:
        out = tuple(items)
    except TypeError as exc:
        raise ValueError(f"{name} must be an iterable of {cls.__name__} records (e.g. "
                         f"ledger.events), got {type(items).__name__}") from exc
    bad = [e for e in out if not isinstance(e, cls)]
    if bad:
        raise ValueError(f"{name} must hold {cls.__name__} records only, got {bad[0]!r}")
    return out


def keywords_after_first(*names: str) -> Callable[[_F], _F]:
    """Every argument after the first is keyword-only; the old positional form (``names``
    in order) still works and warns (DeprecationWarning naming the keywords)."""
    def wrap(func: _F) -> _F:
        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            legacy = args[1:]
            if legacy:
                if len(legacy) > len(names):
                    raise TypeError(f"{func.__name__}() takes 1 positional argument but "
                                    f"{len(args)} were given")
                given = names[:len(legacy)]
                for name in given:
                    if name in kwargs:
                        raise TypeError(f"{func.__name__}() got multiple values for "
                                        f"argument {name!r}")
                warnings.warn(f"pass the arguments after the first by keyword: "
                              f"{func.__name__}(..., {', '.join(f'{n}=...' for n in given)})",
                              DeprecationWarning, stacklevel=2)
                kwargs.update(zip(given, legacy))
            return func(*args[:1], **kwargs)
        return call
    return wrap
