"""The analytic tier (R-GAP, Zhu & Blaschko 2021): one example rebuilt layer by layer from
its own gradient, no optimiser; refused where the recursion does not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from leakaudit import attacks, fl, metrics, models
from leakaudit.attacks import rgap


def _small_net(seed: int = 0) -> nn.Sequential:
    """Conv(1->4, 3, p1), sigmoid, Conv(4->8, 3, p1), sigmoid, flatten, Linear(512 -> 10)."""
    torch.manual_seed(seed)  # nn's default init: this test's own weights
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Sigmoid(),
                         nn.Conv2d(4, 8, 3, padding=1), nn.Sigmoid(), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 10))


@pytest.mark.parametrize("dtype, floor", [(torch.float64, 150.0), (torch.float32, 60.0)])
def test_rebuilds_a_random_input_of_a_conv_fc_net_exactly(dtype, floor):
    model = _small_net().to(dtype)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand((1, 1, 8, 8), generator=gen, dtype=dtype)
    y = torch.tensor([3])
    grads = fl.batch_gradient(model, x, y)
    rec = attacks.reconstruct("rgap", model, grads, input_shape=(1, 8, 8), num_classes=10)
    assert metrics.psnr(rec.inputs.double(), x.double()) > floor
    assert rec.labels.tolist() == [3] and rec.iterations == 1 and rec.converged
    # the optimiser-free result is a pure function of the gradient: any seed, same answer
    again = attacks.reconstruct("rgap", model, grads, input_shape=(1, 8, 8), num_classes=10,
                                seed=7)
    assert torch.equal(rec.inputs, again.inputs)


@pytest.mark.slow  # LeNet's dense solves: seconds
def test_rebuilds_a_digit_from_the_audits_lenet_at_initial_weights(digits):
    model = models.lenet(1, 28, 10, generator=torch.Generator().manual_seed(0))
    x, y = digits.x_train[:1], digits.y_train[:1]
    grads = fl.batch_gradient(model, x, y)
    rec = attacks.reconstruct("rgap", model, grads, input_shape=(1, 28, 28), num_classes=10)
    assert metrics.psnr(rec.inputs, x) > 60.0  # measured: 111 dB (float32 gradient)
    assert rec.labels.tolist() == y.tolist()
    # a wrong gradient (another example's top layer) gives a wrong image, not the truth
    other = fl.batch_gradient(model, digits.x_train[1:2], digits.y_train[1:2])
    mixed = [*grads[:-2], *other[-2:]]
    bad = attacks.reconstruct("rgap", model, mixed, input_shape=(1, 28, 28), num_classes=10)
    assert metrics.psnr(bad.inputs, x) < 30.0


@pytest.mark.slow  # LeNet's dense solves: seconds
def test_a_local_step_update_is_the_gradient_times_minus_lr(digits):
    """Leak point 1 with one local step: the protocol's g = -dW / lr, float32 rounding of the
    update included."""
    model = models.lenet(1, 28, 10, generator=torch.Generator().manual_seed(0))
    x, y = digits.x_train[:1], digits.y_train[:1]
    lr = 0.1
    before = [p.detach().clone() for p in model.parameters()]
    after = [p - lr * g for p, g in zip(before, fl.batch_gradient(model, x, y))]
    grads = [-(a - b) / lr for a, b in zip(after, before)]
    rec = attacks.reconstruct("rgap", model, grads, input_shape=(1, 28, 28), num_classes=10)
    assert metrics.psnr(rec.inputs, x) > 30.0


def test_sigmoid_and_tanh_are_inverted():
    z = torch.linspace(-8, 8, 33, dtype=torch.float64)
    for act in (nn.Sigmoid(), nn.Tanh(), nn.LeakyReLU(0.1)):
        back, slope = rgap.invert_activation(act, act(z))
        assert torch.allclose(back, z, atol=1e-6), act
        auto = torch.func.vmap(torch.func.grad(lambda t, a=act: a(t)))(z)
        assert torch.allclose(slope, auto, atol=1e-9), act


@pytest.mark.slow  # LeNet's dense solves: seconds
def test_refused_where_the_recursion_does_not_apply(digits):
    lenet = models.lenet(1, 28, 10, generator=torch.Generator().manual_seed(0))
    assert rgap.applicable(lenet, (1, 28, 28))
    relu = models.relu_cnn(1, 28, 10, generator=torch.Generator().manual_seed(0))
    assert not rgap.applicable(relu, (1, 28, 28))
    assert not rgap.applicable(models.adap_cnn(1, 28, 10), (1, 28, 28))
    x, y = digits.x_train[:2], digits.y_train[:2]
    with pytest.raises(ValueError, match="not applicable"):
        attacks.reconstruct("rgap", relu, fl.batch_gradient(relu, x[:1], y[:1]),
                            input_shape=(1, 28, 28), num_classes=10)
    with pytest.raises(ValueError, match="batch_size"):
        attacks.reconstruct("rgap", lenet, fl.batch_gradient(lenet, x, y),
                            input_shape=(1, 28, 28), num_classes=10, batch_size=2)
