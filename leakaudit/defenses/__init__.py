"""Defenses, registered by name: ``get("fed-cdp", clip=4.0, sigma=6.0)``, ``available()``.

One file per defense, each a :class:`~leakaudit.defenses.base.Defense` that declares where it
acts and records its releases in the claimed and sound ledgers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .adaclip import AdaClip
from .adadp import AdaDP
from .adap_dp_fl import AdapDPFL
from .base import SITES, ClientContext, Defense, RoundContext
from .cos_adaptive_laplace import CosAdaptiveLaplace
from .dpfl_agn import DPFLAGN
from .dssgd import DSSGD
from .fed_alpha_cdp import FedAlphaCDP
from .fed_cdp import FedCDP
from .fed_sdp import FedSDP
from .none import NoDefense
from .prune import Prune
from .quantile_clip import QuantileClip
from .random_noise import RandomNoise

__all__ = ["Defense", "ClientContext", "RoundContext", "SITES", "PAPER_PARAMS", "get",
           "available", "register",
           "NoDefense", "FedSDP", "FedCDP", "FedAlphaCDP", "Prune", "RandomNoise", "AdapDPFL",
           "CosAdaptiveLaplace", "DSSGD", "QuantileClip", "AdaClip",
           "DPFLAGN", "AdaDP"]

_REGISTRY: dict[str, Callable[..., Defense]] = {}

#: the source papers' parameters of a bare name: the one table every entry point uses
#: (``get``, hence audit, privacy_audit, simulate and ``leakaudit defenses``); keyword
#: arguments override them
PAPER_PARAMS: dict[str, dict[str, object]] = {
    "fed-sdp-server": {"clip": 4.0, "sigma": 6.0},
    "fed-sdp-client": {"clip": 4.0, "sigma": 6.0},
    "fed-cdp": {"clip": 4.0, "sigma": 6.0},
    "fed-alpha-cdp": {"clip": 4.0, "sigma": 6.0},
    "prune": {"rate": 0.1},
    "random-noise": {"variance": 0.001},
}


def register(name: str, factory: Callable[..., Defense], *, replace: bool = False) -> None:
    """Register a defense factory under ``name`` (refuses to overwrite unless ``replace``)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"a defense named {name!r} is already registered")
    _REGISTRY[name] = factory


def available() -> list[str]:
    """Names of the registered defenses."""
    return sorted(_REGISTRY)


def get(name: str, **kwargs: object) -> Defense:
    """Build the defense registered as ``name``: the papers' parameters (``PAPER_PARAMS``)
    overridden by the keyword arguments."""
    if isinstance(name, Defense):
        if kwargs:
            raise ValueError("keyword arguments are only allowed with a defense name")
        return name
    if name not in _REGISTRY:
        raise ValueError(f"unknown defense {name!r}; available: {', '.join(available())}")
    try:
        return _REGISTRY[name](**{**PAPER_PARAMS.get(name, {}), **kwargs})
    except TypeError as exc:
        raise ValueError(f"bad arguments for defense {name!r}: {exc}") from exc


register("none", NoDefense)
register("fed-sdp-server", partial(FedSDP, where="server"))
register("fed-sdp-client", partial(FedSDP, where="client"))
register("fed-cdp", FedCDP)
register("fed-alpha-cdp", FedAlphaCDP)
for _short in ("linear", "staircase", "exp", "cyclic"):
    register(f"fed-alpha-cdp-{_short}", partial(FedAlphaCDP, decay=_short, sigma=15.0))
register("adap-dp-fl", AdapDPFL)
register("cos-adaptive-laplace", CosAdaptiveLaplace)
register("cos-adaptive-laplace-public", partial(CosAdaptiveLaplace, similarity="public"))
register("dssgd", DSSGD)
register("dssgd-dp", partial(DSSGD, tau=None, gamma=0.05, laplace_eps=500.0))
register("dpfl-agn", DPFLAGN)
register("adadp", AdaDP)
register("adadp-nonprivate", partial(AdaDP, private=False))
register("quantile-clip", QuantileClip)
register("adaclip", AdaClip)
register("prune", Prune)
register("random-noise", RandomNoise)
