"""Data sets and federated partitions (docs/simulation.md):
:mod:`.dataset` (the type), :mod:`.loaders` (by name), :mod:`.partition` (among clients).

``load(name)`` returns a :class:`Dataset` of float32 tensors: images ``(N, C, H, W)`` in
[0, 1], tabular ``(N, F)`` standardised with the training statistics. Nothing is downloaded:
built-in sets come with scikit-learn or a Debian package, the others from a directory named in
the data set's name (``"mnist:/data/mnist"``). ``partition(labels, clients, scheme, rng=...)``
splits example indices among clients (IID, label-sorted shards, k classes per client,
Dirichlet label skew).

Randomness always comes from an argument (``seed`` for the splits, a numpy ``Generator`` for
partitions); the global random state is never touched.
"""

from __future__ import annotations

from .dataset import Dataset
from .loaders import FASHION_MNIST_DIR, available, load, read_idx, resolve
from .partition import SCHEMES, partition

__all__ = ["Dataset", "FASHION_MNIST_DIR", "SCHEMES", "available", "load", "partition",
           "read_idx", "resolve"]
