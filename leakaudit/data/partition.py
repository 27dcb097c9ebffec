"""Federated partitions: which client holds which examples (IID, label-sorted shards, k classes
per client, Dirichlet label skew), from a numpy Generator passed in."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._validate import check_int as _check_int
from .._validate import check_positive

__all__ = ["SCHEMES", "partition"]

# --------------------------------------------------------------------------------------------
# partitions

SCHEMES = ("iid", "shards", "classes", "dirichlet")
_MAX_DIRICHLET_DRAWS = 100


def partition(
    labels: Sequence[int] | np.ndarray | torch.Tensor,
    clients: int,
    scheme: str = "iid",
    *,
    rng: np.random.Generator,
    shards_per_client: int = 2,
    classes_per_client: int = 2,
    alpha: float = 0.5,
    shards: int | None = None,
) -> list[np.ndarray]:
    """Split example indices among ``clients``: a list of sorted int64 index arrays.

    The parts are disjoint and cover every index. Schemes:

    - ``"iid"``: a random permutation cut into nearly equal parts.
    - ``"shards"``: indices sorted by label (ties in random order) cut into ``shards`` pieces
      (default ``clients * shards_per_client``; when given it must equal that), and
      ``shards_per_client`` random pieces dealt to each client (McMahan et al. 2017; Adap
      DP-FL uses 400 shards, 40 per client for 10 clients). Shard sizes differ by at most 1.
    - ``"classes"``: each client holds exactly ``classes_per_client`` classes, dealt
      round-robin over a random class order so that every class is held; a class's examples
      are split evenly among its holders.
    - ``"dirichlet"``: for each class, proportions drawn from Dirichlet(``alpha``) over the
      clients (Hsu et al. 2019); redrawn up to 100 times until every client has an example.
    """
    y = _labels_array(labels)
    n = len(y)
    clients = _check_int("clients", clients, 1)
    if clients > n:
        raise ValueError(f"clients={clients} is more than the {n} examples")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    shards_per_client = _check_int("shards_per_client", shards_per_client, 1)
    classes_per_client = _check_int("classes_per_client", classes_per_client, 1)
    alpha_value = check_positive("alpha", alpha)
    if scheme == "iid":
        parts = np.array_split(rng.permutation(n), clients)
    elif scheme == "shards":
        parts = _shards(y, clients, shards_per_client, shards, rng)
    elif scheme == "classes":
        parts = _classes(y, clients, classes_per_client, rng)
    else:
        parts = _dirichlet(y, clients, alpha_value, rng)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _shards(
    y: np.ndarray, clients: int, per_client: int, shards: int | None, rng: np.random.Generator
) -> list[np.ndarray]:
    needed = clients * per_client
    if shards is None:
        count = needed
        if count > len(y):
            raise ValueError(
                f"shards_per_client={per_client}: {clients} clients need {count} shards, "
                f"more than the {len(y)} examples"
            )
    else:
        count = _check_int("shards", shards, 1)
        if count % clients:
            raise ValueError(f"shards={count} is not divisible by clients={clients}")
        if count != needed:
            relation = "fewer" if count < needed else "more"
            raise ValueError(
                f"shards={count}: {relation} shards than the clients * shards_per_client = "
                f"{clients} * {per_client} = {needed} that are dealt"
            )
        if count > len(y):
            raise ValueError(f"shards={count} is more than the {len(y)} examples")
    order = rng.permutation(len(y))
    by_label = order[np.argsort(y[order], kind="stable")]
    pieces = np.array_split(by_label, count)
    dealt = rng.permutation(count)
    return [
        np.concatenate([pieces[s] for s in dealt[i * per_client : (i + 1) * per_client]])
        for i in range(clients)
    ]


def _classes(
    y: np.ndarray, clients: int, per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    present = np.unique(y)
    num = len(present)
    if per_client > num:
        raise ValueError(
            f"classes_per_client must be in [1, {num}] (the classes present in labels), "
            f"got {per_client}"
        )
    if clients * per_client < num:
        raise ValueError(
            f"classes_per_client={per_client}: {clients} clients hold only "
            f"{clients * per_client} class slots, fewer than the {num} classes"
        )
    order = rng.permutation(present)
    holders: dict[int, list[int]] = {int(c): [] for c in present}
    for client in range(clients):
        for j in range(per_client):
            holders[int(order[(client * per_client + j) % num])].append(client)
    members = {c: np.flatnonzero(y == c) for c in holders}
    for c, held_by in holders.items():
        if len(members[c]) < len(held_by):
            raise ValueError(
                f"classes_per_client={per_client}: class {c} has {len(members[c])} examples "
                f"but {len(held_by)} clients hold it"
            )
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c, held_by in holders.items():
        pieces = np.array_split(rng.permutation(members[c]), len(held_by))
        for client, piece in zip(held_by, pieces):
            parts[client].append(piece)
    return [np.concatenate(p) for p in parts]


def _dirichlet(
    y: np.ndarray, clients: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    by_class = [np.flatnonzero(y == c) for c in np.unique(y)]
    concentration = np.full(clients, alpha)
    for _ in range(_MAX_DIRICHLET_DRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        for members in by_class:
            members = rng.permutation(members)
            cuts = (np.cumsum(rng.dirichlet(concentration))[:-1] * len(members)).astype(np.int64)
            for client, piece in enumerate(np.split(members, np.clip(cuts, 0, len(members)))):
                parts[client].append(piece)
        merged = [np.concatenate(p) for p in parts]
        if all(len(p) for p in merged):
            return merged
    raise ValueError(
        f"alpha={alpha}: no Dirichlet draw in {_MAX_DIRICHLET_DRAWS} gave each of the "
        f"{clients} clients an example; raise alpha or use fewer clients"
    )


# --------------------------------------------------------------------------------------------
# validation helpers


def _labels_array(labels: object) -> np.ndarray:
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    array = np.asarray(labels)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"labels must be integer class indices, got dtype {array.dtype}")
    if array.min() < 0:
        raise ValueError(f"labels must be >= 0, got {int(array.min())}")
    return array.astype(np.int64)
