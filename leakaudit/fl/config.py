"""The settings of one federated run, checked in one place before any work starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import check_fraction, check_int, check_number, check_probability
from ..optim import OPTIMIZERS
from .observe import Tap

__all__ = ["FLConfig", "BATCH_SAMPLING"]

#: how a local batch is drawn: fixed size min(B, n_c) without replacement, or each example
#: independently with probability B/n_c
BATCH_SAMPLING = ("shuffle", "poisson")


def clients_per_round_count(clients_per_round: object, clients: int) -> int:
    """K as a count: a count, or a fraction of N in (0, 1] (1.0 means every client)."""
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
    return k


@dataclass(frozen=True)
class FLConfig:
    """Every setting of :func:`leakaudit.fl.simulate` but the model, data and defense.

    Build it with :meth:`make`, which checks every argument (ValueError naming it).
    ``clients_per_round`` is K as a count.
    """

    clients: int = 10
    clients_per_round: int = 10
    rounds: int = 10
    local_steps: int = 1
    batch_size: int = 32
    lr: float = 0.1
    optimizer: str = "sgd"
    partition: str | tuple[tuple[int, ...], ...] = "iid"
    partition_kwargs: tuple[tuple[str, Any], ...] = ()
    taps: tuple[Tap, ...] = ()
    seed: int = 0
    progress: bool = True
    val_fraction: float = 0.1
    batch_sampling: str = "shuffle"
    eval_every: int = 1
    track_epsilon: float | None = None

    @classmethod
    def make(cls, *, clients: int = 10, clients_per_round: int | float = 1.0,
             rounds: int = 10, local_steps: int = 1, batch_size: int = 32, lr: float = 0.1,
             optimizer: str = "sgd", partition: str | Sequence[Sequence[int]] = "iid",
             partition_kwargs: dict[str, Any] | None = None, taps: Sequence[Tap] = (),
             seed: int = 0, progress: bool = True, val_fraction: float = 0.1,
             batch_sampling: str = "shuffle", eval_every: int = 1,
             track_epsilon: float | None = None) -> FLConfig:
        """Check every argument, then build the config."""
        clients = check_int("clients", clients, 1)
        rounds = check_int("rounds", rounds, 1)
        local_steps = check_int("local_steps", local_steps, 1)
        batch_size = check_int("batch_size", batch_size, 1)
        eval_every = check_int("eval_every", eval_every, 1)
        seed = check_int("seed", seed, 0)
        k = clients_per_round_count(clients_per_round, clients)
        lr = check_number("lr", lr, minimum=0.0, open_min=True)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if batch_sampling not in BATCH_SAMPLING:
            raise ValueError(f"batch_sampling must be 'shuffle' or 'poisson', "
                             f"got {batch_sampling!r}")
        if track_epsilon is not None:
            check_probability("track_epsilon", track_epsilon,
                              what="a delta in (0, 1) or None")
        check_fraction("val_fraction", val_fraction)
        taps = _checked_taps(taps, rounds, local_steps, k)
        if not isinstance(partition, str):
            partition = tuple(tuple(int(i) for i in p) for p in partition)
            if len(partition) != clients:
                raise ValueError(f"partition has {len(partition)} index lists for "
                                 f"clients={clients}")
        return cls(clients=clients, clients_per_round=k, rounds=rounds,
                   local_steps=local_steps, batch_size=batch_size, lr=lr,
                   optimizer=optimizer, partition=partition,
                   partition_kwargs=tuple(sorted((partition_kwargs or {}).items())),
                   taps=taps, seed=seed, progress=bool(progress),
                   val_fraction=float(val_fraction), batch_sampling=batch_sampling,
                   eval_every=eval_every, track_epsilon=track_epsilon)


def _checked_taps(taps: Sequence[Tap], rounds: int, local_steps: int,
                  k: int) -> tuple[Tap, ...]:
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
    return taps


