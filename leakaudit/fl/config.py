"""The settings of one federated run, checked in one place before any work starts."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .. import data as data_mod
from .. import defenses as defenses_mod
from .._validate import (
    check_fraction,
    check_int,
    check_keys,
    check_number,
    check_probability,
    check_selection,
)
from ..defenses import Defense
from ..defenses.base import client_rate_of, client_sampling_of
from ..optim import OPTIMIZERS
from .observe import Tap

__all__ = ["FLConfig", "BATCH_SAMPLING", "CLIENT_SAMPLING", "FIELDS", "resolve_defense",
           "resolve_defenses"]

#: how a local batch is drawn: fixed size min(B, n_c) without replacement, each example
#: independently with probability B/n_c, or each example dealt into one of the L local steps
#: uniformly at random (random allocation, "balls in bins": every example in exactly one
#: step per round)
BATCH_SAMPLING = ("shuffle", "poisson", "balls-in-bins")


#: how the clients of a round are drawn: K of N without replacement ("fixed-size"; K = N is
#: every client) or each client independently with probability q ("poisson")
CLIENT_SAMPLING = ("fixed-size", "poisson")


def clients_per_round_count(clients_per_round: object, clients: int) -> int:
    """K as a count in [1, N] (None: every client). A float is refused: a rate is
    ``client_fraction`` (Poisson sampling), never a fraction of N turned into a count."""
    if clients_per_round is None:
        return clients
    if isinstance(clients_per_round, (float, np.floating)):
        raise ValueError(f"clients_per_round must be an int (a count K), got the float "
                         f"{clients_per_round!r}; for Poisson client sampling with rate q "
                         f"pass client_fraction=q instead (clients_per_round=1.0 used to mean "
                         f"every client: omit it or pass clients_per_round=clients)")
    if isinstance(clients_per_round, bool) or not isinstance(clients_per_round,
                                                               (int, np.integer)):
        raise ValueError(f"clients_per_round must be an int (a count K), "
                         f"got {clients_per_round!r}")
    k = int(clients_per_round)
    if k < 1 or k > clients:
        raise ValueError(f"clients_per_round must be between 1 and clients={clients}, got {k}")
    return k


def check_client_fraction(client_fraction: object) -> float:
    """q of Poisson client sampling, in (0, 1]."""
    if isinstance(client_fraction, bool) or not isinstance(
            client_fraction, (int, float, np.integer, np.floating)) \
            or not 0.0 < float(client_fraction) <= 1.0:
        raise ValueError(f"client_fraction must be a rate q in (0, 1] (Poisson client "
                         f"sampling), got {client_fraction!r}")
    return float(client_fraction)


@dataclass(frozen=True)
class FLConfig:
    """Every setting of :func:`leakaudit.fl.simulate` but the model, data and defense.

    Build it with :meth:`make`, which checks every argument (ValueError naming it).
    ``clients_per_round`` is K as a count (fixed-size client sampling); with
    ``client_fraction`` = q set, each client takes part independently with probability q
    (Poisson client sampling) and ``clients_per_round`` is unused (its expected value
    round(q N) is kept for display only).
    """

    clients: int = 10
    clients_per_round: int = 10
    client_fraction: float | None = None
    #: the fixed denominator of client-level DP aggregation (McMahan et al. 2018, the
    #: expected total weight qW): a public constant of the algorithm, default K; required
    #: with ``client_fraction`` by the client-level DP defenses (simulate's
    #: ``check_denominator``: q N would follow the population)
    expected_weight: float | None = None
    #: client-level DP aggregation weights min(1, n_c / weight_cap) (None: every weight 1)
    weight_cap: float | None = None
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
    #: None: the defense's default (:func:`leakaudit.defenses.base.default_batch_sampling`),
    #: resolved by the simulator
    batch_sampling: str | None = None
    eval_every: int = 1
    track_epsilon: float | None = None

    @property
    def client_sampling(self) -> str:
        """"poisson" (rate ``client_fraction``) or "fixed-size" (K = ``clients_per_round``)."""
        return client_sampling_of(self.client_fraction)

    @property
    def client_rate(self) -> float:
        """q of client sampling: the Poisson rate, or K/N for fixed-size sampling."""
        return client_rate_of(self.client_fraction, self.clients_per_round, self.clients)

    @property
    def denominator(self) -> float:
        """The fixed denominator of client-level DP aggregation: ``expected_weight``, else
        the expected number of participants (K; q N, which the client-level DP defenses
        refuse: :func:`leakaudit.fl.simulate.check_denominator`), every weight at most 1."""
        if self.expected_weight is not None:
            return self.expected_weight
        if self.client_fraction is not None:
            return self.client_fraction * self.clients
        return float(self.clients_per_round)

    @classmethod
    def make(cls, *, clients: int = 10, clients_per_round: int | None = None,
             client_fraction: float | None = None, expected_weight: float | None = None,
             weight_cap: float | None = None,
             rounds: int = 10, local_steps: int = 1, batch_size: int = 32, lr: float = 0.1,
             optimizer: str = "sgd", partition: str | Sequence[Sequence[int]] = "iid",
             partition_kwargs: dict[str, Any] | None = None, taps: Sequence[Tap] = (),
             seed: int = 0, progress: bool = True, val_fraction: float = 0.1,
             batch_sampling: str | None = None, eval_every: int = 1,
             track_epsilon: float | None = None) -> FLConfig:
        """Check every argument, then build the config."""
        clients = check_int("clients", clients, 1)
        rounds = check_int("rounds", rounds, 1)
        local_steps = check_int("local_steps", local_steps, 1)
        batch_size = check_int("batch_size", batch_size, 1)
        eval_every = check_int("eval_every", eval_every, 1)
        seed = check_int("seed", seed, 0)
        k = clients_per_round_count(clients_per_round, clients)
        if client_fraction is not None:
            if clients_per_round is not None:
                raise ValueError("give clients_per_round (a count K, fixed-size sampling) or "
                                 "client_fraction (a rate q, Poisson sampling), not both")
            client_fraction = check_client_fraction(client_fraction)
            k = max(1, int(round(client_fraction * clients)))
        if expected_weight is not None:
            expected_weight = check_number("expected_weight", expected_weight, minimum=0.0,
                                           open_min=True)
        if weight_cap is not None:
            weight_cap = check_number("weight_cap", weight_cap, minimum=0.0, open_min=True)
        lr = check_number("lr", lr, minimum=0.0, open_min=True)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if batch_sampling is not None and batch_sampling not in BATCH_SAMPLING:
            raise ValueError(f"batch_sampling must be one of {BATCH_SAMPLING} or None (the "
                             f"defense's default), got {batch_sampling!r}")
        if track_epsilon is not None:
            check_probability("track_epsilon", track_epsilon,
                              what="a delta in (0, 1) or None")
        check_fraction("val_fraction", val_fraction)
        taps = _checked_taps(taps, rounds, local_steps,
                             clients if client_fraction is not None else k)
        partition_kwargs = check_keys("partition_kwargs", partition_kwargs, _PARTITION_OPTIONS,
                                      what="option")
        if not isinstance(partition, str):
            partition = tuple(tuple(int(i) for i in p) for p in partition)
            if len(partition) != clients:
                raise ValueError(f"partition has {len(partition)} index lists for "
                                 f"clients={clients}")
        return cls(clients=clients, clients_per_round=k, client_fraction=client_fraction,
                   expected_weight=expected_weight, weight_cap=weight_cap, rounds=rounds,
                   local_steps=local_steps, batch_size=batch_size, lr=lr,
                   optimizer=optimizer, partition=partition,
                   partition_kwargs=tuple(sorted((partition_kwargs or {}).items())),
                   taps=taps, seed=seed, progress=bool(progress),
                   val_fraction=float(val_fraction), batch_sampling=batch_sampling,
                   eval_every=eval_every, track_epsilon=track_epsilon)


    def replace(self, **changes: Any) -> FLConfig:
        """A copy with ``changes``, every setting checked again (:meth:`make`). K = N
        (every client) stays every client when ``clients`` changes; giving one of
        ``clients_per_round`` and ``client_fraction`` drops the other."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise ValueError(f"{unknown[0]} is not a setting of FLConfig; expected one of "
                             f"{list(FIELDS)}")
        now: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        now["partition_kwargs"] = dict(self.partition_kwargs)
        if self.client_fraction is not None or self.clients_per_round == self.clients:
            now["clients_per_round"] = None  # Poisson sampling, or every client
        if "client_fraction" in changes and "clients_per_round" not in changes:
            now["clients_per_round"] = None
        if "clients_per_round" in changes and "client_fraction" not in changes:
            now["client_fraction"] = None
        return FLConfig.make(**{**now, **changes})


#: the options of :func:`leakaudit.data.partition` (``partition_kwargs``)
_PARTITION_OPTIONS = tuple(
    name for name, p in inspect.signature(data_mod.partition).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "rng")

#: the settings of :class:`FLConfig`, in order
FIELDS = tuple(f.name for f in fields(FLConfig))


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




def resolve_defense(defense: Defense | str) -> Defense:
    """The one place a defense argument becomes a :class:`Defense` (for the simulator, the
    audit and the CLI): a Defense as it is, a registered name with the source papers'
    parameters (``defenses.PAPER_PARAMS``)."""
    return resolve_defenses([defense])[0]


def resolve_defenses(defenses: Sequence[Defense | str],
                     params: Mapping[str, Mapping[str, Any]] | None = None, *,
                     base: Mapping[str, Mapping[str, Any]] | None = None) -> list[Defense]:
    """Defense arguments as Defense objects: names (the papers' parameters, overridden per
    name by ``base``, a caller's own table such as an audit profile's
    ``defense_params``, then by ``params``: name -> keyword arguments) or Defense objects.
    ``base`` may name defenses that are not chosen; ``params`` may not. Refused before any
    work (ValueError naming the argument): an empty selection, a name given twice, a
    ``params`` entry for a name that is not among ``defenses`` (a misspelled name would
    otherwise audit the defaults), bad parameters."""
    if isinstance(defenses, (str, Defense)):
        defenses = [defenses]
    chosen = check_selection("defenses", defenses)
    names = [d for d in chosen if isinstance(d, str)]
    params = check_keys("defense_params", params, names, what="defense")
    out = []
    for d in chosen:
        if isinstance(d, Defense):
            out.append(d)
            continue
        if not isinstance(d, str):
            raise ValueError(f"defenses must be names or Defense objects, got {d!r}")
        if d not in defenses_mod.available():
            raise ValueError(f"defenses: unknown defense {d!r}; available: "
                             f"{', '.join(defenses_mod.available())}")
        given = params.get(d) or {}
        if not isinstance(given, Mapping):
            raise ValueError(f"defense_params: {d}: must map parameter names to values, got "
                             f"{given!r}")
        given = {**((base or {}).get(d) or {}), **given}
        try:
            out.append(defenses_mod.get(d, **given))
        except ValueError as exc:
            raise ValueError(f"defense_params: {d}: {exc}" if given
                             else f"defenses: {exc}") from None
    labels = [d.describe() for d in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"defenses must be distinct, got {labels}")
    return out
