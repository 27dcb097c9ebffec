"""Loading data sets by name; nothing is downloaded (built-in sets come with scikit-learn or
a Debian package, the others from a directory named in the data set's name)."""

from __future__ import annotations

import functools
import gzip
import io
import math
import os
import pickle
import struct
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._validate import check_int as _check_int
from .dataset import Dataset

__all__ = ["FASHION_MNIST_DIR", "available", "load", "read_idx", "resolve"]

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip
DIGIT_CLASSES = tuple(str(d) for d in range(10))

_BUILTIN = ("digits", "breast-cancer", "fashion-mnist")
_WITH_DIR = (
    "mnist:<dir>",
    "fashion-mnist:<dir>",
    "cifar10:<dir>",
    "images:<dir>",
    "torchvision:<Name>:<root>",
)
_IDX_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_IDX_MAGIC = {3: 0x00000803, 1: 0x00000801}  # unsigned bytes, 3-D images / 1-D labels
_IMAGE_SUFFIXES = {
    ".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm", ".webp",
}  # fmt: skip
_TEST_FRACTION = 0.25
_FASHION_HINT = (
    "install it with `sudo apt-get install dataset-fashion-mnist` "
    '(or pass "fashion-mnist:<dir>" naming a directory with the four IDX files)'
)


# --------------------------------------------------------------------------------------------
# loading


def resolve(dataset: str | Dataset, *, seed: int = 0) -> Dataset:
    """A data set given by name (:func:`load`) or as a :class:`Dataset` (the one place where
    names are resolved)."""
    if isinstance(dataset, str):
        return load(dataset, seed=seed)
    if isinstance(dataset, Dataset):
        return dataset
    raise ValueError(f"dataset must be a name or a leakaudit.data.Dataset, got {type(dataset)!r}")


def available() -> list[str]:
    """The built-in data set names (those that need no directory)."""
    return list(_BUILTIN)


def load(name: str, *, seed: int = 0, image_size: int = 32) -> Dataset:
    """Load a data set by name; nothing is downloaded.

    Built-in: ``"digits"`` (scikit-learn's 8x8 digits scaled to [0, 1] and upsampled to 28x28
    with ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``, stratified
    split with test fraction 0.25), ``"breast-cancer"`` (426 train / 143 test, stratified,
    standardised with the train statistics), ``"fashion-mnist"`` (the IDX files of the Debian
    package ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist``).

    From a directory: ``"mnist:<dir>"`` and ``"fashion-mnist:<dir>"`` (the four standard IDX
    files, gzipped or not), ``"cifar10:<dir>"`` (the python pickle batches, optionally inside
    ``cifar-10-batches-py``), ``"images:<dir>"`` (one sub-folder per class, resized to
    ``image_size`` x ``image_size``, stratified split with test fraction 0.25) and
    ``"torchvision:<Name>:<root>"`` (a ``torchvision.datasets`` class, ``download=False``;
    needs the optional ``vision`` extra).

    ``seed`` drives the splits of digits, breast-cancer and images; the other sets keep their
    official train/test split. ``image_size`` is used only by ``"images:<dir>"``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    seed = _check_int("seed", seed, 0)
    if seed >= 2**32:
        raise ValueError(f"seed must be < 2**32, got {seed}")
    image_size = _check_int("image_size", image_size, 1)
    if name == "digits":
        return _load_digits(seed)
    if name == "breast-cancer":
        return _load_breast_cancer(seed)
    if name == "fashion-mnist":
        if not FASHION_MNIST_DIR.is_dir():
            raise FileNotFoundError(
                f"{FASHION_MNIST_DIR}: Fashion-MNIST is not installed; {_FASHION_HINT}"
            )
        return _load_idx_set(
            "fashion-mnist", FASHION_MNIST_DIR, FASHION_MNIST_CLASSES, hint=_FASHION_HINT
        )
    prefix, sep, rest = name.partition(":")
    if sep and rest:
        if prefix in ("mnist", "fashion-mnist"):
            classes = FASHION_MNIST_CLASSES if prefix == "fashion-mnist" else DIGIT_CLASSES
            return _load_idx_set(prefix, _existing_dir(rest), classes)
        if prefix == "cifar10":
            return _load_cifar10(_existing_dir(rest))
        if prefix == "images":
            return _load_image_folder(_existing_dir(rest), image_size, seed)
        if prefix == "torchvision":
            tv_name, sep2, root = rest.partition(":")
            if not (sep2 and tv_name and root):
                raise ValueError(f'name must look like "torchvision:<Name>:<root>", got {name!r}')
            return _load_torchvision(tv_name, root)
    valid = ", ".join(repr(n) for n in _BUILTIN + _WITH_DIR)
    raise ValueError(f"unknown data set name {name!r}; valid names: {valid}")


def _existing_dir(path: str) -> Path:
    out = Path(path).expanduser()
    if not out.is_dir():
        raise FileNotFoundError(f"{out}: no such directory")
    return out


@functools.lru_cache(maxsize=1)
def _digit_images() -> tuple[torch.Tensor, np.ndarray]:
    """scikit-learn's digits scaled to [0, 1] and upsampled to 28x28, and their labels: read
    and upsampled once per process (every split indexes copies out of them)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.as_tensor(bunch.images / 16.0, dtype=torch.float32).unsqueeze(1)
    images = torch.nn.functional.interpolate(
        images, size=(28, 28), mode="bilinear", align_corners=False
    )
    return images, np.asarray(bunch.target, dtype=np.int64)


def _load_digits(seed: int) -> Dataset:
    from sklearn.model_selection import train_test_split

    images, y = _digit_images()
    train, test = train_test_split(
        np.arange(len(y)), test_size=_TEST_FRACTION, random_state=seed, stratify=y
    )
    return Dataset(
        name="digits",
        x_train=images[train].contiguous(),
        y_train=torch.from_numpy(y[train]),
        x_test=images[test].contiguous(),
        y_test=torch.from_numpy(y[test]),
        num_classes=10,
        input_shape=(1, 28, 28),
        kind="image",
        source="sklearn.datasets.load_digits (8x8 upsampled to 28x28, bilinear)",
        classes=DIGIT_CLASSES,
    )


def _load_breast_cancer(seed: int) -> Dataset:
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    bunch = load_breast_cancer()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    train, test = train_test_split(np.arange(len(y)), test_size=143, random_state=seed, stratify=y)
    mean = x[train].mean(axis=0)
    std = x[train].std(axis=0)
    std[std == 0.0] = 1.0
    x = (x - mean) / std
    return Dataset(
        name="breast-cancer",
        x_train=torch.as_tensor(x[train], dtype=torch.float32),
        y_train=torch.from_numpy(y[train]),
        x_test=torch.as_tensor(x[test], dtype=torch.float32),
        y_test=torch.from_numpy(y[test]),
        num_classes=2,
        input_shape=(x.shape[1],),
        kind="tabular",
        source="sklearn.datasets.load_breast_cancer",
        classes=tuple(str(c) for c in bunch.target_names),
    )


# ---- IDX (MNIST format)


def read_idx(path: str | os.PathLike[str], *, ndim: int) -> np.ndarray:
    """Read an unsigned-byte IDX file (gzipped or not) of ``ndim`` dimensions.

    The header is checked strictly: magic number (0x00000803 for 3-D images, 0x00000801 for
    1-D labels), positive dimensions and a payload of exactly their product in bytes. A
    malformed or truncated file raises ``ValueError`` naming the path.
    """
    if ndim not in _IDX_MAGIC:
        raise ValueError(f"ndim must be 1 (labels) or 3 (images), got {ndim!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    raw = _read_maybe_gzip(path)
    what = "image" if ndim == 3 else "label"
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(
            f"{path}: truncated IDX {what} file ({len(raw)} bytes, header needs {header})"
        )
    (magic,) = struct.unpack(">I", raw[:4])
    if magic != _IDX_MAGIC[ndim]:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{magic:08x} "
            f"(expected 0x{_IDX_MAGIC[ndim]:08x} for an {what} file)"
        )
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    if any(d == 0 for d in dims):
        raise ValueError(f"{path}: IDX header has a zero dimension {dims}")
    size = math.prod(dims)
    payload = len(raw) - header
    if payload < size:
        raise ValueError(
            f"{path}: truncated IDX {what} file: dimensions {dims} need {size} data bytes, "
            f"found {payload}"
        )
    if payload > size:
        raise ValueError(
            f"{path}: IDX {what} file has {payload - size} bytes after the {dims} data"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def _read_maybe_gzip(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: corrupt or truncated gzip data ({exc})") from exc


def _find_idx(directory: Path, stem: str, hint: str | None) -> Path:
    dotted = stem.replace("-idx", ".idx")  # some copies spell train-images.idx3-ubyte
    for candidate in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (directory / candidate).is_file():
            return directory / candidate
    extra = f"; {hint}" if hint else ""
    raise FileNotFoundError(f"{directory / stem}: missing (looked for {stem}[.gz]){extra}")


def _load_idx_set(
    name: str, directory: Path, classes: tuple[str, ...], hint: str | None = None
) -> Dataset:
    paths = {key: _find_idx(directory, stem, hint) for key, stem in _IDX_NAMES.items()}
    arrays = {}
    for split in ("train", "test"):
        images = read_idx(paths[f"{split}_images"], ndim=3)
        labels = read_idx(paths[f"{split}_labels"], ndim=1)
        if len(images) != len(labels):
            raise ValueError(
                f"{paths[f'{split}_images']} holds {len(images)} images but "
                f"{paths[f'{split}_labels']} holds {len(labels)} labels"
            )
        if labels.max() >= len(classes):
            raise ValueError(
                f"{paths[f'{split}_labels']}: label {int(labels.max())} outside "
                f"[0, {len(classes)})"
            )
        arrays[split] = (images, labels)
    shape = arrays["train"][0].shape[1:]
    if arrays["test"][0].shape[1:] != shape:
        raise ValueError(
            f"{paths['test_images']}: images are {arrays['test'][0].shape[1:]}, "
            f"train images are {shape}"
        )
    x_train, x_test = (_uint8_images(arrays[s][0][:, None]) for s in ("train", "test"))
    return Dataset(
        name=name,
        x_train=x_train,
        y_train=torch.from_numpy(arrays["train"][1].astype(np.int64)),
        x_test=x_test,
        y_test=torch.from_numpy(arrays["test"][1].astype(np.int64)),
        num_classes=len(classes),
        input_shape=(1, *shape),
        kind="image",
        source=str(directory),
        classes=classes,
    )


def _uint8_images(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(torch.float32).div_(255.0)


# ---- CIFAR-10 pickles

_PICKLE_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    *(
        (module, name)
        for module in ("numpy.core.multiarray", "numpy._core.multiarray")
        for name in ("_reconstruct", "scalar")
    ),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a batch file cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def _read_pickle(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing CIFAR-10 batch file")
    try:
        return _ArrayUnpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except Exception as exc:  # any failure to decode the file is a malformed file
        raise ValueError(f"{path}: not a readable CIFAR-10 pickle ({exc})") from exc


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    batch = _read_pickle(path)
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(batch).__name__}")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path}: the dict needs the keys b'data' and b'labels'")
    data = np.asarray(data)
    labels = np.asarray(labels)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(
            f"{path}: b'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}"
        )
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path}: b'labels' must hold {len(data)} integers")
    if len(labels) and (labels.min() < 0 or labels.max() >= 10):
        raise ValueError(f"{path}: labels outside [0, 10)")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _load_cifar10(directory: Path) -> Dataset:
    if (directory / "cifar-10-batches-py").is_dir():
        directory = directory / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for batch_name in names:  # report a missing file before reading any
        if not (directory / batch_name).is_file():
            raise FileNotFoundError(f"{directory / batch_name}: missing CIFAR-10 batch file")
    train = [_cifar_batch(directory / n) for n in names[:5]]
    x_test, y_test = _cifar_batch(directory / "test_batch")
    classes = CIFAR10_CLASSES
    meta_path = directory / "batches.meta"
    if meta_path.is_file():
        meta = _read_pickle(meta_path)
        names_meta = meta.get(b"label_names") if isinstance(meta, dict) else None
        if names_meta is None or len(names_meta) != 10:
            raise ValueError(f"{meta_path}: expected b'label_names' with 10 names")
        classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names_meta)
    return Dataset(
        name="cifar10",
        x_train=_uint8_images(np.concatenate([x for x, _ in train])),
        y_train=torch.from_numpy(np.concatenate([y for _, y in train])),
        x_test=_uint8_images(x_test),
        y_test=torch.from_numpy(y_test),
        num_classes=10,
        input_shape=(3, 32, 32),
        kind="image",
        source=str(directory),
        classes=classes,
    )


# ---- image folders


def _load_image_folder(directory: Path, image_size: int, seed: int) -> Dataset:
    from skimage.io import imread
    from skimage.transform import resize
    from skimage.util import img_as_float

    class_dirs = sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not class_dirs:
        raise ValueError(f"{directory}: no class sub-folders (expected one folder per class)")
    if len(class_dirs) < 2:
        raise ValueError(f"{directory}: only one class folder ({class_dirs[0].name}); need >= 2")
    files: list[tuple[Path, int]] = []
    for label, class_dir in enumerate(class_dirs):
        found = sorted(
            p
            for p in class_dir.iterdir()
            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in _IMAGE_SUFFIXES
        )
        if not found:
            raise ValueError(f"{class_dir}: class folder without images")
        if len(found) < 2:
            raise ValueError(f"{class_dir}: a stratified split needs >= 2 images per class")
        files.extend((p, label) for p in found)
    images = []
    for path, _ in files:
        try:
            # an open file, not a path: imageio leaks the handles it opens while probing a
            # bad file; its deprecated plugins warn while probing
            with open(path, "rb") as handle, warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                image = img_as_float(imread(handle))
        except Exception as exc:  # the readers raise many types for a bad file
            raise ValueError(f"{path}: unreadable image ({exc})") from exc
        if image.ndim == 3 and image.shape[2] in (2, 4):  # drop alpha
            image = image[..., : image.shape[2] - 1]
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[..., 0]
        if not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)):
            raise ValueError(f"{path}: unsupported image shape {image.shape}")
        images.append(image)
    gray = all(im.ndim == 2 for im in images)
    out = np.empty((len(images), 1 if gray else 3, image_size, image_size), dtype=np.float32)
    for i, image in enumerate(images):
        if not gray and image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=2)
        small = resize(image, (image_size, image_size), anti_aliasing=True)
        out[i] = np.clip(small, 0.0, 1.0).reshape(image_size, image_size, -1).transpose(2, 0, 1)
    y = np.array([label for _, label in files], dtype=np.int64)
    train, test = _stratified_split(y, seed, directory)
    x = torch.from_numpy(out)
    return Dataset(
        name=f"images:{directory}",
        x_train=x[train].contiguous(),
        y_train=torch.from_numpy(y[train]),
        x_test=x[test].contiguous(),
        y_test=torch.from_numpy(y[test]),
        num_classes=len(class_dirs),
        input_shape=tuple(out.shape[1:]),
        kind="image",
        source=str(directory),
        classes=tuple(p.name for p in class_dirs),
    )


def _stratified_split(y: np.ndarray, seed: int, where: Path) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    try:
        train, test = train_test_split(
            np.arange(len(y)), test_size=_TEST_FRACTION, random_state=seed, stratify=y
        )
    except ValueError as exc:
        raise ValueError(f"{where}: cannot split it stratified ({exc})") from exc
    return np.sort(train), np.sort(test)


# ---- torchvision (optional)


def _load_torchvision(tv_name: str, root: str) -> Dataset:
    try:
        import torchvision  # noqa: F401  (optional extra, imported only here)
        import torchvision.datasets as tv_datasets
    except (ImportError, OSError, RuntimeError) as exc:
        raise ImportError(
            "torchvision is not available: `pip install leakaudit[vision]` "
            f"(with a torch build that matches your CUDA) ({exc})"
        ) from exc
    cls = getattr(tv_datasets, tv_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"name: torchvision.datasets has no data set class {tv_name!r}")
    root_path = Path(root).expanduser()
    splits = []
    for train in (True, False):
        try:
            try:
                ds = cls(str(root_path), train=train, download=False)
            except TypeError:
                ds = cls(str(root_path), split="train" if train else "test", download=False)
        except RuntimeError as exc:  # torchvision's "Dataset not found" when download=False
            raise FileNotFoundError(
                f"{root_path}: torchvision {tv_name} files not found; nothing is downloaded "
                f"({exc})"
            ) from exc
        splits.append(_torchvision_arrays(ds, tv_name))
    (x_train, y_train), (x_test, y_test) = splits
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ValueError(f"{root_path}: train and test images differ in shape")
    classes = tuple(str(c) for c in getattr(ds, "classes", ()) or ())
    num_classes = max(len(classes), int(max(y_train.max(), y_test.max())) + 1)
    if len(classes) != num_classes:
        classes = ()
    return Dataset(
        name=f"torchvision:{tv_name}",
        x_train=x_train,
        y_train=torch.from_numpy(y_train),
        x_test=x_test,
        y_test=torch.from_numpy(y_test),
        num_classes=num_classes,
        input_shape=tuple(x_train.shape[1:]),
        kind="image",
        source=f"torchvision.datasets.{tv_name}({str(root_path)!r})",
        classes=classes,
    )


def _torchvision_arrays(ds: Any, tv_name: str) -> tuple[torch.Tensor, np.ndarray]:
    """(N, C, H, W) floats in [0, 1] and int64 labels from a torchvision data set."""
    data = getattr(ds, "data", None)
    targets = getattr(ds, "targets", getattr(ds, "labels", None))
    if data is not None and targets is not None:
        array = np.asarray(data)
        if array.ndim == 3:
            array = array[:, None]
        elif array.ndim == 4 and array.shape[-1] in (1, 3) and array.shape[1] not in (1, 3):
            array = array.transpose(0, 3, 1, 2)  # channels last (CIFAR) -> channels first
        if array.ndim != 4 or array.dtype != np.uint8:
            raise ValueError(f"torchvision {tv_name}: unsupported data {array.dtype} {array.shape}")
        return _uint8_images(array), np.asarray(targets, dtype=np.int64)
    xs, ys = [], []
    for image, label in ds:  # generic path: PIL images one by one
        array = np.asarray(image)
        xs.append(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
        ys.append(int(label))
    return _uint8_images(np.stack(xs)), np.asarray(ys, dtype=np.int64)
