"""The tightest sound eps a ledger's events allow, for reports that print one number.

Gaussian releases at q = 1 compose exactly into one Gaussian mechanism with multiplier
(sum sigma_i^-2)^-1/2, whose eps is exact (Balle & Wang 2018, Thm 8). Other Gaussian ledgers:
the smaller of the certified PLD upper bound and the RDP bound (both are upper bounds). Any
other event (Laplace, (eps, delta)): RDP. No event: inf (nothing was promised).
"""

from __future__ import annotations

import math

import numpy as np

from .composition import analytic_gaussian_epsilons
from .events import GaussianSchedule, SampledGaussian
from .ledger import PrivacyLedger

__all__ = ["tightest_epsilon"]


def tightest_epsilon(ledger: PrivacyLedger, delta: float) -> float:
    """The smallest certified upper bound on eps(delta) among exact Gaussian, PLD and RDP."""
    events = ledger.events
    if not events:
        return math.inf
    if all(isinstance(e, SampledGaussian) and e.q == 1.0 for e in events):
        inv = sum(e.count / e.sigma ** 2 if e.sigma > 0 else math.inf for e in events)
        if math.isinf(inv):
            return math.inf
        return float(analytic_gaussian_epsilons(np.array([inv ** -0.5]), delta)[0])
    rdp = float(ledger.epsilon(delta, warn=False))
    if math.isfinite(rdp) and any(callable(getattr(e, "pld_parts", None)) for e in events):
        # random allocation: RDP counts it without amplification, PLD certifies it
        return min(rdp, float(ledger.epsilon(delta, "pld", warn=False)))
    if not math.isfinite(rdp) or not all(
            isinstance(e, (SampledGaussian, GaussianSchedule)) for e in events):
        return rdp  # Laplace / pure-DP releases: RDP is tight enough, PLD slow at large eps
    return min(rdp, float(ledger.epsilon(delta, "pld", warn=False)))
