"""Argument checks for the whole ``leakaudit`` package: ValueError naming the argument, before
any work starts. (``accounting`` keeps its own, ``accounting._validate``: it must not import
this package.)"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from accounting._validate import keywords_after_first  # one deprecation shim for both packages

__all__ = ["Moved", "legacy_call", "keywords_after_first", "check_bool", "check_device",
           "check_fraction", "check_int", "check_keys", "check_nonneg", "check_number",
           "check_positive", "check_probability", "check_selection", "is_number"]

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Moved:
    """Old keywords of a call that now live in one settings argument (``target``):
    ``fold(given, old)`` returns that argument (``given``: the one passed, or None) with the
    old keywords' values (``old``: name -> value) set; ``how`` names the new form in the
    warning (e.g. "FLConfig.make"; empty: the target takes the value itself)."""

    names: Collection[str]
    fold: Callable[[Any, dict[str, Any]], Any]
    how: str
    #: keywords of the new form that the object also holds, folded in with the old ones
    #: (not warned about; they stay keywords of the call), so that the old keywords are
    #: checked together with them (e.g. a partition of N lists with ``clients=N``)
    along: Collection[str] = ()


def legacy_call(*positional: str, **moved: Moved) -> Callable[[_F], _F]:
    """The one deprecation mechanism of leakaudit's public calls. Every argument after the
    first is keyword-only: the old positional form (``positional``, in order) still works
    and warns (:func:`accounting._validate.keywords_after_first`, shared with the
    accountant); and keywords that moved into a settings object (``moved``: target argument
    -> :class:`Moved`) still work and warn (DeprecationWarning naming them and the new
    form), their values folded into that object."""
    def wrap(func: _F) -> _F:
        def pack(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return args, kwargs
        pack.__name__ = pack.__qualname__ = func.__name__  # named in its messages
        unpack = keywords_after_first(*positional)(pack)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                args, kwargs = unpack(*args, **kwargs)
            for w in caught:  # said where the caller is
                warnings.warn(w.message, w.category, stacklevel=2)
            for target, m in moved.items():
                old = {n: kwargs.pop(n) for n in list(kwargs) if n in m.names}
                if old:
                    keys = ", ".join(f"{n}=..." for n in old)
                    new = f"{m.how}({keys})" if m.how else "..."
                    warnings.warn(f"{func.__name__}({keys}) is deprecated: pass "
                                  f"{target}={new}", DeprecationWarning, stacklevel=2)
                    with_ = {n: kwargs[n] for n in m.along
                             if n in kwargs and kwargs[n] is not None}
                    kwargs[target] = m.fold(kwargs.get(target), {**with_, **old})
            return func(*args, **kwargs)
        return call
    return wrap


def check_keys(name: str, mapping: Mapping[str, Any] | None, known: Iterable[str],
               what: str = "name") -> dict[str, Any]:
    """A mapping whose keys are all among ``known`` (an unknown one, e.g. a misspelled
    defense name, would otherwise be ignored without a word)."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{name} must be a mapping, got {type(mapping).__name__}")
    known = list(known)
    unknown = [k for k in mapping if k not in known]
    if unknown:
        raise ValueError(f"{name} has an unknown {what} {unknown[0]!r}; expected one of "
                         f"{known}")
    return dict(mapping)


def check_selection(name: str, values: object, allowed: Iterable[Any] | None = None
                    ) -> tuple[Any, ...]:
    """A non-empty sequence (not a string, a bool or a number) of distinct items, each
    among ``allowed`` when given."""
    if isinstance(values, (str, bytes, bool, int, float)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a non-empty sequence, got {values!r}")
    out = tuple(values)
    if not out:
        raise ValueError(f"{name} must be a non-empty sequence, got {values!r}")
    if allowed is not None:
        allowed = list(allowed)
        bad = [v for v in out if isinstance(v, bool) or v not in allowed]
        if bad:
            raise ValueError(f"{name} must be among {allowed}, got {bad[0]!r}")
    seen: set[Any] = set()
    for v in out:
        try:
            key = (hash(v), v)
        except TypeError:
            key = (id(v), None)
        if key in seen:
            raise ValueError(f"{name} must be distinct, got {v!r} twice")
        seen.add(key)
    return out



def is_number(value: object) -> bool:
    """A real number that is not a bool (Python or numpy)."""
    return not isinstance(value, bool) and isinstance(
        value, (int, float, np.integer, np.floating))


def check_int(name: str, value: object, minimum: int) -> int:
    """An integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_device(name: str, value: object) -> torch.device | None:
    """A torch device: None (leave tensors where they are), "auto" (CUDA when present, else
    the CPU), or a CPU/CUDA device name or ``torch.device``; CUDA must be available."""
    if value is None:
        return None
    if isinstance(value, str) and value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(value, (str, torch.device)):
        raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda[:i]' or a torch.device, "
                         f"got {value!r}")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{name}: unknown device {value!r} ({exc})") from exc
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} must be a CPU or CUDA device, got {value!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name} is {value!r} but CUDA is not available here")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{name} is {value!r} but only {torch.cuda.device_count()} CUDA "
                             "devices exist")
    return device


def check_number(name: str, value: object, *, minimum: float | None = None,
                 open_min: bool = False, maximum: float | None = None,
                 open_max: bool = False) -> float:
    """A finite real number (not a bool) in the given range; returns it as a float.

    The message names the argument and the range, e.g. "lr must be a finite number > 0".
    """
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if open_min else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"{'<' if open_max else '<='} {maximum:g}")
    wanted = f"{name} must be a finite number" + (" " + " and ".join(parts) if parts else "")
    if not is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{wanted}, got {value!r}")
    x = float(value)
    if minimum is not None and (x < minimum or (open_min and x == minimum)):
        raise ValueError(f"{wanted}, got {value!r}")
    if maximum is not None and (x > maximum or (open_max and x == maximum)):
        raise ValueError(f"{wanted}, got {value!r}")
    return x


def check_probability(name: str, value: object, *, what: str = "in (0, 1)") -> float:
    """A number strictly between 0 and 1 (a delta, a confidence, a rate)."""
    if not is_number(value) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return float(value)


def check_positive(name: str, value: object) -> float:
    """A finite number > 0."""
    return check_number(name, value, minimum=0.0, open_min=True)


def check_nonneg(name: str, value: object) -> float:
    """A finite number >= 0."""
    return check_number(name, value, minimum=0.0)


def check_fraction(name: str, value: object) -> float:
    """A number in [0, 1)."""
    return check_number(name, value, minimum=0.0, maximum=1.0, open_max=True)


def check_bool(name: str, value: object) -> bool:
    """True or False (not a number that could be read as one)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)
