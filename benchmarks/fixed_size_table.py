"""The fixed-size-batch tables of ``benchmarks/privacy.py``: sampling without replacement
under replace-one, no amplification against the certified bracket, and the bracket's width
over B/n x sigma x steps."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from accounting.composition import analytic_gaussian_epsilons
from accounting.without_replacement import (
    epsilon_bounds_without_replacement,
    epsilon_without_replacement,
)
from benchmarks._common import Report

#: the sweep: B/n, sigma and steps (n = 100,000)
GAMMAS, SIGMAS, STEPS = (1e-3, 1e-2, 1e-1), (0.6, 1.0, 2.0), (100, 1_000, 10_000)


def without_replacement_table(rep: Report, delta: float, fmt: Callable[[float], str]) -> None:
    """Fixed-size batches under replace-one: no amplification vs Wang et al. 2019 Thm 9,
    the certified bracket, and its width over the sweep."""
    rep.line("## Fixed-size batches (sampling without replacement, replace-one)")
    rep.line()
    rep.line(f"delta = {delta:g}; sigma = noise std / clip norm, sensitivity 2C under "
             "replace-one (`accounting.without_replacement`). Upper: the smaller of the "
             "symmetrised PLD of Dong, Roth, Su's C_gamma(G_{2/sigma}) and the RDP of Wang, "
             "Balle, Kasiviswanathan 2019 Thm 9 (dp-accounting's RDP value in the last "
             "column, its noise multiplier sigma / 2); lower: the realised 'same gradient' "
             "pair (every record's gradient +C, the replacement's -C: the Poisson pair at B/n "
             "and sigma / 2); no amplification: every step a Gaussian release with "
             "multiplier sigma / 2.")
    rep.line()
    body = []
    for sigma, batch, n, epochs in ((1.1, 256, 60_000, 60), (1.0, 64, 10_000, 10)):
        steps = epochs * (n // batch)
        lo, up = epsilon_bounds_without_replacement(sigma, batch, n, steps, delta)
        plain = float(analytic_gaussian_epsilons(
            np.array([sigma / (2 * math.sqrt(steps))]), delta)[0])
        rdp = epsilon_without_replacement(sigma, batch, n, steps, delta)
        body.append([f"{sigma:g}", f"{batch}", f"{n:,}", f"{steps:,}", fmt(plain),
                     f"[{fmt(lo)}, {fmt(up)}]", fmt(rdp)])
    rep.table(["sigma", "B", "n", "steps", "eps, no amplification", "eps bracket (amplified)",
               "RDP (Thm 9)"], body)
    rep.line("Bracket [lower, upper] and width (upper - lower) / upper, n = 100,000:")
    rep.line()
    sweep = []
    for gamma in GAMMAS:
        for sigma in SIGMAS:
            row = [f"{gamma:g}", f"{sigma:g}"]
            for steps in STEPS:
                lo, up = epsilon_bounds_without_replacement(sigma, round(gamma * 100_000),
                                                            100_000, steps, delta)
                row.append(f"[{fmt(lo)}, {fmt(up)}] {100 * (up - lo) / up:.1f}%")
            sweep.append(row)
    rep.table(["B/n", "sigma"] + [f"{t:,} steps" for t in STEPS], sweep)
