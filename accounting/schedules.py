"""Noise-multiplier schedules (Wei & Liu 2021; Fu et al. 2022), for defenses and forecasting eps.

Convention: a schedule has ``steps`` values for t = 0..steps-1; it starts at ``sigma0`` and its
decay rate g is solved so that the LAST step (t = steps-1) uses ``sigma_end``. No value is
ever below ``sigma_end`` (round-off and the cyclic formula are clamped).

Closed-form decays (Fed-alphaCDP, Wei & Liu 2021, "Gradient-leakage resilient federated
learning", decaying-noise variants):

* constant:    sigma_t = sigma0
* linear:      sigma_t = sigma0 (1 - g t)
* staircase:   sigma_t = sigma0 (1 - g floor(t / period))
* exponential: sigma_t = sigma0 exp(-g t)
* cyclic:      cosine annealing restarting every ceil(steps / cycles) steps,
               sigma_t = sigma0 / 2 (1 + cos(pi (t mod P) / P)), clamped at sigma_end. The
               printed formula reaches 0 at the end of each cycle (infinite eps); we clamp.

Event-driven decays depend only on server-held validation loss and record themselves:
:class:`PlateauDecay` (Adap DP-FL, Fu et al. 2022) and :class:`ThresholdDecay` (DPFL-AGN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ._validate import (
    check_choice,
    check_count,
    check_factor,
    check_nonnegative,
    check_positive,
    check_real,
)

__all__ = [
    "SCHEDULES",
    "constant",
    "linear",
    "staircase",
    "exponential",
    "cyclic",
    "schedule",
    "PlateauDecay",
    "ThresholdDecay",
]


def _check_endpoints(sigma0: float, sigma_end: float, steps: int) -> tuple[float, float, int]:
    sigma0 = check_positive("sigma0", sigma0)
    sigma_end = check_positive("sigma_end", sigma_end)
    steps = check_count("steps", steps, minimum=1)
    if sigma_end > sigma0:
        raise ValueError(
            f"sigma_end must be <= sigma0 for a decay, got sigma0={sigma0!r}, "
            f"sigma_end={sigma_end!r}"
        )
    return sigma0, sigma_end, steps


def _clamp(values: np.ndarray, sigma0: float, sigma_end: float) -> np.ndarray:
    out = np.clip(values, sigma_end, sigma0)
    out[-1] = sigma_end if out.size > 1 else out[-1]
    return out


def constant(sigma0: float, steps: int) -> np.ndarray:
    """sigma_t = sigma0 for every step."""
    sigma0 = check_positive("sigma0", sigma0)
    steps = check_count("steps", steps, minimum=1)
    return np.full(steps, sigma0)


def linear(sigma0: float, sigma_end: float, steps: int) -> np.ndarray:
    """sigma_t = sigma0 (1 - g t), g = (1 - sigma_end/sigma0) / (steps - 1)."""
    sigma0, sigma_end, steps = _check_endpoints(sigma0, sigma_end, steps)
    if steps == 1:
        return np.array([sigma0])
    g = (1.0 - sigma_end / sigma0) / (steps - 1)
    return _clamp(sigma0 * (1.0 - g * np.arange(steps)), sigma0, sigma_end)


def staircase(sigma0: float, sigma_end: float, steps: int, period: int | None = None) -> np.ndarray:
    """sigma_t = sigma0 (1 - g floor(t / period)); the last stair reaches sigma_end.

    ``period`` (Gamma) defaults to max(1, steps // 10): ten stairs.
    """
    sigma0, sigma_end, steps = _check_endpoints(sigma0, sigma_end, steps)
    period = max(1, steps // 10) if period is None else check_count("period", period, minimum=1)
    stairs = (steps - 1) // period
    if stairs == 0:
        return np.full(steps, sigma0)
    g = (1.0 - sigma_end / sigma0) / stairs
    t = np.arange(steps)
    return _clamp(sigma0 * (1.0 - g * (t // period)), sigma0, sigma_end)


def exponential(sigma0: float, sigma_end: float, steps: int) -> np.ndarray:
    """sigma_t = sigma0 exp(-g t), g = log(sigma0 / sigma_end) / (steps - 1)."""
    sigma0, sigma_end, steps = _check_endpoints(sigma0, sigma_end, steps)
    if steps == 1:
        return np.array([sigma0])
    g = math.log(sigma0 / sigma_end) / (steps - 1)
    return _clamp(sigma0 * np.exp(-g * np.arange(steps)), sigma0, sigma_end)


def cyclic(sigma0: float, sigma_end: float, steps: int, cycles: int = 4) -> np.ndarray:
    """Cosine annealing restarting every P = ceil(steps / cycles) steps, clamped at sigma_end.

    sigma_t = max(sigma_end, sigma0 / 2 (1 + cos(pi (t mod P) / P))). The printed formula
    has no floor and reaches 0 (no privacy); the clamp at sigma_end is ours.
    """
    sigma0, sigma_end, steps = _check_endpoints(sigma0, sigma_end, steps)
    cycles = check_count("cycles", cycles, minimum=1)
    period = math.ceil(steps / cycles)
    t = np.arange(steps) % period
    raw = sigma0 / 2.0 * (1.0 + np.cos(np.pi * t / period))
    return np.clip(raw, sigma_end, sigma0)


SCHEDULES = ("constant", "linear", "staircase", "exponential", "cyclic")


def schedule(name: str, sigma0: float, sigma_end: float | None, steps: int, **kwargs) -> np.ndarray:
    """Build a schedule by name: one of :data:`SCHEDULES`.

    ``kwargs``: ``period`` for staircase, ``cycles`` for cyclic.
    """
    check_choice("name", name, SCHEDULES)
    if name == "constant":
        return constant(sigma0, steps)
    if sigma_end is None:
        raise ValueError(f"sigma_end is required for the {name!r} schedule")
    fn = {"linear": linear, "staircase": staircase, "exponential": exponential,
          "cyclic": cyclic}[name]
    return fn(sigma0, sigma_end, steps, **kwargs)


@dataclass
class PlateauDecay:
    """Adap DP-FL (Fu et al. 2022): sigma <- beta sigma after ``patience`` consecutive drops.

    Call :meth:`update` once per round with the server's validation loss; the decay fires
    exactly when the loss has fallen in each of the last ``patience`` rounds, then the count
    restarts. ``history`` holds the sigma used in each round, as it happened.
    """

    sigma0: float
    beta: float = 0.9
    patience: int = 3
    sigma_min: float = 0.0
    sigma: float = field(init=False)
    history: list[float] = field(init=False, default_factory=list)
    _prev: float | None = field(init=False, default=None, repr=False)
    _drops: int = field(init=False, default=0, repr=False)

    def __post_init__(self) -> None:
        self.sigma0 = check_positive("sigma0", self.sigma0)
        self.beta = check_factor("beta", self.beta)
        self.patience = check_count("patience", self.patience, minimum=1)
        self.sigma_min = check_nonnegative("sigma_min", self.sigma_min)
        self.sigma = self.sigma0

    def update(self, loss: float) -> float:
        """Record this round's validation loss; return the sigma for the next round."""
        loss = check_real("loss", loss)
        self.history.append(self.sigma)
        if self._prev is not None and loss < self._prev:
            self._drops += 1
        else:
            self._drops = 0
        self._prev = loss
        if self._drops >= self.patience:
            self.sigma = max(self.sigma_min, self.sigma * self.beta)
            self._drops = 0
        return self.sigma


@dataclass
class ThresholdDecay:
    """DPFL-AGN: sigma <- rho sigma when the loss improved by less than mu.

    The paper also names the factor 0.001, which would erase the noise in a few rounds; rho
    stays a parameter with default 0.9 (docs/defenses.md). ``history`` as in PlateauDecay.
    """

    sigma0: float
    rho: float = 0.9
    mu: float = 0.001
    sigma_min: float = 0.0
    sigma: float = field(init=False)
    history: list[float] = field(init=False, default_factory=list)
    _prev: float | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.sigma0 = check_positive("sigma0", self.sigma0)
        self.rho = check_factor("rho", self.rho)
        self.mu = check_nonnegative("mu", self.mu)
        self.sigma_min = check_nonnegative("sigma_min", self.sigma_min)
        self.sigma = self.sigma0

    def update(self, loss: float) -> float:
        """Record this round's loss; return the sigma for the next round."""
        loss = check_real("loss", loss)
        self.history.append(self.sigma)
        if self._prev is not None and (self._prev - loss) < self.mu:
            self.sigma = max(self.sigma_min, self.sigma * self.rho)
        self._prev = loss
        return self.sigma
