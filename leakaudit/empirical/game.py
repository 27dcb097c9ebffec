"""The canary distinguishing game: one release of a defense, with and without a canary.

What is audited (white box, model frozen):

* point 2: the batch gradient of ONE local step, i.e. the defense's own ``local_step`` (hence
  its ``privatize_batch``) on a batch of fixed per-example gradients;
* point 1: the client's upload after ``local_steps`` local steps on that batch, then the
  defense's ``privatize_update``;
* point 0: that upload after the server's ``sanitize_update`` (the update as it enters
  aggregation).

Neighbouring inputs are add/remove of ONE example for instance-level defenses (the canary is
one more per-example gradient in every local batch, so the sampling rate of the audited
release is q = 1; a zero gradient in its place under zero-out or replace-one,
:func:`leakaudit.neighbours.canary_out`), and add/remove of ONE client for client-level
defenses at points 1 and 0 (the canary is the client's update, against the zero update of an
absent client). The
auditor chooses the worst case it can: a background of ``background`` per-example gradients
of small norm (``background_scale`` times the clip bound C, random directions) and one of
several canaries (:func:`canaries`), each testing a part of the mechanism:

* ``dirac``: one coordinate at C in every parameter tensor (on the bound for flat, per-layer
  and L1 clipping alike);
* ``large``: 100 C in all, spread over one coordinate of every tensor (an unclipped or
  wrongly clipped tensor shows unbounded sensitivity);
* ``large@k``: 100 C in tensor k only, one canary per tensor (a clip missing on one layer).

Each trial runs the defense's own code. What the game needs from a defense it asks the
:class:`~leakaudit.defenses.Defense` protocol (never a concrete class): ``audit_bound`` (the
clip the canaries are placed against), ``audit_setup`` (a first-round state),
``audit_batched`` (noise additive and drawn through :mod:`leakaudit.defenses.ops`: the trials
of a chunk share one call, every noise draw carrying a leading trial dimension,
``ops.trials``) and ``audit_side_ledgers``. A defense that does not declare
``audit_batched``, that inherits the declaration past a hook it overrides (a user's subclass
of a shipped defense), or whose two trials in one call do not come back as two, runs once
per trial, with a warning: a user's code is never refused for the auditor's reason.
Unbatched trials all run on ONE working copy (the caller's), brought back
to a first-round state before each (state a defense wrongly keeps across releases, such as
noise drawn once and reused, then shows).

Statistics of each run (:func:`statistics`), around a reference (mean and per-coordinate
standard deviation of separate canary-out runs): the projection on the canary direction
(mean channel), the energy orthogonal to it (variance channel: normalisers, sampling), the
most extreme per-tensor standardised projection (``tensor``: a tensor without noise cannot
hide among noisy ones) and the most extreme standardised coordinate (``coordinate``: as a
Bonferroni-corrected -log10 p-value over the D coordinates looked at, monotone in max |z|).
The log-likelihood ratio of the first two is fitted on the selection split (api). Fisher's
direction in a :class:`Subspace` (per-tensor sums, per-tensor canary parts, random signed
partitions) under the noise covariance of the reference runs (``subspace``): a functional of
the release that carries no noise (correlated noise) separates the worlds there.

Worst-case datasets (:data:`SCENARIOS`): backgrounds against the canary, a single example,
an empty batch, examples at and far above the clip, each a game of its own that the
selection split chooses among like the canaries.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np
import torch
from scipy import special

from accounting import PrivacyLedger

from ..defenses import ops
from ..defenses.base import ClientContext, Defense, RoundContext, untrusted_hook
from ..grads import torch_threads
from ..neighbours import canary_out
from ..optim import make_optimizer
from .subspace import Subspace, make_subspace, subspace_weights

__all__ = ["GameSetup", "LENET_SHAPES", "POINTS", "releases_at", "adjacency", "canary_bound",
           "make_setup", "canaries", "with_canary", "Probe", "probe", "run_trials", "Trials",
           "Reference", "statistics", "vectorisable", "fit_llr", "log_likelihood_ratio",
           "LARGE", "SCENARIOS", "BACKGROUNDS", "scenario_name", "worst_background",
           "with_scenario", "Subspace", "make_subspace", "subspace_weights",
           "batches_as_declared", "NotBatched", "CALLS", "LATTICE", "lattice_offset"]

#: parameter shapes of the LeNet of the DLG papers (28x28x1 inputs, 10 classes): 13,426 values
LENET_SHAPES: tuple[tuple[int, ...], ...] = ((12, 1, 5, 5), (12,), (12, 12, 5, 5), (12,),
                                             (12, 12, 5, 5), (12,), (10, 588), (10,))
POINTS = (0, 1, 2)
#: norm of the large canaries, in units of the clip bound
LARGE = 100.0
#: norm of the lattice canary, in units of the clip bound (an irrational share of C: a
#: release on a lattice of any simple spacing moves off it by this)
LATTICE = (math.sqrt(5.0) - 1.0) / 2.0
#: the sites whose processing a release at each point has gone through
_UPSTREAM = {2: {"example"}, 1: {"example", "client"}, 0: {"example", "client", "server"}}


def releases_at(defense: Defense, point: int) -> bool:
    """Does ``defense`` release something it protects at ``point``? (no sites: raw, yes)"""
    sites = set(defense.sites)
    return not sites or bool(sites & _UPSTREAM[point])


def adjacency(defense: Defense, point: int) -> str:
    """"instance" (add/remove one example) or "client" (add/remove one client's update)."""
    if point == 2 or defense.level == "instance" or "example" in defense.sites:
        return "instance"
    return "client"


def canary_bound(defense: Defense) -> float:
    """The clip bound the canary sits on, as the defense declares it (``audit_bound``)."""
    bound = float(defense.audit_bound())
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"defense {defense.name!r}: audit_bound() must be a number > 0, "
                         f"got {bound!r}")
    return bound


@dataclass(frozen=True)
class GameSetup:
    """The auditor's choices: the release's point, the background, the canary."""

    point: int
    adjacency: str
    background: list[torch.Tensor]   # (B, *shape) per parameter tensor
    canary: list[torch.Tensor]       # (*shape) per parameter tensor
    local_steps: int
    lr: float = 0.1
    canary_name: str = "dirac"
    declared: int | None = None      # the batch size the release is told (None: the in-batch)
    round: int = 0                   # the round the release is run in
    pristine: Defense | None = None  # run each trial on a fresh copy of this (None: one copy)

    @property
    def direction(self) -> torch.Tensor:
        """Unit vector of the canary, flattened."""
        flat = torch.cat([c.reshape(-1) for c in self.canary])
        return flat / flat.norm()

    @property
    def slices(self) -> list[slice]:
        """Where each parameter tensor sits in a flattened release."""
        out, start = [], 0
        for c in self.canary:
            out.append(slice(start, start + c.numel()))
            start += c.numel()
        return out

    @property
    def batch_size(self) -> int:
        """The batch size the release is told: the canary-in batch (the expected batch at
        q = 1), or ``declared`` (a Poisson batch above its expected size)."""
        return int(self.background[0].shape[0]) + 1 if self.declared is None else self.declared


def canaries(shapes: tuple[tuple[int, ...], ...], bound: float) -> dict[str, list[torch.Tensor]]:
    """The canaries, by name: ``dirac`` (C in coordinate 0 of every tensor), ``large``
    (LARGE * C in all, spread over coordinate 0 of every tensor), ``large@k`` (LARGE * C in
    coordinate 0 of tensor k only) and ``lattice`` (:data:`LATTICE` * C in all, spread as
    ``large``; played only against the zero background, :data:`SCENARIOS`)."""
    def dirac(values: list[float]) -> list[torch.Tensor]:
        out = []
        for s, v in zip(shapes, values):
            c = torch.zeros(s)
            c.view(-1)[0] = v
            out.append(c)
        return out
    t = len(shapes)
    found = {"dirac": dirac([bound] * t),
             "large": dirac([LARGE * bound / math.sqrt(t)] * t)}
    found["lattice"] = dirac([LATTICE * bound / math.sqrt(t)] * t)
    if t > 1:
        for k in range(t):
            found[f"large@{k}"] = dirac([LARGE * bound if i == k else 0.0 for i in range(t)])
    return found


def with_canary(setup: GameSetup, name: str, canary: list[torch.Tensor]) -> GameSetup:
    """The same game (background, point) with another canary."""
    return replace(setup, canary=canary, canary_name=name)


#: worst-case datasets and calls (canary, background): the game picks them as it picks the
#: canary, on the selection split, and pays for the choice there. ``opposed``: the first
#: background example replaced by -C along the canary (the rest sums to about -C against
#: it: clipping the batch or the aggregate instead of each example then moves the release
#: by 2C, not C); ``single``: one background example; ``empty``: none (the canary alone
#: against an empty batch; where the code cannot take 0 rows, ``zero-row``: one zero
#: gradient); ``zero``: every background example a zero gradient (noise drawn only where the
#: data is nonzero, a clip from the batch's own norms); ``split``: half the background at C,
#: half small (a clip or noise scale from a batch statistic such as the median moves with
#: one example); ``at-clip`` / ``above-clip``: every background example at exactly C / at
#: LARGE * C, random directions; ``above-declared``: the release is told a batch size one
#: below the canary-in batch (a Poisson batch above its expected size: rows past the
#: declared size must be clipped too); ``round-1``: the release is run as round 1 of 2 (a
#: noise scale that changes with the round); ``fresh``: each trial on a fresh copy of the
#: defense as the caller built it (a generator seeded once in ``__init__`` then draws the
#: same noise in every trial); the ``lattice`` canary against the zero background (noise
#: rounded to a lattice before it is added: the ``lattice`` statistic).
SCENARIOS: tuple[tuple[str, str], ...] = (
    ("large", "opposed"), ("dirac", "opposed"), ("dirac", "single"), ("dirac", "empty"),
    ("dirac", "at-clip"), ("large", "above-clip"), ("dirac", "zero"), ("dirac", "split"),
    ("large", "above-declared"), ("dirac", "round-1"), ("dirac", "fresh"),
    ("lattice", "zero"))
BACKGROUNDS = ("opposed", "single", "empty", "zero-row", "zero", "split", "at-clip",
               "above-clip", "above-declared", "round-1", "fresh")
#: scenarios that change the call, not the data (the background stays the random one)
CALLS = ("above-declared", "round-1", "fresh")


def scenario_name(canary: str, background: str) -> str:
    """The name a (canary, background) game is reported under: ``canary+background``."""
    return f"{canary}+{background}"


def worst_background(kind: str, setup: GameSetup, canary: list[torch.Tensor], bound: float,
                     generator: torch.Generator) -> list[torch.Tensor]:
    """The background of a worst-case dataset ``kind`` (:data:`BACKGROUNDS`) for ``canary``,
    built from ``setup``'s random background (same count and directions where kept)."""
    bg = setup.background
    if kind in CALLS:
        return [g.clone() for g in bg]
    if kind == "empty":
        return [g[:0].clone() for g in bg]
    if kind == "zero-row":
        return [torch.zeros_like(g[:1]) for g in bg]
    if kind == "zero":
        return [torch.zeros_like(g) for g in bg]
    if kind == "single":
        return [g[:1].clone() for g in bg]
    if kind == "split":
        half = bg[0].shape[0] // 2
        raw = [torch.randn(g[:half].shape, generator=generator) for g in bg]
        scale = (bound / ops.flat_norms(raw)).view(-1)
        return [torch.cat([r * scale.view(-1, *([1] * (r.dim() - 1))), g[half:]])
                for r, g in zip(raw, bg)]
    if kind == "opposed":
        flat = torch.cat([c.reshape(-1) for c in canary])
        unit = flat / flat.norm()
        out, start = [], 0
        for g in bg:
            g = g.clone()
            n = g[0].numel()
            g[0] = (-bound * unit[start:start + n]).view_as(g[0])
            start += n
            out.append(g)
        return out
    if kind in ("at-clip", "above-clip"):
        norm = bound * (LARGE if kind == "above-clip" else 1.0)
        raw = [torch.randn(g.shape, generator=generator) for g in bg]
        scale = (norm / ops.flat_norms(raw)).view(-1)
        return [g * scale.view(-1, *([1] * (g.dim() - 1))) for g in raw]
    raise ValueError(f"background must be among {BACKGROUNDS}, got {kind!r}")


def with_scenario(setup: GameSetup, canary_name: str, canary: list[torch.Tensor],
                  background: str, bound: float, generator: torch.Generator,
                  pristine: Defense | None = None) -> GameSetup:
    """The game of one worst-case dataset or call: ``canary`` against background
    ``background`` (:data:`SCENARIOS`); ``pristine``: the defense as the caller built it
    (``fresh``)."""
    bg = worst_background(background, setup, canary, bound, generator)
    calls: dict[str, Any] = {}
    if background == "above-declared":
        calls["declared"] = int(bg[0].shape[0])
    elif background == "round-1":
        calls["round"] = 1
    elif background == "fresh":
        if pristine is None:
            raise ValueError("background 'fresh' needs the defense as the caller built it")
        calls["pristine"] = copy.deepcopy(pristine)
    return replace(setup, canary=canary, background=bg,
                   canary_name=scenario_name(canary_name, background), **calls)


def make_setup(defense: Defense, point: int, shapes: tuple[tuple[int, ...], ...],
               background: int, background_scale: float, local_steps: int,
               generator: torch.Generator) -> GameSetup:
    """Background gradients of norm ``background_scale * C`` and the Dirac canary at C."""
    bound = canary_bound(defense)
    raw = [torch.randn((background, *s), generator=generator) for s in shapes]
    norms = ops.flat_norms(raw)
    scale = (background_scale * bound / norms).view(-1)
    bg = [g * scale.view(-1, *([1] * (g.dim() - 1))) for g in raw]
    canary = canaries(shapes, bound)["dirac"]
    steps = 1 if point == 2 else local_steps
    return GameSetup(point=point, adjacency=adjacency(defense, point), background=bg,
                     canary=canary, local_steps=steps)


class _FixedBatch:
    """A local batch of fixed per-example gradients (the model is frozen), duck-typing
    ``LocalBatch`` for a defense's ``local_step``."""

    input_shape = (1,)
    num_classes = 2

    def __init__(self, grads: list[torch.Tensor]) -> None:
        self._grads = grads

    @property
    def size(self) -> int:
        return int(self._grads[0].shape[0])

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [g.clone() for g in self._grads]

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [g.mean(dim=0) for g in self._grads]

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        return [g[:1].expand(x.shape[0], *g.shape[1:]).clone() for g in self._grads]

    def fresh(self) -> _FixedBatch:
        return self


class NotBatched(RuntimeError):
    """A release run for n trials in one call did not come back with n trials."""


class _NoStep:
    """At point 2 the release is the gradient; the weights it would move are not needed."""

    lr = 0.1

    def step(self, params: dict[str, torch.Tensor],
             grads: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        return params


def _contexts(setup: GameSetup, generator: torch.Generator
              ) -> tuple[Callable[[int], ClientContext], RoundContext]:
    """Contexts of the audited release: one client, one round, q = 1, public metadata only."""
    claimed, sound = PrivacyLedger(), PrivacyLedger()
    b = setup.batch_size
    round_ctx = RoundContext(round=setup.round, rounds=setup.round + 1, clients=1,
                             clients_per_round=1,
                             local_steps=setup.local_steps, batch_size=b, client_sizes=(b,),
                             participants=(0,), claimed=[claimed], sound=[sound])

    def ctx(step: int) -> ClientContext:
        return ClientContext(round=setup.round, client=0, local_step=step, n_examples=b,
                             batch_size=b,
                             lr=setup.lr, generator=generator, round_ctx=round_ctx,
                             claimed=claimed, sound=sound)
    return ctx, round_ctx


def _prepare(defense: Defense, setup: GameSetup, params: dict[str, torch.Tensor]) -> None:
    """Bring a fresh defense to the state of a first round (white box where needed)."""
    defense.audit_setup(list(params.values()), canary_bound(defense))


def _batch(defense: Defense, setup: GameSetup, canary_in: bool) -> _FixedBatch:
    """The batch of an instance-level release: the background, and the canary or (unless the
    relation's out world is absence) a zero example. It hands out copies only, so the runs
    of one world may share it."""
    grads = setup.background
    if canary_in or canary_out(defense.relation) != "absent":   # or a zero example
        grads = [torch.cat([g, (c if canary_in else torch.zeros_like(c)).unsqueeze(0)])
                 for g, c in zip(grads, setup.canary)]
    return _FixedBatch(grads)


def _release(defense: Defense, setup: GameSetup, canary_in: bool,
             ctx: Callable[[int], ClientContext],
             batch: _FixedBatch | None = None) -> list[torch.Tensor]:
    """One run of the audited release through the defense's own hooks (``batch``: its
    :func:`_batch`, when the caller has it)."""
    params = {f"p{i}": torch.zeros(c.shape) for i, c in enumerate(setup.canary)}
    _prepare(defense, setup, params)
    if setup.adjacency == "client":
        # out: an absent client's zero update, a zeroed one or one replaced by zero alike
        update = [c.clone() if canary_in else torch.zeros_like(c) for c in setup.canary]
    else:
        batch = _batch(defense, setup, canary_in) if batch is None else batch
        optimizer = _NoStep() if setup.point == 2 else \
            make_optimizer(defense.optimizer or "sgd", setup.lr)
        current = params
        for step in range(setup.local_steps):
            current, g = defense.local_step(current, batch, optimizer, ctx(step))
            if setup.point == 2:
                return g
        update = [current[k] - params[k] for k in params]
    out = defense.privatize_update(update, ctx(setup.local_steps - 1))
    if setup.point == 0:
        out = defense.sanitize_update(out, ctx(setup.local_steps - 1))
    return out


def _flatten(out: list[torch.Tensor], n: int | None) -> torch.Tensor:
    if n is None:
        return torch.cat([t.reshape(-1) for t in out]).unsqueeze(0)
    return torch.cat([t.reshape(n, -1) for t in out], dim=1)


def _vectorised(template: Defense, setup: GameSetup, canary_in: bool, n: int,
                generator: torch.Generator) -> torch.Tensor:
    """n trials in one call (every noise draw with a leading trial dimension)."""
    defense = copy.deepcopy(template)
    ctx, _ = _contexts(setup, generator)
    with ops.trials(n):
        out = _release(defense, setup, canary_in, ctx)
    if any(tuple(t.shape) != (n, *c.shape) for t, c in zip(out, setup.canary)):
        raise NotBatched(
            f"defense {template.name!r} declares audit_batched (noise drawn through "
            f"leakaudit.defenses.ops with a leading trial dimension) but its release has "
            f"shapes {[tuple(t.shape) for t in out]}, not ({n}, *shape): draw every noise "
            "term through ops.gaussian_like / ops.laplace_like, or declare it False")
    return _flatten(out, n)


def _looped(defense: Defense, setup: GameSetup, canary_in: bool, n: int,
            generator: torch.Generator) -> torch.Tensor:
    """n trials one by one on ``defense`` itself, brought to a first-round state before each
    (the caller passes a working copy: state kept across releases, such as noise drawn once
    and reused, then shows across all runs of an audit)."""
    rows = []
    shared = _batch(defense, setup, canary_in) \
        if setup.adjacency != "client" and setup.pristine is None else None
    for _ in range(n):
        ctx, _ = _contexts(setup, generator)
        run = defense if setup.pristine is None else copy.deepcopy(setup.pristine)
        rows.append(_flatten(_release(run, setup, canary_in, ctx, shared), None))
    return torch.cat(rows)


def vectorisable(defense: Defense, point: int) -> bool:
    """Whether the defense declares its release at ``point`` batchable (``audit_batched``);
    undeclared: False, with a warning (a new defense must say, not silently go slow)."""
    declared = defense.audit_batched(point)
    if declared is None:
        warnings.warn(f"defense {defense.name!r} does not declare audit_batched(point): the "
                      "empirical audit runs one trial per call (slow); declare True if its "
                      "noise is additive and drawn only through leakaudit.defenses.ops, "
                      "else False", stacklevel=3)
        return False
    if declared:
        hook = untrusted_hook(type(defense))
        if hook:
            warnings.warn(f"defense {defense.name!r}: {hook} overrides a hook below the class "
                          "that declared audit_batched, so the declaration does not cover it: "
                          "the empirical audit runs one trial per call (slow); set "
                          "batched_trials on that class if its noise is drawn only through "
                          "leakaudit.defenses.ops", stacklevel=3)
            return False
    return bool(declared)


def batches_as_declared(template: Defense, setup: GameSetup, seed: int) -> str | None:
    """None when two trials in one call come back as two trials of the right shapes; else
    why not (the caller then runs one trial per call). Own generator: the audit's draws are
    the same either way."""
    try:
        _vectorised(template, setup, True, 2, torch.Generator().manual_seed(seed + 7919))
    except Exception as err:  # noqa: BLE001 - any failure of the batched path means: loop
        return f"{type(err).__name__}: {str(err)[:200]}"
    return None


def releases(template: Defense, setup: GameSetup, canary_in: bool, n: int, chunk: int,
             generator: torch.Generator, vectorise: bool) -> Iterator[torch.Tensor]:
    """Flattened releases, (m, D) per chunk, n in all."""
    done = 0
    while done < n:
        m = min(chunk, n - done)
        rows = _vectorised(template, setup, canary_in, m, generator) if vectorise else \
            _looped(template, setup, canary_in, m, generator)
        done += m
        yield rows


@dataclass
class Probe:
    """The ledgers of exactly one audited release (canary in), and what else it noted."""

    claimed: PrivacyLedger
    sound: PrivacyLedger
    extra: dict[str, Any]


def probe(template: Defense, setup: GameSetup, generator: torch.Generator) -> Probe:
    """Run the release once with the canary and read the defense's own ledgers of it."""
    defense = copy.deepcopy(template)
    ctx, round_ctx = _contexts(setup, generator)
    with torch_threads(1):
        _release(defense, setup, True, ctx)
    defense.claimed_round(round_ctx)
    extra: dict[str, Any] = dict(defense.audit_side_ledgers(0))
    return Probe(claimed=round_ctx.claimed[0], sound=round_ctx.sound[0], extra=extra)


@dataclass(frozen=True)
class Reference:
    """Mean and per-coordinate standard deviation of canary-out releases (float64), and,
    where a :class:`Subspace` was given, the noise's covariance there: the direction
    ``weights`` of the ``subspace`` statistic and ``noise_floor`` (:func:`subspace_weights`:
    0 where some functional of the release carries no noise)."""

    mean: torch.Tensor
    sd: torch.Tensor
    subspace: Subspace | None = None
    weights: torch.Tensor | None = None
    noise_floor: float = math.nan
    folded: torch.Tensor | None = None   # P^T weights: the statistic as one dot product

    @classmethod
    def from_sums(cls, total: torch.Tensor, total_sq: torch.Tensor, n: int,
                  sub: tuple[Subspace, torch.Tensor, torch.Tensor] | None = None,
                  direction: torch.Tensor | None = None) -> Reference:
        """From the sum and sum of squares of n runs; a zero deviation (a coordinate without
        noise) is floored at 1e-6 of the typical scale, so its shift stands out. ``sub``:
        the subspace, the sum and the sum of outer products of the runs' projections;
        ``direction``: the canary's unit vector."""
        mean = total / n
        var = (total_sq / n - mean ** 2).clamp(min=0.0) * n / max(n - 1, 1)
        sd = var.sqrt()
        scale = float(sd.pow(2).mean().sqrt() + mean.pow(2).mean().sqrt())
        sd = sd.clamp(min=1e-6 * scale + 1e-30)
        if sub is None or direction is None:
            return cls(mean=mean, sd=sd)
        space, s1, s2 = sub
        weights, floor = subspace_weights(space, s1, s2, n, direction)
        folded = (space.pt.double() @ weights).float()
        return cls(mean=mean, sd=sd, subspace=space, weights=weights, noise_floor=floor,
                   folded=folded)


class Trials(NamedTuple):
    """Per-run statistics (name -> (n,) array) and the sum and sum of squares of the runs
    (and of their subspace projections, when a subspace was given)."""

    stats: dict[str, np.ndarray]
    total: torch.Tensor
    total_sq: torch.Tensor
    sub_total: torch.Tensor | None = None
    sub_sq: torch.Tensor | None = None


def statistics(rows: torch.Tensor, setup: GameSetup, reference: Reference,
               wanted: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """projection, energy, tensor, coordinate, lattice and (with a subspace) subspace
    statistics of (m, D) releases; ``wanted``: only these (None: all).

    energy: the squared norm of the release minus the reference mean, orthogonal to the
    canary. tensor: max over the tensors the canary touches of the standardised projection
    of the release's part in that tensor on the canary's part (deviation from the
    reference's per-coordinate deviations, coordinates treated as independent).
    coordinate: the most extreme |z| over the D coordinates as -log10(D * 2 Phi(-|z|max))
    (Bonferroni over D). subspace: the release's projection (:class:`Subspace`) on Fisher's
    direction of the reference (:func:`subspace_weights`), taken as one dot product with
    P^T weights (``Reference.folded``).
    """
    def want(k: str) -> bool:
        return wanted is None or k in wanted
    u = setup.direction
    r = rows - reference.mean.float()
    proj_r = r @ u
    out: dict[str, np.ndarray] = {}
    if want("projection"):
        out["projection"] = (rows @ u).double().numpy()
    if want("energy"):
        perp = torch.addr(r, proj_r, u, alpha=-1.0)
        out["energy"] = torch.linalg.vector_norm(perp, dim=1).double().pow(2).numpy()
    if want("tensor"):
        out["tensor"] = _tensor_z(r, setup, reference.sd.float())
    if want("coordinate"):
        zmax = torch.linalg.vector_norm(r / reference.sd.float(), ord=math.inf, dim=1)
        with np.errstate(all="ignore"):
            out["coordinate"] = -(math.log(2.0 * rows.shape[1])
                                  + special.log_ndtr(-zmax.double().numpy())) / math.log(10.0)
    if want("subspace") and reference.folded is not None:
        out["subspace"] = (r @ reference.folded).double().numpy()
    if want("lattice"):
        out["lattice"] = lattice_offset(rows, torch.cat([c.reshape(-1) for c in setup.canary])
                                        != 0)
    return out


def _tensor_z(r: torch.Tensor, setup: GameSetup, sd: torch.Tensor) -> np.ndarray:
    """The ``tensor`` statistic of :func:`statistics` (r: releases minus the reference)."""
    u = setup.direction
    zs = []
    for sl in setup.slices:
        uk = u[sl]
        norm = uk.norm()
        if norm <= 0:
            continue
        uk = uk / norm
        zs.append((r[:, sl] @ uk) / (uk.pow(2) * sd[sl].pow(2)).sum().sqrt())
    return torch.stack(zs, dim=1).max(dim=1).values.double().numpy()


#: at most this many coordinates off the canary estimate a release's lattice spacing
LATTICE_COORDINATES = 1024


def lattice_offset(rows: torch.Tensor, canary: torch.Tensor) -> np.ndarray:
    """How far the canary's coordinates lie off the lattice of the other coordinates, per
    run: the spacing h is the smallest positive gap between the values of (at most
    :data:`LATTICE_COORDINATES`) coordinates the canary does not touch, and the statistic
    the mean over the canary's coordinates of the distance of (value - a reference value)
    to hZ, in units of h (0 to 1/2). Noise rounded to a lattice before it is added to a
    zero-gradient batch puts every coordinate on one lattice without the canary, and the
    canary's off it with one; continuous noise gives a spacing near 0 and no signal."""
    other = torch.nonzero(~canary).reshape(-1)[:LATTICE_COORDINATES]
    mine = torch.nonzero(canary).reshape(-1)
    if other.numel() < 2 or mine.numel() == 0:
        return np.zeros(rows.shape[0])
    vals = rows[:, other].double().sort(dim=1).values
    gaps = vals.diff(dim=1)
    scale = vals.abs().amax(dim=1, keepdim=True).clamp(min=1e-30)
    gaps = torch.where(gaps > 1e-9 * scale, gaps, torch.full_like(gaps, math.inf))
    h = gaps.min(dim=1).values.clamp(max=1e30).unsqueeze(1)
    x = (rows[:, mine].double() - vals[:, :1]) / h
    return (x - x.round()).abs().mean(dim=1).nan_to_num(0.0).numpy()


def run_trials(template: Defense, setup: GameSetup, canary_in: bool, n: int,
               reference: Reference | None, generator: torch.Generator, chunk: int = 512,
               vectorise: bool = True, threads: int = 1,
               subspace: Subspace | None = None, wanted: Collection[str] | None = None
               ) -> Trials:
    """The statistics (``wanted``, None: all) of n runs around ``reference``, or (without
    one) only the sum and sum of squares of the runs (and of their projections on
    ``subspace``), to make a reference."""
    found: dict[str, list[np.ndarray]] = {}
    total = torch.zeros_like(setup.direction, dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    sub_total = sub_sq = None
    if subspace is not None:
        sub_total = torch.zeros(subspace.dims, dtype=torch.float64)
        sub_sq = torch.zeros(subspace.dims, subspace.dims, dtype=torch.float64)
    with torch_threads(threads):
        for rows in releases(template, setup, canary_in, n, chunk, generator, vectorise):
            rows = rows.float()
            if reference is None:   # the sums only make a reference
                d = rows.double()
                total += d.sum(dim=0)
                total_sq += (d * d).sum(dim=0)
                if subspace is not None:
                    y = subspace.project(rows).double()
                    sub_total += y.sum(dim=0)
                    sub_sq += y.T @ y
            else:
                for k, v in statistics(rows, setup, reference, wanted).items():
                    found.setdefault(k, []).append(v)
    return Trials({k: np.concatenate(v) for k, v in found.items()}, total, total_sq,
                  sub_total, sub_sq)


def log_likelihood_ratio(proj: np.ndarray, energy: np.ndarray, fit: dict[str, float],
                         dims: int) -> np.ndarray:
    """Gaussian log-likelihood ratio of "canary in" against "canary out".

    Model (fitted on the selection split): the projection is N(a_w, v_w) and the orthogonal
    energy is s_w^2 chi^2_{dims-1} in world w; the ratio adds both channels.
    """
    def world(w: str) -> np.ndarray:
        a, v, s2 = fit[f"a{w}"], fit[f"v{w}"], fit[f"s{w}"]
        return (-0.5 * (proj - a) ** 2 / v - 0.5 * math.log(v)
                - 0.5 * energy / s2 - 0.5 * (dims - 1) * math.log(s2))
    with np.errstate(all="ignore"):
        return world("1") - world("0")


def fit_llr(proj_out: np.ndarray, energy_out: np.ndarray, proj_in: np.ndarray,
            energy_in: np.ndarray, dims: int) -> dict[str, float]:
    """Per-world mean and variance of the projection and noise scale of the energy."""
    tiny = 1e-300
    return {"a0": float(proj_out.mean()), "v0": max(float(proj_out.var()), tiny),
            "s0": max(float(energy_out.mean()) / (dims - 1), tiny),
            "a1": float(proj_in.mean()), "v1": max(float(proj_in.var()), tiny),
            "s1": max(float(energy_in.mean()) / (dims - 1), tiny)}
