"""The tightest sound eps a ledger's events allow: "the sound eps" of every report.

Candidates, each a certified upper bound under the ledger's neighbouring relation (every
event accounted by the pair :mod:`accounting.relations` gives for its sampling):

* exact: when every accounted step is an unsampled Gaussian (q = 1, whether recorded as
  single steps or as a ``step_schedule``, or a fixed-size / "all" step accounted at q = 1),
  the steps compose into one Gaussian with multiplier (sum_i c_i / sigma_i^2)^(-1/2), whose
  eps is Balle & Wang's (2018, Thm 8) closed form;
* the certified PLD upper end (:func:`accounting.pld_epsilon`), for every ledger, Laplace and
  (eps, delta) releases included (they compose exactly there; RDP over-charges them);
* the RDP bound (improved conversion).

The smallest wins. A PLD that cannot be discretised within its memory budget (e.g. 10^15
steps) is skipped: the RDP bound, computed in closed form per group, remains. No event: inf
(nothing was promised); a release without noise: inf.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._grid import sgm_groups
from ._validate import check_delta
from .composition import analytic_gaussian_epsilons
from .events import GaussianSchedule, SampledGaussian
from .ledger import PrivacyLedger
from .relations import uses_group_privacy

__all__ = ["tightest_epsilon"]


def _exact_unsampled(ledger: PrivacyLedger, delta: float) -> float | None:
    """Closed-form eps when every release is a Gaussian step accounted at q = 1 (or q = 0)."""
    if not all(isinstance(e, (SampledGaussian, GaussianSchedule)) for e in ledger.events):
        return None
    groups = sgm_groups(ledger.events)
    if not np.all((groups.qs == 1.0) | (groups.qs == 0.0)):
        return None
    full = groups.qs == 1.0
    if not full.any():
        return 0.0
    if (groups.sigmas[full] == 0).any():
        return math.inf
    inv = float((groups.counts[full] / groups.sigmas[full] ** 2).sum())
    return float(analytic_gaussian_epsilons(np.array([inv ** -0.5]), delta)[0])


def _group_privacy_applies(ledger: PrivacyLedger) -> bool:
    """Some Poisson step under replace-one (its PLD group-privacy bound may beat the rest)."""
    return any(isinstance(e, (SampledGaussian, GaussianSchedule))
               and uses_group_privacy(e.sampling, e.relation, e.q) for e in ledger.events)


def tightest_epsilon(ledger: PrivacyLedger, delta: float) -> float:
    """The smallest certified upper bound on eps(delta) among exact Gaussian, PLD and RDP,
    under ``ledger.relation``. An empty ledger released nothing: 0, as every method of
    :meth:`PrivacyLedger.epsilon` says (a mechanism with no guarantee records an infinite
    event, e.g. ``ApproxDP(eps=inf)``, and reads inf)."""
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(f"ledger must be a PrivacyLedger, got {type(ledger)!r}")
    delta = check_delta("delta", delta)
    if not ledger.events:
        return 0.0
    if ledger.why_infinite() is not None:
        return math.inf
    exact = _exact_unsampled(ledger, delta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rdp = float(ledger.epsilon(delta, warn=False))
        candidates = [rdp] if exact is None else [rdp, exact]
        if exact is None or _group_privacy_applies(ledger):
            try:
                candidates.append(float(ledger.epsilon(delta, "pld", warn=False)))
            except ValueError:
                pass  # beyond the PLD's memory budget: the RDP bound stands
    return min(candidates)
