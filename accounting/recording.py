"""The recording calls of :class:`accounting.PrivacyLedger` (Opacus's ``step`` included):
each builds one typed event (:mod:`accounting.events`) under the ledger's relation and hands
it to ``_append``; none accounts anything."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import numpy as np

from ._validate import check_count
from .events import ApproxDP, Event, GaussianSchedule, Laplace, SampledGaussian
from .relations import ALL, POISSON

__all__ = ["LedgerRecording"]


class LedgerRecording:
    """step / step_schedule / laplace / dp_step / allocate (needs ``relation``, ``record``
    and ``_append``)."""

    relation: str

    def _append(self, event: Event) -> None:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def record(self, event: Event) -> None:  # pragma: no cover - the ledger's
        raise NotImplementedError

    _events: list

    def _bump(self, cls: type, count: object, **values: object) -> bool:
        """Fast path of a release equal to the last one (every field but ``count``, plain
        Python numbers and strings only, so that every value was validated then): add
        ``count`` to it. False: not that case (the caller builds and checks the event)."""
        last = self._events[-1] if self._events else None
        if type(last) is not cls or type(count) is not int or count <= 0:
            return False
        if any(type(v) not in (float, int, str) or getattr(last, k) != v
               for k, v in values.items()):
            return False
        merged = copy.copy(last)
        object.__setattr__(merged, "count", check_count("count", last.count + count))
        self._events[-1] = merged
        return True

    def step(self, q: float | None = None, sigma: float | None = None, count: int = 1, *,
             noise_multiplier: float | None = None, sample_rate: float | None = None,
             note: str = "", sampling: str = POISSON) -> None:
        """Record ``count`` Gaussian steps (rate q, noise multiplier sigma) drawn by ``sampling``
        ("poisson"; "fixed-size"/"shuffle": q = B/n recorded, no amplification; "all": q = 1).
        ``noise_multiplier`` / ``sample_rate`` are Opacus's names for sigma / q."""
        for name, alias, value in (("sigma", "noise_multiplier", noise_multiplier),
                                   ("q", "sample_rate", sample_rate)):
            if value is not None and (sigma if name == "sigma" else q) is not None:
                raise ValueError(f"give {name} or {alias}, not both")
        sigma = noise_multiplier if noise_multiplier is not None else sigma
        q = sample_rate if sample_rate is not None else q
        q = 1.0 if q is None and sampling == ALL else q
        if q is None:
            raise ValueError("q (sampling probability in [0, 1]) is required")
        if sigma is None:
            raise ValueError("sigma (noise multiplier >= 0) is required")
        if self._bump(SampledGaussian, count, q=q, sigma=sigma, note=note, sampling=sampling):
            return
        count = check_count("count", count)
        event = SampledGaussian(q=q, sigma=sigma, count=max(count, 1), note=note,
                                sampling=sampling, relation=self.relation)
        if count:
            self._append(event)

    def step_schedule(self, q: float, sigmas: Iterable[float], *, note: str = "",
                      sampling: str = POISSON) -> None:
        """One Gaussian step per sigma in ``sigmas`` (a noise schedule), same q and sampling."""
        arr = np.asarray(sigmas if isinstance(sigmas, np.ndarray) else list(sigmas), float)
        self._append(GaussianSchedule(q=q, sigmas=arr, note=note, sampling=sampling,
                                      relation=self.relation))

    def laplace(self, b: float, count: int = 1, *, sensitivity: float = 1.0,
                note: str = "") -> None:
        """Record ``count`` Laplace releases of scale ``b`` and L1 ``sensitivity``."""
        if self._bump(Laplace, count, b=b, sensitivity=sensitivity, note=note):
            return
        self.record(Laplace(b=b, count=check_count("count", count), sensitivity=sensitivity,
                            note=note, relation=self.relation))

    def dp_step(self, eps: float, delta: float = 0.0, count: int = 1, *, note: str = "") -> None:
        """Record ``count`` releases known only to be (eps, delta)-DP (delta=0: pure DP)."""
        if self._bump(ApproxDP, count, eps=eps, delta=delta, note=note):
            return
        self.record(ApproxDP(eps=eps, delta=delta, count=check_count("count", count),
                             note=note, relation=self.relation))

    def allocate(self, sigma: float, steps: int, selected: int = 1, epochs: int = 1, *,
                 note: str = "") -> None:
        """``epochs`` epochs of random allocation: every example in ``selected`` of the
        ``steps`` steps of an epoch, noise multiplier ``sigma``
        (:class:`accounting.allocation.RandomAllocation`; certified bracket by "pld")."""
        from .allocation import RandomAllocation

        self._append(RandomAllocation(sigma, steps, selected, epochs, note=note,
                                      relation=self.relation))

