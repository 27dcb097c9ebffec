"""The FedAvg attack: reconstruct a client's data from its update after L local steps by
simulating the local optimisation in the graph (Geiping, Bauermeister, Droege, Moeller,
"Inverting Gradients", NeurIPS 2020, section 6 "Federated averaging"; Dimitrov, Balunovic,
Konstantinov, Vechev, "Data leakage in federated averaging", TMLR 2022).

What the attacker knows: the global weights the round started from, the update, and what the
protocol says about local training: the number of local steps ``local_steps`` (L), the
client's learning rate ``client_lr``, its optimizer ``client_optimizer`` ("sgd" or "adam", a
fresh state each round as in :mod:`leakaudit.optim`) and the batch size B. The client is
taken to hold B examples and to take every local step on all of them (L local epochs of
one full batch: Geiping et al.'s FedAvg case; the simulator's behaviour when a client holds
exactly B examples).

Input: like every attack, the gradient ``g = -dW / (client_lr L)`` (what the naive attacks
match; docs/attacks.md), from which the update ``dW`` is known up
to the scale. Labels: inferred from ``g`` (the counts of
:mod:`leakaudit.attacks.label_counts`; exact in the limit of small steps).

Objective: 1 - cosine similarity between the simulated update ``w_L(x) - w_0`` of the dummy
batch ``x`` (L optimiser steps on the mean cross-entropy, each differentiated through) and
the observed update, plus ``tv_weight`` times the total variation; optimiser, step schedule
and boxing as in :mod:`leakaudit.attacks.ig` (signed Adam, pixels in [0, 1]). With L = 1 and
SGD this is exactly Inverting Gradients. ``method="l2"`` matches instead the squared L2
distance between ``-dW_sim / (client_lr L)`` and ``g`` with iDLG's L-BFGS loop (the same
as idlg for L = 1; on the sigmoid LeNet it rebuilds where idlg's naive gradient fails at
L > 1); it is registered as ``"fedavg-l2"``. Each evaluation costs about L times an IG / iDLG one.
``per_tensor=True`` matches every tensor's direction separately (as ig-layer).
Not modelled (listed in docs/results.md): several mini-batches per epoch (Dimitrov et al.'s
epoch-order prior), momentum, weight decay.
"""

from __future__ import annotations

from typing import Any

import torch

from .._validate import check_int, check_number
from ..grads import cross_entropy
from ..optim import OPTIMIZERS, make_optimizer
from .attempt import Attempt, Config, Start
from .base import Attack
from .ig import InvertingGradients, total_variation
from .problem import GradientProblem, layer_cosine_distance

__all__ = ["FedAvg", "FedAvgL2", "METHODS", "simulated_update"]

#: "cosine": Geiping et al.'s objective and loop (as ig); "l2": iDLG's (L-BFGS on the squared
#: distance in gradient units, both updates scaled by -1 / (client_lr L); no TV term;
#: strong-Wolfe line search unless ``line_search=None``)
METHODS = ("cosine", "l2")


class FedAvg(InvertingGradients):
    """Match the update of L simulated local steps (cosine + TV, signed Adam, boxed)."""

    name = "fedavg"
    paper = ("Geiping et al., Inverting Gradients (FedAvg case), NeurIPS 2020; Dimitrov et "
             "al., Data leakage in federated averaging, TMLR 2022")
    defaults = {**InvertingGradients.defaults, "local_steps": 1, "client_lr": 0.1,
                "client_optimizer": "sgd", "method": "cosine", "line_search": "strong_wolfe"}
    protocol = {"local_steps": "local_steps", "client_lr": "lr", "client_optimizer": "optimizer"}

    def check_option(self, key: str, value: Any) -> Any:
        if key == "local_steps":
            return check_int("local_steps", value, 1)
        if key == "client_lr":
            return check_number("client_lr", value, minimum=0.0, open_min=True)
        if key == "method":
            if value not in METHODS:
                raise ValueError(f"method must be one of {METHODS}, got {value!r}")
            return value
        if key == "line_search":
            return Attack.check_option(self, key, value)
        if key == "client_optimizer":
            if value not in OPTIMIZERS:
                raise ValueError(f"client_optimizer must be one of {OPTIMIZERS}, got {value!r}")
            return value
        return super().check_option(key, value)

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config) -> Attempt:
        if cfg.options["method"] == "l2":  # iDLG's loop: L-BFGS on the L2 distance
            return Attack.attempt(self, problem, start, cfg)
        return super().attempt(problem, start, cfg)

    def objective(self, problem: GradientProblem, x: torch.Tensor,
                  label_logits: torch.Tensor | None, cfg: Config,
                  create_graph: bool = True) -> torch.Tensor:
        opts = cfg.options
        with torch.enable_grad():
            update = simulated_update(problem, x, opts["local_steps"], opts["client_lr"],
                                      opts["client_optimizer"])
        if opts["method"] == "l2":  # in gradient units: g = -dW / (client_lr L)
            scale = -1.0 / (opts["client_lr"] * opts["local_steps"])
            loss = torch.stack([(u * scale - o).pow(2).sum()
                                for u, o in zip(update, problem.observed)]).sum()
            return loss if create_graph else loss.detach()
        # the observed gradient is -dW / (client_lr L): its negative points along dW
        if opts["per_tensor"]:
            loss = layer_cosine_distance(update, [-o for o in problem.observed])
            if not create_graph:
                loss = loss.detach()
            if cfg.is_image and opts["tv_weight"] > 0:
                loss = loss + opts["tv_weight"] * total_variation(x)
            return loss
        dot = torch.stack([(u * -o).sum() for u, o in zip(update, problem.observed)]).sum()
        uu = torch.stack([u.pow(2).sum() for u in update]).sum()
        oo = torch.stack([o.pow(2).sum() for o in problem.observed]).sum()
        loss = 1.0 - dot / (uu.sqrt() * oo.sqrt()).clamp_min(1e-30)
        if not create_graph:
            loss = loss.detach()
        if cfg.is_image and opts["tv_weight"] > 0:
            loss = loss + opts["tv_weight"] * total_variation(x)
        return loss


def simulated_update(problem: GradientProblem, x: torch.Tensor, local_steps: int,
                     client_lr: float, client_optimizer: str) -> list[torch.Tensor]:
    """``w_L - w_0`` after ``local_steps`` steps of ``client_optimizer`` on the mean
    cross-entropy of ``(x, problem.labels)``, differentiable with respect to ``x``."""
    start = {n: p.detach().requires_grad_(True) for n, p in zip(problem.names, problem.params)}
    weights = dict(start)
    opt = make_optimizer(client_optimizer, client_lr)
    for _ in range(local_steps):
        tensors = {**weights, **problem.constants}
        logits = torch.func.functional_call(problem.model, tensors, (x,))
        loss = cross_entropy(logits, problem.target(None))
        grads = torch.autograd.grad(loss, list(weights.values()), create_graph=True,
                                    allow_unused=True)
        grads = [torch.zeros_like(w) if g is None else g
                 for g, w in zip(grads, weights.values())]
        weights = opt.step(weights, grads)
    return [weights[n] - start[n] for n in problem.names]


class FedAvgL2(FedAvg):
    """The same simulation matched iDLG's way: L2 in gradient units, L-BFGS."""

    name = "fedavg-l2"
    defaults = {**FedAvg.defaults, "method": "l2"}
