"""Hyperparameter tuning as an accounted event: the eps of the whole search, not of one run.

Choosing the best of several training runs on private data is itself a mechanism (Liu &
Talwar 2019; Papernot & Steinke 2022). :class:`HyperparameterSearch` records it: the
candidates' histories (one tuple of events per configuration), the selection ``rule`` and
the number of runs.

* ``rule="fixed"`` (best-of-k): every candidate is run once and the best published. Its
  cost is the composition of the k runs (adaptive choices of the next configuration
  included): every family of accountants gets the candidates' own parts, so the PLD, PRV and
  composition accountants apply and ``tightest`` is usually the PLD's upper end.
* ``rule`` in :data:`RANDOM_RULES`: the number of runs K is drawn at random (truncated
  negative binomial of shape eta > -1, geometric eta = 1, logarithmic eta = 0, or Poisson),
  each run trains a configuration drawn independently of the data from the candidates,
  and only the best run is published. Its RDP bound is Papernot & Steinke 2022, Thm 2
  (truncated negative binomial) and Thm 6 (Poisson) applied to the base mechanism's RDP
  curve, the maximum of the candidates' curves (Rényi divergence is jointly quasi-convex, so
  a data-independent mixture of candidates is no worse than its worst). Only the RDP
  accountants have a rule; where every candidate is pure eps-DP, the accountant
  ``"liu-talwar"`` gives the closed form (2 + eta) eps (Liu & Talwar 2019, Thm 3.1:
  3 eps for the geometric rule; Papernot & Steinke 2022, Thm 2 as the orders go to
  infinity), and ``tightest`` takes the smaller and names it.
* ``rule="adaptive"``: a random number of runs whose next configuration depends on earlier
  scores (Bayesian optimisation). No theorem here covers it; every accountant refuses it by
  name (record ``rule="fixed"``: composition covers adaptive choices).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from ._validate import check_choice, check_real
from .accountants import Accountant, rdp_curve
from .conversions import DPResult, dp_delta
from .events import Event, event_from_dict
from .rdp import DEFAULT_ORDERS
from .registry import (
    DPPart,
    LaplacePart,
    RDPPart,
    UnsupportedEventError,
    parts,
    pure_total,
    register_accountant,
    register_event,
)
from .relations import ADD_REMOVE, ALL, convert_event

__all__ = ["HyperparameterSearch", "SELECTION_RULES", "RANDOM_RULES", "NOT_COVERED",
           "truncated_negative_binomial_mean", "truncated_negative_binomial_gamma",
           "selection_rdp_tnb", "selection_rdp_poisson", "pure_selection_epsilon",
           "PureSelectionAccountant"]

#: Random numbers of runs with an RDP theorem (name -> shape eta; Poisson: inf).
RANDOM_RULES: dict[str, float] = {"geometric": 1.0, "logarithmic": 0.0,
                                  "negative-binomial": math.nan, "poisson": math.inf}
#: Selection rules recorded but covered by no theorem here (refused by name when accounted).
NOT_COVERED = ("adaptive",)
SELECTION_RULES = ("fixed", *RANDOM_RULES, *NOT_COVERED)


# ---------------------------------------------------------------- the mathematics
def truncated_negative_binomial_mean(gamma: float, eta: float) -> float:
    """E[K] of the truncated negative binomial D_{eta,gamma} on {1, 2, ...} (Papernot &
    Steinke 2022, Def. 1): eta (1 - gamma) / (gamma (1 - gamma^eta)) for eta != 0, and
    (1/gamma - 1) / log(1/gamma) for eta = 0 (the logarithmic distribution)."""
    if eta == 0.0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))


def truncated_negative_binomial_gamma(mean: float, eta: float) -> float:
    """The gamma in (0, 1) with E[K] = ``mean`` (bisection on the decreasing mean; the end
    returned has mean >= ``mean``, i.e. gamma at most the exact one: log(1/gamma), which the
    bound grows with, is never understated)."""
    if mean <= 1.0:
        return 1.0
    lo, hi = 1e-300, 1.0 - 1e-16
    for _ in range(200):
        mid = math.sqrt(lo * hi) if hi / lo > 4.0 else 0.5 * (lo + hi)
        if truncated_negative_binomial_mean(mid, eta) >= mean:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo


def _envelope(values: np.ndarray) -> np.ndarray:
    """RDP is non-decreasing in the order: the bound at a higher order also bounds every
    lower one, so each value becomes the minimum over the orders at or above it."""
    return np.minimum.accumulate(values[::-1])[::-1]


def selection_rdp_tnb(orders: np.ndarray, rdp: np.ndarray, mean: float, eta: float
                      ) -> np.ndarray:
    """RDP at ``orders`` of the best of K runs, K ~ truncated negative binomial (eta, mean),
    of a mechanism with RDP curve ``rdp`` (Papernot & Steinke 2022, Thm 2):

        eps'(lam) = eps(lam) + (1 + eta)(1 - 1/lam_hat) eps(lam_hat)
                    + (1 + eta) log(1/gamma) / lam_hat + log(E[K]) / (lam - 1),

    minimised over lam_hat among ``orders`` (every lam_hat >= 1 is valid), then the
    monotone envelope (:func:`_envelope`)."""
    gamma = truncated_negative_binomial_gamma(mean, eta)
    with np.errstate(invalid="ignore"):
        hat = (1.0 - 1.0 / orders) * rdp + math.log(1.0 / gamma) / orders
    c = (1.0 + eta) * float(np.min(np.where(np.isnan(hat), np.inf, hat)))
    out = rdp + c + math.log(mean) / (orders - 1.0)
    return _envelope(np.where(np.isnan(out), np.inf, out))


def selection_rdp_poisson(orders: np.ndarray, rdp: np.ndarray, mean: float) -> np.ndarray:
    """RDP at ``orders`` of the best of K ~ Poisson(mean) runs (Papernot & Steinke 2022,
    Thm 6): eps'(lam) = eps(lam) + mean delta_hat + log(mean) / (lam - 1), where the base
    mechanism is (eps_hat, delta_hat)-DP at eps_hat = log(1 + 1/(lam - 1)) (the theorem's
    condition e^eps_hat <= 1 + 1/(lam - 1) with equality); delta_hat from the same RDP curve
    (improved conversion, Balle et al. 2020), then the monotone envelope."""
    out = np.full(orders.size, np.inf)
    for i, lam in enumerate(orders):
        if not math.isfinite(rdp[i]):
            continue
        eps_hat = math.log1p(1.0 / (lam - 1.0))
        delta_hat = min(1.0, dp_delta(rdp, orders, eps_hat, warn_edge=False).delta)
        out[i] = rdp[i] + mean * delta_hat + math.log(mean) / (lam - 1.0)
    return _envelope(out)


def pure_selection_epsilon(eps: float, eta: float) -> float:
    """Pure DP of the best of K ~ truncated negative binomial (shape eta) runs of an eps-DP
    mechanism: (2 + eta) eps (Liu & Talwar 2019, Thm 3.1 for the geometric eta = 1: 3 eps;
    Papernot & Steinke 2022, Thm 2 with both orders going to infinity)."""
    return (2.0 + eta) * eps


# ---------------------------------------------------------------- the event
def _candidates(name: str, value: object) -> tuple[tuple[Event, ...], ...]:
    """Each candidate: a ledger (``.events``), one event or a sequence of events/dicts."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{name} must be a sequence of candidate runs (ledgers or sequences "
                         f"of events), got {type(value).__name__}")
    out = []
    for i, cand in enumerate(value):
        cand = getattr(cand, "events", cand)
        items = [cand] if isinstance(cand, (Event, dict)) else list(cand)
        events = tuple(event_from_dict(x) if isinstance(x, dict) else x for x in items)
        if not events or not all(isinstance(x, Event) for x in events):
            raise ValueError(f"{name}[{i}] must hold at least one accounting event (a ledger "
                             f"or a sequence of events), got {cand!r}")
        out.append(events)
    if not out:
        raise ValueError(f"{name} must name at least one candidate run")
    return tuple(out)


def _shape(name: str, value: object) -> float:
    v = check_real(name, value)
    if not v > -1.0:
        raise ValueError(f"{name} (eta of the truncated negative binomial) must be > -1, "
                         f"got {value!r}")
    return v


@dataclass(frozen=True, eq=False)
class HyperparameterSearch(Event):
    """A search over ``candidates`` (one history per configuration) publishing the best run.

    ``rule``: :data:`SELECTION_RULES`. ``mean``: the expected number of runs of a random
    rule (>= 1; ignored by "fixed", which runs every candidate once). ``shape``: eta of the
    "negative-binomial" rule (> -1; the geometric and logarithmic rules fix it)."""

    candidates: tuple
    rule: str = "fixed"
    mean: float = 1.0
    shape: float = 1.0
    note: str = ""
    sampling: str = ALL
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "hyperparameter_search"
    checks: ClassVar[dict] = {"candidates": _candidates,
                              "rule": lambda n, v: check_choice(n, v, SELECTION_RULES),
                              "mean": check_real, "shape": _shape}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rule in RANDOM_RULES and not (1.0 <= self.mean < math.inf):
            raise ValueError(f"mean (expected number of runs of the {self.rule} rule) must be "
                             f">= 1 and finite, got {self.mean!r}")
        fixed = RANDOM_RULES.get(self.rule, math.nan)
        if not math.isnan(fixed) and math.isfinite(fixed):
            object.__setattr__(self, "shape", fixed)
        for i, cand in enumerate(self.candidates):
            for e in cand:
                if getattr(e, "relation", ADD_REMOVE) != self.relation:
                    raise ValueError(
                        f"candidates[{i}] holds an event under relation={e.relation!r} but the "
                        f"search is accounted under relation={self.relation!r}: one relation "
                        "for the whole search (convert the candidates first)")

    @property
    def eta(self) -> float:
        """The truncated negative binomial's shape (inf: Poisson; nan: not a random rule)."""
        if self.rule == "poisson":
            return math.inf
        return self.shape if self.rule in RANDOM_RULES else math.nan

    @property
    def steps(self) -> int:
        """Releases published: every run's ("fixed"); the selected run's otherwise (at most
        the longest candidate's)."""
        counts = [sum(e.steps for e in c) for c in self.candidates]
        return sum(counts) if self.rule == "fixed" else max(counts)

    def describe(self) -> str:
        k = len(self.candidates)
        if self.rule == "fixed":
            how = f"best of {k} runs (each candidate once: their composition)"
        elif self.rule in RANDOM_RULES:
            shape = (f", eta={self.shape:.6g}" if self.rule == "negative-binomial" else "")
            how = (f"best of a {self.rule} number of runs (mean {self.mean:.6g}{shape}) over "
                   f"{k} candidate configurations")
        else:
            how = f"{self.rule} search over {k} candidate configurations (not covered)"
        first = "; ".join(e.describe() for e in self.candidates[0])
        return f"hyperparameter search: {how}; candidate 1: {first}{self._note()}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = ([[e.to_dict() for e in c] for c in value]
                           if f.name == "candidates" else value)
        return out

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, HyperparameterSearch)
                and all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self)))

    __hash__ = None


# ---------------------------------------------------------------- wiring (the registry)
def _not_covered(e: HyperparameterSearch, family: str) -> UnsupportedEventError:
    if e.rule in NOT_COVERED:
        why = (f"selection rule {e.rule!r} (a random number of runs whose configurations "
               "depend on earlier scores) is covered by no theorem here: Papernot & Steinke's "
               "need independent runs; record rule='fixed' (the composition of the runs made "
               "covers adaptive choices)")
    else:
        why = (f"a {e.rule} number of runs has only an RDP bound (Papernot & Steinke 2022, "
               f"Thm {6 if e.rule == 'poisson' else 2}): no {family!r} rule; use an RDP "
               "method (or 'tightest')")
    return UnsupportedEventError(e, family, why)


def candidate_curve(e: HyperparameterSearch, orders: np.ndarray) -> np.ndarray:
    """The base mechanism's RDP at ``orders``: the maximum of the candidates' composed
    curves (a data-independent draw among them; refused by name for a candidate with an
    (eps, delta > 0) release, which has no RDP curve)."""
    curves = []
    for i, cand in enumerate(e.candidates):
        items = parts(cand, "rdp", "rdp")
        if any(isinstance(p, DPPart) and not p.pure for p in items):
            raise UnsupportedEventError(e, "rdp", f"candidate {i + 1} holds an (eps, delta > 0) "
                                        "release: it has no RDP curve, and the random-count "
                                        "selection theorems need one")
        curves.append(rdp_curve(items, orders))
    return np.max(np.stack(curves), axis=0)


def selection_rdp(e: HyperparameterSearch, orders: np.ndarray) -> np.ndarray:
    """RDP of the search at ``orders`` (a random rule); the second order lam_hat of Thm 2 and
    the conversion of Thm 6 range over ``orders`` and :data:`DEFAULT_ORDERS`."""
    grid = np.union1d(np.asarray(orders, dtype=float), DEFAULT_ORDERS)
    base = candidate_curve(e, grid)
    if e.rule == "poisson":
        full = selection_rdp_poisson(grid, base, e.mean)
    else:
        full = selection_rdp_tnb(grid, base, e.mean, e.shape)
    return full[np.searchsorted(grid, orders)]


def _rule_for(family: str):
    def rule(e: HyperparameterSearch, side: str) -> list:
        if e.rule == "fixed":  # the composition of every run: the candidates' own parts
            return parts([x for c in e.candidates for x in c], family, family, side)
        if e.rule in RANDOM_RULES and family == "rdp":
            candidate_curve(e, DEFAULT_ORDERS[:1])  # refuses (eps, delta) candidates first
            return [RDPPart(lambda orders: selection_rdp(e, orders), 1)]
        raise _not_covered(e, family)
    return rule


def _convert(e: HyperparameterSearch, source: str, target: str) -> HyperparameterSearch | None:
    """Each candidate's events converted (None where one has no valid conversion)."""
    try:
        cands = tuple(tuple(convert_event(x, target) for x in c) for c in e.candidates)
    except ValueError:
        return None
    return HyperparameterSearch(cands, e.rule, e.mean, e.shape, note=e.note,
                                sampling=e.sampling, relation=target)


register_event(HyperparameterSearch, convert=_convert,
               **{f: _rule_for(f) for f in ("rdp", "zcdp", "composition", "pld", "prv")})


# ---------------------------------------------------------------- the pure closed form
class PureSelectionAccountant(Accountant):
    """Liu & Talwar 2019 (Thm 3.1) / Papernot & Steinke 2022: a search with a truncated
    negative binomial number of runs over pure eps_i-DP candidates is (2 + eta) max eps_i-DP,
    at every delta. Refuses, by name, anything else."""

    name, family, forms = "liu-talwar", "composition", (LaplacePart, DPPart)

    def why_not(self, event: object) -> str | None:
        if not isinstance(event, HyperparameterSearch):
            return ("only a hyperparameter search (random number of runs) over pure eps-DP "
                    "candidates has this closed form")
        if event.rule not in RANDOM_RULES or event.rule == "poisson":
            return (f"selection rule {event.rule!r}: the closed form covers the truncated "
                    "negative binomial rules (geometric, logarithmic, negative-binomial)")
        return self._pure_eps(event)[1]

    def _pure_eps(self, e: HyperparameterSearch) -> tuple[float, str | None]:
        worst = 0.0
        for i, cand in enumerate(e.candidates):
            try:
                total = pure_total(parts(cand, self.family, self.name))
            except UnsupportedEventError as exc:
                return math.inf, f"candidate {i + 1}: {exc.why}"
            if total is None:
                return math.inf, (f"candidate {i + 1} is not pure eps-DP (a Gaussian step or "
                                  "an (eps, delta > 0) release)")
            worst = max(worst, total)
        return worst, None

    def epsilon(self, events: Any, delta: float, **_: Any) -> DPResult:
        self.check(events)
        eps = sum(pure_selection_epsilon(self._pure_eps(e)[0], e.shape) for e in events)
        return DPResult(float(eps), math.inf)


register_accountant(PureSelectionAccountant())
