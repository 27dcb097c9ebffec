"""The data set type: a train/test split of float32 inputs and int64 labels, checked."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validate import check_int as _check_int

__all__ = ["Dataset"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split of float32 inputs and int64 class labels.

    Images are ``(N, C, H, W)`` scaled to [0, 1]; tabular inputs are ``(N, F)`` standardised
    with the training mean and standard deviation. Equality is identity (tensors have no
    single truth value).
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    kind: str
    source: str
    classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("image", "tabular"):
            raise ValueError(f"kind must be 'image' or 'tabular', got {self.kind!r}")
        _check_int("num_classes", self.num_classes, 2)
        shape = tuple(self.input_shape)
        if self.kind == "image" and len(shape) != 3:
            raise ValueError(f"input_shape of an image data set must be (C, H, W), got {shape}")
        if self.kind == "tabular" and len(shape) != 1:
            raise ValueError(f"input_shape of a tabular data set must be (F,), got {shape}")
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
                raise ValueError(f"x_{split} must be a float32 tensor")
            if tuple(x.shape[1:]) != shape:
                raise ValueError(
                    f"x_{split} has examples of shape {tuple(x.shape[1:])}, "
                    f"input_shape says {shape}"
                )
            if not isinstance(y, torch.Tensor) or y.dtype != torch.int64 or y.ndim != 1:
                raise ValueError(f"y_{split} must be a 1-D int64 tensor")
            if len(y) != len(x):
                raise ValueError(f"y_{split} has {len(y)} labels for {len(x)} examples")
            if len(y) and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
                raise ValueError(f"y_{split} has labels outside [0, {self.num_classes})")
        if self.classes and len(self.classes) != self.num_classes:
            raise ValueError(
                f"classes names {len(self.classes)} classes, num_classes is {self.num_classes}"
            )
        object.__setattr__(self, "input_shape", shape)
        object.__setattr__(self, "classes", tuple(self.classes))

    @property
    def in_channels(self) -> int:
        """Number of image channels (images only)."""
        self._require_image("in_channels")
        return self.input_shape[0]

    @property
    def image_size(self) -> int:
        """Side of the (square) images (images only)."""
        self._require_image("image_size")
        _, h, w = self.input_shape
        if h != w:
            raise ValueError(f"data set {self.name!r} has non-square images ({h}x{w})")
        return h

    def _require_image(self, what: str) -> None:
        if self.kind != "image":
            raise ValueError(f"data set {self.name!r} is {self.kind}: it has no {what}")

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, {self.kind} {self.input_shape}, "
            f"{self.num_classes} classes, train {len(self.y_train)}, test {len(self.y_test)}, "
            f"source={self.source!r})"
        )
