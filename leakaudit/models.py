"""Models of the federated simulator (docs/simulation.md).

- :func:`lenet`: the LeNet of DLG / iDLG / CPL (Zhu et al. 2019), sigmoid activations so that
  gradient-matching attacks can differentiate twice, weights and biases uniform(-0.5, 0.5) as
  in the DLG code.
- :func:`adap_cnn`: the small CNN of Adap DP-FL (the same as Opacus's MNIST example).
- :func:`relu_cnn`: the FEMNIST CNN of Dimitrov et al. 2022 (two 3x3 convolutions of 32 and
  64 channels, a dense layer of 100, ReLU): the harder, more realistic target.
- :func:`mlp`: a multilayer perceptron for tabular data.

Every model is a plain ``nn.Sequential`` with named layers, no BatchNorm and no in-place
operations, so per-example gradients work with ``torch.func.functional_call`` and
``vmap(grad(...))``. Parameters are drawn from the ``generator`` argument (a generator seeded
with 0 when it is None); layers are built without initialising, so the global RNG is never
touched.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

from leakaudit.data import Dataset

from ._validate import check_int as _check_int

__all__ = ["ACTIVATIONS", "adap_cnn", "default_for", "lenet", "mlp", "relu_cnn",
           "resolve"]

ACTIVATIONS = ("sigmoid", "relu", "tanh")


def lenet(
    in_channels: int = 1,
    image_size: int = 28,
    num_classes: int = 10,
    activation: str = "sigmoid",
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    """LeNet of the DLG/iDLG/CPL papers: three 12-channel 5x5 convolutions, one linear layer.

    Conv(in, 12, 5, stride 2, pad 2), act, Conv(12, 12, 5, stride 2, pad 2), act,
    Conv(12, 12, 5, stride 1, pad 2), act, flatten, Linear(12 * s * s, num_classes), where s is
    ``image_size`` after the two stride-2 convolutions (28 -> 7, 32 -> 8). Weights and biases
    are uniform(-0.5, 0.5).
    """
    in_channels, image_size, num_classes, act, gen = _image_model_args(
        in_channels, image_size, num_classes, activation, generator)
    side = _conv_out(_conv_out(image_size, 5, 2, 2, image_size), 5, 2, 2, image_size)
    model = nn.Sequential(
        OrderedDict(
            conv1=_skip(nn.Conv2d, in_channels, 12, 5, padding=2, stride=2),
            act1=act(),
            conv2=_skip(nn.Conv2d, 12, 12, 5, padding=2, stride=2),
            act2=act(),
            conv3=_skip(nn.Conv2d, 12, 12, 5, padding=2, stride=1),
            act3=act(),
            flatten=nn.Flatten(),
            fc=_skip(nn.Linear, 12 * side * side, num_classes),
        )
    )
    for param in model.parameters():
        _fill_uniform(param, 0.5, gen)
    return model


def adap_cnn(
    in_channels: int = 1,
    image_size: int = 28,
    num_classes: int = 10,
    activation: str = "relu",
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    """The CNN of Adap DP-FL (Opacus's MNIST example).

    Conv(in, 16, 8, stride 2, pad 3), act, MaxPool(2, 1), Conv(16, 32, 4, stride 2), act,
    MaxPool(2, 1), flatten, Linear(32 * s * s, 32), act, Linear(32, num_classes); s = 4 for
    28x28 inputs (512 features), 5 for 32x32. PyTorch's default initialisation bounds
    (uniform within 1/sqrt(fan_in) for weights and biases) drawn from ``generator``.
    """
    in_channels, image_size, num_classes, act, gen = _image_model_args(
        in_channels, image_size, num_classes, activation, generator)
    side = image_size
    for kernel, stride, padding, pool in ((8, 2, 3, True), (4, 2, 0, True)):
        side = _conv_out(side, kernel, stride, padding, image_size)
        if pool:
            side = _conv_out(side, 2, 1, 0, image_size)
    model = nn.Sequential(
        OrderedDict(
            conv1=_skip(nn.Conv2d, in_channels, 16, 8, stride=2, padding=3),
            act1=act(),
            pool1=nn.MaxPool2d(2, 1),
            conv2=_skip(nn.Conv2d, 16, 32, 4, stride=2),
            act2=act(),
            pool2=nn.MaxPool2d(2, 1),
            flatten=nn.Flatten(),
            fc1=_skip(nn.Linear, 32 * side * side, 32),
            act3=act(),
            fc2=_skip(nn.Linear, 32, num_classes),
        )
    )
    _default_init(model, gen)
    return model


def relu_cnn(
    in_channels: int = 1,
    image_size: int = 28,
    num_classes: int = 10,
    activation: str = "relu",
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    """The FEMNIST CNN of Dimitrov, Balunovic, Konstantinov, Vechev, "Data leakage in federated
    averaging", TMLR 2022: two 3x3 convolutions of 32 and 64 channels and a dense layer of 100.

    Conv(in, 32, 3, stride 2, pad 1), act, Conv(32, 64, 3, stride 2, pad 1), act, flatten,
    Linear(64 * s * s, 100), act, Linear(100, num_classes); s = 7 for 28x28 inputs. The
    strides (ours, not the paper's) keep the dense layer at 3,136 x 100 so that gradient
    inversion runs on a CPU. PyTorch's default initialisation bounds drawn from ``generator``.
    """
    in_channels, image_size, num_classes, act, gen = _image_model_args(
        in_channels, image_size, num_classes, activation, generator)
    side = _conv_out(_conv_out(image_size, 3, 2, 1, image_size), 3, 2, 1, image_size)
    model = nn.Sequential(
        OrderedDict(
            conv1=_skip(nn.Conv2d, in_channels, 32, 3, stride=2, padding=1),
            act1=act(),
            conv2=_skip(nn.Conv2d, 32, 64, 3, stride=2, padding=1),
            act2=act(),
            flatten=nn.Flatten(),
            fc1=_skip(nn.Linear, 64 * side * side, 100),
            act3=act(),
            fc2=_skip(nn.Linear, 100, num_classes),
        )
    )
    _default_init(model, gen)
    return model


def mlp(
    in_features: int,
    num_classes: int,
    hidden: Sequence[int] = (64, 64),
    activation: str = "sigmoid",
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    """A multilayer perceptron (two hidden layers by default) for tabular inputs ``(N, F)``.

    Inputs with more dimensions are flattened first. PyTorch's default initialisation bounds
    drawn from ``generator``.
    """
    in_features = _check_int("in_features", in_features, 1)
    num_classes = _check_int("num_classes", num_classes, 2)
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence):
        raise ValueError(f"hidden must be a sequence of layer widths, got {hidden!r}")
    for width in hidden:
        _check_int("hidden", width, 1)
    act = _activation(activation)
    gen = _generator(generator)
    layers: OrderedDict[str, nn.Module] = OrderedDict(flatten=nn.Flatten())
    width_in = in_features
    for i, width in enumerate(hidden, start=1):
        layers[f"fc{i}"] = _skip(nn.Linear, width_in, int(width))
        layers[f"act{i}"] = act()
        width_in = int(width)
    layers[f"fc{len(hidden) + 1}"] = _skip(nn.Linear, width_in, num_classes)
    model = nn.Sequential(layers)
    _default_init(model, gen)
    return model


def default_for(dataset: Dataset, generator: torch.Generator | None = None) -> nn.Sequential:
    """LeNet for an image data set (its channels, size and classes), an MLP for a tabular one."""
    if not isinstance(dataset, Dataset):
        raise ValueError(f"dataset must be a leakaudit.data.Dataset, got {type(dataset).__name__}")
    if dataset.kind == "image":
        return lenet(
            dataset.in_channels, dataset.image_size, dataset.num_classes, generator=generator
        )
    return mlp(dataset.input_shape[0], dataset.num_classes, generator=generator)


def resolve(model: nn.Module | None, dataset: Dataset, *, seed: int = 0) -> nn.Module:
    """``model`` itself, or :func:`default_for` the data set with weights drawn from ``seed``
    (the one place where the default model is chosen)."""
    if model is None:
        return default_for(dataset, generator=torch.Generator().manual_seed(seed))
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model)!r}")
    return model


# --------------------------------------------------------------------------------------------
# helpers


def _image_model_args(in_channels: int, image_size: int, num_classes: int, activation: str,
                      generator: torch.Generator | None
                      ) -> tuple[int, int, int, type[nn.Module], torch.Generator]:
    """The checked arguments shared by the image models: sizes, activation class, generator."""
    return (_check_int("in_channels", in_channels, 1), _check_int("image_size", image_size, 1),
            _check_int("num_classes", num_classes, 2), _activation(activation),
            _generator(generator))


def _skip(cls: type[nn.Module], *args: object, **kwargs: object) -> nn.Module:
    """Build a layer without running its initialiser (no global RNG use); filled later."""
    return nn.utils.skip_init(cls, *args, **kwargs)


def _fill_uniform(param: torch.Tensor, bound: float, gen: torch.Generator) -> None:
    values = torch.rand(param.shape, generator=gen, device=gen.device, dtype=param.dtype)
    with torch.no_grad():
        param.copy_(values.mul_(2.0 * bound).sub_(bound))


def _default_init(model: nn.Module, gen: torch.Generator) -> None:
    """PyTorch's default Conv/Linear bounds, 1/sqrt(fan_in) for weights and biases."""
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            weight = module.weight
            bound = 1.0 / math.sqrt(weight[0].numel())  # fan_in = in * prod(kernel)
            _fill_uniform(weight, bound, gen)
            if module.bias is not None:
                _fill_uniform(module.bias, bound, gen)


def _generator(generator: torch.Generator | None) -> torch.Generator:
    if generator is None:
        return torch.Generator().manual_seed(0)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return generator


def _activation(name: str) -> type[nn.Module]:
    table = {"sigmoid": nn.Sigmoid, "relu": nn.ReLU, "tanh": nn.Tanh}
    if name not in table:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {name!r}")
    return table[name]


def _conv_out(size: int, kernel: int, stride: int, padding: int, image_size: int) -> int:
    """Side after a convolution or pooling layer; refuses an input too small for it."""
    out = (size + 2 * padding - kernel) // stride + 1
    if out < 1:
        raise ValueError(f"image_size={image_size} is too small for the network")
    return out


