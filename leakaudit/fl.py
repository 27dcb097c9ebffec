"""Federated simulator (FedAvg) with a defense and leak-point taps.

Data flows one way: data -> clients (local SGD, the defense's per-example and client-side
processing) -> server (the defense's server-side processing, FedAvg) -> next round. Taps
record what an attacker at leak point 0, 1 or 2 (Wei et al., "Securing distributed SGD
against gradient leakage threats") would see, without changing training.

Per-example gradients use ``torch.func`` (functional_call + vmap(grad)), never a Python loop
over examples. Randomness: one ``numpy.random.Generator`` (client sampling, batches) and one
``torch.Generator`` (the defense's noise), both seeded from ``seed``; no global RNG state.

Sampling conventions (stated, as the accounting assumes them): K clients are drawn without
replacement each round and accounted with q = K/N; each local iteration draws a batch of
min(B, n_c) examples without replacement ("shuffle") or includes every example
independently with probability B/n_c ("poisson"), accounted with q = B/n_c.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from tqdm.auto import tqdm

from accounting import PrivacyLedger

from ._validate import check_int as _check_int
from .defenses import ClientContext, Defense, RoundContext
from .defenses import get as get_defense
from .optim import OPTIMIZERS, make_optimizer

__all__ = ["Tap", "Observation", "Run", "LocalBatch", "simulate", "accuracy_within",
           "batch_gradient",
           "per_example_gradients", "NonFiniteGradientError"]


class NonFiniteGradientError(FloatingPointError):
    """A gradient or update had NaN/inf; training stops, naming the client and round."""


@dataclass(frozen=True)
class Tap:
    """Record leak point ``point`` at ``round`` (and ``local_step`` for type 2) for the first
    ``clients`` sampled clients of that round."""

    point: int
    round: int = 0
    local_step: int = 0
    clients: int = 1

    def __post_init__(self) -> None:
        if self.point not in (0, 1, 2) or isinstance(self.point, bool):
            raise ValueError(f"point must be 0, 1 or 2, got {self.point!r}")
        for name in ("round", "local_step"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        if not isinstance(self.clients, int) or isinstance(self.clients, bool) or \
                self.clients < 1:
            raise ValueError(f"clients must be an integer >= 1, got {self.clients!r}")


@dataclass
class Observation:
    """What an attacker at a leak point saw, and the truth kept apart for scoring only."""

    point: int
    round: int
    client: int
    local_step: int | None
    #: the observed tensors, in parameter order (type 2: the batch gradient about to be
    #: applied; types 1/0: the update w_local - w_global as it leaves the client / enters
    #: aggregation)
    tensors: list[torch.Tensor] = field(repr=False)
    #: model weights at that moment (type 2: before the local step; 1/0: the global model
    #: the round started from)
    weights: dict[str, torch.Tensor] = field(repr=False)
    lr: float
    local_steps: int
    batch_size: int
    #: ground truth, for scoring only: the examples behind the observation
    inputs: torch.Tensor = field(repr=False)
    labels: torch.Tensor = field(repr=False)
    defense: str = ""


@dataclass
class Run:
    """The result of :func:`simulate`."""

    model: nn.Module
    defense: Defense
    accuracy: list[float]
    loss: list[float]
    val_loss: list[float]
    claimed: list[PrivacyLedger]
    sound: list[PrivacyLedger]
    observations: list[Observation]
    settings: dict[str, Any]
    #: per round, the clients whose update entered aggregation
    uploads: list[tuple[int, ...]] = field(default_factory=list)
    #: the rounds (0-based) after which ``accuracy`` and ``loss`` were measured
    eval_rounds: list[int] = field(default_factory=list)
    #: with ``track_epsilon=delta``: (round, worst claimed eps, worst sound eps) at each
    #: evaluation, so accuracy can be read against the privacy spent so far
    eps_history: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1] if self.accuracy else math.nan

    def epsilon(self, delta: float = 1e-5, kind: str = "sound", method: str = "rdp") -> float:
        """Worst client's eps (parallel composition over disjoint client data).

        Instance level for per-example defenses, client level for client-level ones
        (``defense.level``); ``kind`` is "claimed" (the defense's paper) or "sound".
        """
        if kind not in ("claimed", "sound"):
            raise ValueError(f"kind must be 'claimed' or 'sound', got {kind!r}")
        return _worst_epsilon(self.claimed if kind == "claimed" else self.sound, delta, method)

    def observations_at(self, point: int) -> list[Observation]:
        return [o for o in self.observations if o.point == point]

    def accuracy_within(self, eps_budget: float) -> tuple[int, float] | None:
        """(round, accuracy) of the last evaluation whose sound eps was <= ``eps_budget``
        (None when none was); needs ``simulate(..., track_epsilon=delta)``."""
        if not self.eps_history:
            raise ValueError("no eps history: run simulate(..., track_epsilon=delta)")
        return accuracy_within(self.eps_history, self.accuracy, eps_budget)


def accuracy_within(eps_history: Sequence[tuple[int, float, float]],
                    accuracy: Sequence[float], eps_budget: float) -> tuple[int, float] | None:
    """(round, accuracy) of the last evaluation whose sound eps is <= ``eps_budget``."""
    best = None
    for (r, _, sound), acc in zip(eps_history, accuracy):
        if sound <= eps_budget:
            best = (r, acc)
    return best


def _worst_epsilon(ledgers: Sequence[PrivacyLedger], delta: float, method: str = "rdp") -> float:
    """The worst client's eps (parallel composition over disjoint client data)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = [lg.epsilon(delta, method) for lg in ledgers]
    return max(values) if values else 0.0


# ------------------------------------------------------------------------------ gradients
def _loss_single(model: nn.Module):
    def loss(params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, (params, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(out, y.unsqueeze(0))

    return loss


def _loss_mean(model: nn.Module):
    def loss(params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, (params, buffers), (x,)), y)

    return loss


def per_example_gradients(model: nn.Module, params: dict[str, torch.Tensor],
                          buffers: dict[str, torch.Tensor], x: torch.Tensor,
                          y: torch.Tensor) -> list[torch.Tensor]:
    """Per-example gradients of the cross-entropy, (B, *shape) per parameter, via vmap(grad)."""
    g = vmap(grad(_loss_single(model)), in_dims=(None, None, 0, 0))(params, buffers, x, y)
    return [g[k] for k in params]


def batch_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Gradient of the mean cross-entropy of (x, y) w.r.t. the model's trainable parameters,
    in ``model.named_parameters()`` order (what a client would share)."""
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    g = grad(_loss_mean(model))(params, buffers, x, y)
    return [g[k] for k in params]


class LocalBatch:
    """One local iteration's batch as a defense may use it: gradients at any weights.

    A defense never reads the examples; it asks for per-example gradients or the mean-loss
    gradient at weights of its choice, for gradients of inputs it makes itself (random noise:
    data-independent), or for a freshly sampled batch of the same client (``fresh``).
    NaN/inf in any gradient raises :class:`NonFiniteGradientError` naming client and round.
    """

    def __init__(self, model: nn.Module, buffers: dict[str, torch.Tensor], x: torch.Tensor,
                 y: torch.Tensor, *, num_classes: int, draw: Any = None,
                 where: str = "") -> None:
        self._model, self._buffers = model, buffers
        self.x, self.y = x, y
        self.num_classes = int(num_classes)
        self._draw = draw
        self._where = where

    @property
    def size(self) -> int:
        return int(self.x.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def _checked(self, g: list[torch.Tensor], what: str) -> list[torch.Tensor]:
        if not _finite(g):
            raise NonFiniteGradientError(f"NaN/inf in a {what} of {self._where}")
        return g

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """(B, *shape) per parameter; an empty batch gives one all-zero row."""
        if self.size == 0:
            return [torch.zeros((1, *v.shape), dtype=v.dtype) for v in params.values()]
        return self._checked(per_example_gradients(self._model, params, self._buffers,
                                                   self.x, self.y), "per-example gradient")

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Gradient of the mean cross-entropy of the batch."""
        g = grad(_loss_mean(self._model))(params, self._buffers, self.x, self.y)
        return self._checked([g[k] for k in params], "gradient")

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        """Per-example gradients of inputs the caller made (not the client's data)."""
        return self._checked(per_example_gradients(self._model, params, self._buffers, x, y),
                             "per-example gradient of caller-made inputs")

    def fresh(self) -> LocalBatch:
        """Another batch of the same client, sampled independently by the same rule."""
        if self._draw is None:
            raise RuntimeError("this batch cannot draw another one")
        return self._draw()


# ------------------------------------------------------------------------------ helpers
def _resolve_dataset(dataset: Any, seed: int):
    from . import data as data_mod

    if isinstance(dataset, str):
        return data_mod.load(dataset, seed=seed)
    if hasattr(dataset, "x_train") and hasattr(dataset, "num_classes"):
        return dataset
    raise ValueError(f"dataset must be a name or a leakaudit.data.Dataset, got {type(dataset)!r}")


def _evaluate(model: nn.Module, params: dict, buffers: dict, x: torch.Tensor,
              y: torch.Tensor, chunk: int = 1024) -> tuple[float, float]:
    if x.shape[0] == 0:
        return math.nan, math.nan
    correct, total_loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], chunk):
            out = functional_call(model, (params, buffers), (x[i:i + chunk],))
            total_loss += float(F.cross_entropy(out, y[i:i + chunk], reduction="sum"))
            correct += int((out.argmax(dim=1) == y[i:i + chunk]).sum())
    return correct / x.shape[0], total_loss / x.shape[0]


def _finite(tensors: Sequence[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _validate_model(model: nn.Module, ds: Any) -> None:
    x = ds.x_train[:2]
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:  # noqa: BLE001 - any failure here is a shape mismatch to report
        raise ValueError(f"model cannot process the dataset's inputs of shape "
                         f"{tuple(x.shape[1:])}: {exc}") from exc
    if out.dim() != 2 or out.shape[1] != ds.num_classes:
        raise ValueError(f"model outputs shape {tuple(out.shape[1:])} per example but the "
                         f"dataset has {ds.num_classes} classes")


_FLUSH_STATE = {"depth": 0, "was_on": False}


def _flush_is_on() -> bool:
    return torch.tensor([1e-40], dtype=torch.float32).mul(1.0).item() == 0.0


@contextlib.contextmanager
def _flush_denormals():
    """Flush subnormal floats to zero while training or attacking.

    Saturated sigmoids produce subnormal gradients that make CPU arithmetic ~4x slower;
    values below ~1e-38 are numerically irrelevant here. Nested uses are counted, and the
    caller's own mode is restored when the outermost one ends.
    """
    if _FLUSH_STATE["depth"] == 0:
        _FLUSH_STATE["was_on"] = _flush_is_on()
        torch.set_flush_denormal(True)
    _FLUSH_STATE["depth"] += 1
    try:
        yield
    finally:
        _FLUSH_STATE["depth"] -= 1
        if _FLUSH_STATE["depth"] == 0:
            torch.set_flush_denormal(_FLUSH_STATE["was_on"])


# ------------------------------------------------------------------------------ simulate
def _simulate(
    model: nn.Module | None = None,
    dataset: Any = "digits",
    defense: Defense | str = "none",
    *,
    clients: int = 10,
    clients_per_round: int | float = 1.0,
    rounds: int = 10,
    local_steps: int = 1,
    batch_size: int = 32,
    lr: float = 0.1,
    optimizer: str = "sgd",
    partition: str | Sequence[Sequence[int]] = "iid",
    partition_kwargs: dict[str, Any] | None = None,
    taps: Sequence[Tap] = (),
    seed: int = 0,
    progress: bool = True,
    val_fraction: float = 0.1,
    batch_sampling: str = "shuffle",
    eval_every: int = 1,
    track_epsilon: float | None = None,
) -> Run:
    """Train a federated model under a defense; return accuracy, ledgers and tapped views.

    Args:
        model: any nn.Module mapping the dataset's inputs to class logits; default
            ``leakaudit.models.default_for(dataset)``. It is copied, never mutated.
        dataset: a name for :func:`leakaudit.data.load` or a ``Dataset``.
        defense: a :class:`Defense` or a registered name (:func:`leakaudit.defenses.get`).
        clients: N; clients_per_round: K as a count, or a fraction of N in (0, 1].
        rounds: T; local_steps: L local iterations of batch size B per round.
        lr: local learning rate; optimizer: "sgd" or "adam" (fresh state every round).
        partition: "iid", "shards", "classes", "dirichlet" (see ``leakaudit.data.partition``,
            options in ``partition_kwargs``) or explicit index lists, one per client.
        taps: leak points to record (:class:`Tap`).
        val_fraction: share of the training data the server keeps as validation set.
        batch_sampling: "shuffle" (fixed size min(B, n_c)) or "poisson" (rate B/n_c).
        eval_every: evaluate the test set every this many rounds (and after the last).
        track_epsilon: a delta: also record the worst client's claimed and sound eps at
            every evaluation (``Run.eps_history``; accuracy against privacy spent).
    """
    from . import data as data_mod
    from . import models as models_mod

    # ---- validate everything before any work
    clients = _check_int("clients", clients, 1)
    rounds = _check_int("rounds", rounds, 1)
    local_steps = _check_int("local_steps", local_steps, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    eval_every = _check_int("eval_every", eval_every, 1)
    seed = _check_int("seed", seed, 0)
    if isinstance(clients_per_round, bool) or not isinstance(clients_per_round,
                                                               (int, float, np.integer)):
        raise ValueError(f"clients_per_round must be a count or a fraction, "
                         f"got {clients_per_round!r}")
    if isinstance(clients_per_round, float) and not float(clients_per_round).is_integer():
        if not 0.0 < clients_per_round <= 1.0:
            raise ValueError(f"clients_per_round as a fraction must be in (0, 1], "
                             f"got {clients_per_round!r}")
        k = max(1, int(round(clients_per_round * clients)))
    elif isinstance(clients_per_round, float) and clients_per_round == 1.0:
        k = clients
    else:
        k = int(clients_per_round)
    if k < 1 or k > clients:
        raise ValueError(f"clients_per_round must be between 1 and clients={clients}, got {k}")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) \
            or lr <= 0:
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if batch_sampling not in ("shuffle", "poisson"):
        raise ValueError(f"batch_sampling must be 'shuffle' or 'poisson', got {batch_sampling!r}")
    if track_epsilon is not None and (isinstance(track_epsilon, bool) or not isinstance(
            track_epsilon, (int, float)) or not 0.0 < track_epsilon < 1.0):
        raise ValueError(f"track_epsilon must be a delta in (0, 1) or None, "
                         f"got {track_epsilon!r}")
    if not isinstance(val_fraction, (int, float)) or not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
    taps = tuple(taps)
    for tap in taps:
        if not isinstance(tap, Tap):
            raise ValueError(f"taps must be Tap objects, got {tap!r}")
        if tap.round >= rounds:
            raise ValueError(f"a tap's round {tap.round} is beyond rounds={rounds}")
        if tap.point == 2 and tap.local_step >= local_steps:
            raise ValueError(f"a tap's local_step {tap.local_step} is beyond "
                             f"local_steps={local_steps}")
        if tap.clients > k:
            raise ValueError(f"a tap asks for {tap.clients} clients but only {k} take part "
                             f"in a round")
    the_defense = get_defense(defense) if isinstance(defense, (str, Defense)) else None
    if the_defense is None:
        raise ValueError(f"defense must be a name or a Defense, got {defense!r}")

    ds = _resolve_dataset(dataset, seed)
    ytr = ds.y_train
    if ytr.numel() and (int(ytr.min()) < 0 or int(ytr.max()) >= ds.num_classes):
        raise ValueError(f"dataset labels must be in [0, {ds.num_classes}), got range "
                         f"[{int(ytr.min())}, {int(ytr.max())}]")
    if tuple(ds.x_train.shape[1:]) != tuple(ds.input_shape):
        raise ValueError(f"dataset inputs have shape {tuple(ds.x_train.shape[1:])}, "
                         f"metadata says {tuple(ds.input_shape)}")
    if model is None:
        model = models_mod.default_for(ds, generator=torch.Generator().manual_seed(seed))
    elif not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model)!r}")
    else:
        model = copy.deepcopy(model)
    _validate_model(model, ds)

    np_rng = np.random.default_rng(seed)
    noise_gen = torch.Generator().manual_seed(seed + 1)
    n_train = ds.x_train.shape[0]
    perm = np_rng.permutation(n_train)
    n_val = int(round(val_fraction * n_train))
    val_idx, pool = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    if isinstance(partition, str):
        parts_local = data_mod.partition(ytr[pool].numpy(), clients, partition, rng=np_rng,
                                         **(partition_kwargs or {}))
        parts = [pool[p] for p in parts_local]
    else:
        parts = [np.asarray(p, dtype=np.int64) for p in partition]
        if len(parts) != clients:
            raise ValueError(f"partition has {len(parts)} index lists for clients={clients}")
        flat = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= n_train):
            raise ValueError("partition indices are out of range of the training set")
    for c, p in enumerate(parts):
        if len(p) == 0:
            raise ValueError(f"client {c} has no data (partition gives it no example)")

    # ---- state
    params = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    names = list(params)
    sizes = tuple(len(p) for p in parts)
    claimed = [PrivacyLedger(orders=the_defense.orders) for _ in range(clients)]
    sound = [PrivacyLedger(orders=the_defense.orders) for _ in range(clients)]
    opt_name = the_defense.optimizer or optimizer
    uploads: list[tuple[int, ...]] = []
    eval_rounds: list[int] = []
    eps_history: list[tuple[int, float, float]] = []
    the_defense.start(rounds)
    per_example = "example" in the_defense.sites
    xv, yv = ds.x_train[val_idx], ytr[val_idx]
    accuracy: list[float] = []
    losses: list[float] = []
    val_losses: list[float] = []
    observations: list[Observation] = []

    def tapped(point: int, r: int, pos: int, step: int | None = None) -> bool:
        return any(t.point == point and t.round == r and pos < t.clients
                   and (point != 2 or t.local_step == step) for t in taps)

    for r in tqdm(range(rounds), disable=not progress, desc=f"FL {the_defense.name}"):
        participants = tuple(int(c) for c in np_rng.choice(clients, size=k, replace=False))
        round_ctx = RoundContext(round=r, rounds=rounds, clients=clients, clients_per_round=k,
                                 local_steps=local_steps, batch_size=batch_size,
                                 client_sizes=sizes, participants=participants,
                                 claimed=claimed, sound=sound)
        updates, weights = [], []
        uploaded: list[int] = []
        for pos, c in enumerate(participants):
            if not the_defense.uploads(c, round_ctx):
                continue
            uploaded.append(c)
            idx_all = parts[c]
            n_c = len(idx_all)
            local = {n: v.clone() for n, v in params.items()}
            opt = make_optimizer(opt_name, float(lr))
            used: list[np.ndarray] = []
            ctx = ClientContext(round=r, client=c, local_step=0, n_examples=n_c,
                                batch_size=min(batch_size, n_c), lr=float(lr),
                                generator=noise_gen, round_ctx=round_ctx,
                                claimed=claimed[c], sound=sound[c])

            def draw(idx_all: np.ndarray = idx_all, n_c: int = n_c, used: list = used,
                     c: int = c, r: int = r) -> LocalBatch:
                if batch_sampling == "shuffle":
                    bidx = idx_all[np_rng.choice(n_c, size=min(batch_size, n_c), replace=False)]
                else:
                    bidx = idx_all[np_rng.random(n_c) < min(1.0, batch_size / n_c)]
                used.append(bidx)
                return LocalBatch(model, buffers, ds.x_train[bidx], ytr[bidx],
                                  num_classes=ds.num_classes, draw=draw,
                                  where=f"client {c} in round {r}")

            for step in range(local_steps):
                ctx.local_step = step
                batch = draw()
                if batch.size == 0 and not per_example:  # empty Poisson batch, no noise
                    continue
                before = local
                local, g = the_defense.local_step(local, batch, opt, ctx)
                if not _finite(g):
                    raise NonFiniteGradientError(
                        f"NaN/inf in the gradient of client {c} in round {r}, local step {step}")
                if tapped(2, r, pos, step):
                    observations.append(Observation(
                        point=2, round=r, client=c, local_step=step,
                        tensors=[t.detach().clone() for t in g],
                        weights={n: v.clone() for n, v in before.items()}, lr=float(lr),
                        local_steps=1, batch_size=batch.size, inputs=batch.x.clone(),
                        labels=batch.y.clone(), defense=the_defense.name))
            update = [local[n] - params[n] for n in names]
            update = the_defense.privatize_update(update, ctx)
            seen = np.unique(np.concatenate(used)) if used else np.empty(0, dtype=np.int64)
            truth_x, truth_y = ds.x_train[seen], ytr[seen]
            if tapped(1, r, pos):
                observations.append(_update_obs(1, r, c, update, params, lr, local_steps,
                                                batch_size, truth_x, truth_y, the_defense))
            update = the_defense.sanitize_update(update, ctx)
            if not _finite(update):
                raise NonFiniteGradientError(f"NaN/inf in the update of client {c} in round {r}")
            if tapped(0, r, pos):
                observations.append(_update_obs(0, r, c, update, params, lr, local_steps,
                                                batch_size, truth_x, truth_y, the_defense))
            updates.append(update)
            weights.append(float(n_c) if the_defense.weighted_aggregation else 1.0)
        uploads.append(tuple(uploaded))
        total = sum(weights)
        if updates:  # no upload (every sampled client stopped): the model stays
            for i, n in enumerate(names):
                params[n] = params[n] + sum(w / total * u[i] for w, u in zip(weights, updates))
        the_defense.claimed_round(round_ctx)
        _, vloss = _evaluate(model, params, buffers, xv, yv)
        val_losses.append(vloss)
        the_defense.end_round(r, vloss)
        if (r + 1) % eval_every == 0 or r == rounds - 1:
            acc, loss = _evaluate(model, params, buffers, ds.x_test, ds.y_test)
            accuracy.append(acc)
            losses.append(loss)
            eval_rounds.append(r)
            if track_epsilon is not None:
                eps_history.append((r, _worst_epsilon(claimed, track_epsilon),
                                    _worst_epsilon(sound, track_epsilon)))

    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in params:
                p.copy_(params[n])
    settings = dict(clients=clients, clients_per_round=k, rounds=rounds,
                    local_steps=local_steps, batch_size=batch_size, lr=lr, optimizer=opt_name,
                    partition=partition if isinstance(partition, str) else "explicit",
                    seed=seed, val_fraction=val_fraction, batch_sampling=batch_sampling,
                    client_sizes=list(sizes),
                    dataset=ds.name, defense=the_defense.describe())
    return Run(model=model, defense=the_defense, accuracy=accuracy, loss=losses,
               val_loss=val_losses, claimed=claimed, sound=sound, observations=observations,
               settings=settings, uploads=uploads, eval_rounds=eval_rounds,
               eps_history=eps_history)


@functools.wraps(_simulate)
def simulate(*args: Any, **kwargs: Any) -> Run:  # noqa: D103 - docstring from _simulate
    with _flush_denormals():
        return _simulate(*args, **kwargs)


def _update_obs(point: int, r: int, c: int, update: list[torch.Tensor], params: dict,
                lr: float, local_steps: int, batch_size: int, x: torch.Tensor, y: torch.Tensor,
                defense: Defense) -> Observation:
    return Observation(point=point, round=r, client=c, local_step=None,
                       tensors=[u.detach().clone() for u in update],
                       weights={n: v.clone() for n, v in params.items()}, lr=float(lr),
                       local_steps=local_steps, batch_size=batch_size, inputs=x.clone(),
                       labels=y.clone(), defense=defense.name)
