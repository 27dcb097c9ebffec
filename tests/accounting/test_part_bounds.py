"""The ledger's PLD bracket is at least as tight as each part's own certified function."""

import pytest

from accounting import PrivacyLedger
from accounting.allocation import allocation_epsilon_bounds
from accounting.fixed_size import SampledWithoutReplacement
from accounting.part_bounds import part_function
from accounting.without_replacement import epsilon_bounds_without_replacement


@pytest.mark.parametrize("epochs", [1, 10, 30])
def test_allocation_in_a_ledger_equals_or_beats_its_function(epochs):
    # t = 2, sigma 0.5: the composed PLD's lower end was 0.0 at 30 epochs where the
    # function certifies 62.2
    delta = 1e-5
    ledger = PrivacyLedger()
    ledger.allocate(sigma=0.5, steps=2, epochs=epochs)
    lo, _, up = ledger.epsilon_bounds(delta, method="pld")
    f_lo, _, f_up = allocation_epsilon_bounds(0.5, 2, delta, epochs=epochs)
    assert lo >= f_lo * (1 - 1e-12) and up <= f_up * (1 + 1e-12)
    assert lo > 0
    # with another release the part's lower end still holds for the composition
    ledger.step(q=0.01, sigma=1.0, count=10)
    lo2, _, up2 = ledger.epsilon_bounds(delta, method="pld")
    assert lo2 >= f_lo * (1 - 1e-12) and lo2 <= up2
    assert ledger.tightest_epsilon(delta) >= lo2


def test_fixed_size_in_a_ledger_equals_or_beats_its_function():
    delta = 1e-6
    ev = SampledWithoutReplacement(1.0, 64, 10_000, 1_000)
    ledger = PrivacyLedger(relation="replace-one")
    ledger.record(ev)
    lo, _, up = ledger.epsilon_bounds(delta, method="pld")
    f_lo, f_up = epsilon_bounds_without_replacement(1.0, 64, 10_000, 1_000, delta)
    assert lo >= f_lo * (1 - 1e-3) and up <= f_up * (1 + 1e-3)


def test_only_types_with_a_function_are_tightened():
    from accounting.events import SampledGaussian

    assert part_function(SampledGaussian(0.1, 1.0)) is None
    assert part_function(SampledWithoutReplacement(1.0, 1, 10)) is not None
