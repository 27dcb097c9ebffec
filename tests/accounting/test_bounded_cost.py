"""Bounded cost and extreme inputs: subnormal parameters are refused by name before any
work (their reciprocals and squares overflow); nothing answers with a bare arithmetic
error."""

import pytest

import accounting as A
from accounting.allocation import allocation_epsilon_bounds


@pytest.mark.parametrize("call, name", [
    (lambda: allocation_epsilon_bounds(5e-324, 10, 1e-5), "sigma"),
    (lambda: A.SampledGaussian(0.1, 5e-324), "sigma"),
    (lambda: A.Laplace(5e-324), "b"),
    (lambda: A.shuffle_epsilon_bounds(1e-310, 10, 1, 1e-5), "sigma"),
    (lambda: A.PrivacyLedger().step_schedule(0.1, [1.0, 1e-320]), "sigmas"),
])
def test_subnormal_parameters_are_refused_by_name(call, name):
    with pytest.raises(ValueError, match=f"{name}.*subnormal"):
        call()


def test_zero_sigma_is_still_an_answer():
    ledger = A.PrivacyLedger()
    ledger.step(q=0.1, sigma=0.0)
    assert ledger.epsilon(1e-5) == float("inf")
