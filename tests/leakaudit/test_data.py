"""Data sets and federated partitions: leakaudit.data."""

from __future__ import annotations

import gzip
import os
import pickle
import re
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from leakaudit import data

# --------------------------------------------------------------------------------------------
# helpers


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    """Serialise a uint8 array in IDX format (magic 0x0803 images, 0x0801 labels)."""
    if magic is None:
        magic = 0x0800 | array.ndim
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx_set(
    directory: Path, *, gz: bool, n_train: int = 12, n_test: int = 5, rows: int = 4, cols: int = 5
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, rows, cols), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, rows, cols), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        payload = idx_bytes(array)
        if gz:
            (directory / f"{stem}.gz").write_bytes(gzip.compress(payload))
        else:
            (directory / stem).write_bytes(payload)
    return arrays


def label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean over clients of the entropy (nats) of the client's label distribution."""
    out = []
    for part in parts:
        p = np.bincount(labels[part]) / len(part)
        p = p[p > 0]
        out.append(float(-(p * np.log(p)).sum()))
    return float(np.mean(out))


# --------------------------------------------------------------------------------------------
# built-in data sets


def test_available_lists_the_builtin_names() -> None:
    assert data.available() == ["digits", "breast-cancer", "fashion-mnist"]


def test_digits_shapes_types_and_range(digits: data.Dataset) -> None:
    assert digits.x_train.shape == (1347, 1, 28, 28)
    assert digits.x_test.shape == (450, 1, 28, 28)
    assert digits.x_train.dtype == torch.float32 and digits.y_train.dtype == torch.int64
    assert digits.kind == "image" and digits.num_classes == 10
    assert digits.input_shape == (1, 28, 28)
    assert (digits.in_channels, digits.image_size) == (1, 28)
    for x in (digits.x_train, digits.x_test):
        assert x.min() >= 0.0 and x.max() <= 1.0
    # the raw data reaches 16 (=1.0) and 0; upsampling keeps both ends close
    assert digits.x_train.max() > 0.95 and digits.x_train.min() == 0.0
    assert "bilinear" in digits.source and "Dataset('digits'" in repr(digits)


def test_digits_split_is_stratified_and_complete(digits: data.Dataset) -> None:
    from sklearn.datasets import load_digits

    target = load_digits().target
    train = np.bincount(digits.y_train.numpy(), minlength=10)
    test = np.bincount(digits.y_test.numpy(), minlength=10)
    np.testing.assert_array_equal(train + test, np.bincount(target, minlength=10))
    overall = np.bincount(target) / len(target)
    assert np.abs(train / train.sum() - overall).max() < 0.01
    assert np.abs(test / test.sum() - overall).max() < 0.01


def test_digits_upsampling_preserves_each_image_mean(digits: data.Dataset) -> None:
    """Bilinear upsampling (8 -> 28) roughly keeps an image's mean intensity."""
    from sklearn.datasets import load_digits

    raw_means = np.sort(load_digits().images.reshape(-1, 64).mean(axis=1) / 16.0)
    ours = torch.cat([digits.x_train, digits.x_test]).mean(dim=(1, 2, 3)).numpy()
    np.testing.assert_allclose(np.sort(ours), raw_means, atol=0.03)


def test_digits_deterministic_under_seed(digits: data.Dataset) -> None:
    again = data.load("digits", seed=0)
    assert torch.equal(again.x_train, digits.x_train)
    assert torch.equal(again.y_test, digits.y_test)
    other = data.load("digits", seed=1)
    assert not torch.equal(other.y_train, digits.y_train)


def test_breast_cancer_split_and_train_standardisation() -> None:
    ds = data.load("breast-cancer", seed=0)
    assert ds.x_train.shape == (426, 30) and ds.x_test.shape == (143, 30)
    assert ds.kind == "tabular" and ds.num_classes == 2 and ds.input_shape == (30,)
    assert ds.classes == ("malignant", "benign")
    x = ds.x_train.double()
    assert x.mean(dim=0).abs().max() < 1e-5
    assert (x.std(dim=0, unbiased=False) - 1).abs().max() < 1e-5
    # the test set is scaled with the train statistics, not its own
    assert ds.x_test.double().mean(dim=0).abs().max() > 1e-2
    # stratified: the class ratio of train and test match the whole set (212 / 569)
    for y in (ds.y_train, ds.y_test):
        assert abs(float((y == 0).double().mean()) - 212 / 569) < 0.01
    other = data.load("breast-cancer", seed=3)
    assert not torch.equal(other.y_train, ds.y_train)
    with pytest.raises(ValueError, match="tabular"):
        _ = ds.in_channels


@pytest.mark.parametrize("seed", [-1, 1.5, True, 2**32])
def test_bad_seed_is_refused(seed: object) -> None:
    with pytest.raises(ValueError, match="seed"):
        data.load("digits", seed=seed)


@pytest.mark.parametrize("name", ["mnist", "cifar-10", "", "images:", "torchvision:MNIST"])
def test_unknown_name_lists_the_valid_ones(name: str) -> None:
    with pytest.raises(ValueError, match="name") as info:
        data.load(name)
    if name and name != "torchvision:MNIST":
        assert "digits" in str(info.value) and "cifar10:<dir>" in str(info.value)


def test_builtin_fashion_mnist_missing_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data.loaders, "FASHION_MNIST_DIR", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist") as info:
        data.load("fashion-mnist")
    assert isinstance(info.value, OSError) and "fashion-mnist:<dir>" in str(info.value)
    # directory present but a file missing: the file is named, with the same hint
    (tmp_path / "partial").mkdir()
    monkeypatch.setattr(data.loaders, "FASHION_MNIST_DIR", tmp_path / "partial")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.*apt-get install"):
        data.load("fashion-mnist")


def test_real_fashion_mnist() -> None:
    if not data.FASHION_MNIST_DIR.is_dir():
        pytest.skip("Fashion-MNIST absent: sudo apt-get install dataset-fashion-mnist")
    ds = data.load("fashion-mnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert ds.num_classes == 10 and len(ds.classes) == 10 and ds.classes[9] == "Ankle boot"
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    np.testing.assert_array_equal(np.bincount(ds.y_train.numpy()), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(ds.y_test.numpy()), [1000] * 10)


# --------------------------------------------------------------------------------------------
# IDX files


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("prefix", ["mnist", "fashion-mnist"])
def test_idx_round_trip(tmp_path: Path, gz: bool, prefix: str) -> None:
    arrays = write_idx_set(tmp_path, gz=gz)
    ds = data.load(f"{prefix}:{tmp_path}")
    assert ds.input_shape == (1, 4, 5) and ds.num_classes == 10
    got = torch.round(ds.x_train[:, 0] * 255).to(torch.uint8).numpy()
    np.testing.assert_array_equal(got, arrays["train-images-idx3-ubyte"])
    got = torch.round(ds.x_test[:, 0] * 255).to(torch.uint8).numpy()
    np.testing.assert_array_equal(got, arrays["t10k-images-idx3-ubyte"])
    np.testing.assert_array_equal(ds.y_train.numpy(), arrays["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(ds.y_test.numpy(), arrays["t10k-labels-idx1-ubyte"])
    assert ds.classes[0] == ("T-shirt/top" if prefix == "fashion-mnist" else "0")
    assert ds.source == str(tmp_path)


def test_read_idx_mixed_plain_and_gzip(tmp_path: Path) -> None:
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a").write_bytes(idx_bytes(array))
    (tmp_path / "b.gz").write_bytes(gzip.compress(idx_bytes(array)))
    for name in ("a", "b.gz"):
        np.testing.assert_array_equal(data.read_idx(tmp_path / name, ndim=3), array)


@pytest.mark.parametrize(
    ("payload", "ndim", "message"),
    [
        (idx_bytes(np.zeros(5, np.uint8), magic=0x0803), 1, "magic"),  # image magic for labels
        (idx_bytes(np.zeros((2, 2, 2), np.uint8), magic=0x0D03), 3, "magic"),  # float type
        (idx_bytes(np.zeros((2, 2, 2), np.uint8), magic=0x01000803), 3, "magic"),
        (idx_bytes(np.zeros((3, 2, 2), np.uint8))[:-1], 3, "truncated"),
        (idx_bytes(np.zeros(4, np.uint8))[:6], 1, "truncated"),  # header cut short
        (idx_bytes(np.zeros(4, np.uint8)) + b"\x00", 1, "after"),
        (struct.pack(">IIII", 0x0803, 0, 2, 2), 3, "zero"),
        (gzip.compress(idx_bytes(np.zeros(50, np.uint8)), mtime=0)[:-12], 1, "gzip"),
    ],
)
def test_malformed_idx_names_the_path(
    tmp_path: Path, payload: bytes, ndim: int, message: str
) -> None:
    path = tmp_path / "broken-idx"
    path.write_bytes(payload)
    with pytest.raises(ValueError, match=message) as info:
        data.read_idx(path, ndim=ndim)
    assert str(path) in str(info.value)


def test_idx_set_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        data.load(f"mnist:{tmp_path / 'nothing'}")
    write_idx_set(tmp_path, gz=False)
    missing = tmp_path / "t10k-labels-idx1-ubyte"
    missing.unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        data.load(f"mnist:{tmp_path}")
    missing.write_bytes(idx_bytes(np.zeros(4, np.uint8)))  # 4 labels for 5 images
    with pytest.raises(ValueError, match="5 images.*4 labels"):
        data.load(f"mnist:{tmp_path}")
    missing.write_bytes(idx_bytes(np.full(5, 10, np.uint8)))  # label 10 of 10 classes
    with pytest.raises(ValueError, match=re.escape(f"{missing}: label 10")):
        data.load(f"mnist:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="nope"):
        data.read_idx(tmp_path / "nope", ndim=1)
    with pytest.raises(ValueError, match="ndim"):
        data.read_idx(missing, ndim=2)


# --------------------------------------------------------------------------------------------
# CIFAR-10 pickles


def write_cifar(directory: Path, *, per_batch: int = 3, protocol: int = 2, meta: bool = True):
    rng = np.random.default_rng(11)
    directory.mkdir(parents=True, exist_ok=True)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"batch_label": name.encode(),
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
        }
        with open(directory / name, "wb") as f:
            pickle.dump(batch, f, protocol=protocol)
        batches[name] = batch
    if meta:
        names = [f"class{i}".encode() for i in range(10)]
        with open(directory / "batches.meta", "wb") as f:
            pickle.dump({b"label_names": names, b"num_vis": 3072}, f, protocol=protocol)
    return batches


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
def test_cifar_round_trip(tmp_path: Path, protocol: int) -> None:
    batches = write_cifar(tmp_path / "cifar-10-batches-py", protocol=protocol)
    ds = data.load(f"cifar10:{tmp_path}")  # finds the cifar-10-batches-py sub-folder
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.classes == tuple(f"class{i}" for i in range(10))
    assert (ds.in_channels, ds.image_size) == (3, 32)
    train = np.concatenate([batches[f"data_batch_{i}"][b"data"] for i in range(1, 6)])
    labels = sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    pixels = torch.round(ds.x_train * 255).to(torch.uint8).numpy()
    # row layout: 1024 red, then 1024 green, then 1024 blue values, each row-major 32x32
    assert pixels[4, 1, 2, 3] == train[4, 1024 + 2 * 32 + 3]
    np.testing.assert_array_equal(pixels.reshape(15, -1), train)
    np.testing.assert_array_equal(ds.y_train.numpy(), labels)
    np.testing.assert_array_equal(ds.y_test.numpy(), batches["test_batch"][b"labels"])


def test_cifar_without_meta_uses_the_standard_names(tmp_path: Path) -> None:
    write_cifar(tmp_path, meta=False)
    ds = data.load(f"cifar10:{tmp_path}")
    assert ds.classes[0] == "airplane" and ds.classes[9] == "truck"


def test_cifar_errors(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "data_batch_3"))):
        data.load(f"cifar10:{tmp_path}")
    # a pickle that names any other global (here a function) is refused, not executed
    with open(tmp_path / "data_batch_3", "wb") as f:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": os.getcwd}, f)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "data_batch_3")) + ".*refusing"):
        data.load(f"cifar10:{tmp_path}")
    with open(tmp_path / "data_batch_3", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(ValueError, match="3072"):
        data.load(f"cifar10:{tmp_path}")
    (tmp_path / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="data_batch_3"):
        data.load(f"cifar10:{tmp_path}")


# --------------------------------------------------------------------------------------------
# image folders

COLOURS = {"blue": 2, "green": 1, "red": 0}


def write_image_folder(root: Path, *, per_class: int = 4, gray: bool = False) -> None:
    from skimage.io import imsave

    rng = np.random.default_rng(5)
    for name, channel in COLOURS.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            h, w = int(rng.integers(12, 40)), int(rng.integers(12, 40))
            if gray:
                image = np.full((h, w), 60 * (channel + 1), dtype=np.uint8)
            else:
                image = rng.integers(0, 40, (h, w, 3), dtype=np.uint8)
                image[..., channel] = 220
            imsave(root / name / f"img{i}.png", image, check_contrast=False)
    (root / "red" / "notes.txt").write_text("not an image: ignored")


def test_image_folder_labels_and_shapes(tmp_path: Path) -> None:
    write_image_folder(tmp_path)
    ds = data.load(f"images:{tmp_path}", image_size=16, seed=0)
    assert ds.classes == ("blue", "green", "red") and ds.num_classes == 3
    assert ds.input_shape == (3, 16, 16) and ds.kind == "image"
    assert len(ds.y_train) == 9 and len(ds.y_test) == 3
    assert sorted(ds.y_test.tolist()) == [0, 1, 2]  # stratified: one of each class
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        assert x.min() >= 0 and x.max() <= 1
        dominant = x.mean(dim=(2, 3)).argmax(dim=1)
        expected = torch.tensor([COLOURS[ds.classes[int(c)]] for c in y])
        assert torch.equal(dominant, expected)
    again = data.load(f"images:{tmp_path}", image_size=16, seed=0)
    assert torch.equal(again.x_train, ds.x_train)


def test_image_folder_gray_and_mixed(tmp_path: Path) -> None:
    from skimage.io import imsave

    write_image_folder(tmp_path, gray=True)
    ds = data.load(f"images:{tmp_path}", image_size=8)
    assert ds.input_shape == (1, 8, 8)
    levels = {int(y): round(float(x.mean()) * 255) for x, y in zip(ds.x_train, ds.y_train)}
    assert levels == {0: 180, 1: 120, 2: 60}  # blue/green/red folders hold levels 180/120/60
    # one colour image makes the whole set RGB; gray images become three equal channels
    imsave(tmp_path / "red" / "colour.png", np.zeros((9, 9, 3), np.uint8), check_contrast=False)
    ds = data.load(f"images:{tmp_path}", image_size=8)
    assert ds.input_shape == (3, 8, 8)
    gray = ds.x_train[ds.x_train.mean(dim=(1, 2, 3)) > 0.1]
    assert torch.equal(gray[:, 0], gray[:, 1]) and torch.equal(gray[:, 1], gray[:, 2])


def test_image_folder_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'empty'}: no class")):
        data.load(f"images:{tmp_path / 'empty'}")
    root = tmp_path / "set"
    write_image_folder(root)
    (root / "zebra").mkdir()
    message = f"{root / 'zebra'}: class folder without images"
    with pytest.raises(ValueError, match=re.escape(message)):
        data.load(f"images:{root}")
    (root / "zebra" / "a.png").write_bytes(b"\x89PNG garbage")
    (root / "zebra" / "b.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(ValueError, match=re.escape(f"{root / 'zebra' / 'a.png'}: unreadable")):
        data.load(f"images:{root}")
    with pytest.raises(ValueError, match="image_size"):
        data.load(f"images:{root}", image_size=0)
    with pytest.raises(FileNotFoundError, match="missing-folder"):
        data.load(f"images:{tmp_path / 'missing-folder'}")


# --------------------------------------------------------------------------------------------
# torchvision (optional extra, imported lazily)


def test_torchvision_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import fails even if installed
    with pytest.raises(ImportError, match=r"pip install leakaudit\[vision\]"):
        data.load("torchvision:MNIST:/nonexistent")


def test_torchvision_path_with_a_stand_in_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    class FakeCIFAR:
        classes = [f"c{i}" for i in range(4)]

        def __init__(self, root: str, train: bool, download: bool) -> None:
            calls.append((root, train, download))
            if not Path(root).is_dir():
                raise RuntimeError("Dataset not found. You can use download=True")
            n = 6 if train else 2
            self.data = np.arange(n * 5 * 5 * 3, dtype=np.uint64).reshape(n, 5, 5, 3) % 256
            self.data = self.data.astype(np.uint8)
            self.targets = list(range(n)) if not train else [0, 1, 2, 3, 0, 1]

    datasets = types.ModuleType("torchvision.datasets")
    datasets.FakeCIFAR = FakeCIFAR
    module = types.ModuleType("torchvision")
    module.datasets = datasets
    monkeypatch.setitem(sys.modules, "torchvision", module)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", datasets)

    ds = data.load(f"torchvision:FakeCIFAR:{tmp_path}")
    assert all(download is False for _, _, download in calls)
    assert ds.input_shape == (3, 5, 5) and ds.classes == ("c0", "c1", "c2", "c3")
    raw = FakeCIFAR(str(tmp_path), train=True, download=False).data
    np.testing.assert_array_equal(
        torch.round(ds.x_train * 255).to(torch.uint8).numpy(), raw.transpose(0, 3, 1, 2)
    )
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        data.load(f"torchvision:FakeCIFAR:{tmp_path / 'absent'}")
    with pytest.raises(ValueError, match="NoSuchSet"):
        data.load(f"torchvision:NoSuchSet:{tmp_path}")


# --------------------------------------------------------------------------------------------
# Dataset validation


def test_dataset_refuses_inconsistent_fields() -> None:
    x = torch.zeros(4, 3)
    y = torch.zeros(4, dtype=torch.int64)
    fields = dict(
        name="t", x_train=x, y_train=y, x_test=x, y_test=y, num_classes=2,
        input_shape=(3,), kind="tabular", source="test",
    )  # fmt: skip
    data.Dataset(**fields)
    for key, value, message in [
        ("input_shape", (4,), "input_shape"),
        ("y_test", torch.zeros(3, dtype=torch.int64), "y_test"),
        ("y_train", torch.full((4,), 2), "y_train"),
        ("x_train", x.double(), "x_train"),
        ("kind", "text", "kind"),
        ("num_classes", 1, "num_classes"),
        ("classes", ("a",), "classes"),
    ]:
        with pytest.raises(ValueError, match=message):
            data.Dataset(**{**fields, key: value})


# --------------------------------------------------------------------------------------------
# partitions

LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 30))  # 10 x 30


@pytest.mark.parametrize("scheme", data.SCHEMES)
def test_partition_is_disjoint_and_covering(scheme: str) -> None:
    parts = data.partition(LABELS, 7, scheme, rng=np.random.default_rng(1), shards_per_client=3)
    assert len(parts) == 7
    assert all(p.dtype == np.int64 and len(p) > 0 for p in parts)
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(LABELS)))


@pytest.mark.parametrize("scheme", data.SCHEMES)
def test_partition_deterministic_under_a_seed(scheme: str) -> None:
    def run(seed: int) -> list[np.ndarray]:
        return data.partition(LABELS, 5, scheme, rng=np.random.default_rng(seed))

    first, again, other = run(3), run(3), run(4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_iid_sizes_and_mixed_labels() -> None:
    parts = data.partition(LABELS, 7, "iid", rng=np.random.default_rng(0))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 300
    assert min(len(np.unique(LABELS[p])) for p in parts) >= 8


def test_shards_limit_the_labels_per_client() -> None:
    # 10 classes x 30 examples, 10 clients x 3 shards = 30 shards of 10: one label per shard
    parts = data.partition(LABELS, 10, "shards", rng=np.random.default_rng(2), shards_per_client=3)
    assert all(len(p) == 30 for p in parts)
    assert all(len(np.unique(LABELS[p])) <= 3 for p in parts)
    assert np.mean([len(np.unique(LABELS[p])) for p in parts]) > 2  # random shards, not a label


def test_shards_adap_dp_fl_setting() -> None:
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(10), 400))
    parts = data.partition(
        torch.as_tensor(labels), 10, "shards", rng=np.random.default_rng(0),
        shards=400, shards_per_client=40,
    )  # fmt: skip
    assert [len(p) for p in parts] == [400] * 10
    assert all(len(np.unique(labels[p])) <= 10 for p in parts)


@pytest.mark.parametrize(("clients", "k"), [(10, 2), (7, 3), (4, 10), (20, 1), (3, 4)])
def test_classes_gives_exactly_k_classes(clients: int, k: int) -> None:
    parts = data.partition(
        LABELS, clients, "classes", rng=np.random.default_rng(0), classes_per_client=k
    )
    assert all(len(np.unique(LABELS[p])) == k for p in parts)
    sizes = [len(p) for p in parts]
    assert max(sizes) <= 2.5 * min(sizes)  # each class split evenly among its holders


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    labels = np.repeat(np.arange(10), 100)

    def entropy(alpha: float) -> float:
        rng = np.random.default_rng(0)
        return np.mean(
            [
                label_entropy(labels, data.partition(labels, 10, "dirichlet", rng=rng, alpha=alpha))
                for _ in range(3)
            ]
        )

    low, mid, high = entropy(0.1), entropy(1.0), entropy(100.0)
    assert low < mid < high
    assert high > 0.95 * np.log(10)  # nearly uniform label mix
    assert low < 0.6 * np.log(10)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"clients": 0}, "clients"),
        ({"clients": 301}, "clients"),
        ({"clients": 2.0}, "clients"),
        ({"scheme": "random"}, "scheme"),
        ({"scheme": "dirichlet", "alpha": 0.0}, "alpha"),
        ({"scheme": "dirichlet", "alpha": -1.0}, "alpha"),
        ({"scheme": "dirichlet", "alpha": float("nan")}, "alpha"),
        ({"scheme": "classes", "classes_per_client": 0}, "classes_per_client"),
        ({"scheme": "classes", "classes_per_client": 11}, "classes_per_client"),
        ({"scheme": "classes", "clients": 3, "classes_per_client": 3}, "classes_per_client"),
        ({"scheme": "shards", "shards": 25}, "shards=25 is not divisible"),
        ({"scheme": "shards", "shards": 10}, "shards=10: fewer"),
        ({"scheme": "shards", "shards": 40}, "shards=40: more"),
        ({"scheme": "shards", "shards_per_client": 0}, "shards_per_client"),
        ({"scheme": "shards", "shards_per_client": 31}, "shards_per_client"),
        ({"rng": np.random.RandomState(0)}, "rng"),
        ({"rng": 0}, "rng"),
        ({"labels": LABELS.reshape(10, 30)}, "labels"),
        ({"labels": LABELS.astype(float)}, "labels"),
        ({"labels": LABELS - 1}, "labels"),
        ({"labels": []}, "labels"),
    ],
)
def test_partition_errors_name_the_argument(kwargs: dict, name: str) -> None:
    args = {"labels": LABELS, "clients": 10, "scheme": "iid", "rng": np.random.default_rng(0)}
    args.update(kwargs)
    labels, clients, scheme = args.pop("labels"), args.pop("clients"), args.pop("scheme")
    with pytest.raises(ValueError, match=name):
        data.partition(labels, clients, scheme, **args)


def test_partition_impossible_cases() -> None:
    # a class with fewer examples than the clients that must hold it
    labels = np.array([0] * 20 + [1])
    with pytest.raises(ValueError, match="class 1 has 1 examples but 2 clients"):
        data.partition(labels, 2, "classes", rng=np.random.default_rng(0), classes_per_client=2)
    # Dirichlet with one class and a tiny alpha cannot give five clients one example each
    with pytest.raises(ValueError, match="alpha"):
        data.partition(np.zeros(5, int), 5, "dirichlet", rng=np.random.default_rng(0), alpha=1e-3)
