"""The audit: :func:`audit` orchestrates (:mod:`.auditor`: simulate, then the pipeline);
:func:`audit_observations` audits observations captured elsewhere (:mod:`.observations`:
Opacus, Flower, your loop); both go through one pipeline (:mod:`.pipeline`: one job builder,
one run loop); one attack cell is attacked and scored in :mod:`.cells`; :mod:`.engines` runs
cells (serial, process pool, Ray); :mod:`.report` the tables and figure. The settings are objects
(:class:`AuditPlan`, :class:`AttackBudget`, :class:`EngineConfig`; the federated run's is
:class:`leakaudit.fl.FLConfig`). The results file
and the observations are :mod:`leakaudit.records`'.

(The package is ``auditing`` rather than ``audit`` because ``leakaudit.audit`` is the
function: a subpackage of that name would replace it as soon as it is imported.)
"""

from __future__ import annotations

from ..records import ResultsFile
from .auditor import DEFAULT_DEFENSES, PAPER_PARAMS, PROFILES, AuditPlan, AuditProfile, audit
from .cells import AttackBudget
from .engines import ENGINES, EngineConfig
from .observations import audit_observations
from .report import AuditReport

__all__ = ["AttackBudget", "AuditPlan", "AuditProfile", "AuditReport", "DEFAULT_DEFENSES",
           "ENGINES", "EngineConfig", "PAPER_PARAMS", "PROFILES", "ResultsFile", "audit",
           "audit_observations"]
