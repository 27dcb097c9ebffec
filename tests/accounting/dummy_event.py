"""A dummy event type written as the recipe in docs/architecture.md says: one module, the
class with a standard checker per field, its rules, one registration (nothing else is
edited). The registration tests import it, or drop it into a copy of the package."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from accounting._validate import check_count, check_probability, check_sigma
from accounting.events import Event, gaussian_pairs, gaussian_pld_pairs
from accounting.registry import register_event
from accounting.relations import ADD_REMOVE, POISSON, converted_note


@dataclass(frozen=True)
class TwiceClipped(Event):
    """``count`` sampled Gaussian steps whose updates are clipped to 2C with noise
    ``sigma`` x C: each is the Gaussian step at noise multiplier sigma / 2."""

    q: float
    sigma: float
    count: int = 1
    note: str = ""
    sampling: str = POISSON
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "contract_test_twice_clipped"
    checks: ClassVar[dict] = {"q": check_probability, "sigma": check_sigma,
                              "count": check_count}
    gaussian: ClassVar[bool] = True

    @property
    def steps(self) -> int:
        return self.count

    def describe(self) -> str:
        return f"twice-clipped q={self.q:.6g} sigma={self.sigma:.6g} x {self.count}"


def _steps(e: TwiceClipped) -> tuple[float, np.ndarray, np.ndarray]:
    return e.q, np.array([e.sigma / 2.0]), np.array([e.count])


def _to(e: TwiceClipped, source: str, target: str) -> TwiceClipped:
    return replace(e, relation=target, note=converted_note(e, source, target))


register_event(TwiceClipped, convert=_to,
               pld=lambda e, side: gaussian_pld_pairs(e, *_steps(e), side),
               **{"*": lambda e, side: gaussian_pairs(e, *_steps(e), side)})
