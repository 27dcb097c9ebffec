"""Privacy loss distributions with certified lower and upper ends on eps.

:func:`pld_epsilon` and :func:`pld_delta` bracket the eps (delta) of a ledger's events; the
theory (dominating pairs, connect-the-dots and merge-down discretisation, offset lattices,
composition by FFT with a Chernoff-bounded fold) is in docs/accounting.md. The package:

* :mod:`accounting.pld.discrete`: the discrete toolkit: a PLD on the grid {k h}
  (:class:`PMF`), its upper / lower discretisation (:func:`discretise`), truncation
  (:func:`trim`), composition (:func:`compose`), and eps / delta read off it
  (:func:`eps_of`, :func:`delta_of`);
* :mod:`accounting.pld.pairs`: the dominating pairs (Poisson-subsampled Gaussian under
  add/remove and replace-one, Laplace, (eps, delta) releases), their loss ranges and
  interval masses, and the lower side's lattice offsets;
* :mod:`accounting.pld.bracket`: the driver: grid step, per-step PLDs of a ledger,
  composition, refinement of the bracket, the RDP fallback.
"""

from .bracket import PLDBounds, PLDOptions, gaussian_pmfs, pld_delta, pld_epsilon
from .discrete import (
    PMF,
    GridTooLarge,
    compose,
    delta_of,
    discretise,
    eps_of,
    trim,
)
from .pairs import (
    atom_intervals,
    gaussian_intervals,
    gaussian_step_pmf,
    loss_limits,
    lower_shifts,
    replace_loss_limits,
    replace_pmfs,
    replace_variance,
)

__all__ = ["PLDBounds", "PLDOptions", "pld_delta", "pld_epsilon", "gaussian_pmfs", "PMF",
           "GridTooLarge",
           "compose", "delta_of", "discretise", "eps_of", "trim", "atom_intervals",
           "gaussian_intervals", "gaussian_step_pmf", "loss_limits", "lower_shifts",
           "replace_loss_limits", "replace_pmfs", "replace_variance"]
