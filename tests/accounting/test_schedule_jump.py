"""Random allocation with a one-jump sigma schedule: the heavy step kept exact."""

import math

import numpy as np
import pytest

from accounting.allocation import allocation_epsilon_bounds
from accounting.schedule_jump import jump_schedule_bounds


@pytest.mark.slow  # ~5-10 s: two constructions of 1,000 steps
def test_one_jump_is_bracketed_tightly_around_the_direct_reference():
    # one sigma 0.3 among 999 at sigma 50, t 1,000, delta 1e-5: a direct reference
    # (independent quadrature of the pair) gives 5.654; the schedule tree gave [2.686, 19.131]
    sig = np.full(1000, 50.0)
    sig[0] = 0.3
    lo, up = jump_schedule_bounds(sig, 1e-5, 1)
    assert lo <= 5.654 * (1 + 1e-4) and up >= 5.654 * (1 - 1e-4)
    assert up - lo <= 0.001 * up
    lo3, up3 = jump_schedule_bounds(sig, 1e-5, 3)  # more epochs: more eps, still narrow
    assert lo3 > up and up3 - lo3 <= 0.01 * up3


@pytest.mark.parametrize("sigma, t", [(1.0, 100), (2.0, 50)])
def test_a_constant_schedule_brackets_the_tight_allocation_bracket(sigma, t):
    # a valid bracket of the same pair must contain the (0.01 %-wide) one of the
    # constant-sigma construction
    lo, up = jump_schedule_bounds(np.full(t, sigma), 1e-5, 1)
    ref = allocation_epsilon_bounds(sigma, t, 1e-5)
    assert lo <= ref.upper and up >= ref.lower and math.isfinite(up)


def test_one_step_is_not_its_case():
    assert jump_schedule_bounds(np.array([1.0]), 1e-5, 1) == (0.0, math.inf)
