"""A simulator-level canary game: one round of :func:`leakaudit.fl.simulate` with a canary
client in and out of the population.

The population: ``background`` clients holding ``per_client`` random examples of norm about
1, and the canary client, whose one example x = ``scale`` e_0 has a gradient far above any
clip bound in a fixed direction (a bias-free linear model starting at w = 0). The worlds
follow the neighbouring relation the defense's sound ledger states:

* client-level defense, "add-remove": the canary client is absent ("out") or present ("in");
* otherwise ("zero-out", "replace-one", and every instance-level defense): the canary client
  is present in both worlds, holding x = 0 ("zero": a zero gradient, as if its example
  contributed nothing) or the canary ("in"); its size, hence the FedAvg weights and the
  batch rates, are the same in both.

What is released is the global model after the round (and quantile-clip's next clip). Each
run reports three statistics: the projection of the model change on the canary direction,
its energy ||w_1 - w_0||^2 and, where the defense publishes one, the next clip. The fixed
denominator of client-level DP aggregation is a public constant of the algorithm, so it is
set to the canary-out population's default in both worlds.

Turning the statistics into a lower bound on eps is the auditor's job
(:mod:`leakaudit.empirical.stats`); this module only runs the simulator.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from ..data import Dataset
from ..defenses import Defense
from ..defenses import get as get_defense
from ..neighbours import canary_out
from .config import FLConfig
from .run import Run
from .simulate import simulate

__all__ = ["CanaryGame", "worlds"]


def worlds(defense: Defense) -> tuple[str, str]:
    """(canary-out world, canary-in world) for the relation the sound ledger states."""
    if defense.level == "client" and canary_out(defense.relation) == "absent":
        return "out", "in"
    return "zero", "in"   # a zero example, or a client present with one


class CanaryGame:
    """The population, model and settings of the game; :meth:`run` plays one world once."""

    def __init__(self, *, features: int = 256, classes: int = 4, background: int = 4,
                 per_client: int = 2, companions: int = 0, scale: float = 50.0,
                 lr: float = 1.0, data_seed: int = 123) -> None:
        self.features, self.classes = features, classes
        self.background, self.per_client = background, per_client
        self.companions, self.scale, self.lr = companions, scale, lr
        g = torch.Generator().manual_seed(data_seed)
        n = background * per_client + companions
        self._x = torch.randn(n, features, generator=g) / math.sqrt(features)
        self._y = torch.randint(0, classes, (n,), generator=g)

    @property
    def canary_client(self) -> int:
        """The canary client's index (the last one) where it is present."""
        return self.background

    def dataset(self, world: str) -> tuple[Dataset, list[list[int]]]:
        """The data set and explicit partition of ``world``: "out", "zero" or "in"."""
        if world not in ("out", "zero", "in"):
            raise ValueError(f"world must be 'out', 'zero' or 'in', got {world!r}")
        n_bg = self.background * self.per_client
        parts = [list(range(i * self.per_client, (i + 1) * self.per_client))
                 for i in range(self.background)]
        x, y = self._x, self._y
        if world != "out":
            extra = torch.zeros(1, self.features)
            if world == "in":
                extra[0, 0] = self.scale
            x = torch.cat([x, extra])
            y = torch.cat([y, torch.zeros(1, dtype=torch.int64)])
            parts.append(list(range(n_bg, n_bg + self.companions + 1)))
        else:
            x, y = x[:n_bg], y[:n_bg]
        ds = Dataset(name="canary-game", x_train=x, y_train=y, x_test=x[:2].clone(),
                     y_test=y[:2].clone(), num_classes=self.classes,
                     input_shape=(self.features,), kind="tabular", source="canary game")
        return ds, parts

    def model(self) -> nn.Module:
        model = nn.Linear(self.features, self.classes, bias=False)
        with torch.no_grad():
            model.weight.zero_()
        return model

    def direction(self) -> torch.Tensor:
        """Unit vector of the canary's update at w = 0 (minus its gradient), flattened."""
        x = torch.zeros(self.features)
        x[0] = self.scale
        p = torch.full((self.classes,), 1.0 / self.classes)
        p[0] -= 1.0
        g = torch.outer(p, x).reshape(-1)
        return -g / g.norm()

    def run(self, defense: Defense | str, world: str, seed: int, **settings: Any) -> Run:
        """One round in ``world``; ``settings`` go to :func:`simulate` (client sampling,
        batch sampling, local steps, batch size)."""
        ds, parts = self.dataset(world)
        kw = dict(settings)
        if "client_fraction" in kw:
            default = kw["client_fraction"] * self.background
        else:
            default = kw.get("clients_per_round") or self.background
        kw.setdefault("expected_weight", default)
        kw.setdefault("local_steps", 1)
        kw.setdefault("batch_size", self.per_client)
        config = FLConfig.make(clients=len(parts), partition=parts, rounds=1, lr=self.lr,
                               seed=seed, progress=False, val_fraction=0.25, **kw)
        return simulate(self.model(), dataset=ds, defense=copy.deepcopy(get_defense(defense)),
                        config=config)

    def statistics(self, run: Run) -> dict[str, float]:
        """Projection on the canary direction, energy, and the next clip where published."""
        w = run.model.weight.detach().reshape(-1)
        out = {"projection": float(w @ self.direction()), "energy": float(w @ w)}
        history = getattr(run.defense, "clip_history", None)
        if isinstance(history, list) and len(history) > 1:
            out["clip"] = float(history[1])
        return out

    def play(self, defense: Defense | str, trials: int, seed: int, delta: float,
             **settings: Any) -> tuple[dict[str, list[dict[str, float]]], float]:
        """``trials`` runs per world: ({world: [statistics]}, the largest sound eps that
        ``Run.epsilon(delta, "sound")`` printed in the canary-in world)."""
        d = get_defense(defense)
        world_out, world_in = worlds(d)
        runs: dict[str, list[dict[str, float]]] = {world_out: [], world_in: []}
        printed: dict[str, float] = {}
        for t in range(trials):
            for w in runs:
                run = self.run(d, w, 1_000_003 * seed + t, **settings)
                runs[w].append(self.statistics(run))
                if w == world_in:
                    key = repr([[e.to_dict() for e in lg.events] for lg in run.sound])
                    if key not in printed:
                        printed[key] = run.epsilon(delta, "sound")
        return runs, max(printed.values())
