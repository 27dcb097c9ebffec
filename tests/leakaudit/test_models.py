"""Models of the simulator: leakaudit.models."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from leakaudit import models
from leakaudit.data import Dataset


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tiny_dataset(kind: str) -> Dataset:
    if kind == "image":
        x, shape = torch.rand(6, 3, 32, 32, generator=gen(0)), (3, 32, 32)
    else:
        x, shape = torch.randn(6, 30, generator=gen(0)), (30,)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    return Dataset("tiny", x, y, x, y, 5, shape, kind, "test")


# --------------------------------------------------------------------------------------------
# shapes and sizes


@pytest.mark.parametrize("build", [models.lenet, models.adap_cnn])
@pytest.mark.parametrize(("channels", "size"), [(1, 28), (3, 32)])
def test_output_shapes(build: Callable[..., nn.Module], channels: int, size: int) -> None:
    model = build(channels, size, 10)
    out = model(torch.rand(4, channels, size, size, generator=gen(1)))
    assert out.shape == (4, 10) and torch.isfinite(out).all()


def test_lenet_parameter_counts_by_hand() -> None:
    conv1 = lambda c: c * 12 * 5 * 5 + 12  # noqa: E731
    conv = 12 * 12 * 5 * 5 + 12  # conv2 and conv3
    # 28 -> 14 -> 7: 12 * 7 * 7 = 588 features; 32 -> 16 -> 8: 768
    assert count(models.lenet(1, 28, 10)) == conv1(1) + 2 * conv + 588 * 10 + 10 == 13426
    assert count(models.lenet(3, 32, 10)) == conv1(3) + 2 * conv + 768 * 10 + 10 == 15826
    assert models.lenet(1, 28, 10).fc.in_features == 588
    assert models.lenet(3, 32, 100).fc.out_features == 100


def test_adap_cnn_sizes() -> None:
    model = models.adap_cnn(1, 28, 10)
    assert model.fc1.in_features == 512  # the paper's fc 512 -> 32
    # conv 1*16*8*8+16, conv 16*32*4*4+32, fc 512*32+32, fc 32*10+10 (Opacus MNIST example)
    assert count(model) == 1040 + 8224 + 16416 + 330 == 26010
    assert models.adap_cnn(3, 32, 10).fc1.in_features == 32 * 5 * 5


def test_mlp_layers() -> None:
    model = models.mlp(30, 2)
    assert count(model) == (30 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2)
    assert models.mlp(30, 2)(torch.randn(5, 30, generator=gen(0))).shape == (5, 2)
    assert count(models.mlp(4, 3, hidden=(8,))) == 4 * 8 + 8 + 8 * 3 + 3
    assert isinstance(models.mlp(4, 3, activation="relu").act1, nn.ReLU)


def test_default_for() -> None:
    image = models.default_for(tiny_dataset("image"), gen(3))
    assert image.fc.in_features == 768 and image.conv1.in_channels == 3
    assert image(tiny_dataset("image").x_train).shape == (6, 5)
    tabular = models.default_for(tiny_dataset("tabular"))
    assert tabular(tiny_dataset("tabular").x_train).shape == (6, 5)
    assert tabular.fc1.in_features == 30
    with pytest.raises(ValueError, match="dataset"):
        models.default_for("digits")


# --------------------------------------------------------------------------------------------
# initialisation


@pytest.mark.parametrize(
    "build",
    [
        lambda g: models.lenet(generator=g),
        lambda g: models.adap_cnn(3, 32, generator=g),
        lambda g: models.mlp(30, 2, generator=g),
    ],
)
def test_init_deterministic_and_leaves_global_rng_alone(build: Callable) -> None:
    state = torch.get_rng_state()
    first, again, other = build(gen(5)), build(gen(5)), build(gen(6))
    default, zero = build(None), build(gen(0))
    assert torch.equal(torch.get_rng_state(), state)
    for name, value in first.state_dict().items():
        assert torch.equal(value, again.state_dict()[name])
        assert not torch.equal(value, other.state_dict()[name])
        assert torch.equal(default.state_dict()[name], zero.state_dict()[name])


def test_lenet_init_is_uniform_half() -> None:
    for param in models.lenet(3, 32, generator=gen(2)).parameters():
        param = param.detach()
        assert param.abs().max() <= 0.5
        if param.numel() >= 100:
            assert param.min() < -0.45 and param.max() > 0.45
            assert abs(float(param.mean())) < 0.05


def test_default_init_bounds_are_one_over_sqrt_fan_in() -> None:
    model = models.adap_cnn(generator=gen(4))
    for layer, fan_in in [(model.conv1, 64), (model.conv2, 256), (model.fc1, 512), (model.fc2, 32)]:
        bound = 1 / math.sqrt(fan_in)
        for param in (layer.weight, layer.bias):
            assert param.abs().max() <= bound
        assert layer.weight.abs().max() > 0.9 * bound
        assert layer.bias.abs().max() > 0.3 * bound  # biases drawn too, not zeros


# --------------------------------------------------------------------------------------------
# per-example gradients through torch.func


def per_example_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, p, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(logits, yi.unsqueeze(0))

    return vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    ("build", "shape"),
    [
        (lambda: models.lenet(1, 28), (1, 28, 28)),
        (lambda: models.lenet(3, 32, activation="relu"), (3, 32, 32)),
        (lambda: models.adap_cnn(1, 28), (1, 28, 28)),
        (lambda: models.mlp(30, 10), (30,)),
    ],
)
def test_vmap_grad_equals_a_loop(build: Callable, shape: tuple, dtype: torch.dtype) -> None:
    model = build().to(dtype)
    x = torch.rand(5, *shape, generator=gen(8)).to(dtype)
    y = torch.tensor([0, 3, 9, 3, 1])
    batched = per_example_grads(model, x, y)
    for i in range(len(x)):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for name, param in model.named_parameters():
            assert param.grad is not None and param.grad.abs().max() > 0
            # float32: summation order differs, so compare relative to the tensor's scale
            atol = 1e-6 if dtype == torch.float64 else 1e-5 * float(param.grad.abs().max())
            torch.testing.assert_close(batched[name][i], param.grad, rtol=0, atol=atol)


def test_lenet_is_twice_differentiable() -> None:
    """Gradient matching (DLG) differentiates the gradient with respect to the input."""
    model = models.lenet(generator=gen(0)).double()
    x = torch.rand(1, 1, 28, 28, generator=gen(1), dtype=torch.float64, requires_grad=True)
    loss = nn.functional.cross_entropy(model(x), torch.tensor([4]))
    grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
    (second,) = torch.autograd.grad(sum((g**2).sum() for g in grads), x)
    assert torch.isfinite(second).all() and second.abs().max() > 0


def test_no_batchnorm_and_no_inplace_ops() -> None:
    for model in (models.lenet(), models.adap_cnn(), models.mlp(3, 2, activation="relu")):
        for module in model.modules():
            assert not isinstance(module, nn.modules.batchnorm._BatchNorm)
            assert not getattr(module, "inplace", False)


# --------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: models.lenet(in_channels=0), "in_channels"),
        (lambda: models.lenet(in_channels=True), "in_channels"),
        (lambda: models.lenet(image_size=0), "image_size"),
        (lambda: models.lenet(image_size=28.0), "image_size"),
        (lambda: models.lenet(num_classes=1), "num_classes"),
        (lambda: models.lenet(activation="gelu"), "activation"),
        (lambda: models.lenet(generator=0), "generator"),
        (lambda: models.adap_cnn(image_size=13), "image_size=13 is too small"),
        (lambda: models.adap_cnn(in_channels=-1), "in_channels"),
        (lambda: models.adap_cnn(activation="Sigmoid"), "activation"),
        (lambda: models.mlp(0, 2), "in_features"),
        (lambda: models.mlp(3, 1), "num_classes"),
        (lambda: models.mlp(3, 2, hidden=(8, 0)), "hidden"),
        (lambda: models.mlp(3, 2, hidden=8), "hidden"),
    ],
)
def test_errors_name_the_argument(call: Callable, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_smallest_adap_cnn_input_works() -> None:
    assert models.adap_cnn(1, 14)(torch.rand(2, 1, 14, 14, generator=gen(0))).shape == (2, 10)
