"""Label counts of batches with repeated labels (leakaudit.attacks.label_counts): the
bias-corrected estimate reaches the issue's multiset accuracy on real digits, its integer
rounding keeps the batch size and the present classes, and it never needs the truth."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from leakaudit import attacks, fl, metrics, models
from leakaudit.attacks import label_counts
from leakaudit.attacks.labels import labels_from_last_layer


def batches(ds, batch_size, count, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for t in range(count):
        idx = torch.randperm(len(ds.y_train), generator=gen)[:batch_size]
        model = models.lenet(generator=torch.Generator().manual_seed(100 + t))
        x, y = ds.x_train[idx], ds.y_train[idx]
        yield model, fl.batch_gradient(model, x, y), y


@pytest.mark.parametrize(("batch_size", "target"), [(8, 0.95), (32, 0.90)])
def test_multiset_accuracy_on_untrained_lenet(digits, batch_size, target):
    """The targets; the sign rule it replaces stays below them on the same batches."""
    ours, sign_rule = [], []
    for model, grads, y in batches(digits, batch_size, 8):
        labels, _ = attacks.infer_labels(model, grads, batch_size, 10)
        ours.append(metrics.label_accuracy(labels, y))
        old, _ = labels_from_last_layer(grads[-2].double(), batch_size)
        sign_rule.append(metrics.label_accuracy(old, y))
    assert sum(ours) / len(ours) >= target
    assert sum(ours) > sum(sign_rule)


def test_exact_softmax_mass_gives_exact_counts(digits):
    """n_c = P_c - B db_c is an identity: with the true softmax mass the counts are exact,
    so every error of the estimate comes from P_hat alone."""
    model = models.lenet(generator=torch.Generator().manual_seed(3))
    x, y = digits.x_train[:16], digits.y_train[:16]
    grads = fl.batch_gradient(model, x, y)
    with torch.no_grad():
        mass = torch.softmax(model(x).double(), dim=1).sum(dim=0)
    exact = mass - 16 * grads[-1].double()
    assert torch.allclose(exact, torch.bincount(y, minlength=10).double(), atol=1e-4)


@given(st.lists(st.floats(0.0, 9.0), min_size=2, max_size=12), st.integers(1, 40),
       st.data())
def test_rounding_keeps_batch_size_and_present_classes(estimate, batch_size, draw):
    est = torch.tensor(estimate, dtype=torch.float64)
    present = torch.tensor(draw.draw(st.lists(st.booleans(), min_size=len(estimate),
                                              max_size=len(estimate))))
    counts = label_counts.round_counts(est, batch_size, present)
    assert int(counts.sum()) == batch_size and bool((counts >= 0).all())
    if int(present.sum()) <= batch_size:
        assert bool((counts[present] >= 1).all())
    labels = label_counts.counts_to_labels(counts)
    assert labels.tolist() == sorted(labels.tolist()) and len(labels) == batch_size


def test_integer_estimates_are_kept():
    est = torch.tensor([3.0, 0.0, 2.0, 0.0, 3.0], dtype=torch.float64)
    counts = label_counts.round_counts(est, 8, est > 0)
    assert counts.tolist() == [3, 0, 2, 0, 3]


def test_no_bias_no_counts(digits):
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10, bias=False))
    x, y = digits.x_train[:12], digits.y_train[:12]
    grads = fl.batch_gradient(model, x, y)
    assert label_counts.count_labels(model, grads, 12, 10) is None
    labels, identifiable = attacks.infer_labels(model, grads, 12, 10)  # the sign rule
    assert len(labels) == 12 and not identifiable


def test_bad_input_is_refused(digits):
    model = models.lenet()
    grads = fl.batch_gradient(model, digits.x_train[:2], digits.y_train[:2])
    with pytest.raises(ValueError, match="batch_size"):
        label_counts.count_labels(model, grads, 0, 10)
    with pytest.raises(ValueError, match="gradients"):
        label_counts.count_labels(model, grads[:-1], 2, 10)
    with pytest.raises(ValueError, match="last linear layer"):
        label_counts.count_labels(model, grads, 2, 7)
