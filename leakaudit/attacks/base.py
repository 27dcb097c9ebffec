"""Shared machinery of the gradient-inversion attacks (docs/attacks.md).

An attack is a subclass of :class:`Attack` in its own module: it says how a dummy batch
starts (:meth:`Attack.start`), whether the labels are learned with the input (DLG) or inferred
from the gradient first (iDLG, CPL, IG), and, when it does not use the common L-BFGS loop, how
one attempt optimises (:meth:`Attack.attempt`). Everything else is here and common to all:

* the gradient-matching problem (:class:`GradientProblem`, :mod:`.problem`): the model's
  weights at the leak point are copied, never modified; the dummy's gradient is that of
  :func:`leakaudit.grads.cross_entropy` over the dummy batch (as
  :func:`leakaudit.grads.batch_gradient` computes the observed one);
* the L-BFGS loop: ``torch.optim.LBFGS`` with its defaults (lr 1, max_iter 20, history 100), an
  "iteration" is one ``step(closure)``; ``line_search="strong_wolfe"`` by default, ``None`` for
  the reference behaviour; stops early when the objective is <= ``early_stop`` times its
  scale (:meth:`Attack.loss_scale`: the L2 distance relative to ||observed||^2, so that
  the rule means the same at trained weights, where ||g||^2 ~ 1e-10, as at initial ones;
  ``converged`` says the same test held) or when a step no longer moves the dummy; the L2
  objective is divided by a power of two near ||observed||^2 when that is below 1
  (:func:`.problem.l2_unit`: L-BFGS's absolute tolerances would stop it otherwise); with
  the built-in objective, the evaluations L-BFGS and the history repeat (the point where
  the previous step stopped) are reused, not recomputed, which leaves every result
  bit-for-bit unchanged;
* restarts: attempt seeds come from one ``torch.Generator`` seeded with ``seed``; the winner is
  the attempt with the lowest gradient loss (never the distance to the ground truth, which the
  attacker does not have). An attempt whose loss becomes NaN/inf, or grows above
  ``divergence_factor`` times its initial value, or whose dummy becomes non-finite or larger
  than 1e6 in magnitude, is abandoned and replaced by the next seed (at most ``max_retries``
  times); its best finite iterate is kept as a last resort, flagged ``diverged``. Each attempt
  returns its best iterate by gradient loss (the last one, except when the reference L-BFGS
  without line search overshoots);
* the ground truth never reaches the attack: with ``keep_iterates`` the history keeps the
  reported dummies (:mod:`.attempt`), which a scorer measures afterwards
  (:func:`leakaudit.metrics.score_history`);
* the run flushes subnormal floats (saturated sigmoids, 4x slower arithmetic otherwise) and by
  default uses one intra-op thread (``num_threads=1``): on a shared 2-core CPU, two threads
  made these small double-backward problems 20-50x slower (OpenMP threads waiting for each
  other); ``num_threads=None`` keeps torch's setting. Both are restored after.

Reported inputs: images (``input_shape`` with 2 or more dimensions) clamped to [0, 1], tabular
rows unclamped; the optimisation itself is unconstrained unless the attack says otherwise.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from .._validate import check_device, check_int, check_number
from ..grads import flush_denormals, torch_threads
from .attempt import Attempt, AttemptRun, Config, Memo, Start
from .checks import RELU_TYPES, ReLUWarning, check_call, warn_relu
from .labels import infer_labels
from .problem import GradientProblem, trainable

__all__ = [
    "Attack",
    "AttackDivergedError",
    "Attempt",
    "AttemptRun",
    "Config",
    "GradientProblem",
    "RELU_TYPES",
    "ReLUWarning",
    "Reconstruction",
    "Start",
    "check_int",
    "check_number",
    "run_attack",
    "trainable",
]

#: options every attack accepts, with their defaults
COMMON_OPTIONS: dict[str, Any] = {
    "early_stop": 1e-9,
    "divergence_factor": 1e4,
    "max_retries": 3,
    "num_threads": 1,
}


class AttackDivergedError(FloatingPointError):
    """Every attempt diverged before reaching a finite gradient loss."""


@dataclass
class Reconstruction:
    """The result of :func:`leakaudit.attacks.reconstruct`."""

    #: (B, *input_shape) reconstructed inputs (images clamped to [0, 1])
    inputs: torch.Tensor = field(repr=False)
    #: (B,) int64: argmax of the dummy soft labels (DLG) or the inferred/given labels
    labels: torch.Tensor
    #: final objective of the winning attempt (the L2 gradient distance; IG: its objective)
    gradient_loss: float
    #: {"iteration", "gradient_loss"[, "mse"]} every ``track_every`` steps and at the end
    history: list[dict[str, Any]] = field(repr=False)
    #: optimiser steps done by the winning attempt
    iterations: int
    #: index of the winning attempt among ``attempts`` (abandoned ones included)
    restart: int
    attack: str
    #: the objective reached ``early_stop`` relative to its scale (:meth:`Attack.loss_scale`)
    converged: bool
    #: every attempt diverged: ``inputs`` is the best finite iterate seen before divergence
    diverged: bool = False
    #: labels inferred from the gradient: whether the multiset was identifiable (None when
    #: the labels were given or learned)
    labels_identifiable: bool | None = None
    #: one dict per attempt: seed, gradient_loss, iterations, diverged, reason
    attempts: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: wall-clock seconds of the whole call
    seconds: float = 0.0



class Attack:
    """One gradient-inversion attack: subclasses set ``name`` and implement :meth:`start`."""

    name: ClassVar[str] = ""
    #: one-line reference shown by ``describe``
    paper: ClassVar[str] = ""
    #: labels optimised jointly with the input (DLG) rather than inferred first
    learns_labels: ClassVar[bool] = False
    #: attack-specific options and their defaults (added to COMMON_OPTIONS)
    defaults: ClassVar[dict[str, Any]] = {"line_search": "strong_wolfe"}
    #: what the protocol tells the attack from an observation: option -> Observation attribute
    protocol: ClassVar[dict[str, str]] = {}
    #: whether the attack optimises a dummy (False: a closed form or a scoring, no budget;
    #: no ReLU warning then)
    optimises: ClassVar[bool] = True

    # ---------------------------------------------------------------- to override
    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        """The initial dummy (and label logits) of one attempt, drawn from ``gen`` only."""
        raise NotImplementedError

    def check_option(self, key: str, value: Any) -> Any:
        """Validate one attack-specific option; returns the value to use."""
        if key == "line_search":
            if value not in ("strong_wolfe", None):
                raise ValueError(f"line_search must be 'strong_wolfe' or None, got {value!r}")
            return value
        return value

    def objective(self, problem: GradientProblem, x: torch.Tensor,
                  label_logits: torch.Tensor | None, cfg: Config,
                  create_graph: bool = True) -> torch.Tensor:
        """What the optimiser minimises and restarts are scored by: the L2 gradient
        distance divided by ``problem.l2_unit`` (1 unless ||observed||^2 < 1)."""
        loss = problem.l2(x, label_logits, create_graph)
        return loss if problem.l2_unit == 1.0 else loss / problem.l2_unit

    def loss_scale(self, problem: GradientProblem) -> float:
        """The objective's scale, which ``early_stop`` is relative to: ||observed||^2 (over
        ``l2_unit``) for the built-in L2 objective, 1 for an attack with its own objective
        (the scale-free cosine and normalised matches, already of order one)."""
        if type(self).objective is not Attack.objective:
            return 1.0
        return max(problem.observed_sq, 1e-300) / problem.l2_unit

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config) -> Attempt:
        """One L-BFGS optimisation from ``start`` (see the module docstring)."""
        x = start.inputs.clone().requires_grad_(True)
        logits = None
        if start.label_logits is not None:
            logits = start.label_logits.clone().requires_grad_(True)
        variables = [x] if logits is None else [x, logits]
        opt = torch.optim.LBFGS(variables, line_search_fn=cfg.options["line_search"])
        # the built-in objective is a pure function of the dummy: reuse its evaluations (a
        # subclass's own objective may count or vary its calls, so it gets every call)
        memo = Memo() if type(self).objective is Attack.objective else None

        def closure() -> torch.Tensor:
            opt.zero_grad()
            if memo is not None:
                hit = memo.get(variables)
                if hit is not None:
                    loss, grads = hit
                    for v, g in zip(variables, grads):
                        v.grad = g.clone()
                    return loss
            loss = self.objective(problem, x, logits, cfg)
            # the dummy's gradient only: backward() would also differentiate (and accumulate)
            # the loss with respect to the model's weights, which nothing reads
            grads = torch.autograd.grad(loss, variables, allow_unused=True)
            for v, g in zip(variables, grads):
                v.grad = g
            if memo is not None:
                memo.put(variables, loss, grads)
            return loss

        def evaluate() -> float:
            if memo is not None:
                hit = memo.get(variables)
                if hit is None:  # evaluate as the closure would: its next call is likely here
                    with torch.enable_grad():
                        loss = self.objective(problem, x, logits, cfg)
                        grads = torch.autograd.grad(loss, variables)
                    hit = memo.put(variables, loss, grads)
                return float(hit[0])
            ld = None if logits is None else logits.detach()
            return float(self.objective(problem, x.detach(), ld, cfg, create_graph=False))

        run = AttemptRun(cfg, x, logits, evaluate,
                         cfg.options["early_stop"] * self.loss_scale(problem))
        if run.failed:
            return run.result()
        while run.iterations < cfg.max_iterations:
            before = x.detach().clone()
            before_logits = None if logits is None else logits.detach().clone()
            start_loss = float(opt.step(closure).detach())
            if not run.after_step(start_loss, before, before_logits):
                break
        return run.result()

    # ---------------------------------------------------------------- options
    def options(self, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults merged with ``given``, every value checked; unknown names refused."""
        known = {**COMMON_OPTIONS, **self.defaults}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for attack {self.name!r}; "
                f"known: {', '.join(sorted(known))}"
            )
        merged = {**known, **given}
        out: dict[str, Any] = {}
        for key, value in merged.items():
            if key == "early_stop":
                value = check_number(key, value, minimum=0.0)
            elif key == "divergence_factor":
                value = check_number(key, value, minimum=1.0)
                if value <= 1.0:
                    raise ValueError(f"divergence_factor must be > 1, got {value}")
            elif key == "max_retries":
                value = check_int(key, value, 0)
            elif key == "num_threads":
                value = None if value is None else check_int(key, value, 1)
            else:
                value = self.check_option(key, value)
            out[key] = value
        return out


# -------------------------------------------------------------------------------- driver
def run_attack(attack: Attack, model: nn.Module, gradients: Sequence[torch.Tensor], *,
               input_shape: Sequence[int], num_classes: int, batch_size: int,
               max_iterations: int, restarts: int, seed: int, labels: Any,
               options: dict[str, Any], track_every: int = 10,
               keep_iterates: bool = False,
               device: str | torch.device | None = None) -> Reconstruction:
    """Validate everything, then run the attempts and keep the best by gradient loss.

    The attack sees only what an attacker has; with ``keep_iterates`` the winning history
    holds the reported dummy of each recorded step (``"inputs"``) for a scorer. ``device``:
    where it runs (None: where ``model`` is; the model is copied there)."""
    t0 = time.perf_counter()
    where = check_device("device", device)
    if where is not None and isinstance(model, nn.Module):
        model = copy.deepcopy(model).to(where)
    cfg, grads, known = check_call(
        attack.options, model, gradients, input_shape, num_classes, batch_size,
        max_iterations, restarts, seed, labels, track_every, options, keep_iterates)
    return _best_of_attempts(attack, model, cfg, grads, known, t0)


def _best_of_attempts(attack: Attack, model: nn.Module, cfg: Config,
                      grads: list[torch.Tensor], known: torch.Tensor | None,
                      t0: float) -> Reconstruction:
    if attack.optimises:
        warn_relu(model)
    with torch_threads(cfg.options["num_threads"]), flush_denormals():
        identifiable: bool | None = None
        if known is None and not attack.learns_labels:
            known, identifiable = infer_labels(model, grads, cfg.batch_size, cfg.num_classes)
        problem = GradientProblem(model, grads, None)
        if known is not None:
            problem.labels = known.to(problem.device)
        master = torch.Generator().manual_seed(cfg.seed)
        attempts: list[Attempt] = []
        seeds: list[int] = []
        done = 0
        while done < cfg.restarts and len(attempts) < cfg.restarts + cfg.options["max_retries"]:
            sub = int(torch.randint(0, 2**62, (1,), generator=master))
            start = attack.start(torch.Generator().manual_seed(sub), cfg)
            if problem.labels is not None and start.label_logits is not None:
                start.label_logits = None  # known labels: DLG optimises the input only
            start.inputs = start.inputs.to(problem.device, problem.dtype)
            if start.label_logits is not None:
                start.label_logits = start.label_logits.to(problem.device, problem.dtype)
            attempt = attack.attempt(problem, start, cfg)
            attempts.append(attempt)
            seeds.append(sub)
            done += not attempt.diverged
    pool = [i for i, a in enumerate(attempts) if not a.diverged] or list(range(len(attempts)))
    win = min(pool, key=lambda i: (attempts[i].gradient_loss, i))
    best = attempts[win]
    if not math.isfinite(best.gradient_loss):
        raise AttackDivergedError(
            f"{attack.name}: all {len(attempts)} attempts diverged without a finite gradient "
            f"loss (first reason: {attempts[0].reason}); the observed gradients may be "
            "non-finite in effect (too large) or inconsistent with the model"
        )
    diverged = best.diverged
    if diverged:
        warnings.warn(f"{attack.name}: every attempt diverged; returning the best finite "
                      f"iterate (gradient loss {best.gradient_loss:.3g})", RuntimeWarning,
                      stacklevel=4)
    if best.label_logits is not None:
        out_labels = best.label_logits.argmax(dim=-1).to(torch.int64).cpu()
    else:
        assert problem.labels is not None
        out_labels = problem.labels.detach().to(torch.int64).cpu()
    inputs = cfg.report(best.inputs).cpu()
    if not torch.isfinite(inputs).all():  # cannot happen: the best iterate is finite
        raise AttackDivergedError(f"{attack.name}: non-finite reconstruction")
    return Reconstruction(
        inputs=inputs,
        labels=out_labels,
        gradient_loss=float(best.gradient_loss),
        history=best.history,
        iterations=best.iterations,
        restart=win,
        attack=attack.name,
        converged=bool(best.gradient_loss
                       <= cfg.options["early_stop"] * attack.loss_scale(problem)),
        diverged=diverged,
        labels_identifiable=identifiable,
        attempts=[{"seed": s, "gradient_loss": float(a.gradient_loss),
                   "iterations": a.iterations, "diverged": a.diverged, "reason": a.reason}
                  for s, a in zip(seeds, attempts)],
        seconds=time.perf_counter() - t0,
    )

