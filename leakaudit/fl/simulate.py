"""Federated simulator (FedAvg) with a defense and leak-point taps.

Data flows one way: data -> clients (local iterations, the defense's per-example and
client-side processing) -> server (the defense's server-side processing, FedAvg) -> next
round. :func:`simulate` checks its arguments (:class:`~leakaudit.fl.config.FLConfig`), then
wires a few named steps: split the data, and per round sample clients, train each client,
aggregate, evaluate. Taps (:mod:`leakaudit.fl.observe`) record what an attacker at leak point
0, 1 or 2 would see, without changing training.

Randomness: one ``numpy.random.Generator`` (validation split, partition, client sampling,
batches) and one ``torch.Generator`` (the defense's noise), both seeded from ``seed``; no
global RNG state.

Sampling conventions (stated, as the accounting assumes them): clients are drawn either K of
N without replacement (``clients_per_round``, "fixed-size": client-level ledgers then claim
no amplification, the server knows who took part) or each independently with probability q
(``client_fraction``, "poisson": amplified by q). Defenses with a client-level DP ledger
(``Defense.fixed_denominator``) aggregate as DP-FedAvg (McMahan et al. 2018, Alg. 1):
weights min(1, n_c / weight_cap) (1 without a cap), the sum divided by a FIXED denominator
(``expected_weight``, default q N or K), never by the realised total weight; the others use
FedAvg's weighted mean over the realised participants (sound for instance-level ledgers:
who takes part does not depend on the data, and client sizes are treated as public, as
q = B/n_c already does; for client-level Laplace defenses under the relation they state,
zero-out / replace-one). Each local iteration includes every
example independently with probability B/n_c ("poisson", accounted with q = B/n_c; the
default for per-example DP defenses, whose ledgers assume it) or draws a batch of
min(B, n_c) examples without replacement ("shuffle", the default otherwise; per-example
releases then accounted without amplification, replace-one, multiplier sigma/2).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from tqdm.auto import tqdm

from accounting import PrivacyLedger

from .. import data as data_mod
from .. import models as models_mod
from .._validate import Moved, legacy_call
from ..data import Dataset
from ..defenses import ClientContext, Defense, RoundContext
from ..defenses.base import (
    AllocationLedger,
    FixedSizeBatchLedger,
    LedgerView,
    allocation_steps,
    default_batch_sampling,
)
from ..grads import LocalBatch, NonFiniteGradientError, cross_entropy, finite, flush_denormals
from ..optim import make_optimizer
from .config import FIELDS, FLConfig, resolve_defense
from .observe import Recorder, Tap
from .run import Run, worst_epsilon

__all__ = ["simulate"]


def _fold_config(config: FLConfig | None, old: dict[str, Any]) -> FLConfig:
    return (config or FLConfig()).replace(**old)


_SHORT = ("clients", "rounds", "taps", "seed", "progress")
#: simulate()'s keywords before the settings became :class:`FLConfig` (still accepted)
_MOVED = Moved(names=tuple(n for n in FIELDS if n not in _SHORT), fold=_fold_config,
               how="FLConfig.make", along=_SHORT)


@legacy_call("dataset", "defense", config=_MOVED)
def simulate(
    model: nn.Module | None = None,
    *,
    dataset: str | Dataset = "digits",
    defense: Defense | str = "none",
    config: FLConfig | None = None,
    clients: int | None = None,
    rounds: int | None = None,
    taps: Sequence[Tap] | None = None,
    seed: int | None = None,
    progress: bool | None = None,
) -> Run:
    """Train a federated model under a defense; return accuracy, ledgers and tapped views.

    ``simulate(None, dataset="digits", defense="fed-cdp", config=FLConfig.make(rounds=20,
    batch_size=8))``; the settings most runs change are keywords of their own and replace
    the config's (``simulate(defense="fed-cdp", rounds=20, seed=1)``). Every argument after
    ``model`` is keyword-only (``dataset`` and ``defense`` given by position, the old form,
    still work and warn; so do the settings of :class:`FLConfig` given as keywords of
    ``simulate``, e.g. ``batch_size=8``, folded into ``config``).

    Args:
        model: any nn.Module mapping the dataset's inputs to class logits; default
            ``leakaudit.models.default_for(dataset)``. It is copied, never mutated.
        dataset: a name for :func:`leakaudit.data.load` or a ``Dataset``.
        defense: a :class:`Defense` or a registered name (:func:`leakaudit.defenses.get`).
        config: the federated run (:class:`FLConfig`: clients N, K or q, the DP-FedAvg
            denominator and weight cap, rounds T, L local steps of batch size B, lr,
            optimizer, partition, validation share, batch sampling, evaluation, eps
            tracking); default ``FLConfig()``.
        clients, rounds, taps, seed, progress: replace the config's N, T, leak-point taps
            (:class:`Tap`), seed and progress bar when given (None: the config's; the
            default config: 10 clients, 10 rounds, no taps, seed 0, a progress bar).
    """
    if config is not None and not isinstance(config, FLConfig):
        raise ValueError(f"config must be an FLConfig (FLConfig.make(...)), got {config!r}")
    given = {k: v for k, v in dict(clients=clients, rounds=rounds, taps=taps, seed=seed,
                                   progress=progress).items() if v is not None}
    cfg = (config or FLConfig()).replace(**given) if given or config is None else config
    if not isinstance(defense, (str, Defense)):
        raise ValueError(f"defense must be a name or a Defense, got {defense!r}")
    the_defense = resolve_defense(defense)
    check_denominator(the_defense, cfg)
    if cfg.batch_sampling is None:
        cfg = cfg.replace(batch_sampling=default_batch_sampling(the_defense))
    ds = data_mod.resolve(dataset, seed=cfg.seed)
    net = models_mod.resolve(model, ds, seed=cfg.seed)
    if net is model:
        net = copy.deepcopy(model)
    _check_model(net, ds)
    with flush_denormals():
        return Simulation(net, ds, the_defense, cfg).run()


def _check_model(model: nn.Module, ds: Dataset) -> None:
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


def evaluate(model: nn.Module, params: dict, buffers: dict, x: torch.Tensor,
             y: torch.Tensor, chunk: int = 1024) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the model at ``params`` on (x, y)."""
    if x.shape[0] == 0:
        return math.nan, math.nan
    correct, total_loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], chunk):
            out = functional_call(model, (params, buffers), (x[i:i + chunk],))
            yb = y[i:i + chunk]
            total_loss += float(cross_entropy(out, yb, reduction="sum"))
            correct += int((out.argmax(dim=1) == yb).sum())
    return correct / x.shape[0], total_loss / x.shape[0]


def split(ds: Dataset, cfg: FLConfig, rng: np.random.Generator
          ) -> tuple[np.ndarray, list[np.ndarray]]:
    """The server's validation indices and each client's training indices."""
    n_train = ds.x_train.shape[0]
    perm = rng.permutation(n_train)
    n_val = int(round(cfg.val_fraction * n_train))
    val_idx, pool = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    if isinstance(cfg.partition, str):
        local = data_mod.partition(ds.y_train[pool].numpy(), cfg.clients, cfg.partition,
                                   rng=rng, **dict(cfg.partition_kwargs))
        parts = [pool[p] for p in local]
    else:
        parts = [np.asarray(p, dtype=np.int64) for p in cfg.partition]
        flat = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= n_train):
            raise ValueError("partition indices are out of range of the training set")
    for c, p in enumerate(parts):
        if len(p) == 0:
            raise ValueError(f"client {c} has no data (partition gives it no example)")
    return val_idx, parts


def check_denominator(defense: Defense, cfg: FLConfig) -> None:
    """Client-level DP aggregation (``fixed_denominator``) under Poisson client sampling
    divides by a public constant D (McMahan et al. 2018, Alg. 1: the expected total weight
    qW, fixed in advance): ``expected_weight`` must be given. The default q N would follow
    the population (one more client changes the noise scale of every round, which is itself
    a release the accounting does not count: measured eps >= 4.43 against a sound 3.53, N 6
    -> 7). Fixed-size sampling divides by K, a count the caller chose."""
    if (defense.fixed_denominator and cfg.client_sampling == "poisson"
            and cfg.expected_weight is None):
        q = float(cfg.client_fraction or 0.0)
        raise ValueError(
            f"expected_weight is required: {defense.name} aggregates at client level "
            f"(DP-FedAvg) with Poisson client sampling (client_fraction={q:g}) and divides "
            f"by a fixed public denominator D; q N = {q * cfg.clients:g} would change with "
            f"the population (one more client changes the noise scale, itself a release). "
            f"Pass expected_weight=D, a constant published in advance (e.g. q times the "
            f"population size you announce)")


def sound_relation(defense: Defense, cfg: FLConfig | str) -> str:
    """The neighbouring relation the sound ledgers state: the defense's own, except that a
    client-level DP-FedAvg release under fixed-size client sampling is accounted under
    replace-one (the server knows the K who took part: no amplification, sensitivity 2C).
    ``cfg``: the run's settings, or just its client sampling ("fixed-size" or "poisson")."""
    sampling = cfg if isinstance(cfg, str) else cfg.client_sampling
    if (defense.relation == "add-remove" and defense.level == "client"
            and defense.fixed_denominator and sampling == "fixed-size"):
        return "replace-one"
    return defense.relation


class Simulation:
    """The state of one run and its steps: sample, train each client, aggregate, evaluate."""

    def __init__(self, model: nn.Module, ds: Dataset, defense: Defense, cfg: FLConfig) -> None:
        if cfg.batch_sampling is None:  # the defense's default
            cfg = cfg.replace(batch_sampling=default_batch_sampling(defense))
        self.model, self.ds, self.defense, self.cfg = model, ds, defense, cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.noise = torch.Generator().manual_seed(cfg.seed + 1)
        self.val_idx, self.parts = split(ds, cfg, self.rng)
        self.params = {n: p.detach().clone() for n, p in model.named_parameters()
                       if p.requires_grad}
        self.buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        self.names = list(self.params)
        self.sizes = tuple(len(p) for p in self.parts)
        self.claimed = [PrivacyLedger(orders=defense.orders) for _ in range(cfg.clients)]
        self.sound = [PrivacyLedger(relation=sound_relation(defense, cfg), orders=defense.orders)
                      for _ in range(cfg.clients)]
        self.optimizer = defense.optimizer or cfg.optimizer
        self.per_example = "example" in defense.sites
        self.recorder = Recorder(cfg.taps, defense.name, optimizer=self.optimizer)
        self.history: dict[str, list] = {k: [] for k in (
            "accuracy", "loss", "val_loss", "uploads", "eval_rounds", "eps_history")}

    def run(self) -> Run:
        cfg = self.cfg
        self.defense.start(cfg.rounds)
        for r in tqdm(range(cfg.rounds), disable=not cfg.progress,
                      desc=f"FL {self.defense.name}"):
            participants = self.sample_clients()
            round_ctx = RoundContext(
                round=r, rounds=cfg.rounds, clients=cfg.clients,
                clients_per_round=cfg.clients_per_round, local_steps=cfg.local_steps,
                batch_size=cfg.batch_size, client_sizes=self.sizes, participants=participants,
                claimed=self.claimed, sound=self.sound, client_fraction=cfg.client_fraction,
                denominator=cfg.denominator)
            self.round(r, participants, round_ctx)
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if n in self.params:
                    p.copy_(self.params[n])
        return self.result()

    def sample_clients(self) -> tuple[int, ...]:
        """This round's participants: Poisson (each with probability q) or K of N."""
        cfg = self.cfg
        if cfg.client_fraction is not None:
            chosen = np.flatnonzero(self.rng.random(cfg.clients) < cfg.client_fraction)
            return tuple(int(c) for c in chosen)
        return tuple(int(c) for c in self.rng.choice(cfg.clients, size=cfg.clients_per_round,
                                                     replace=False))

    def weight(self, c: int) -> float:
        """Client ``c``'s aggregation weight: capped (<= 1) for client-level DP aggregation,
        its data size for FedAvg's weighted mean, 1 for an unweighted mean."""
        n_c = len(self.parts[c])
        if self.defense.fixed_denominator:
            cap = self.cfg.weight_cap
            return 1.0 if cap is None else min(1.0, n_c / cap)
        return float(n_c) if self.defense.weighted_aggregation else 1.0

    def round(self, r: int, participants: tuple[int, ...], round_ctx: RoundContext) -> None:
        """Train the participants that upload, aggregate their updates, evaluate."""
        updates, weights, uploaded = [], [], []
        for pos, c in enumerate(participants):
            if not self.defense.uploads(c, round_ctx):
                continue
            uploaded.append(c)
            updates.append(self.client(r, pos, c, round_ctx))
            weights.append(self.weight(c))
        self.history["uploads"].append(tuple(uploaded))
        self.aggregate(updates, weights, round_ctx)
        self.defense.claimed_round(round_ctx)
        _, vloss = evaluate(self.model, self.params, self.buffers,
                            self.ds.x_train[self.val_idx], self.ds.y_train[self.val_idx])
        self.history["val_loss"].append(vloss)
        self.defense.end_round(r, vloss)
        if (r + 1) % self.cfg.eval_every == 0 or r == self.cfg.rounds - 1:
            self.evaluate_test(r)

    def client(self, r: int, pos: int, c: int, round_ctx: RoundContext) -> list[torch.Tensor]:
        """One client's local iterations and the update that enters aggregation."""
        cfg, rec = self.cfg, self.recorder
        n_c = len(self.parts[c])
        local = {n: v.clone() for n, v in self.params.items()}
        opt = make_optimizer(self.optimizer, float(cfg.lr))
        used: list[np.ndarray] = []
        sound = self._sound_view(c)
        ctx = ClientContext(round=r, client=c, local_step=0, n_examples=n_c,
                            batch_size=self._expected_batch(n_c), lr=float(cfg.lr),
                            generator=self.noise, round_ctx=round_ctx,
                            claimed=self.claimed[c], sound=sound)
        draw = self.sampler(r, c, used)
        for step in range(cfg.local_steps):
            ctx.local_step = step
            batch = draw()
            if batch.size == 0 and not self.per_example:  # empty Poisson batch, no noise
                continue
            before = local
            local, g = self.defense.local_step(local, batch, opt, ctx)
            if not finite(g):
                raise NonFiniteGradientError(
                    f"NaN/inf in the gradient of client {c} in round {r}, local step {step}")
            if rec.wants(2, r, pos, step):
                rec.batch_gradient(r, c, step, g, before, cfg.lr, batch.x, batch.y)
        if isinstance(sound, AllocationLedger):
            sound.flush(draws=len(used))
        update = [local[n] - self.params[n] for n in self.names]
        update = self.defense.privatize_update(update, ctx)
        seen = np.unique(np.concatenate(used)) if used else np.empty(0, dtype=np.int64)
        truth = (self.ds.x_train[seen], self.ds.y_train[seen])
        if rec.wants(1, r, pos):
            rec.update(1, r, c, update, self.params, cfg.lr, cfg.local_steps, cfg.batch_size,
                       *truth)
        update = self.defense.sanitize_update(update, ctx)
        if not finite(update):
            raise NonFiniteGradientError(f"NaN/inf in the update of client {c} in round {r}")
        if rec.wants(0, r, pos):
            rec.update(0, r, c, update, self.params, cfg.lr, cfg.local_steps, cfg.batch_size,
                       *truth)
        return update

    def _expected_batch(self, n_c: int) -> float:
        """The batch size the defenses normalise by: min(B, n_c), or n_c / t under random
        allocation (t steps per epoch)."""
        if self.cfg.batch_sampling == "balls-in-bins":
            return n_c / allocation_steps(n_c, self.cfg.batch_size)
        return min(self.cfg.batch_size, n_c)

    def _sound_view(self, c: int) -> PrivacyLedger | LedgerView:
        """Client ``c``'s sound ledger; with fixed-size batches or random allocation, the view
        that accounts them soundly (the defenses' steps assume Poisson batches)."""
        if self.cfg.batch_sampling == "shuffle":
            n_c = len(self.parts[c])
            return FixedSizeBatchLedger(self.sound[c], min(self.cfg.batch_size, n_c), n_c)
        if self.cfg.batch_sampling == "balls-in-bins":
            n_c = len(self.parts[c])
            return AllocationLedger(self.sound[c], allocation_steps(n_c, self.cfg.batch_size))
        return self.sound[c]

    def sampler(self, r: int, c: int, used: list[np.ndarray]):
        """The function that draws client ``c``'s next local batch (and records its indices
        in ``used``)."""
        idx_all, cfg, ds = self.parts[c], self.cfg, self.ds
        n_c = len(idx_all)
        t = allocation_steps(n_c, cfg.batch_size)
        bins: list[np.ndarray] = []     # this epoch's step of each example (random allocation)
        drawn = [0]

        def draw() -> LocalBatch:
            if cfg.batch_sampling == "balls-in-bins":
                if drawn[0] % t == 0:
                    bins[:] = [self.rng.integers(t, size=n_c)]
                bidx = idx_all[bins[0] == drawn[0] % t]
                drawn[0] += 1
            elif cfg.batch_sampling == "shuffle":
                bidx = idx_all[self.rng.choice(n_c, size=min(cfg.batch_size, n_c),
                                               replace=False)]
            else:
                bidx = idx_all[self.rng.random(n_c) < min(1.0, cfg.batch_size / n_c)]
            used.append(bidx)
            return LocalBatch(self.model, self.buffers, ds.x_train[bidx], ds.y_train[bidx],
                              num_classes=ds.num_classes, draw=draw,
                              where=f"client {c} in round {r}")

        return draw

    def aggregate(self, updates: list[list[torch.Tensor]], weights: list[float],
                  round_ctx: RoundContext) -> None:
        """Client-level DP aggregation (``fixed_denominator``): the defense's
        ``sanitize_sum`` of sum_k w_k u_k, divided by the fixed denominator D, even in a round
        without uploads. Otherwise FedAvg: the weighted mean of the updates (no upload: the
        model stays)."""
        if self.defense.fixed_denominator:
            total = [torch.zeros_like(self.params[n]) for n in self.names]
            for w, u in zip(weights, updates):
                total = [t + w * x for t, x in zip(total, u)]
            total = self.defense.sanitize_sum(total, len(updates), round_ctx, self.noise)
            d = self.cfg.denominator
            for i, n in enumerate(self.names):
                self.params[n] = self.params[n] + total[i] / d
            return
        total = sum(weights)
        if not updates:
            return
        for i, n in enumerate(self.names):
            self.params[n] = self.params[n] + sum(w / total * u[i]
                                                  for w, u in zip(weights, updates))

    def evaluate_test(self, r: int) -> None:
        acc, loss = evaluate(self.model, self.params, self.buffers, self.ds.x_test,
                             self.ds.y_test)
        h = self.history
        h["accuracy"].append(acc)
        h["loss"].append(loss)
        h["eval_rounds"].append(r)
        if self.cfg.track_epsilon is not None:
            h["eps_history"].append((r, worst_epsilon(self.claimed, self.cfg.track_epsilon),
                                     worst_epsilon(self.sound, self.cfg.track_epsilon)))

    def result(self) -> Run:
        cfg, h = self.cfg, self.history
        settings = dict(clients=cfg.clients, clients_per_round=cfg.clients_per_round,
                        client_fraction=cfg.client_fraction,
                        client_sampling=cfg.client_sampling,
                        relation=self.defense.relation,
                        denominator=cfg.denominator if self.defense.fixed_denominator
                        else None,
                        rounds=cfg.rounds, local_steps=cfg.local_steps,
                        batch_size=cfg.batch_size, lr=cfg.lr, optimizer=self.optimizer,
                        partition=cfg.partition if isinstance(cfg.partition, str)
                        else "explicit", seed=cfg.seed, val_fraction=cfg.val_fraction,
                        batch_sampling=cfg.batch_sampling, client_sizes=list(self.sizes),
                        dataset=self.ds.name, defense=self.defense.describe())
        return Run(model=self.model, defense=self.defense, accuracy=h["accuracy"],
                   loss=h["loss"], val_loss=h["val_loss"], claimed=self.claimed,
                   sound=self.sound, observations=self.recorder.observations,
                   settings=settings, uploads=h["uploads"], eval_rounds=h["eval_rounds"],
                   eps_history=h["eps_history"], truths=self.recorder.truths)
