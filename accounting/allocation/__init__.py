"""Random allocation ("balls in bins"): every example in exactly k of the t steps of an
epoch, Gaussian noise, add/remove (or zero-out) adjacency.

:class:`RandomAllocation` is the ledger event; :func:`allocation_epsilon_bounds` its
certified (lower, estimate, upper) eps; :func:`allocation_gaussian_bounds` the closed-form
bracket valid everywhere; :func:`allocation_schedule_bounds` a per-step sigma schedule.
The construction (dominating pair, mean-preserving and one-sided rounding, the reduction
for k > 1) is in docs/accounting.md, its measurements in docs/results.md. The package:

* :mod:`~accounting.allocation.event`: the event and its PLD hooks;
* :mod:`~accounting.allocation.laws`: one-sided (floor / ceil) rounding laws of the sum;
* :mod:`~accounting.allocation.sums`: mean-preserving sums with certified error bounds;
* :mod:`~accounting.allocation.epoch`: one epoch's law and its upper / lower PLD pairs;
* :mod:`~accounting.allocation.bounds`: the bracket of an allocation, closed-form bounds;
* :mod:`~accounting.allocation.schedules`: per-step sigma schedules.
"""

from .bounds import allocation_epsilon_bounds, allocation_gaussian_bounds
from .event import RandomAllocation, clear_cache
from .schedules import ScheduleBounds, allocation_schedule_bounds

__all__ = ["RandomAllocation", "ScheduleBounds", "allocation_epsilon_bounds",
           "allocation_gaussian_bounds", "allocation_schedule_bounds",
           "clear_cache"]
