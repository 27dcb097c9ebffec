"""Flower's DP strategy wrappers and ``LocalDpMod`` under both of its import paths.

``flwr.serverapp`` / ``flwr.clientapp`` and the older ``flwr.server`` / ``flwr.client``
export distinct classes with the same fields; the tuples here name both, so that the taps,
the ledgers and the replay recognise a wrapper whichever path the user imported.

Flower is imported when this module is (from a clone: ``pip install -e '.[flower]'``).
"""

from __future__ import annotations

try:
    from flwr.clientapp.mod import LocalDpMod
    from flwr.serverapp.strategy import (
        DifferentialPrivacyClientSideAdaptiveClipping,
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideAdaptiveClipping,
        DifferentialPrivacyServerSideFixedClipping,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("leakaudit.interop.flower needs Flower: "
                      "pip install -e '.[flower]' (from a clone of leakaudit)") from exc

try:  # Flower's other import path (flwr.client / flwr.server): distinct classes, same fields
    from flwr.client.mod import LocalDpMod as _LegacyLocalDpMod
    from flwr.server.strategy import (
        DifferentialPrivacyClientSideAdaptiveClipping as _LegacyClientAdaptive,
    )
    from flwr.server.strategy import (
        DifferentialPrivacyClientSideFixedClipping as _LegacyClientFixed,
    )
    from flwr.server.strategy import (
        DifferentialPrivacyServerSideAdaptiveClipping as _LegacyServerAdaptive,
    )
    from flwr.server.strategy import (
        DifferentialPrivacyServerSideFixedClipping as _LegacyServerFixed,
    )
    LEGACY_SERVER_FIXED: tuple[type, ...] = (_LegacyServerFixed,)
    LEGACY_CLIENT_FIXED: tuple[type, ...] = (_LegacyClientFixed,)
    LEGACY_SERVER_ADAPTIVE: tuple[type, ...] = (_LegacyServerAdaptive,)
    LEGACY_CLIENT_ADAPTIVE: tuple[type, ...] = (_LegacyClientAdaptive,)
    LEGACY_LOCAL: tuple[type, ...] = (_LegacyLocalDpMod,)
except ImportError:  # pragma: no cover - a Flower without the older path
    LEGACY_SERVER_FIXED = LEGACY_CLIENT_FIXED = LEGACY_SERVER_ADAPTIVE = ()
    LEGACY_CLIENT_ADAPTIVE = LEGACY_LOCAL = ()

__all__ = ["FIXED", "ADAPTIVE", "CLIENT_FIXED", "CLIENT_ADAPTIVE", "CENTRAL", "LOCAL",
           "LEGACY", "LEGACY_LOCAL"]

#: central DP with fixed clipping (server- or client-side), either import path
FIXED: tuple[type, ...] = (DifferentialPrivacyServerSideFixedClipping,
                           DifferentialPrivacyClientSideFixedClipping) + \
    LEGACY_SERVER_FIXED + LEGACY_CLIENT_FIXED
#: central DP with adaptive clipping (Andrew et al. 2021), either side, either path
ADAPTIVE: tuple[type, ...] = (DifferentialPrivacyServerSideAdaptiveClipping,
                              DifferentialPrivacyClientSideAdaptiveClipping) + \
    LEGACY_SERVER_ADAPTIVE + LEGACY_CLIENT_ADAPTIVE
#: the wrappers whose clients clip (``fixedclipping_mod``)
CLIENT_FIXED: tuple[type, ...] = (DifferentialPrivacyClientSideFixedClipping,) + \
    LEGACY_CLIENT_FIXED
#: the wrappers whose clients clip and report the norm bit (``adaptiveclipping_mod``)
CLIENT_ADAPTIVE: tuple[type, ...] = (DifferentialPrivacyClientSideAdaptiveClipping,) + \
    LEGACY_CLIENT_ADAPTIVE
#: every central wrapper
CENTRAL: tuple[type, ...] = FIXED + ADAPTIVE
#: ``LocalDpMod``, either import path
LOCAL: tuple[type, ...] = (LocalDpMod,) + LEGACY_LOCAL
#: the central wrappers of the older path (``aggregate_fit`` on ``FitRes``)
LEGACY: tuple[type, ...] = LEGACY_SERVER_FIXED + LEGACY_CLIENT_FIXED + \
    LEGACY_SERVER_ADAPTIVE + LEGACY_CLIENT_ADAPTIVE
