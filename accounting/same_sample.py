"""The same-sample contract: releases computed on ONE realised batch are one sampled release.

Amplification by subsampling holds for a mechanism run on a fresh random sample. Two
releases computed on the same realised batch (a clipped gradient sum and a noisy count of
that batch, or two queries of one DP-SGD step) are not two independent subsampled releases:
composing them as such (each amplified by q separately, then added) can understate eps,
because the sample they share links them (the composition of two amplified measurements that
use the same sample is not their independent composition: OpenDP issue 2933). An accountant
must either refuse such a pair or account it as one sampled composite.

:class:`SameBatch` records them as what they are: ``members``, each a Gaussian step
(:class:`~accounting.events.SampledGaussian`) recorded with the batch's rate q, sampling,
relation and count. It is accounted as ONE sampled mechanism on that batch: the members'
Gaussians compose to one Gaussian of multiplier (sum_i sigma_i^-2)^(-1/2) (Dong, Roth & Su
2022, Cor. 3.3; :func:`accounting.composition.joint_gaussian_multiplier`), subsampled once:
``SampledGaussian(q, joint sigma, count)`` under every accountant. Members that are not
Gaussian steps of one (q, sampling, relation, count) are refused by name (no composite
is implemented for them), never composed as independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .composition import joint_gaussian_multiplier
from .events import Event, SampledGaussian, event_from_dict
from .registry import UnsupportedEventError, parts, register_event
from .relations import ADD_REMOVE, POISSON, convert_event

__all__ = ["SameBatch"]


def _members(name: str, value: object) -> tuple[Event, ...]:
    if isinstance(value, (str, bytes, Event)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be a sequence of at least two events recorded over "
                         f"one realised batch, got {value!r}")
    items = tuple(event_from_dict(x) if isinstance(x, dict) else x for x in value)
    if len(items) < 2 or not all(isinstance(x, Event) for x in items):
        raise ValueError(f"{name} must hold at least two accounting events (the releases "
                         f"computed on one batch), got {value!r}")
    return items


@dataclass(frozen=True)
class SameBatch(Event):
    """Releases computed on one realised batch (``members``): one sampled composite.
    ``sampling`` and ``relation`` are taken from the first member."""

    members: tuple
    note: str = ""
    sampling: str = POISSON
    relation: str = ADD_REMOVE
    kind: ClassVar[str] = "same_batch"
    checks: ClassVar[dict] = {"members": _members}

    def _check_relation_fields(self, gaussian: bool) -> None:
        """Sampling and relation are those of the first member (the batch's)."""
        object.__setattr__(self, "sampling", self.members[0].sampling)
        object.__setattr__(self, "relation", self.members[0].relation)

    @property
    def steps(self) -> int:
        return max(e.steps for e in self.members)

    def why_not_composite(self) -> str | None:
        """Why the members are not one Gaussian composite (None: they are)."""
        if not all(type(e) is SampledGaussian for e in self.members):
            kinds = sorted({type(e).__name__ for e in self.members})
            return (f"releases over one realised batch ({', '.join(kinds)}) cannot be composed "
                    "as independent subsampled releases, and only Gaussian steps "
                    "(SampledGaussian) have a sampled composite here")
        keys = {(e.q, e.sampling, e.relation, e.count) for e in self.members}
        if len(keys) > 1:
            return ("releases over one realised batch must state its rate q, sampling, "
                    f"relation and count alike, got {sorted(keys)}: they cannot be composed "
                    "as independent subsampled releases")
        return None

    def composite(self) -> SampledGaussian:
        """The one sampled Gaussian step the members are (UnsupportedEventError otherwise)."""
        why = self.why_not_composite()
        if why is not None:
            raise UnsupportedEventError(self, "same-batch", why)
        first = self.members[0]
        sigma = joint_gaussian_multiplier(*(e.sigma for e in self.members))
        return SampledGaussian(first.q, sigma, first.count, note=self.note,
                               sampling=first.sampling, relation=first.relation)

    def describe(self) -> str:
        inner = " + ".join(e.describe() for e in self.members)
        return f"one realised batch, {len(self.members)} releases: {inner}{self._note()}"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "members": [e.to_dict() for e in self.members],
                "note": self.note, "sampling": self.sampling, "relation": self.relation}


def _rule_for(family: str):
    def rule(e: SameBatch, side: str) -> list:
        return parts([e.composite()], family, family, side)
    return rule


def _convert(e: SameBatch, source: str, target: str) -> SameBatch | None:
    try:
        members = tuple(convert_event(x, target) for x in e.members)
    except ValueError:
        return None
    return SameBatch(members, note=e.note, sampling=e.sampling, relation=target)


register_event(SameBatch, convert=_convert,
               **{f: _rule_for(f) for f in ("rdp", "zcdp", "composition", "pld", "prv")})
