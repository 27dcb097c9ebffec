"""The defense interface: where a defense acts, what it does there, what it releases.

A defense is one object with a few hooks the simulator calls (data flows one way):

* ``privatize_batch`` (site "example"): per-example gradients of one local iteration in,
  the batch gradient the client applies out (clip, noise). Only called when
  ``"example" in sites``; otherwise the simulator uses the plain mean-loss gradient.
* ``privatize_update`` (site "client"): the client's local update (w_local - w_global) in,
  what leaves the client out (clip, noise, pruning).
* ``sanitize_update`` (site "server"): one client's update as the server receives it, in,
  what enters aggregation out.
* ``end_round``: the server's validation loss after each round (event-driven decays).
* ``local_step``: one whole local iteration (gradient(s), privatisation, optimizer step). The
  default calls ``privatize_batch`` (or the plain mean gradient) and the optimizer; defenses
  that evaluate several gradients per iteration (adadp) or own their optimizer override it.
* ``uploads``: whether a sampled client trains and uploads this round (a client that has
  spent its budget stops, adap-dp-fl).

Privacy: every data-dependent release is recorded twice, in the per-client ledgers of the
:class:`ClientContext` (``claimed``: what the defense's paper would count; ``sound``: every
release at its true sensitivity). ``claimed_round`` is called once per round for the paper's
own per-round convention. ``claimed_vs_sound`` says in one line why the two differ.

What the empirical privacy audit (:mod:`leakaudit.empirical`) needs, declared by the defense
itself (the audit knows no defense by name):

* :meth:`audit_bound`: the norm bound its canaries are placed against (the clip C);
* :meth:`audit_batched`: whether the noise enters additively and is drawn only through
  :mod:`leakaudit.defenses.ops` with no data-dependent random choice, so many trials of a
  release can share one call (every noise draw gets a leading trial dimension inside
  ``ops.trials(n)``); ``None`` (not declared) runs one trial per call and says so;
* :meth:`audit_setup`: bring this object to the state of a first round;
* :meth:`audit_side_ledgers`: ledgers of a release under stated extra assumptions (e.g.
  "if_public"), reported next to the sound one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from accounting import PrivacyLedger
from accounting.fixed_size import SampledWithoutReplacement

if TYPE_CHECKING:
    from ..grads import LocalBatch
    from ..optim import SGD, Adam

__all__ = ["Defense", "AUDIT_HOOKS", "untrusted_hook", "ClientContext", "RoundContext",
           "SITES", "FixedSizeBatchLedger", "default_batch_sampling", "client_level_step",
           "RELATIONS", "AllocationLedger", "allocation_steps", "Forwarding",
           "DefenseWrapper", "LedgerView", "RECORDING"]

#: neighbouring relations a sound ledger can state (as ``accounting.relations``)
RELATIONS = ("add-remove", "replace-one", "zero-out")

SITES = ("example", "client", "server")


class Forwarding:
    """Everything its class does not define is ``inner``'s: attributes, methods and
    properties, looked up on ``inner`` at each access.

    A subclass overrides what it changes and nothing else. Names are resolved at access
    time, so a hook that the wrapped interface or ``inner``'s class gains later reaches
    ``inner`` through every wrapper (the interface's own defaults never shadow ``inner``:
    only the classes above :class:`Forwarding` in the wrapper's MRO count as its own)."""

    inner: object

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattribute__(self, name: str) -> object:
        if name.startswith("__") or name in own_names(type(self)):
            return object.__getattribute__(self, name)
        values = object.__getattribute__(self, "__dict__")
        if name in values:
            return values[name]
        return getattr(values["inner"], name)


_OWN: dict[type, frozenset[str]] = {}


def own_names(cls: type) -> frozenset[str]:
    """The names a :class:`Forwarding` subclass defines itself (its classes above
    :class:`Forwarding` in the MRO); every other name is forwarded."""
    names = _OWN.get(cls)
    if names is None:
        mro = cls.__mro__
        mine = mro[:mro.index(Forwarding)] if Forwarding in mro else ()
        names = _OWN[cls] = frozenset(n for k in mine for n in vars(k))
    return names


@dataclass
class RoundContext:
    """What a defense may know about a round (no data)."""

    round: int
    rounds: int
    clients: int
    clients_per_round: int
    local_steps: int
    batch_size: int
    client_sizes: tuple[int, ...]
    participants: tuple[int, ...]
    claimed: list[PrivacyLedger] = field(repr=False, default_factory=list)
    sound: list[PrivacyLedger] = field(repr=False, default_factory=list)
    #: q of Poisson client sampling; None: K = ``clients_per_round`` of N drawn without
    #: replacement (fixed-size)
    client_fraction: float | None = None
    #: the fixed denominator D of client-level DP aggregation (None: q N or K)
    denominator: float | None = None

    @property
    def expected_weight(self) -> float:
        """D, the fixed denominator: the expected number of participants unless set."""
        if self.denominator is not None:
            return self.denominator
        return self.client_rate * self.clients

    @property
    def total_examples(self) -> int:
        return sum(self.client_sizes)

    @property
    def client_sampling(self) -> str:
        """"poisson" (each client with probability ``client_fraction``) or "fixed-size"."""
        return client_sampling_of(self.client_fraction)

    @property
    def client_rate(self) -> float:
        """q of client sampling: the Poisson rate, or K/N (the claimed conventions read it)."""
        return client_rate_of(self.client_fraction, self.clients_per_round, self.clients)

    @property
    def reporting(self) -> int:
        """m, the number of clients sampled this round (known to the server and told to
        the clients before they send: a count of the sampling, not of the data)."""
        return len(self.participants)


def client_sampling_of(client_fraction: float | None) -> str:
    """"poisson" where a client fraction q is given, else "fixed-size" (K of N)."""
    return "poisson" if client_fraction is not None else "fixed-size"


def client_rate_of(client_fraction: float | None, clients_per_round: int,
                   clients: int) -> float:
    """q of client sampling: the Poisson rate, or K/N for fixed-size sampling."""
    if client_fraction is not None:
        return client_fraction
    return clients_per_round / clients


def _sigma_argument(sigma: float | None, noise_multiplier: float | None) -> float:
    """sigma, or Opacus's name for it; a ValueError where neither is given."""
    sigma = noise_multiplier if sigma is None else sigma
    if sigma is None:
        raise ValueError("sigma (noise multiplier >= 0) is required")
    return sigma


def client_level_step(ledger: PrivacyLedger, ctx: RoundContext, sigma: float,
                      note: str) -> None:
    """One round of a client-level Gaussian release of the aggregate, accounted soundly for
    the client sampling that runs (McMahan et al. 2018, Alg. 1 and Thm 1).

    Poisson client sampling with rate q and a fixed denominator: the sum of the clipped
    updates has sensitivity C under add/remove of a client; a Poisson-sampled Gaussian step
    (q, sigma). Fixed-size sampling (K of N): the server knows who took part, so no
    amplification is claimed; adding a client to the population displaces at most one
    sampled client (couple the K-subsets with and without it), i.e. replace-one, L2
    sensitivity 2C: a Gaussian step with multiplier sigma/2 and q = 1.
    """
    if ctx.client_sampling == "poisson":
        ledger.step(q=ctx.client_rate, sigma=sigma,
                    note=f"{note} [Poisson clients q, fixed public denominator "
                         f"D={ctx.expected_weight:g}]")
    else:
        # the ledger charges a fixed-size draw sensitivity 2C (multiplier sigma/2, q = 1)
        ledger.step(q=1.0, sigma=sigma, sampling="fixed-size",
                    note=f"{note} [fixed-size clients: a client displaces one, 2C, q=1]")


@dataclass
class ClientContext:
    """What a defense may know while it processes one client (no raw data)."""

    round: int
    client: int
    local_step: int
    n_examples: int
    #: the EXPECTED batch size, what a noisy sum is divided by (min(B, n_c); n_c / t under
    #: random allocation, possibly fractional), never the realised one
    batch_size: float
    lr: float
    generator: torch.Generator = field(repr=False)
    round_ctx: RoundContext = field(repr=False)
    claimed: PrivacyLedger = field(repr=False)
    #: the client's sound ledger, or the :class:`LedgerView` of it that accounts the batch
    #: sampling that runs (fixed-size batches, random allocation)
    sound: PrivacyLedger | LedgerView = field(repr=False)

    @property
    def batch_rate(self) -> float:
        """q of one local batch, B / n_c (fixed-size batches accounted as Poisson)."""
        return min(1.0, self.batch_size / self.n_examples)


#: the recording methods of a ledger (``accounting.PrivacyLedger``); a view states for each
#: whether it rewrites it or passes it through
RECORDING = ("step", "step_schedule", "laplace", "dp_step", "allocate", "record")


class LedgerView(Forwarding):
    """A client's sound ledger as a defense sees it under a batch sampling other than the
    Poisson one the defenses' ``step`` calls assume: the view rewrites those steps into what
    holds for the sampling that runs and forwards everything else to the ledger (``inner``).

    :attr:`passes` names the recording methods of :data:`RECORDING` the view forwards
    unchanged (their releases carry no batch-sampling amplification: Laplace and pure
    (eps, delta) releases, a random allocation, an event that states its own sampling);
    every other one it rewrites or refuses. ``step_schedule`` (a Poisson schedule) is
    refused: no defense records one per batch."""

    passes: ClassVar[tuple[str, ...]] = ("laplace", "dp_step", "allocate", "record")

    def step_schedule(self, q: float, sigmas: object, *, note: str = "",
                      sampling: str = "poisson") -> None:
        raise NotImplementedError(
            f"{type(self).__name__}: a Poisson noise schedule under {type(self).__name__}'s "
            "batch sampling is not accounted here; record each batch release with step()")


class FixedSizeBatchLedger(LedgerView):
    """A client's sound ledger as seen by a defense when local batches have a FIXED size.

    The defenses record each noisy batch release as a Poisson-sampled Gaussian step
    (q = B/n_c, add/remove adjacency). With fixed-size batches drawn without replacement (a
    fresh uniform B-subset of the client's n_c examples at every step, as the simulator
    draws them) that accounting does not hold. What holds instead:

    * replace-one ledgers: the amplification theorem of sampling without replacement
      (Wang, Balle, Kasiviswanathan 2019, Thm 9; sensitivity 2C):
      :class:`accounting.fixed_size.SampledWithoutReplacement` (B, n_c, sigma);
    * add/remove ledgers (the dataset size changes, so that theorem does not apply): the
      unamplified bound, sensitivity 2C (multiplier sigma/2) and q = 1. Valid because
      conditioned on the (data-independent) batch each release is such a Gaussian mechanism,
      and Rényi divergence is jointly quasi-convex over the mixture of batches. Loose, but
      sound.

    Poisson batches keep the amplified accounting. Every other ledger call passes through.
    """

    inner: PrivacyLedger

    def __init__(self, ledger: PrivacyLedger, batch_size: int | None = None,
                 n_examples: int | None = None) -> None:
        super().__init__(ledger)
        self.batch_size = batch_size
        self.n_examples = n_examples

    def step(self, q: float | None = None, sigma: float | None = None, count: int = 1, *,
             noise_multiplier: float | None = None, sample_rate: float | None = None,
             note: str = "") -> None:
        sigma = _sigma_argument(sigma, noise_multiplier)
        b, n = self.batch_size, self.n_examples
        if self.inner.relation == "replace-one" and b is not None and n is not None and b < n:
            self.inner.record(SampledWithoutReplacement(
                sigma=sigma, batch_size=b, dataset_size=n, count=count,
                note=f"{note} [fixed-size batch without replacement]"))
            return
        # the ledger charges a fixed-size batch sensitivity 2C (multiplier sigma/2, q = 1)
        self.inner.step(q=1.0, sigma=sigma, count=count, sampling="fixed-size",
                        note=f"{note} [fixed-size batch: sensitivity 2C, q=1]")


def allocation_steps(n_examples: int, batch_size: int) -> int:
    """t, the local steps of one epoch of random allocation: round(n_c / B), at least 1
    (expected batch n_c / t, about B)."""
    return max(1, int(round(n_examples / batch_size)))


class AllocationLedger(LedgerView):
    """A client's sound ledger as seen by a defense when its examples are dealt into the local
    steps by random allocation ("balls in bins", Feldman & Shenfeld 2025): in each epoch of
    t steps every example lands in exactly one step, uniformly at random and independently of
    the others.

    The defenses record each noisy batch release as a Poisson step; this view collects the
    releases of the client's local steps in a round and, at :meth:`flush`, records them as
    ``epochs`` epochs of random allocation, ``ledger.allocate(sigma, steps=t, selected=1,
    epochs=E)``, when every batch dealt made exactly one release, all with the same sigma.
    Any other pattern, and every release after the local steps: q = 1, no amplification.
    """

    inner: PrivacyLedger

    def __init__(self, ledger: PrivacyLedger, steps_per_epoch: int) -> None:
        super().__init__(ledger)
        self.steps_per_epoch = int(steps_per_epoch)
        self._buffer: list[tuple[float, int]] = []
        self._local = True

    def step(self, q: float | None = None, sigma: float | None = None, count: int = 1, *,
             noise_multiplier: float | None = None, sample_rate: float | None = None,
             note: str = "") -> None:
        sigma = _sigma_argument(sigma, noise_multiplier)
        if self._local:
            self._buffer.append((float(sigma), int(count)))
        else:
            self.inner.step(q=1.0, sigma=sigma, count=count,
                            note=f"{note} [random allocation, after the local steps: q=1]")

    def flush(self, draws: int) -> None:
        """Record the round's local-step releases (call once, after the local steps;
        ``draws``: the batches dealt, one per step of the allocation)."""
        buffer, self._buffer, self._local = self._buffer, [], False
        if not buffer:
            return
        sigmas = {s for s, _ in buffer}
        calls = sum(c for _, c in buffer)
        if len(sigmas) == 1 and calls == draws:
            sigma = sigmas.pop()
            epochs = -(-draws // self.steps_per_epoch)   # a partial epoch counts as a whole one
            note = f"random allocation: {draws} batches, {self.steps_per_epoch} per epoch"
            self.inner.allocate(sigma=sigma, steps=self.steps_per_epoch, selected=1,
                                epochs=epochs, note=note)
            return
        for sigma, count in buffer:
            self.inner.step(q=1.0, sigma=sigma, count=count,
                            note="random allocation [no amplification, q=1]")


def default_batch_sampling(defense: Defense) -> str:
    """"poisson" where the defense's sound ledger assumes Poisson batches (per-example DP at
    the instance level), else "shuffle" (fixed size: what the attacks' views assume)."""
    return "poisson" if defense.level == "instance" and "example" in defense.sites \
        else "shuffle"


class Defense:
    """Base class. Subclasses set ``name``, ``sites``, ``level`` and override hooks."""

    name: ClassVar[str] = ""
    #: where it acts: a subset of ("example", "client", "server")
    sites: ClassVar[frozenset[str]] = frozenset()
    #: privacy unit of its guarantee: "instance", "client" or "none" (no DP claim)
    level: ClassVar[str] = "none"
    #: FedAvg weighted by client data size (False: unweighted mean of updates)
    weighted_aggregation: ClassVar[bool] = True
    #: client-level DP aggregation (McMahan et al. 2018, Alg. 1): weights capped at 1, the
    #: sum divided by a FIXED denominator (the expected total weight), noise whose total
    #: does not depend on how many clients took part (``sanitize_sum``). The realised
    #: weighted mean of FedAvg is used otherwise.
    fixed_denominator: ClassVar[bool] = False
    #: the neighbouring relation the sound ledger states: "add-remove" (of one example for
    #: instance-level defenses, of one client for client-level ones), "zero-out" (the
    #: unit's data replaced by a zero contribution, the unit still takes part) or
    #: "replace-one"
    relation: ClassVar[str] = "add-remove"
    #: local optimizer the defense prescribes ("sgd", "adam"); None: the simulator's choice
    optimizer: ClassVar[str | None] = None
    #: Rényi orders of the per-client ledgers (None: accounting's default grid)
    orders: ClassVar[object] = None

    def local_step(self, params: dict[str, torch.Tensor], batch: LocalBatch,
                   optimizer: SGD | Adam, ctx: ClientContext
                   ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        """One local iteration: the new weights and the gradient applied (the type-2 view)."""
        if "example" in self.sites:
            g = self.privatize_batch(batch.per_example(params), ctx)
        else:
            g = batch.mean(params)
        return optimizer.step(params, g), g

    def uploads(self, client: int, ctx: RoundContext) -> bool:
        """Does sampled ``client`` train and upload in this round? (default: always)"""
        return True

    def privatize_batch(self, grads: list[torch.Tensor], ctx: ClientContext) -> list[torch.Tensor]:
        """Per-example gradients (B, *shape) per parameter -> the batch gradient to apply."""
        return [g.mean(dim=0) for g in grads]

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        """Client-side processing of the local update before it leaves the client."""
        return update

    def sanitize_update(self, update: list[torch.Tensor],
                        ctx: ClientContext) -> list[torch.Tensor]:
        """Server-side processing of one client's update before aggregation."""
        return update

    def sanitize_sum(self, total: list[torch.Tensor], uploads: int, ctx: RoundContext,
                     generator: torch.Generator) -> list[torch.Tensor]:
        """Server-side processing of the (weighted) sum of the updates of a round, before it
        is divided by the denominator; ``uploads`` updates are in it (default: unchanged)."""
        return total

    def start(self, rounds: int) -> None:
        """Called once before training with the number of rounds (schedules fix sigma_t)."""

    def claimed_round(self, ctx: RoundContext) -> None:
        """Record the paper's own accounting for this round (default: nothing)."""

    def end_round(self, round_index: int, val_loss: float) -> None:
        """Called after each round with the server's validation loss."""

    def noise_multiplier(self, round_index: int) -> float:
        """The noise multiplier this defense uses in a round (0 when it adds none)."""
        return 0.0

    @property
    def claimed_vs_sound(self) -> str:
        """One line: why claimed and sound eps differ ('' when they do not)."""
        return ""

    # ------------------------------------------------------------ the empirical audit
    #: see :meth:`audit_batched` (a class-level declaration for the common case)
    batched_trials: ClassVar[bool | None] = None

    def audit_bound(self) -> float:
        """The norm bound the audit's canaries are placed against (the clip; 1.0 if none)."""
        return 1.0

    def audit_batched(self, point: int) -> bool | None:
        """Can the release at leak ``point`` run many trials in one call? True: its noise is
        additive, drawn only through ``ops.gaussian_like`` / ``ops.laplace_like``, and no
        data-dependent choice mixes trials. None: not declared (one trial per call, with a
        warning). Default: :attr:`batched_trials`."""
        return self.batched_trials

    def audit_untrusted_hook(self) -> str | None:
        """The hook (``Class.hook``) that makes an inherited batching declaration
        untrustworthy, or None.

        A declaration (:attr:`batched_trials` or :meth:`audit_batched`) speaks for the code of
        the class that made it. A subclass that overrides a hook of the release
        (:data:`AUDIT_HOOKS`) below that class, e.g. a user's variant of a shipped defense with
        its own ``privatize_batch``, has declared nothing for its own code: the audit then
        runs it one trial per call (with a warning), never trusts the inherited True."""
        return untrusted_hook(type(self))

    def audit_setup(self, params: list[torch.Tensor], bound: float) -> None:
        """Bring this defense to the state of a first round whose global model is ``params``
        (a white-box auditor may also fix adaptive state, e.g. a clip, to ``bound``)."""
        self.start(1)

    def audit_side_ledgers(self, client: int) -> dict[str, PrivacyLedger]:
        """Ledgers of ``client``'s releases under stated extra assumptions (label: ledger)."""
        return {}

    def describe(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({params})"

    def params(self) -> dict[str, object]:
        return {}

    def __repr__(self) -> str:
        return self.describe()


class DefenseWrapper(Forwarding, Defense):
    """A defense that is ``inner`` except for the hooks its subclass overrides (the audit's
    canaries): every other attribute and hook, ``Defense``'s own and any ``inner``'s class
    adds, is ``inner``'s, looked up at each access (:class:`Forwarding`)."""

    inner: Defense

    def __init__(self, inner: Defense) -> None:
        super().__init__(inner)


#: the hooks a release runs through (an override of one below the class that declared
#: batching voids the declaration for the audit: :meth:`Defense.audit_untrusted_hook`)
AUDIT_HOOKS = ("local_step", "privatize_batch", "privatize_update", "sanitize_update",
               "sanitize_sum", "audit_setup", "start")
_DECLARATIONS = ("batched_trials", "audit_batched")


def untrusted_hook(cls: type) -> str | None:
    """``Class.hook`` for the first hook of :data:`AUDIT_HOOKS` that a class of ``cls``'s MRO
    overrides BELOW (more derived than) the nearest class declaring batching; None when the
    declaration is the class's own for every hook (or nothing is declared)."""
    mro = cls.__mro__
    declaring = next((i for i, k in enumerate(mro)
                      if any(d in vars(k) for d in _DECLARATIONS)), None)
    if declaring is None or mro[declaring] is Defense:
        return None
    for hook in AUDIT_HOOKS:
        owner = next((i for i, k in enumerate(mro) if hook in vars(k)), None)
        if owner is not None and owner < declaring:
            return f"{mro[owner].__name__}.{hook}"
    return None


def record_no_privacy(ctx: ClientContext, what: str) -> None:
    """A release without a DP guarantee: infinite eps in both ledgers, with the reason."""
    ctx.claimed.dp_step(math.inf, note=f"{what}: no DP guarantee")
    ctx.sound.dp_step(math.inf, note=f"{what}: no DP guarantee")
