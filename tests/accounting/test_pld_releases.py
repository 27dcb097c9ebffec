"""Laplace and (eps, delta) releases in the PLD bracket: each release's discrete PLD is built
once per grid (cached) and the lower side's merge-down recursion on one row is the same
recursion as on many rows; neither changes a bracket."""

from __future__ import annotations

import math

import numpy as np

import accounting as A
from accounting.pld.bracket import release_pmf
from accounting.pld.discrete import merge_down
from accounting.pld.pairs import laplace_intervals

#: One client's ledger after each of six rounds: a subsampled Gaussian step and an (eps,
#: delta) release, then one Laplace release per round at its own eps' = 1/b (0.8 .. 1309:
#: the widest release, hence the grid step, changes from round to round).
_EPS = [0.8, 3.0, 40.0, 997.268, 1164.683, 1309.351]

#: (lower, upper) at delta = 1e-5 of each prefix, computed before the release cache and the
#: rewritten row recursion (main dad00ae): the same floats, bit for bit.
_BEFORE = [
    (2.042828804674763, 2.0428453491803147),
    (4.98925118293444, 4.989267603785493),
    (44.93345192875608, 44.93532809556896),
    (1041.9648202541664, 1042.3221665146368),
    (2206.4769104230727, 2207.003850042515),
    (3515.6861502374895, 3516.3732997311777),
]


def _prefixes() -> list[list[A.Event]]:
    events: list[A.Event] = [A.SampledGaussian(0.05, 1.5, 20), A.ApproxDP(0.5, 1e-7)]
    out = []
    for eps in _EPS:
        events = events + [A.Laplace(b=1.0 / eps)]
        out.append(list(events))
    return out


def test_brackets_of_distinct_laplace_scales_are_unchanged_cold_and_warm() -> None:
    release_pmf.cache_clear()
    warm = [A.pld_epsilon(ev, 1e-5) for ev in _prefixes()]  # round by round: cache reused
    assert release_pmf.cache_info().hits > 0
    for (lo, up), b in zip(_BEFORE, warm):
        assert (b.lower, b.upper) == (lo, up)
    for ev, b in zip(reversed(_prefixes()), reversed(warm)):  # each from a cold cache
        release_pmf.cache_clear()
        assert A.pld_epsilon(ev, 1e-5) == b
    # still a bracket, inside the pure-DP sum plus the Gaussian's share
    for ev, b in zip(_prefixes(), warm):
        pure = 0.5 + sum(e.eps for e in ev if isinstance(e, A.Laplace))
        assert b.lower <= b.upper <= pure + 1.0


def test_cached_release_pmf_is_read_only() -> None:
    pmf = release_pmf(True, 40.0, 0.0, 0.04, False, 1e-16)
    assert not pmf.p.flags.writeable
    assert math.isclose(pmf.p.sum(), 1.0, rel_tol=1e-9)  # lower side: P-mass kept, none at inf
    assert release_pmf(True, 40.0, 0.0, 0.04, False, 1e-16) is pmf


def test_merge_down_one_row_agrees_with_the_many_rows_recursion() -> None:
    """merge_down runs its recursion on Python floats for <= 8 rows, column by column in
    numpy above: two implementations of one recursion (different float operation order)."""
    for eps, h in [(1.0, 1e-3), (40.0, 0.01), (1000.0, 0.0867)]:
        k0 = int(math.floor(-eps / h)) - 1
        edges = np.arange(k0, int(math.ceil(eps / h)) + 2, dtype=float) * h
        pm, qm, _, _ = laplace_intervals(eps, edges, h)
        ks = np.arange(k0, k0 + pm.size, dtype=float)
        one = merge_down(pm[None], qm[None], ks, h)[0]
        many = merge_down(np.repeat(pm[None], 9, 0), np.repeat(qm[None], 9, 0), ks, h)[0]
        np.testing.assert_allclose(one, many, rtol=1e-9, atol=1e-15)  # tiny bins: cancellation
        assert math.isclose(one.sum(), pm.sum(), rel_tol=1e-12)  # mass only moved
