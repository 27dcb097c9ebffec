"""Audit a whole training run: a lower bound on eps (and mu) from ONE run with many canaries,
or, for small runs, from several runs with one canary each.

One run (Steinke, Nasr, Jagielski, NeurIPS 2023, "Privacy auditing with one (1) training
run"): m canaries, each included independently with probability 1/2; the scores become eps
and mu lower bounds in :mod:`leakaudit.scoring.onerun` (Steinke et al.'s eps bound and
Mahloujifar, Melis, Chaudhuri's f-DP bound, ICML 2025), with the guess counts planned from
the sound ledger's mu before any score is read (``guesses="planned"``; a pre-registered grid
with Bonferroni where the ledger has no finite mu). Each row carries the idealised gap:
:func:`leakaudit.scoring.onerun.idealised_bound` gives what the same rule attains on the
papers' idealised game (each canary its own Gaussian mechanism at the ledger's mu) with the
same canary count: the gap between a measured bound and it is what the score loses, the rest
of the gap to the ledger is the bound's own (its cap near ln m).

Dirac canaries (``canary="dirac"``, Steinke et al. Sec. 7, jax_privacy's white-box
gradient canaries): canary i is the gradient 100 C e_{j_i} in its own coordinate j_i (the
coordinates a random subset fixed by the seed; m <= the number of parameters), inserted
into client 0's per-example gradients exactly as the gradient canaries are, on a worst-case
dataset: client 0's own examples contribute zero gradients (DP holds for every dataset, so
the auditor may choose it; the other clients train on their data). Scored by the sum over
client 0's steps of the applied gradient's coordinate j_i: no canary interferes with
another and no data gradient adds variance, so with full-batch steps (batch_size >= the
client's examples: q = 1) each score is the idealised game's Gaussian with the ledger's mu.

Canaries: white-box GRADIENT canaries for defenses that privatise per-example gradients
(site "example", or no site at all): random unit directions times 100 C added to client 0's
per-example gradients, each Poisson-sampled into every local batch at the rate B / n_c that
the ledger assumes, through the defense's own ``local_step``; scored by the projection of
the applied gradients; eps_claimed / eps_sound are client 0's ledgers. Canary CLIENTS for
defenses that protect a client's whole update (sites "client" / "server" only): m extra
clients in the population, sampled into rounds by the run's own client sampling; an included
canary's update is its direction times 100 C, an excluded one's update is zero (their local
steps run the defense's own ``local_step`` on zero gradients), and both go through the
defense's own client-level hooks (``privatize_update``, ``sanitize_update``,
``sanitize_sum``); scored by the projection of the released model change w_T - w_0 on each
direction; eps_claimed / eps_sound are a canary client's (client-level) ledgers. The
excluded canaries follow the relation of the run's sound ledgers: absent from the population
under add/remove (the fixed denominator of DP-FedAvg then set for the whole population, a
public constant), present with a zero update under "zero-out" and "replace-one" (the relation
of DP-FedAvg under fixed-size client sampling).

Multi-run (``runs=R``): R independent runs (seeds drawn from ``seed``), ONE canary (the same
direction in every run) included in a random half of them; each run's score goes to
:func:`leakaudit.empirical.bounds_from_scores` (selection split, Clopper-Pearson).

Pitfalls (read before trusting a number):

* the canaries must be exchangeable: drawn i.i.d. (random directions of one norm) and
  included i.i.d. with probability 1/2; an auditor that picks which canaries to score after
  seeing the run breaks the theorem;
* a one-run bound is never to be mixed with a multi-run one (nor with
  :func:`privacy_audit`'s): they bound different games (one run with m canaries vs repeated
  runs of one canary) and their confidences do not combine; the options of one never apply
  to the other (``canaries`` > 1 with ``runs``, or ``trials``/``statistic``/...: ValueError);
* one-run bounds are weak by construction: with m canaries they cannot exceed about ln(m)
  (eps) and they stay far below the true eps of a strong guarantee; a small bound is no
  evidence of privacy;
* the score must use only what the run releases (the applied gradients, the final model),
  never who was sampled when: the amplified ledgers assume that is hidden.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from accounting import PrivacyLedger, tightest_epsilon

from ..defenses import Defense
from ..defenses import get as get_defense
from ..defenses.base import ClientContext, DefenseWrapper
from ..engines import EngineConfig
from ..neighbours import canary_out
from ..scoring import fdp
from ..scoring.bounds import bounds_from_scores, gdp_epsilon
from ..scoring.onerun import idealised_bound, one_run_bound
from . import game
from .report import PrivacyReport

__all__ = ["privacy_audit_training", "canary_kind", "MULTI_RUN_OPTIONS", "MIN_RUNS", "KINDS"]

#: options of the repeated-release audit (``privacy_audit``) refused here
MULTI_RUN_OPTIONS = ("trials", "statistic", "select_fraction", "background",
                     "background_scale", "shapes", "point", "vectorise", "chunk")
#: the fewest runs of the multi-run mode: 4 canary-in and 4 canary-out runs
#: (``bounds_from_scores`` needs 4 per side)
MIN_RUNS = 8
#: canary kinds: per-example gradients (random directions or one coordinate each), clients
KINDS = ("gradient", "dirac", "client")


class _CanaryBatch:
    """A local batch with the canaries sampled into this step appended as examples."""

    def __init__(self, batch: Any, canary: list[torch.Tensor]) -> None:
        self._batch, self._canary = batch, canary
        self.num_classes = batch.num_classes

    @property
    def size(self) -> int:
        return int(self._batch.size) + int(self._canary[0].shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self._batch.input_shape

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        real = self._batch.per_example(params)
        if self._batch.size == 0:
            real = [r[:0] for r in real]
        return [torch.cat([r, c.to(r.dtype)]) for r, c in zip(real, self._canary)]

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        b, k = int(self._batch.size), int(self._canary[0].shape[0])
        if b + k == 0:
            return [torch.zeros_like(v) for v in params.values()]
        real = self._batch.mean(params) if b else [torch.zeros_like(v) for v in params.values()]
        return [(r * b + c.sum(0).to(r.dtype)) / (b + k) for r, c in zip(real, self._canary)]

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        return self._batch.gradients_at(params, x, y)

    def fresh(self) -> _CanaryBatch:
        return _CanaryBatch(self._batch.fresh(), self._canary)


class _ZeroBatch:
    """A canary client's local batch: its data contributes zero gradients (its update is the
    canary, set in ``privatize_update``); the defense's own ``local_step`` still runs."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch
        self.num_classes = batch.num_classes

    @property
    def size(self) -> int:
        return int(self._batch.size)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self._batch.input_shape

    def per_example(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [torch.zeros((max(1, self.size), *v.shape), dtype=v.dtype)
                for v in params.values()]

    def mean(self, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [torch.zeros_like(v) for v in params.values()]

    def gradients_at(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> list[torch.Tensor]:
        return self._batch.gradients_at(params, x, y)

    def fresh(self) -> _ZeroBatch:
        return _ZeroBatch(self._batch.fresh())


class Canaries(DefenseWrapper):
    """The audited defense with ``m`` canaries (``kind`` "gradient", "dirac" or "client").

    Every hook but ``local_step`` and ``privatize_update`` is the inner defense's
    (:class:`~leakaudit.defenses.base.DefenseWrapper`). Gradient canaries: ``local_step`` of client
    ``first`` hands the inner one a batch with this step's canaries appended and scores each
    canary by the gradient applied (white box). Canary clients ``first, first + 1, ...``
    (holding canaries ``members``):
    their local steps run the inner ``local_step`` on zero gradients (:class:`_ZeroBatch`),
    and ``privatize_update`` replaces their update by the
    canary (included) or zero (excluded) before the inner client-level hooks."""

    def __init__(self, inner: Defense, m: int, magnitude: float, included: torch.Tensor,
                 direction_seed: int, generator: torch.Generator, kind: str, first: int,
                 members: Sequence[int] = ()) -> None:
        super().__init__(inner)
        self.m, self.magnitude, self.generator = m, magnitude, generator
        self.kind, self.first, self.direction_seed = kind, first, direction_seed
        self.members = list(members)   # the canary of each canary client, in client order
        self.included = included.bool()
        self.directions: torch.Tensor | None = None
        self.scores = torch.zeros(m, dtype=torch.float64)
        self.steps = 0

    def _directions(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """m random unit directions in parameter space (the same for one ``direction_seed``)."""
        if self.directions is None:
            d = sum(v.numel() for v in params.values())
            g = torch.Generator().manual_seed(self.direction_seed)
            u = torch.randn(self.m, d, generator=g)
            self.directions = u / u.norm(dim=1, keepdim=True)
        return self.directions

    def _canary_client(self, client: int) -> int | None:
        j = client - self.first
        return self.members[j] if self.kind == "client" and 0 <= j < len(self.members) \
            else None

    def local_step(self, params: dict[str, torch.Tensor], batch: Any, optimizer: Any,
                   ctx: ClientContext) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        if self.kind == "client":
            if self._canary_client(ctx.client) is not None:   # its update is the canary
                batch = _ZeroBatch(batch)
            return self.inner.local_step(params, batch, optimizer, ctx)
        if ctx.client != self.first:
            return self.inner.local_step(params, batch, optimizer, ctx)
        if self.kind == "dirac":
            return self._dirac_step(params, batch, optimizer, ctx)
        u = self._directions(params)
        step = self.included & (torch.rand(self.m, generator=self.generator) < ctx.batch_rate)
        canary = _split(u[step] * self.magnitude, params)
        new, g = self.inner.local_step(params, _CanaryBatch(batch, canary), optimizer, ctx)
        applied = torch.cat([t.reshape(-1) for t in g]).to(u.dtype)
        self.scores += (u @ applied).double()
        self.steps += 1
        return new, g

    def coordinates(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The m distinct coordinates of the Dirac canaries (fixed by ``direction_seed``)."""
        d = sum(v.numel() for v in params.values())
        if self.m > d:
            raise ValueError(f"canaries: {self.m} Dirac canaries need as many parameters, "
                             f"the model has {d}")
        g = torch.Generator().manual_seed(self.direction_seed)
        return torch.randperm(d, generator=g)[: self.m]

    def _dirac_step(self, params: dict[str, torch.Tensor], batch: Any, optimizer: Any,
                    ctx: ClientContext
                    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        """Client ``first``'s step on a zero-gradient dataset with this step's Dirac canaries
        (100 C in one coordinate each) as extra examples; score: the applied coordinate."""
        idx = self.coordinates(params)
        d = sum(v.numel() for v in params.values())
        step = self.included & (torch.rand(self.m, generator=self.generator) < ctx.batch_rate)
        rows = torch.nonzero(step).reshape(-1)
        flat = torch.zeros(rows.numel(), d)
        flat[torch.arange(rows.numel()), idx[rows]] = self.magnitude
        canary = _split(flat, params)
        del flat
        new, g = self.inner.local_step(params, _CanaryBatch(_ZeroBatch(batch), canary),
                                       optimizer, ctx)
        applied = torch.cat([t.reshape(-1) for t in g])
        self.scores += applied[idx].double()
        self.steps += 1
        return new, g

    def privatize_update(self, update: list[torch.Tensor],
                         ctx: ClientContext) -> list[torch.Tensor]:
        j = self._canary_client(ctx.client)
        if j is not None:
            self.steps += 1
            shaped = {str(i): t for i, t in enumerate(update)}
            if bool(self.included[j]):
                u = self._directions(shaped)[j:j + 1] * self.magnitude
                update = [c[0].to(t.dtype) for c, t in zip(_split(u, shaped), update)]
            else:
                update = [torch.zeros_like(t) for t in update]
        return self.inner.privatize_update(update, ctx)


def _split(flat: torch.Tensor, like: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """(k, D) rows cut into (k, *shape) per parameter tensor of ``like``."""
    out, start = [], 0
    for v in like.values():
        out.append(flat[:, start:start + v.numel()].reshape(-1, *v.shape))
        start += v.numel()
    return out


def canary_kind(defense: Defense, kind: str | None = None) -> str:
    """The canaries that audit ``defense``: "gradient" where it privatises per-example
    gradients or has no site at all, "client" where it protects whole client updates
    (sites "client" / "server" only); "dirac" (one coordinate each, on a zero-gradient
    dataset) only when asked, where "gradient" fits; ``kind`` asks for one (ValueError
    where the defense releases nothing it protects there)."""
    sites = set(defense.sites)
    fits = {"gradient": not sites or "example" in sites, "client": "example" not in sites}
    fits["dirac"] = fits["gradient"]
    if kind is None:
        return "gradient" if fits["gradient"] else "client"
    if kind not in KINDS:
        raise ValueError(f"canary must be one of {KINDS}, got {kind!r}")
    if not fits[kind]:
        where = "at the per-example gradient" if kind != "client" else \
            "in a whole client update (it privatises per-example gradients)"
        raise ValueError(f"canary: defense {defense.name!r} releases nothing it protects "
                         f"{where} (sites {sorted(sites)}): {kind} canaries cannot audit it")
    return kind


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad]
                     ).double()


def _population(ds: Any, options: dict[str, Any], extra: int, seed: int
                ) -> tuple[dict[str, Any], int]:
    """The simulator's options with ``extra`` canary clients after the run's own clients, and
    the number of those: the real clients keep the partition the run would give them (the
    simulator's own split), each canary client holds a copy of the median client's indices
    (never read: its update is the canary, and its size gives it a typical weight)."""
    from ..fl.config import FLConfig
    from ..fl.simulate import split

    opts = dict(options)
    keys = ("clients", "partition", "partition_kwargs", "val_fraction")
    cfg = FLConfig.make(seed=seed, **{k: opts[k] for k in keys if k in opts})
    _, parts = split(ds, cfg, np.random.default_rng(cfg.seed))
    median = parts[int(np.argsort([len(p) for p in parts])[len(parts) // 2])]
    opts["clients"] = len(parts) + extra
    opts["partition"] = [p.tolist() for p in parts] + [median.tolist()] * extra
    opts.pop("partition_kwargs", None)
    return opts, len(parts)


def _relation(defense: Defense, options: dict[str, Any]) -> str:
    """The neighbouring relation of the run's sound client ledgers (the simulator's rule)."""
    from ..defenses.base import client_sampling_of
    from ..fl.simulate import sound_relation

    return sound_relation(defense, client_sampling_of(options.get("client_fraction")))


def _simulate(inner: Defense, kind: str, m: int, included: torch.Tensor, ds: Any,
              rounds: int, seed: int, direction_seed: int, options: dict[str, Any]
              ) -> tuple[np.ndarray, PrivacyLedger, PrivacyLedger, int, str]:
    """One training run with ``m`` canaries: (scores, claimed ledger, sound ledger of the
    audited unit, canary releases, what an excluded canary is)."""
    from .. import fl, models

    opts = dict(options)
    opts.pop("progress", None)
    model = models.resolve(opts.pop("model", None), ds, seed=seed)
    first, members, excluded = 0, list(range(m)), "not sampled into any batch"
    if kind == "client":
        excluded = "a zero update"
        if canary_out(_relation(inner, opts)) == "absent":   # an excluded canary client
            members = [j for j in range(m) if bool(included[j])]
            excluded = "absent"
        opts, real = _population(ds, opts, len(members), seed)
        first = real
        if inner.fixed_denominator and opts.get("client_fraction") is not None:
            # the fixed denominator is a public constant: never the realised population's
            opts.setdefault("expected_weight", opts["client_fraction"] * (real + m))
    if kind == "dirac":
        d = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if m > d:
            raise ValueError(f"canaries: {m} Dirac canaries need as many parameters, the "
                             f"model has {d}")
    defense = copy.deepcopy(inner)
    magnitude = game.LARGE * game.canary_bound(defense)
    wrapped = Canaries(defense, m, magnitude, included, direction_seed,
                        torch.Generator().manual_seed(int(seed) + 7919), kind, first, members)
    w0 = _flat(model)
    config = fl.FLConfig.make(rounds=rounds, seed=seed, progress=False, **opts)
    run = fl.simulate(model, dataset=ds, defense=wrapped, config=config)
    if kind == "client":
        change = _flat(run.model) - w0
        scores = (wrapped._directions({"w": change}).double() @ change).numpy()
    else:
        if wrapped.steps == 0:
            raise ValueError("rounds: client 0 took no local step, no canary was released")
        scores = wrapped.scores.numpy()
    unit = first if kind != "client" or members else 0   # no canary client: any client
    return scores, run.claimed[unit], run.sound[unit], wrapped.steps, excluded


def _epsilons(claimed: PrivacyLedger, sound: PrivacyLedger, delta: float
              ) -> dict[str, float]:
    mu_c, mu_s = fdp.ledger_mu(claimed), fdp.ledger_mu(sound)
    return {"eps_claimed": tightest_epsilon(claimed, delta),
            "eps_sound": tightest_epsilon(sound, delta),
            "mu_claimed": math.nan if mu_c is None else mu_c,
            "mu_sound": math.nan if mu_s is None else mu_s}


def _verdict(row: dict[str, Any]) -> None:
    """claim_violated / sound_violated / violated_by from eps_lower and mu_lower (mu only
    against a ledger that is mu-GDP)."""
    by = ""
    for which in ("claimed", "sound"):
        eps_v = row["eps_lower"] > row[f"eps_{which}"]
        mu = row[f"mu_{which}"]
        mu_v = not math.isnan(mu) and row["mu_lower"] > mu
        key = "claim_violated" if which == "claimed" else "sound_violated"
        row[key] = bool(eps_v or mu_v)
        if eps_v or mu_v:
            by = "eps" if eps_v else "mu"
    row["violated_by"] = by


def privacy_audit_training(defense: str | Defense, *, dataset: Any = "digits",
                           canaries: int | None = None, runs: int | None = None,
                           canary: str | None = None, rounds: int = 5, delta: float = 1e-5,
                           confidence: float = 0.95, seed: int = 0,
                           seeds: Sequence[int] | None = None,
                           defense_params: dict[str, Any] | None = None,
                           guesses: Sequence[tuple[float, float]] | str = "planned",
                           engine: str | EngineConfig = "serial", results: str | None = None,
                           progress: bool = False, **simulate_options: Any) -> PrivacyReport:
    """eps_lower and mu_lower of a whole training run next to its eps_claimed and eps_sound
    (at ``delta``), one row per seed (``seed``, or each of ``seeds``).

    One run (default, ``canaries`` = m, 1000 if not given) or ``runs`` = R runs with one
    canary each (multi-run mode); see the module docstring for the bounds, the canaries
    (``canary``: "gradient", "dirac" or "client", by default what the defense protects) and the
    pitfalls; ``guesses``: "planned" (one count per bound, fixed from the sound ledger's
    mu before the scores are read) or a list of (in, out) shares (Bonferroni), see
    :func:`leakaudit.scoring.onerun.one_run_bound`. The
    one-run row also carries the idealised gap: ``eps_ideal`` / ``mu_ideal`` /
    ``eps_ideal_gdp``, what the same rule gives on the idealised game with the same canary
    count at ``ideal_mu`` (the sound ledger's mu, or the mu-GDP with its eps at delta).
    The run is :func:`leakaudit.fl.simulate` itself (``dataset``, ``rounds`` and
    any other of its options, e.g. ``clients``, ``client_fraction``, ``local_steps``,
    ``batch_size``; with canary clients, the population is ``clients`` plus the canary
    clients and the client sampling applies to all).

    The trainings are units of an engine (``engine``: "serial", the default, "process" or
    "ray", or an :class:`~leakaudit.engines.EngineConfig` with a cluster's address): one
    per seed in the one-run mode, one per run in the multi-run mode. Each carries its own
    seeds, so every engine gives the same rows; with ``results`` (a JSON-lines file) each
    is stored as it finishes and a rerun skips those done. ``progress``: one bar over the
    trainings and a line of their cost.

    Raises ValueError (before any work) for canaries < 2, runs < :data:`MIN_RUNS`,
    ``canaries`` > 1 together with ``runs``, an option of the repeated-release audit
    (``trials``, ``statistic``, ...), ``seed`` together with ``seeds``, a bad engine, or a
    defense that releases nothing it protects where the canaries are asked for.
    """
    from ..records import ResultsFile
    from ..workload import Workload

    m, runs, inner, kind, chosen = _check_training_audit(
        defense, canaries, runs, canary, rounds, delta, confidence, seed, seeds,
        defense_params, guesses, simulate_options)
    runs_on = EngineConfig.of(engine)
    config = {"kind": "privacy_audit_training", "mode": "one-run" if runs is None else
              "multi-run", "canaries": m, "runs": runs, "rounds": rounds, "delta": delta,
              "confidence": confidence, "seed": seed if seeds is None else chosen}
    store = ResultsFile(results, {**config, "defense": inner.describe(), "canary": kind,
                                  "dataset": repr(dataset), "guesses": repr(guesses),
                                  "options": repr(sorted(simulate_options.items()))})
    one = functools.partial(_training_row, inner, kind, m, runs, dataset, rounds, delta,
                            confidence, simulate_options, guesses)
    total = len(chosen) * (1 if runs is None else runs)
    done = sum(store.has("training", k) for s in chosen for k, _ in one(s, None))
    report = PrivacyReport(config=config)
    with Workload(runs_on, total=total, done=done, desc="privacy audit: train",
                  progress=progress) as work:
        for s in chosen:
            report.add(one(s, lambda jobs: work.units(store, "training", jobs)))
    return report


def _check_training_audit(defense: str | Defense, canaries: int | None, runs: int | None,
                          canary: str | None, rounds: int, delta: float, confidence: float,
                          seed: int, seeds: Sequence[int] | None,
                          defense_params: dict[str, Any] | None, guesses: Any,
                          options: dict[str, Any]
                          ) -> tuple[int, int | None, Defense, str, list[int]]:
    """The checked settings of :func:`privacy_audit_training` (ValueError naming the
    argument, before any work): canaries, runs, the defense, the canary kind, the seeds."""
    from .._validate import check_int, check_probability

    if runs is not None and canaries is not None and canaries != 1:
        raise ValueError(f"canaries={canaries!r} with runs={runs!r}: the one-run (many "
                         "canaries) and multi-run (one canary per run) modes never mix")
    for key in options:
        if key in MULTI_RUN_OPTIONS:
            raise ValueError(f"{key} is an option of the repeated-release audit "
                             "(privacy_audit); a training-run audit does not take it (the "
                             "two never mix)")
    if runs is None:
        m = check_int("canaries", 1000 if canaries is None else canaries, 2)
    else:
        runs = check_int("runs", runs, MIN_RUNS)
        m = 1
    check_int("rounds", rounds, 1)
    check_int("seed", seed, 0)
    if seeds is not None:
        if seed != 0:
            raise ValueError(f"give seed or seeds, not both (seed={seed}, seeds={seeds!r})")
        if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
            raise ValueError(f"seeds must be a non-empty sequence of seeds, got {seeds!r}")
        chosen = [check_int("seeds", s, 0) for s in seeds]
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"seeds must be distinct, got {list(seeds)}")
    check_probability("delta", delta)
    check_probability("confidence", confidence)
    inner = get_defense(defense, **(defense_params or {})) if isinstance(defense, str) \
        else defense
    if not isinstance(inner, Defense):
        raise ValueError(f"defense must be a name or a Defense, got {defense!r}")
    kind = canary_kind(inner, canary)
    game.canary_bound(inner)
    if isinstance(guesses, str) and guesses != "planned":
        raise ValueError(f"guesses must be 'planned' or a list of (in, out) shares, "
                         f"got {guesses!r}")
    return m, runs, inner, kind, [seed] if seeds is None else chosen


def _training_row(inner: Defense, kind: str, m: int, runs: int | None, dataset: Any,
                  rounds: int, delta: float, confidence: float, options: dict[str, Any],
                  guesses: Any, seed: int, work: Any) -> Any:
    """The row of one seed, its trainings run by ``work`` (keyed units -> their records);
    with ``work`` None, the keyed units alone."""
    from .. import data

    ds = data.resolve(dataset, seed=seed)
    if runs is None:
        jobs = [(f"{seed}|one-run", _OneRun(inner, kind, m, ds, rounds, seed, delta,
                                            confidence, options, guesses))]
        if work is None:
            return jobs
        row = dict(work(jobs)[jobs[0][0]])
    else:
        row = _multi_run(inner, kind, runs, ds, rounds, seed, delta, confidence, options,
                         work)
        if work is None:
            return row
    base = {"defense": inner.name, "params": inner.describe(), "point": 0 if kind ==
            "client" else 2, "rounds": rounds, "seed": seed, "confidence": confidence,
            "delta": delta, "kind": kind, "level": inner.level, "reason": ""}
    row = {**base, **row}
    _verdict(row)
    return row


def _as_stored(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as a results file gives it back (JSON: tuples as lists, numpy scalars as
    Python numbers; inf and nan kept), so that a fresh and a resumed run give one row."""
    return json.loads(json.dumps(record, default=lambda v: v.item()))


@dataclass
class _OneRun:
    """One seed's one-run audit (a unit of the engines): its row of :func:`_one_run`."""

    inner: Defense
    kind: str
    m: int
    ds: Any
    rounds: int
    seed: int
    delta: float
    confidence: float
    options: dict[str, Any]
    guesses: Any

    def run(self) -> dict[str, Any]:
        return _as_stored(_one_run(self.inner, self.kind, self.m, self.ds, self.rounds,
                                   self.seed, self.delta, self.confidence, self.options,
                                   self.guesses))


@dataclass
class _CanaryRun:
    """One training of the multi-run game (a unit of the engines), the canary ``included``
    or not: its score, and the eps of its canary's ledgers where it takes part."""

    inner: Defense
    kind: str
    included: bool
    ds: Any
    rounds: int
    seed: int
    direction_seed: int
    options: dict[str, Any]
    delta: float

    def run(self) -> dict[str, Any]:
        s, claimed, sound, _, excluded = _simulate(
            self.inner, self.kind, 1, torch.tensor([self.included]), self.ds, self.rounds,
            self.seed, self.direction_seed, self.options)
        out: dict[str, Any] = {"score": float(s[0]), "excluded": excluded}
        if self.included:  # the ledgers of the canary's unit: where it takes part
            out["ledgers"] = repr([[e.to_dict() for e in led.events]
                                   for led in (claimed, sound)])
            out["eps"] = {**_epsilons(claimed, sound, self.delta),
                          "relation": sound.relation}
        return _as_stored(out)


def _ideal_mu(eps: dict[str, float], delta: float) -> float:
    """The mu of the idealised game a run is compared with: the sound ledger's mu where it
    is mu-GDP, else the mu whose eps at delta is eps_sound (nan if infinite)."""
    if not math.isnan(eps["mu_sound"]):
        return eps["mu_sound"]
    target = eps["eps_sound"]
    if not math.isfinite(target) or target <= 0:
        return math.nan
    lo, hi = 0.0, 1.0
    while gdp_epsilon(hi, delta) < target:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gdp_epsilon(mid, delta) < target else (lo, mid)
    return lo


def _one_run(inner: Defense, kind: str, m: int, ds: Any, rounds: int, seed: int,
             delta: float, confidence: float, options: dict[str, Any],
             guesses: Sequence[tuple[float, float]] | str = "planned") -> dict[str, Any]:
    included = torch.rand(m, generator=torch.Generator().manual_seed(int(seed) + 104729)) < 0.5
    scores, claimed, sound, steps, excluded = _simulate(inner, kind, m, included, ds, rounds,
                                                        seed, int(seed) + 7919, options)
    eps = _epsilons(claimed, sound, delta)
    ideal_mu = _ideal_mu(eps, delta)       # from the ledger: the counts are fixed before
    found = one_run_bound(scores, included.numpy(), delta, confidence, guesses, ideal_mu)
    return {"mode": "one-run", "trials": 1,
            "canary": f"{m} {kind} canaries (one run)",
            "statistic": "one-run: Steinke et al. 2023 (eps), Mahloujifar et al. 2025 (mu)",
            "eps_lower": found["eps_lower"], "mu_lower": found["mu_lower"],
            "eps_lower_gdp": found["eps_lower_gdp"], "guesses": found["guesses"],
            "correct": found["correct"], "mu_guesses": found["mu_guesses"],
            "mu_correct": found["mu_correct"], "canaries": m,
            "included": int(included.sum()), "steps": steps,
            "excluded": excluded, "guess_rule": found["guess_rule"], "ideal_mu": ideal_mu,
            **idealised_bound(m, ideal_mu, delta, confidence),
            "relation": sound.relation, **eps}


def _multi_run(inner: Defense, kind: str, runs: int, ds: Any, rounds: int, seed: int,
               delta: float, confidence: float, options: dict[str, Any], work: Any
               ) -> Any:
    """The multi-run row of one seed: ``runs`` trainings (units run by ``work``, keyed
    units -> records; with ``work`` None, the keyed units alone), the canary in half."""
    rng = np.random.default_rng(seed)
    seeds = rng.choice(2**31 - 1, size=runs, replace=False)
    into = np.zeros(runs, bool)
    into[rng.permutation(runs)[: runs // 2]] = True
    jobs = [(f"{seed}|run{j}|{int(seeds[j])}|{'in' if into[j] else 'out'}",
             _CanaryRun(inner, kind, bool(into[j]), ds, rounds, int(seeds[j]),
                        int(seed) + 7919, options, delta)) for j in range(runs)]
    if work is None:
        return jobs
    done = work(jobs)
    records = [done[k] for k, _ in jobs]
    scores = np.array([r["score"] for r in records])
    excluded = records[-1]["excluded"]
    # each distinct pair of ledgers is read once
    seen = {r["ledgers"]: r["eps"] for r in records if "ledgers" in r}
    # the worst (largest) of each over the runs; mu only where every run's ledger is mu-GDP
    worst = {k: max(e[k] for e in seen.values()) for k in ("eps_claimed", "eps_sound",
                                                           "mu_claimed", "mu_sound")}
    for k in ("mu_claimed", "mu_sound"):
        if any(math.isnan(e[k]) for e in seen.values()):
            worst[k] = math.nan
    worst["relation"] = "; ".join(sorted({e["relation"] for e in seen.values()}))
    got = bounds_from_scores(scores[~into], scores[into], confidence=confidence,
                                   delta=delta, seed=seed)
    return {"mode": "multi-run", "trials": runs, "canary": f"1 {kind} canary in "
            f"{runs // 2} of {runs} runs", "statistic": "multi-run: projection "
            "(bounds_from_scores)", "eps_lower": got["eps_lower"],
            "mu_lower": got["mu_lower"],
            "eps_lower_gdp": gdp_epsilon(got["mu_lower"], delta), "canaries": 1,
            "excluded": excluded,
            "runs": runs, **worst}
