"""The libraries' own accountants, read into ledgers and checked: Flower's and Opacus's.

A library's accountant prints an eps; this module reads what it composed into the claimed
ledger (the events as the library accounts them, so that the ledger reproduces its number),
puts the sound ledger (the same releases as they ran) beside it, and names every finding
where the two differ or where the library's number cannot be a privacy guarantee.

Flower (``flwr.serverapp.RdpAccountant``, 1.41 and 1.42, behind ``flwr[dp]``) accepts three
(sampling, relation) pairs in its ``PrivacyConfig``. Its events carry the strategy's noise
multiplier z = noise std / clipping norm C (the fixed-clipping wrappers add N(0, (z C)^2) to
the sum of clipped updates). Two pairs pass z to dp-accounting as it should be read: Poisson
and no amplification, both under add-or-remove-one (sensitivity C); the accountant does not
say whether the cohort really was Poisson-drawn (Flower's strategies draw a fixed number of
clients: :func:`leakaudit.interop.flower.ledgers` accounts the run itself). The third, sampling
without replacement under replace-one, hands z to dp-accounting's replace-one path, which
reads a noise multiplier as std over the replace-one sensitivity 2C: Flower's eps is that
of twice the noise that ran (:data:`REPLACE_ONE_SENSITIVITY`). The claimed ledger records
those steps at sigma 2z (accounting's ``SampledWithoutReplacement`` takes std / C), which
reproduces Flower's number; the sound one at z.

Opacus's accountants (RDP, PRV, GDP) keep ``history``; ``get_epsilon`` at a large delta
returns a negative eps (the RDP and PRV conversions are not clamped at 0), and the GDP
accountant's root search can fail or return a non-finite value. Any eps below 0 or not
finite is no guarantee: :data:`NEGATIVE_EPSILON` / :data:`NON_FINITE_EPSILON`, with the
sound value (never below 0) beside it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

from accounting import PrivacyLedger, SampledWithoutReplacement
from accounting.procedure import ProcedureReport, procedure_epsilon

from ._ledgers import LedgerPair, new_ledger

__all__ = ["Finding", "AccountantReading", "read_flower_accountant", "read_opacus_accountant",
           "sound_ledger", "procedure_from_accountants",
           "REPLACE_ONE_SENSITIVITY", "NEGATIVE_EPSILON", "NON_FINITE_EPSILON",
           "LIBRARY_ERROR", "BUDGET_PASSED", "FINDINGS"]

#: Flower's without-replacement / replace-one pair reads z as std over 2C (twice the noise).
REPLACE_ONE_SENSITIVITY = "flower-replace-one-sensitivity"
#: The library's eps is below 0: no mechanism is better than (0, delta)-DP.
NEGATIVE_EPSILON = "negative-epsilon"
#: The library's eps is NaN or infinite where the sound eps is finite.
NON_FINITE_EPSILON = "non-finite-epsilon"
#: The library's accountant raised instead of answering.
LIBRARY_ERROR = "library-error"
#: The configured budget (Flower's max_epsilon) holds for the library's eps, not the sound one.
BUDGET_PASSED = "budget-passed"
FINDINGS = (REPLACE_ONE_SENSITIVITY, NEGATIVE_EPSILON, NON_FINITE_EPSILON, LIBRARY_ERROR,
            BUDGET_PASSED)


class Finding(NamedTuple):
    """A named disagreement between a library's accountant and the sound ledger."""

    name: str
    message: str


class AccountantReading(NamedTuple):
    """A library's accountant read and checked at ``delta``: ``ledgers`` (claimed, sound),
    the eps the library printed, the sound (tightest certified) eps and the findings."""

    ledgers: LedgerPair
    delta: float
    library: str
    library_eps: float
    sound_eps: float
    sound_method: str
    findings: tuple[Finding, ...]

    def describe(self) -> str:
        claimed, sound = self.ledgers
        lines = [f"{self.library} accountant at delta={self.delta:.3g}: the library prints "
                 f"eps={self.library_eps:.6g}; sound ({self.ledgers.relation}, "
                 f"{self.ledgers.sampling}) eps={self.sound_eps:.6g} ({self.sound_method})",
                 "claimed: " + claimed.describe().replace("\n", "\n  "),
                 "sound:   " + sound.describe().replace("\n", "\n  ")]
        lines += [f"finding {f.name}: {f.message}" for f in self.findings]
        return "\n".join(lines)


def _value_findings(library: str, eps: float, sound: float) -> list[Finding]:
    if math.isnan(eps) or (math.isinf(eps) and math.isfinite(sound)):
        return [Finding(NON_FINITE_EPSILON, f"{library} prints eps={eps} where the sound eps is "
                        f"{sound:.6g}: no guarantee can be read from it")]
    if eps < 0:
        return [Finding(NEGATIVE_EPSILON, f"{library} prints eps={eps:.6g} < 0, which no "
                        f"mechanism satisfies (eps >= 0 always); the sound eps is {sound:.6g}")]
    return []


def _sound(ledger: PrivacyLedger, delta: float) -> tuple[float, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = ledger.tightest(delta)
    return best.eps, best.method


# ---------------------------------------------------------------- Flower
def _flower_state(accountant: Any) -> Mapping[str, Any]:
    state = accountant if isinstance(accountant, Mapping) else getattr(
        accountant, "state_dict", lambda: None)()
    if not isinstance(state, Mapping) or "config" not in state or "compositions" not in state:
        raise ValueError("accountant must be a Flower RdpAccountant (flwr.serverapp) or its "
                         f"state_dict(), got {type(accountant).__name__}")
    return state


def _flower_eps(accountant: Any, state: Mapping[str, Any], delta: float) -> float:
    """Flower's own number: its accountant (rebuilt from a state dict where given one)."""
    if isinstance(accountant, Mapping):
        from flwr.serverapp import NeighboringRelation, PrivacyConfig, SamplingMethod
        from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

        c = state["config"]
        accountant = RdpAccountant(PrivacyConfig(
            c["target_delta"], c["population_size"], NeighboringRelation(
                c["neighboring_relation"]), SamplingMethod(c["sampling_method"]),
            c["max_epsilon"]))
        accountant.load_state_dict(dict(state))
    return float(accountant.get_privacy_spent(delta).epsilon)


def _flower_ledgers(state: Mapping[str, Any]) -> tuple[PrivacyLedger, PrivacyLedger, str, str]:
    """(claimed, sound, relation, sampling) of Flower's compositions."""
    c = state["config"]
    sampling, relation = c["sampling_method"], c["neighboring_relation"]
    rel = "replace-one" if relation == "replace-one" else "add-remove"
    claimed, sound = new_ledger(rel), new_ledger(rel)
    for comp in state["compositions"]:
        ev, count = comp["event"], int(comp["count"])
        z, m, n = float(ev["noise_multiplier"]), int(ev["sample_size"]), int(ev["population_size"])
        if sampling == "without-replacement":
            claimed.record(SampledWithoutReplacement(2.0 * z, m, n, count,
                                                     note="as Flower passes it: z read as std/2C"))
            sound.record(SampledWithoutReplacement(z, m, n, count, note="flower: std = z C"))
        elif sampling == "poisson":
            for lg in (claimed, sound):
                lg.step(q=m / n, sigma=z, count=count, note="flower Poisson cohort")
        else:  # no amplification
            for lg in (claimed, sound):
                lg.step(q=1.0, sigma=z, count=count, sampling="all",
                        note="flower: no amplification")
    how = {"without-replacement": "fixed-size", "poisson": "poisson"}.get(sampling, "all")
    return claimed, sound, rel, how


def read_flower_accountant(accountant: Any, delta: float | None = None) -> AccountantReading:
    """Flower's ``RdpAccountant`` (or its ``state_dict()``) read and checked at ``delta``
    (default its ``target_delta``): the claimed ledger reproduces Flower's eps, the sound
    ledger accounts the same releases, and a sampling-without-replacement / replace-one
    accountant gets the finding :data:`REPLACE_ONE_SENSITIVITY` (module doc)."""
    state = _flower_state(accountant)
    delta = float(state["config"]["target_delta"] if delta is None else delta)
    claimed, sound, relation, sampling = _flower_ledgers(state)
    flower_eps = _flower_eps(accountant, state, delta)
    sound_eps, method = _sound(sound, delta)
    findings = _value_findings("Flower", flower_eps, sound_eps)
    if state["config"]["sampling_method"] == "without-replacement" and sound.events:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            at_half = sound.epsilon(delta, "rdp")
            lo, _, up = sound.epsilon_bounds(delta, "pld")
        findings.append(Finding(REPLACE_ONE_SENSITIVITY, (
            f"sampling without replacement under replace-one: Flower passes the noise "
            f"multiplier z (std / C) straight into dp-accounting's replace-one path, which "
            f"reads it as std over the replace-one sensitivity 2C; Flower prints "
            f"eps={flower_eps:.4g}, dp-accounting's RDP at z/2 gives {at_half:.4g}; the "
            f"certified bracket of what ran is [{lo:.4g}, {up:.4g}]")))
    budget = state["config"].get("max_epsilon")
    if budget is not None and flower_eps <= budget < sound_eps:
        findings.append(Finding(BUDGET_PASSED, f"max_epsilon={budget:g} is met by Flower's "
                                f"eps but not by the sound eps {sound_eps:.4g}: "
                                "would_exceed() lets it pass"))
    pair = LedgerPair(claimed, sound, relation=relation, sampling=sampling,
                      claimed_relation=relation, claimed_sampling=sampling,
                      reason="; ".join(f.message for f in findings))
    return AccountantReading(pair, delta, "Flower", flower_eps, sound_eps, method,
                             tuple(findings))


# ---------------------------------------------------------------- Opacus
def read_opacus_accountant(accountant: Any, delta: float) -> AccountantReading:
    """Opacus's accountant (RDP, PRV or GDP) read and checked at ``delta``: its history as
    the claimed ledger (:func:`leakaudit.interop.opacus.ledger_from_accountant`; Poisson
    add/remove, the accountant's own assumption, so sound == claimed here: the loader that
    ran is checked by :func:`leakaudit.interop.opacus.ledgers`), Opacus's ``get_epsilon``
    beside the sound eps, and a finding for a negative, non-finite or failed eps."""
    from .opacus import ledger_from_accountant

    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    claimed = ledger_from_accountant(accountant)
    sound = claimed.copy()
    sound_eps, method = _sound(sound, delta)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eps = float(accountant.get_epsilon(delta))
        findings = _value_findings("Opacus", eps, sound_eps)
    except Exception as exc:  # the library's failure is the finding (e.g. GDP root search)
        eps = math.nan
        findings = [Finding(LIBRARY_ERROR, f"Opacus's get_epsilon({delta:g}) raised "
                            f"{type(exc).__name__}: {exc}; the sound eps is {sound_eps:.6g}")]
    pair = LedgerPair(claimed, sound, relation="add-remove", sampling="poisson",
                      claimed_relation="add-remove", claimed_sampling="poisson",
                      reason="; ".join(f.message for f in findings))
    return AccountantReading(pair, float(delta), f"Opacus {type(accountant).__name__}", eps,
                             sound_eps, method, tuple(findings))


# ---------------------------------------------------------------- a user's procedure
def sound_ledger(accountant: Any) -> PrivacyLedger:
    """The sound ledger of one run's accountant: Flower's ``RdpAccountant`` (or its state
    dict) or an Opacus accountant (its history: Poisson add/remove steps)."""
    if isinstance(accountant, Mapping) or (hasattr(accountant, "state_dict")
                                           and not hasattr(accountant, "history")):
        return _flower_ledgers(_flower_state(accountant))[1]
    from .opacus import ledger_from_accountant

    return ledger_from_accountant(accountant)


def procedure_from_accountants(accountants: list, rule: str = "fixed", *, delta: float,
                               mean: float | None = None, shape: float = 1.0,
                               chosen: int | None = None) -> ProcedureReport:
    """The certified eps of a hyperparameter search whose runs each kept a library
    accountant (Opacus or Flower; one per configuration), beside the chosen run's
    (:func:`accounting.procedure.procedure_epsilon`)."""
    if not isinstance(accountants, (list, tuple)) or not accountants:
        raise ValueError("accountants must be a non-empty list (one accountant per run)")
    return procedure_epsilon([sound_ledger(a) for a in accountants], rule, delta=delta,
                             mean=mean, shape=shape, chosen=chosen)
