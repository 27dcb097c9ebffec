"""One call for a user's procedure: the eps of what is published after a hyperparameter
search, beside the eps of the chosen run alone.

``procedure_epsilon(runs, rule, delta=...)`` takes the runs a user made (ledgers or
sequences of events, one per configuration), the selection rule and its number of runs
(:class:`accounting.tuning.HyperparameterSearch`), and reports the certified eps of the
procedure (its RDP value and the tightest certified value with the method that gave it) and
the eps the chosen run alone would claim. The gap between the two is what a paper that
reports the chosen run's eps leaves out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from ._validate import check_delta
from .ledger import PrivacyLedger
from .tuning import HyperparameterSearch

__all__ = ["ProcedureReport", "procedure_epsilon"]


class ProcedureReport(NamedTuple):
    """The published procedure's eps beside the chosen run's (all at ``delta``, under
    ``relation``)."""

    delta: float
    relation: str
    search: HyperparameterSearch
    rdp: float
    tightest: float
    tightest_method: str
    chosen: int
    chosen_eps: float
    chosen_method: str
    runs_eps: tuple[float, ...]

    def describe(self) -> str:
        s = self.search
        how = ("every candidate run once (best-of-k: their composition)" if s.rule == "fixed"
               else f"a {s.rule} number of runs, mean {s.mean:g}"
               + (f", eta {s.shape:g}" if s.rule == "negative-binomial" else ""))
        ratio = (self.tightest / self.chosen_eps if self.chosen_eps > 0 else math.inf)
        return "\n".join([
            f"hyperparameter search over {len(s.candidates)} configurations: {how}; "
            f"delta={self.delta:.3g}, relation {self.relation}",
            f"  {'procedure (what is published)':<32} eps {_fmt(self.tightest)}  "
            f"({self.tightest_method}; rdp {_fmt(self.rdp)})",
            f"  {f'chosen run {self.chosen} alone':<32} eps {_fmt(self.chosen_eps)}  "
            f"({self.chosen_method})  -> the procedure costs x{ratio:.3g}",
            f"  every run alone (0..{len(self.runs_eps) - 1}): "
            f"{', '.join(_fmt(e) for e in self.runs_eps)}"])


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4f}"


def _ledger(run: Any, relation: str | None) -> PrivacyLedger:
    if isinstance(run, PrivacyLedger):
        return run
    ledger = PrivacyLedger(relation=relation or getattr(next(iter(run), None), "relation",
                                                        "add-remove"))
    for e in run:
        ledger.record(e)
    return ledger


def procedure_epsilon(runs: Sequence[Any], rule: str = "fixed", *, delta: float,
                      mean: float | None = None, shape: float = 1.0,
                      chosen: int | None = None) -> ProcedureReport:
    """The certified eps of a hyperparameter search (``rule``: :data:`SELECTION_RULES`;
    ``mean``: expected number of runs of a random rule, default the number of runs given)
    beside the eps of the ``chosen`` run alone (index; default the most expensive run, the
    largest eps a paper could report). ``runs``: ledgers or sequences of events."""
    delta = check_delta("delta", delta)
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence) or not runs:
        raise ValueError("runs must be a non-empty sequence of ledgers (one per "
                         f"configuration), got {runs!r}")
    ledgers = [_ledger(r, None) for r in runs]
    relation = ledgers[0].relation
    if chosen is None:
        chosen = -1
    elif isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < len(runs):
        raise ValueError(f"chosen must be the index of a run in 0..{len(runs) - 1}, "
                         f"got {chosen!r}")
    search = HyperparameterSearch(ledgers, rule=rule,
                                  mean=float(len(runs) if mean is None else mean),
                                  shape=shape, relation=relation)
    procedure = PrivacyLedger(relation=relation)
    procedure.record(search)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = [lg.tightest(delta) for lg in ledgers]
        best = procedure.tightest(delta)
        rdp = procedure.epsilon(delta, "rdp")
    runs_eps = tuple(a.eps for a in alone)
    if chosen == -1:
        chosen = max(range(len(runs_eps)), key=runs_eps.__getitem__)
    return ProcedureReport(delta, relation, search, rdp, best.eps, best.method, chosen,
                           alone[chosen].eps, alone[chosen].method, runs_eps)
