"""The federated runs of one audit: the trainings under each defense (units of the engines,
:class:`Training`) and the attacked round that gives the observations.

What every run of an audit shares is one object, :class:`Setting` (the plan, the dataset,
the starting model, the clients, the seed), so that no helper takes a dozen loose values.
A :class:`Training` carries everything it reads, its seed included, and gives its summary
and its trained weights (:func:`pack_weights`, stored in the results file so that a resumed
audit attacks the same weights without training again).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import data as data_mod
from .. import defenses as defenses_mod
from .. import fl
from .._jsonsafe import finite_json
from ..fl.simulate import evaluate
from ..grads import torch_threads
from .cells import CellJob
from .pipeline import CellSetting, Target, build_jobs, with_weights

__all__ = ["Setting", "Training", "pack_weights", "unpack_weights"]


def pack_weights(model: nn.Module) -> dict[str, Any]:
    """``model``'s state as JSON (name -> dtype, shape, base64 of the bytes): exact."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        out[name] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                     "data": base64.b64encode(t.numpy().tobytes()).decode()}
    return out


def unpack_weights(packed: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The state :func:`pack_weights` stored, bit for bit."""
    out = {}
    for name, v in packed.items():
        dtype = getattr(torch, v["dtype"])
        raw = np.frombuffer(base64.b64decode(v["data"]),
                            dtype=torch.empty(0, dtype=dtype).numpy().dtype)
        out[name] = torch.from_numpy(raw.copy()).reshape(v["shape"])
    return out


@dataclass
class Training:
    """One federated run under a defense (a unit of the engines): a fresh copy of the
    defense on ``model`` (copied by the simulator) with ``config`` (its seed included).
    ``run()`` gives the test accuracy, the claimed and sound eps at ``delta`` (and the
    sound eps by RDP), the run's settings and the trained weights ("weights")."""

    defense: defenses_mod.Defense
    dataset: data_mod.Dataset
    model: nn.Module
    config: fl.FLConfig
    delta: float

    def run(self) -> dict[str, Any]:
        run = fl.simulate(self.model, dataset=self.dataset,
                          defense=copy.deepcopy(self.defense), config=self.config)
        return finite_json({
            "accuracy": run.final_accuracy,
            "eps_claimed": run.epsilon(self.delta, "claimed"),
            # the tightest certified bound the sound ledger allows (exact Gaussian, PLD or RDP)
            "eps_sound": run.epsilon(self.delta, "sound"),
            "eps_sound_rdp": run.epsilon(self.delta, "sound", method="rdp"),
            "relation": run.relation,
            "settings": {k: v for k, v in run.settings.items() if k != "defense"},
            "weights": pack_weights(run.model)})


@dataclass(frozen=True)
class Setting:
    """What every run of one audit shares: the ``plan`` (the audit's
    :class:`~.auditor.AuditPlan`, which this module does not import: the auditor imports
    it), the ``dataset``, the starting ``model``, the population of ``clients`` and the
    ``seed``."""

    plan: Any
    dataset: data_mod.Dataset
    model: nn.Module
    clients: int
    seed: int

    def training_run(self, rounds: int) -> fl.FLConfig:
        """The profile's federated training run, ``rounds`` rounds."""
        prof = self.plan.profile
        return fl.FLConfig.make(
            clients=self.clients, clients_per_round=prof.clients_per_round, rounds=rounds,
            local_steps=prof.local_steps, batch_size=prof.batch_size, lr=prof.lr,
            optimizer=prof.optimizer, seed=self.seed, progress=False)

    def attacked_round(self, clients: int, *, clients_per_round: int | None = None,
                       local_steps: int | None = None, batch_size: int | None = None,
                       taps: Sequence[fl.Tap] = (), partition: Any = "iid") -> fl.FLConfig:
        """One round at the attacks' learning rate, on batches of exactly B (the attacks'
        view: "shuffle" batches), by the attacked clients (default: ``plan.examples`` of
        them, L and B the plan's)."""
        plan = self.plan
        return fl.FLConfig.make(
            clients=clients, rounds=1, lr=plan.profile.attack_lr, batch_sampling="shuffle",
            clients_per_round=plan.examples if clients_per_round is None
            else clients_per_round,
            local_steps=plan.local_steps if local_steps is None else local_steps,
            batch_size=plan.batch_size if batch_size is None else batch_size,
            taps=taps, partition=partition, seed=self.seed, progress=False)

    def training(self, d: defenses_mod.Defense, rounds: int | None = None) -> Training:
        """The unit that trains under ``d``: ``rounds`` rounds of the profile's run (None:
        the plan's; with ``plan.trained``, the one audited round on the given weights)."""
        if self.plan.trained and rounds is None:
            config = self.attacked_round(self.clients,
                                         clients_per_round=self.plan.profile.clients_per_round,
                                         local_steps=1, batch_size=1)
        else:
            config = self.training_run(self.plan.rounds if rounds is None else rounds)
        return Training(d, self.dataset, self.model, config, self.plan.delta)

    def weights(self, packed: dict[str, Any]) -> nn.Module:
        """A copy of the starting model holding stored weights."""
        return with_weights(self.model, unpack_weights(packed))

    def accuracy(self, model: nn.Module) -> float:
        """Test accuracy of ``model`` (as the simulator measures it)."""
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        ds = self.dataset
        with torch_threads(1):
            return evaluate(model, params, buffers, ds.x_test, ds.y_test)[0]

    def holdings(self) -> list[list[int]]:
        """Disjoint sets of B training examples, one per attacked client (that they fit:
        the auditor's size check)."""
        n, b = len(self.dataset.y_train), self.plan.batch_size
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
        return [order[i * b:(i + 1) * b].tolist() for i in range(self.plan.examples)]

    def attack_round(self, d: defenses_mod.Defense, start: nn.Module) -> fl.Run:
        """The attacked round: one round from the stage's weights ``start``, L local steps
        of batch B, taps at the audited points for ``plan.examples`` clients (each holding
        exactly B examples when L > 1: L local epochs). On one torch thread, as every unit:
        the simulator's floats depend on how reductions are split between threads, and the
        table must not depend on the machine."""
        plan = self.plan
        taps = [fl.Tap(p, clients=plan.examples) for p in plan.points]
        if plan.local_steps > 1:  # each attacked client holds B examples: L local epochs
            config = self.attacked_round(plan.examples, taps=taps, partition=self.holdings())
        else:
            config = self.attacked_round(self.clients, taps=taps)
        with torch_threads(1):  # as every training of the audit (a unit): one thread
            return fl.simulate(start, dataset=self.dataset, defense=copy.deepcopy(d),
                               config=config)

    def attack_jobs(self, d: defenses_mod.Defense, start: nn.Module,
                    key: Callable[[Target], str], pending: set[str]
                    ) -> list[tuple[str, CellJob]]:
        """The attacked round's observations (from the stage's weights ``start``), through
        the pipeline every audit shares (:func:`.pipeline.build_jobs`): one job per pending
        cell (``key(target)`` per attack)."""
        plan, ds = self.plan, self.dataset
        run = self.attack_round(d, start)
        targets = [Target(observation=obs, truth=run.truth(obs), defense=d.describe(),
                          example=e, seed=self.seed + e)
                   for p in plan.points for e, obs in enumerate(run.observations_at(p))
                   if e < plan.examples]
        cells = CellSetting(input_shape=tuple(ds.input_shape), num_classes=ds.num_classes,
                            image=ds.kind == "image", budget=plan.budget,
                            device=plan.device)
        return build_jobs(targets, plan.attacks, self.model, cells,
                          key=lambda i, t, a: key(t) + f"|{a}|{t.example}",
                          pending=pending.__contains__)
