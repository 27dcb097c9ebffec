"""The one attack pipeline of both entry points: observations -> cells -> engine -> records.

:func:`leakaudit.audit` simulates a round and :func:`leakaudit.audit_observations` is handed
observations captured elsewhere (Opacus, Flower, a user's loop); from there both go through
this module: :func:`build_jobs` turns each (observation, attack) into one cell (the
attacker's view, :class:`~.cells.AttackSpec`, and apart the truth, :class:`~.cells.CellJob`)
and :func:`run_jobs` runs the pending cells on an engine and writes each record to the
results file as it finishes.

What the protocol tells an attack comes from the observation, as the attack declares it
(:attr:`leakaudit.attacks.base.Attack.protocol`: attack option -> Observation attribute; e.g.
the FedAvg attacks read L, the client's learning rate and optimizer); every attack is told
how many examples are behind the observation (:attr:`Observation.examples_behind`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .. import attacks as attacks_mod
from .._validate import check_selection
from ..engines import Engine
from ..records import GroundTruth, Observation, ResultsFile
from ..workload import Workload
from .cells import AttackBudget, AttackSpec, CellJob, content_key, relabelled

__all__ = ["CellSetting", "Target", "build_jobs", "protocol_options", "records",
           "resolve_attacks", "run_jobs", "with_weights"]


@dataclass(frozen=True)
class Target:
    """One observation to attack, with the truth behind it (for the scorer only), its row
    label in the report, its number among the observations of (defense, point), and the
    seed of its attacks."""

    observation: Observation
    truth: GroundTruth
    defense: str
    example: int
    seed: int


def resolve_attacks(attacks: Sequence[str | attacks_mod.Attack]) -> list[attacks_mod.Attack]:
    """Attack arguments as Attack objects (a registered name, or an Attack): the objects
    travel to the engines' workers, so an attack registered at run time works in every
    engine. Refused before any work: an empty selection, unknown names, a name twice."""
    chosen = check_selection("attacks", attacks)
    out = []
    for a in chosen:
        if isinstance(a, attacks_mod.Attack):
            out.append(a)
        elif isinstance(a, str) and a in attacks_mod.available():
            out.append(attacks_mod.get(a))
        else:
            raise ValueError(f"attacks must be among {attacks_mod.available()} (or Attack "
                             f"objects), got {a!r}")
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise ValueError(f"attacks must be distinct, got {names}")
    return out


def protocol_options(attack: str | attacks_mod.Attack, obs: Observation) -> dict[str, Any]:
    """What the protocol tells ``attack`` about ``obs``: the options the attack declares in
    ``protocol`` (attack option -> Observation attribute), those the observation knows."""
    facts = (attack if isinstance(attack, attacks_mod.Attack)
             else attacks_mod.get(attack)).protocol
    return {option: getattr(obs, attr) for option, attr in facts.items()
            if getattr(obs, attr) is not None}


def with_weights(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> nn.Module:
    """A copy of ``model`` holding the observed weights: by name (parameters and buffers),
    else the trainable parameters in order."""
    net = copy.deepcopy(model)
    state = net.state_dict()
    params = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    with torch.no_grad():
        if {n for n, _ in params} <= set(weights):
            pairs = [(state[n], weights[n]) for n in weights if n in state]
        else:
            pairs = [(p, w) for (_, p), w in zip(params, weights.values())]
        for p, w in pairs:
            p.copy_(torch.as_tensor(w, dtype=p.dtype))
    return net


@dataclass(frozen=True)
class CellSetting:
    """What every cell of one call shares: the ``input_shape`` and ``num_classes`` the
    protocol tells the attacks, whether the inputs are images (``image``: SSIM is scored),
    the attack ``budget`` with its success threshold, and the ``device`` of the attacks."""

    input_shape: tuple[int, ...]
    num_classes: int
    image: bool
    budget: AttackBudget
    device: str | None = None


def build_jobs(targets: Sequence[Target], attacks: Sequence[str | attacks_mod.Attack],
               model: nn.Module, setting: CellSetting, *,
               key: Callable[[int, Target, str], str],
               pending: Callable[[str], bool] = lambda key: True
               ) -> list[tuple[str, CellJob]]:
    """One cell per (target, attack) whose key (``key(i, target, attack)``) is ``pending``:
    the model at the leak point, the observed gradient, the protocol's facts and the budget
    (the attacker's view), and apart the truth."""
    jobs = []
    shape = tuple(int(s) for s in setting.input_shape)
    budget = setting.budget
    chosen = resolve_attacks(attacks)
    for i, t in enumerate(targets):
        keys = [(a, key(i, t, a.name)) for a in chosen]
        keys = [(a, k) for a, k in keys if pending(k)]
        if not keys:
            continue
        obs = t.observation
        net = with_weights(model, obs.weights)
        for a, k in keys:
            spec = AttackSpec.make(a, net, obs.as_gradient(), input_shape=shape,
                                   num_classes=int(setting.num_classes),
                                   batch_size=obs.examples_behind,
                                   max_iterations=budget.max_iterations,
                                   restarts=budget.restarts, seed=t.seed,
                                   options=protocol_options(a, obs), device=setting.device)
            jobs.append((k, CellJob(defense=t.defense, point=int(obs.point),
                                    example=t.example, spec=spec, truth=t.truth,
                                    threshold=float(budget.threshold),
                                    image=setting.image)))
    return jobs


def run_jobs(jobs: list[tuple[str, CellJob]], runner: Engine | Workload, store: ResultsFile,
             on_done: Callable[[], Any] = lambda: None,
             memo: dict[str, dict[str, Any]] | None = None) -> None:
    """Run the cells on ``runner``; each record is stored (by this process, the one writer)
    as its cell finishes. A cell whose truth has no labels (label -1) gets label accuracy
    "nan".

    Cells with the same content (:func:`~.cells.content_key`: the same attack on the same
    observation with the same truth, e.g. leak points 0 and 1 of a defense that acts
    elsewhere) run once: the others get its record under their own name, bit for bit what
    they would have computed. ``memo`` (content key -> record) carries these records from
    one call to the next (an audit's defenses share the point-2 cells). A cell whose record
    comes from another is stored right after the cell before it in ``jobs``, so a serial
    engine writes the file in the order of ``jobs``."""
    memo = {} if memo is None else memo
    unlabelled = {k for k, job in jobs if bool((job.truth.labels < 0).any())}
    contents = [content_key(job) for _, job in jobs]
    first: dict[str, int] = {}
    for i, c in enumerate(contents):
        if c not in memo:
            first.setdefault(c, i)
    runs = set(first.values())
    index = {jobs[i][0]: i for i in runs}
    written = [False] * len(jobs)

    def put(i: int, rec: dict[str, Any]) -> None:
        k, job = jobs[i]
        rec = relabelled(rec, job)
        if k in unlabelled:
            rec = dict(rec, label_accuracy="nan")  # no labels to score against
        store.put("cell", k, rec)
        written[i] = True
        on_done()

    def follow() -> None:  # the cells that reuse a record, each after its predecessor
        for i in range(len(jobs)):
            if (not written[i] and i not in runs and contents[i] in memo
                    and (i == 0 or written[i - 1])):
                put(i, memo[contents[i]])

    follow()
    for done in runner.run([jobs[i] for i in sorted(runs)]):
        i = index[done.key]
        memo[contents[i]] = done.record
        put(i, done.record)
        follow()


def records(store: ResultsFile, keys: Iterable[str]) -> list[dict[str, Any]]:
    """The stored cell records, in the order of ``keys`` (canonical, whatever order the cells
    finished in)."""
    return [store.get("cell", k) for k in keys]
