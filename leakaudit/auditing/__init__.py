"""The audit: :func:`audit` orchestrates (:mod:`.auditor`); one attack cell is attacked and
scored in :mod:`.cells`; :mod:`.engines` runs cells (serial, process pool, Ray);
:mod:`.results` is the resumable results file; :mod:`.report` the tables and figure;
:mod:`.observations` audits observations captured elsewhere (Opacus, Flower, your loop).

(The package is ``auditing`` rather than ``audit`` because ``leakaudit.audit`` is the
function: a subpackage of that name would replace it as soon as it is imported.)
"""

from __future__ import annotations

from ..records import ResultsFile
from .auditor import DEFAULT_DEFENSES, PAPER_PARAMS, PROFILES, AuditProfile, audit
from .engines import ENGINES
from .observations import audit_observations
from .report import AuditReport

__all__ = ["AuditProfile", "AuditReport", "DEFAULT_DEFENSES", "ENGINES", "PAPER_PARAMS",
           "PROFILES", "ResultsFile", "audit", "audit_observations"]
