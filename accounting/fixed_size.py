"""The event of fixed-size batches sampled without replacement, wired into the accountants.

``SampledWithoutReplacement(sigma, batch_size, dataset_size, count)``: ``count`` steps, each
the Gaussian mechanism (noise multiplier sigma = std / clip norm) on a uniformly random
batch of exactly B of the n records, under replace-one (the relation with an amplification
theorem; sensitivity 2C). The mathematics is :mod:`accounting.without_replacement`'s:

* rdp (and rdp-classic, moments): its per-step RDP bound (Wang, Balle, Kasiviswanathan 2019,
  Thm 9) as an :class:`~accounting.registry.RDPPart`: amplified, composes with anything;
* pld: its own discrete PLDs (a :class:`~accounting.registry.PLDPart`): upper side, the
  symmetrised pair of Dong, Roth, Su's C_gamma(G_{2/sigma}) (amplified; that module's doc),
  or the unamplified Gaussian of multiplier sigma / 2 where the symmetrisation is not
  certified at the grid step; lower side, the realised "same gradient" pair (every record's
  gradient +C, the replacement's -C): the Poisson add/remove pair at q = B / n and
  multiplier sigma / 2, in each direction: a certified bracket that composes with any
  other event;
* zcdp, composition, prv: refused by name (no rule).

``tightest`` takes the smaller of the two upper ends. One file, one registration: the
template for an event type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ._validate import check_count, check_sigma
from .events import Event
from .registry import GaussianPart, PLDPart, RDPPart, register_event
from .relations import FIXED_SIZE, REPLACE_ONE
from .without_replacement import (
    rdp_without_replacement,
    same_gradient_pld_parts,
    step_loss_variance,
    without_replacement_pld_parts,
)

__all__ = ["SampledWithoutReplacement"]


def _positive_count(name: str, value: object) -> int:
    return check_count(name, value, minimum=1)


@dataclass(frozen=True)
class SampledWithoutReplacement(Event):
    """``count`` Gaussian steps on batches of ``batch_size`` of ``dataset_size`` records drawn
    without replacement, noise multiplier ``sigma``, replace-one."""

    sigma: float
    batch_size: int
    dataset_size: int
    count: int = 1
    note: str = ""
    sampling: str = FIXED_SIZE
    relation: str = REPLACE_ONE
    kind: ClassVar[str] = "sampled_without_replacement"
    checks: ClassVar[dict] = {"sigma": check_sigma, "batch_size": _positive_count,
                              "dataset_size": _positive_count, "count": check_count}
    gaussian: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size > self.dataset_size:
            raise ValueError(f"batch_size (B={self.batch_size}) must be <= dataset_size "
                             f"(n={self.dataset_size})")
        if self.relation != REPLACE_ONE or self.sampling != FIXED_SIZE:
            raise ValueError("sampling without replacement is accounted under "
                             "relation='replace-one' with sampling='fixed-size' (the amplified "
                             f"theorem), got {self.relation!r}/{self.sampling!r}; record other "
                             "relations with ledger.step(..., sampling='fixed-size')")

    @property
    def q(self) -> float:
        """The batch fraction B / n."""
        return self.batch_size / self.dataset_size

    @property
    def steps(self) -> int:
        return self.count

    def describe(self) -> str:
        return (f"without replacement B={self.batch_size} of n={self.dataset_size} Gaussian "
                f"sigma={self.sigma:.6g} x {self.count} (replace-one){self._note()}")


    def pld_loss_variance(self) -> float:
        """Variance of one step's privacy loss, bounded above (sets the PLD grid step): that
        of the +-1 pair, at most gamma^2 (e^(4 / sigma^2) - 1) and (2 / sigma)^2."""
        return step_loss_variance(self.q, self.sigma)

    def pld_loss_range(self) -> float:
        """Widest loss range of one step on either side (bounds the PLD grid step from
        below): the +-1 pair's (lower) and the Poisson pair's at sigma / 2 (upper)."""
        from .pld import _loss_limits, _replace_loss_limits

        qs, ss = np.array([min(self.q, 1.0 - 1e-16)]), np.array([self.sigma])
        lo1, hi1 = _replace_loss_limits(qs, ss)
        lo2, hi2 = _loss_limits(np.array([self.q]), ss / 2.0)
        return float(max(hi1[0] - lo1[0], hi2[0] - lo2[0]))

    def pld_parts(self, h: float, direction: str, upper: bool) -> tuple[list, float]:
        """Discrete PLDs (``accounting.pld._PMF``, count) of these steps on the loss grid
        {k h} for one direction and side, and the round-off allowance (module doc)."""
        from .pld import gaussian_step_pmf

        if not upper:  # the realised "same gradient" pair, in this direction
            return same_gradient_pld_parts(self.sigma, self.batch_size, self.dataset_size,
                                           self.count, h, direction)
        try:
            return without_replacement_pld_parts(self.sigma, self.batch_size,
                                                  self.dataset_size, self.count, h, upper)
        except ValueError:  # not certified at this grid step: no amplification
            pmf = gaussian_step_pmf(1.0, self.sigma / 2.0, h, direction, True)
            return [(pmf, self.count)], 0.0


def _rdp_rule(e: SampledWithoutReplacement, side: str) -> list:
    if side == "lower":  # the realised "same gradient" pair (module doc): a lower bound
        return _gaussian_rule(e, side)
    return [RDPPart(lambda orders: rdp_without_replacement(e.sigma, e.batch_size,
                                                           e.dataset_size, orders), e.count,
                    key=("without_replacement", e.sigma, e.batch_size, e.dataset_size))]


def _pld_rule(e: SampledWithoutReplacement, side: str) -> list:
    if e.sigma > 0 and e.count > 0:
        return [PLDPart(e)]
    return _gaussian_rule(e, side)  # no noise (eps = inf) or no step: as a plain Gaussian


def _gaussian_rule(e: SampledWithoutReplacement, side: str) -> list:
    """upper: no amplification (q = 1, sigma / 2); lower: the "same gradient" pair."""
    q = np.array([1.0 if side == "upper" else e.q])
    s = np.array([e.sigma / 2.0])
    return [GaussianPart(q, s, np.array([e.count], dtype=np.int64))]


def _convert(e: Any, source: str, target: str) -> None:
    return None  # stated under replace-one only


register_event(SampledWithoutReplacement, convert=_convert, rdp=_rdp_rule, pld=_pld_rule)
