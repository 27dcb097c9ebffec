"""The random-allocation event: every example in k of the t steps of each of E epochs.

:class:`RandomAllocation` validates its parameters, states its accounting (add/remove and
zero-out: one pair; replace-one: refused with a pointer to group privacy) and hands its
per-epoch discrete PLDs to :func:`accounting.pld.pld_epsilon`: the mean-preserving epoch
(:mod:`~accounting.allocation.epoch`) where its grid holds the bulk, the one-sided laws
(:mod:`~accounting.allocation.laws`) for heavy tails, k Gaussian releases where m =
floor(t/k) = 1; for k > 1 the upper end is k concurrent 1-of-m allocations and the lower
end a post-processing of the realised k-of-t pair. :meth:`RandomAllocation.for_delta`
gives the same event with tails and grids scaled to a small delta (fields ``tail`` and
``small``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._validate import check_count, check_positive
from ..events import Event, register_event
from .epoch import certified_epoch, epoch_pairs, epoch_pmf, mean_preserving
from .laws import BINS, binned_pair, binned_pmf, exact_ok, loss_pmf, rounded_laws


def clear_cache() -> None:
    """Forget the cached per-sigma laws (for timings from scratch)."""
    rounded_laws.cache_clear()
    certified_epoch.cache_clear()
    binned_pair.cache_clear()


# ---------------------------------------------------------------- the event
@dataclass(frozen=True, init=False)
class RandomAllocation(Event):
    """``epochs`` epochs of random allocation: each example in ``selected`` (k) of the
    ``steps_per_epoch`` (t) steps of an epoch, uniformly at random, Gaussian noise
    multiplier ``sigma`` (L2 sensitivity 1 per step), add/remove adjacency.

    ``RandomAllocation(sigma, steps, selected=1, epochs=1)``: ``steps`` is t (per epoch);
    :attr:`steps` (the Event contract) is the number of releases, t x epochs.
    """

    sigma: float
    steps_per_epoch: int
    selected: int
    epochs: int
    note: str
    relation: str
    kind: ClassVar[str] = "random_allocation"
    #: per-node tail probability of the capped sums (:func:`rounded_laws`)
    tail: float = field(default=1e-10, repr=False)
    #: small-delta grids (:meth:`for_delta`)
    small: bool = field(default=False, repr=False)
    #: how the batches are drawn (:mod:`accounting.relations`)
    sampling: ClassVar[str] = "random-allocation"

    def __init__(self, sigma: float, steps: int, selected: int = 1, epochs: int = 1,
                 note: str = "", relation: str = "add-remove", *, tail: float = 1e-10,
                 small: bool = False) -> None:
        if relation not in ("add-remove", "zero-out"):
            raise ValueError(
                f"relation={relation!r}: random allocation is certified under 'add-remove' and "
                "'zero-out' (a zeroed example is still dealt into its steps and moves nothing, "
                "the same pair as removing it); for 'replace-one' account the ledger under "
                "add-remove and convert with group privacy (ledger.converted)")
        sigma = check_positive("sigma", sigma)
        if math.isinf(sigma):
            raise ValueError("sigma must be finite")
        t = check_count("steps", steps, minimum=1)
        k = check_count("selected", selected, minimum=1)
        if k > t:
            raise ValueError(f"selected (k={k}) must be <= steps (t={t}): every example is "
                             "in k distinct steps of an epoch")
        e = check_count("epochs", epochs, minimum=1)
        if t > 10**6:
            raise ValueError(f"steps (t={t}) above 10**6 per epoch is not supported")
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "steps_per_epoch", t)
        object.__setattr__(self, "selected", k)
        object.__setattr__(self, "epochs", e)
        object.__setattr__(self, "note", str(note))
        if not 0.0 < float(tail) < 1.0:
            raise ValueError(f"tail={tail!r} must be a probability in (0, 1)")
        object.__setattr__(self, "tail", float(tail))
        object.__setattr__(self, "small", bool(small))
        object.__setattr__(self, "relation", relation)

    # Event contract
    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def groups_of(self) -> int:
        """m = floor(t / k): the upper bound is k concurrent 1-of-m allocations
        (docs/accounting.md)."""
        return self.steps_per_epoch // self.selected

    @property
    def reduction(self) -> str:
        """How the upper bound is obtained: "exact" (k = 1), "groups" (k x 1-of-m, m =
        floor(t/k) >= 2), "none" (m = 1: k Gaussian releases per epoch)."""
        if self.selected == 1:
            return "exact"
        return "groups" if self.groups_of >= 2 else "none"

    @property
    def count(self) -> int:
        """Compositions of one per-epoch PLD in the upper bound (epochs, or epochs x k)."""
        return self.epochs * (1 if self.selected == 1 else self.selected)

    @property
    def lower_kind(self) -> str:
        """What the lower end is: "realised" (k = 1: the realised pair, which is the
        dominating one), "binned" (k > 1: a post-processing of the realised k-of-t pair,
        :func:`binned_pair`), "sum" (the sum of the outputs, where the log-normal
        machinery does not apply: sigma below ~0.06, or k = t). All three are certified
        lower bounds on the eps of the scheme that ran."""
        if not exact_ok(self.sigma, self.steps_per_epoch) or self.selected == self.steps_per_epoch:
            return "sum" if self.steps_per_epoch > 1 else "realised"
        return "realised" if self.selected == 1 else "binned"

    def describe(self) -> str:
        t, k, m = self.steps_per_epoch, self.selected, self.groups_of
        sub = f" of a uniform {k * m}-step subset" if t % k else ""
        how = {"exact": "", "groups": f" (bound: {k} x 1-of-{m}{sub})",
               "none": " (bound: no amplification, k > t/2)"}[self.reduction]
        return (f"random allocation {self.selected} of {self.steps_per_epoch} steps, "
                f"Gaussian sigma={self.sigma:.6g} x {self.epochs} epoch(s){how}"
                f"{self._note()}")

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "sigma": self.sigma, "steps": self.steps_per_epoch,
                "selected": self.selected, "epochs": self.epochs, "note": self.note,
                "relation": self.relation}

    # ------------------------------------------------------------ PLD hooks
    def for_delta(self, delta: float) -> RandomAllocation:
        """The same event with its discrete PLD built for a target ``delta`` (the optional
        PLDPart protocol method of :func:`accounting.pld.pld_epsilon`): per-node tails
        delta 1e-3 / (2 t x compositions) (N >= 2, cap overflow: absorbed at +inf) and the
        small-delta grids of :func:`mean_preserving`; the same pair, so the same bounds
        hold, only the allowances are smaller."""
        tail = max(1e-300, min(self.tail, delta * 1e-3 / (2.0 * self.steps_per_epoch
                                                            * self.count)))
        return RandomAllocation(self.sigma, self.steps_per_epoch, self.selected, self.epochs,
                                self.note, self.relation, tail=tail, small=True)

    def pld_loss_variance(self) -> float:
        """Variance of the one-epoch privacy loss under P (sets the PLD grid step)."""
        m = self.groups_of
        if m == 1 or not exact_ok(self.sigma, m):
            return self.selected / self.sigma**2
        ep = mean_preserving(self.sigma, m, self.tail, self.small)
        if ep is not None:
            p, loss, _, _ = epoch_pairs(ep, "remove", True)
            w = p / max(float(p.sum()), 1e-300)
        else:
            laws = rounded_laws(self.sigma, m, BINS, self.tail)
            n = laws.p_dn.size - 1
            j = np.arange(1, n + 1, dtype=float)
            loss = np.log(j * laws.hy / m) - 0.5 / self.sigma**2
            w = laws.p_dn[1:] / max(float(laws.p_dn[1:].sum()), 1e-300)
        mean = float((w * loss).sum())
        return float(self.selected * (w * (loss - mean) ** 2).sum())

    def pld_parts(self, h: float, direction: str, upper: bool) -> tuple[list, float]:
        """Discrete PLDs (``accounting.pld.PMF``, count) of this event on the loss grid
        {k h} for one direction ("remove"/"add") and side, and its round-off allowance."""
        from ..pld import PMF, trim

        t, k, m = self.steps_per_epoch, self.selected, self.groups_of
        if not upper:
            kind = self.lower_kind
            if kind == "sum":  # the sum of the t outputs: N(k, t sigma^2) vs N(0, t sigma^2)
                s = self.sigma * math.sqrt(t) / k
                return [(_gaussian_pmf(s, h, direction, False), self.epochs)], 0.0
            if kind == "binned":  # round-off already inside the pair (see binned_pmf)
                return [(binned_pmf(self.sigma, t, k, h, direction), self.epochs)], 0.0
        if m == 1 or not exact_ok(self.sigma, m):  # k Gaussian releases per epoch
            return [(_gaussian_pmf(self.sigma, h, direction, upper), self.count)], 0.0
        ep = mean_preserving(self.sigma, m, self.tail, self.small)
        if ep is not None:
            pmf, allow = epoch_pmf(ep, h, direction, upper, self.tail)
            return [(pmf, self.count)], self.count * allow
        # heavy tails (the grid of S below c too coarse for the bulk): one-sided rounding
        laws = rounded_laws(self.sigma, m, BINS, self.tail)
        if direction == "remove":
            law = laws.p_up if upper else laws.p_dn
        else:
            law = laws.q_dn if upper else laws.q_up
        lo, p, inf = loss_pmf(law, laws.hy, self.sigma, m, h, direction, upper)
        pmf = trim(PMF(lo, p, inf), upper)
        return [(pmf, self.count)], self.count * laws.err


def _gaussian_pmf(s: float, h: float, direction: str, upper: bool):
    """Discrete PLD of the Gaussian pair N(1, s^2) / N(0, s^2) (connect-the-dots upper,
    merge-down lower, :mod:`accounting.pld`)."""
    from ..pld import gaussian_step_pmf

    return gaussian_step_pmf(1.0, s, h, direction, upper)


register_event(RandomAllocation)

