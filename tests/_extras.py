"""Optional extras in tests: skipped cleanly when absent, a failure where CI requires them.

CI (``make test`` / ``.ci/run``) sets ``LEAKAUDIT_REQUIRE_EXTRAS=1`` after installing the
``opacus`` and ``flower`` extras, so a missing extra fails there instead of skipping.
"""

import importlib
import os
from types import ModuleType

import pytest


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; skip the test module without it unless CI requires the extras."""
    if os.environ.get("LEAKAUDIT_REQUIRE_EXTRAS") == "1":
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            pytest.fail(f"LEAKAUDIT_REQUIRE_EXTRAS=1 but {module} is missing "
                        f"(pip install 'leakaudit[{extra}]'): {exc}", pytrace=False)
    return pytest.importorskip(module, reason=f"needs the {extra!r} extra: "
                                              f"pip install 'leakaudit[{extra}]'")


def effective_steps(ledger) -> list[tuple[float, float, int]]:
    """(q, multiplier, count) of the add/remove Poisson pair each sound step is charged as
    (the ledger applies its relation's sensitivity: 2C replace-one, C zero-out)."""
    from accounting.relations import gaussian_upper

    out = []
    for e in ledger.events:
        q, s = gaussian_upper(e.q, e.sigma, e.sampling, e.relation)
        out.append((float(q), float(s), e.count))
    return out
