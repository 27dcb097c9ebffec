"""grads.rounded_away: the share of an update's entries that float32 rounding erases."""

from __future__ import annotations

import pytest
import torch

from leakaudit.grads import rounded_away


def test_counts_exactly_the_entries_that_round_back_to_their_weight():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(5000, generator=gen) * 10.0 ** torch.randint(-3, 3, (5000,), generator=gen)
    g = torch.randn(5000, generator=gen) * 10.0 ** torch.randint(-9, -3, (5000,), generator=gen)
    lr = 0.1
    frac = rounded_away([w], [g], lr)
    erased = float(((w - (lr * g).float()) == w).double().mean())  # float32 arithmetic
    assert 0.05 < frac < 0.95
    # ties (exactly half an ulp) may round either way: a handful at most
    assert frac == pytest.approx(erased, abs=2e-3)


def test_half_an_ulp_of_one():
    w = torch.ones(2)  # ulp(1) = 2^-23 in float32
    g = torch.tensor([0.49 * 2.0 ** -23, 0.51 * 2.0 ** -23])
    assert rounded_away([w], [g], 1.0) == 0.5
    assert rounded_away([w.double()], [g.double()], 1.0) == 0.0  # float64 keeps both


def test_bad_input_is_refused_by_name():
    w = [torch.ones(3)]
    with pytest.raises(ValueError, match="lr"):
        rounded_away(w, w, 0.0)
    with pytest.raises(ValueError, match="gradients"):
        rounded_away(w, [torch.ones(4)], 0.1)
