"""Shared machinery of the gradient-inversion attacks (SPEC-attacks.md, "Attacks").

An attack is a subclass of :class:`Attack` in its own module: it says how a dummy batch
starts (:meth:`Attack.start`), whether the labels are learned with the input (DLG) or inferred
from the gradient first (iDLG, CPL, IG), and, when it does not use the common L-BFGS loop, how
one attempt optimises (:meth:`Attack.attempt`). Everything else is here and common to all:

* the gradient-matching problem (:class:`GradientProblem`): the model's weights at the leak
  point are copied, never modified; the dummy's gradient is that of the mean cross-entropy over
  the dummy batch (as :func:`leakaudit.fl.batch_gradient` computes the observed one), through
  ``torch.func.functional_call`` and ``torch.autograd.grad(create_graph=True)``;
* the L-BFGS loop: ``torch.optim.LBFGS`` defaults (lr 1, max_iter 20, history 100), an
  "iteration" is one ``step(closure)``; ``line_search="strong_wolfe"`` by default, ``None`` for
  the reference behaviour; stops early when the gradient loss is <= ``early_stop`` or when a
  step no longer moves the dummy; with the built-in objective, the evaluations L-BFGS and the
  history repeat (the point where the previous step stopped) are reused, not recomputed, which
  leaves every result bit-for-bit unchanged;
* restarts: attempt seeds come from one ``torch.Generator`` seeded with ``seed``; the winner is
  the attempt with the lowest gradient loss (never the distance to the ground truth, which the
  attacker does not have). An attempt whose loss becomes NaN/inf, or grows above
  ``divergence_factor`` times its initial value, or whose dummy becomes non-finite or larger
  than 1e6 in magnitude, is abandoned and replaced by the next seed (at most ``max_retries``
  times); its best finite iterate is kept as a last resort, flagged ``diverged``. Each attempt
  returns its best iterate by gradient loss (the last one, except when the reference L-BFGS
  without line search overshoots);
* ``track`` (the ground truth) never reaches the attack: attempts get a ``monitor`` that maps
  a reported dummy to its matched MSE, used only to add that number to the history;
* the run flushes subnormal floats (saturated sigmoids, 4x slower arithmetic otherwise) and by
  default uses one intra-op thread (``num_threads=1``): on a shared 2-core CPU, two threads
  made these small double-backward problems 20-50x slower (OpenMP threads waiting for each
  other); ``num_threads=None`` keeps torch's setting. Both are restored after.

Reported inputs: images (``input_shape`` with 2 or more dimensions) clamped to [0, 1], tabular
rows unclamped; the optimisation itself is unconstrained unless the attack says otherwise.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from leakaudit.fl import _flush_denormals
from leakaudit.metrics import matched_mse

from .._validate import check_device, check_int
from .labels import infer_labels

__all__ = [
    "Attack",
    "AttackDivergedError",
    "GradientProblem",
    "RELU_TYPES",
    "ReLUWarning",
    "Reconstruction",
    "Start",
]

#: activations whose second derivative vanishes (piecewise linear) or nearly so: gradient
#: matching still works on such models, only worse (SPEC: warn, do not refuse)
RELU_TYPES: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU,
    nn.SiLU, nn.Mish, nn.Hardswish, nn.Hardtanh, nn.Hardsigmoid,
)  # fmt: skip

#: options every attack accepts, with their defaults
COMMON_OPTIONS: dict[str, Any] = {
    "early_stop": 1e-6,
    "divergence_factor": 1e4,
    "max_retries": 3,
    "num_threads": 1,
}
_INPUT_LIMIT = 1e6

#: maps a reported dummy batch to its matched MSE against the ground truth (history only)
Monitor = Optional[Callable[[torch.Tensor], float]]


class ReLUWarning(UserWarning):
    """The model has ReLU-type activations: gradient inversion is harder, not impossible."""


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
    #: the gradient loss reached ``early_stop``
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


@dataclass
class Start:
    """Where one attempt starts: the dummy inputs and, for DLG, the dummy label logits."""

    inputs: torch.Tensor
    label_logits: torch.Tensor | None = None


@dataclass
class Attempt:
    """One optimisation from one start; ``inputs`` is its best iterate by gradient loss."""

    inputs: torch.Tensor
    label_logits: torch.Tensor | None
    gradient_loss: float
    iterations: int
    history: list[dict[str, Any]]
    diverged: bool = False
    reason: str | None = None


@dataclass
class Config:
    """Validated arguments of one call."""

    input_shape: tuple[int, ...]
    num_classes: int
    batch_size: int
    max_iterations: int
    restarts: int
    seed: int
    track_every: int
    options: dict[str, Any]

    @property
    def is_image(self) -> bool:
        return len(self.input_shape) >= 2

    def report(self, x: torch.Tensor) -> torch.Tensor:
        """What the attacker reports for a dummy: images clamped to [0, 1]."""
        x = x.detach()
        return x.clamp(0.0, 1.0) if self.is_image else x.clone()


class GradientProblem:
    """The dummy-gradient side of gradient matching, on a private copy of the weights."""

    def __init__(self, model: nn.Module, gradients: Sequence[torch.Tensor],
                 labels: torch.Tensor | None) -> None:
        named = trainable(model)
        self.model = model
        self.names = [n for n, _ in named]
        self.params = [p.detach().clone().requires_grad_(True) for _, p in named]
        self.constants = {n: p.detach().clone() for n, p in model.named_parameters()
                          if not p.requires_grad}
        self.constants.update({n: b.detach().clone() for n, b in model.named_buffers()})
        self.dtype = self.params[0].dtype
        self.device = self.params[0].device
        self.observed = [g.detach().to(self.device, self.dtype).clone() for g in gradients]
        self.labels = labels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tensors = dict(zip(self.names, self.params))
        tensors.update(self.constants)
        return functional_call(self.model, tensors, (x,))

    def target(self, label_logits: torch.Tensor | None) -> torch.Tensor:
        """Hard labels, or the softmax of DLG's dummy label logits."""
        if label_logits is not None:
            return F.softmax(label_logits, dim=-1)
        assert self.labels is not None
        return self.labels

    def dummy_gradients(self, x: torch.Tensor, label_logits: torch.Tensor | None,
                        create_graph: bool = True) -> list[torch.Tensor]:
        """Gradient of the mean cross-entropy of the dummy batch w.r.t. the parameters."""
        with torch.enable_grad():
            loss = F.cross_entropy(self.forward(x), self.target(label_logits))
            grads = torch.autograd.grad(loss, self.params, create_graph=create_graph,
                                        allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, self.params)]

    def l2(self, x: torch.Tensor, label_logits: torch.Tensor | None = None,
           create_graph: bool = True) -> torch.Tensor:
        """sum over parameters of ||dummy gradient - observed gradient||^2."""
        grads = self.dummy_gradients(x, label_logits, create_graph)
        return torch.stack([(g - o).pow(2).sum() for g, o in zip(grads, self.observed)]).sum()

    def cosine(self, x: torch.Tensor, label_logits: torch.Tensor | None = None,
               create_graph: bool = True) -> torch.Tensor:
        """1 - cosine similarity between the concatenated dummy and observed gradients."""
        grads = self.dummy_gradients(x, label_logits, create_graph)
        dot = torch.stack([(g * o).sum() for g, o in zip(grads, self.observed)]).sum()
        gg = torch.stack([g.pow(2).sum() for g in grads]).sum()
        oo = torch.stack([o.pow(2).sum() for o in self.observed]).sum()
        return 1.0 - dot / (gg.sqrt() * oo.sqrt()).clamp_min(1e-30)


class Attack:
    """One gradient-inversion attack: subclasses set ``name`` and implement :meth:`start`."""

    name: ClassVar[str] = ""
    #: one-line reference shown by ``describe``
    paper: ClassVar[str] = ""
    #: labels optimised jointly with the input (DLG) rather than inferred first
    learns_labels: ClassVar[bool] = False
    #: attack-specific options and their defaults (added to COMMON_OPTIONS)
    defaults: ClassVar[dict[str, Any]] = {"line_search": "strong_wolfe"}

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
        """What the optimiser minimises and restarts are scored by (L2 gradient distance)."""
        return problem.l2(x, label_logits, create_graph)

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config,
                monitor: Monitor = None) -> Attempt:
        """One L-BFGS optimisation from ``start`` (see the module docstring); ``monitor``
        only feeds the history."""
        x = start.inputs.clone().requires_grad_(True)
        logits = None
        if start.label_logits is not None:
            logits = start.label_logits.clone().requires_grad_(True)
        variables = [x] if logits is None else [x, logits]
        opt = torch.optim.LBFGS(variables, line_search_fn=cfg.options["line_search"])
        # the built-in objective is a pure function of the dummy: reuse its evaluations (a
        # subclass's own objective may count or vary its calls, so it gets every call)
        memo = _Memo() if type(self).objective is Attack.objective else None

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
            loss.backward()
            if memo is not None:
                memo.put(variables, loss, [v.grad for v in variables])
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

        run = _Run(cfg, x, logits, evaluate, monitor)
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
                value = _check_float(key, value, 0.0)
            elif key == "divergence_factor":
                value = _check_float(key, value, 1.0)
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


_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (0.0 and -0.0 differ, equal NaNs match): same bits in, same
    bits out."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype in _BITS:
        return torch.equal(a.view(_BITS[a.dtype]), b.view(_BITS[b.dtype]))
    return torch.equal(a, b)


class _Memo:
    """The objective's last few evaluations (point -> loss, gradients) in one attempt.

    ``torch.optim.LBFGS`` starts every ``step`` by evaluating the point where the previous
    step's line search stopped, which that line search had already evaluated, and the tracked
    history evaluates it once more: both are answered from here (about one evaluation in 20
    per step, and the tracked one). The stored values are the very numbers computed at that
    point (the loss with or without ``create_graph`` is the same float), so the optimisation
    path is unchanged bit for bit."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.entries: list[tuple[list[torch.Tensor], torch.Tensor, list[torch.Tensor]]] = []

    def get(self, variables: list[torch.Tensor]
            ) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
        for point, loss, grads in reversed(self.entries):
            if all(_same(p, v.detach()) for p, v in zip(point, variables)):
                return loss, grads
        return None

    def put(self, variables: list[torch.Tensor], loss: torch.Tensor,
            grads: Sequence[torch.Tensor | None]
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        point = [v.detach().clone() for v in variables]
        kept = [torch.zeros_like(v) if g is None else g.detach().clone()
                for v, g in zip(variables, grads)]
        self.entries.append((point, loss.detach(), kept))
        if len(self.entries) > self.size:
            self.entries.pop(0)
        return loss.detach(), kept


class _Run:
    """Book-keeping of one attempt: history, best iterate, divergence and stopping tests."""

    def __init__(self, cfg: Config, x: torch.Tensor, logits: torch.Tensor | None,
                 evaluate: Callable[[], float], monitor: Monitor) -> None:
        self.cfg, self.x, self.logits, self.evaluate = cfg, x, logits, evaluate
        self.monitor = monitor
        self.iterations = 0
        self.history: list[dict[str, Any]] = []
        self.reason: str | None = None
        self.best_loss = math.inf
        self.best_x = x.detach().clone()
        self.best_logits = None if logits is None else logits.detach().clone()
        self.recorded = -1
        loss0 = evaluate()
        self.record(0, loss0)
        self.ceiling = cfg.options["divergence_factor"] * max(loss0, 1e-12)
        if not math.isfinite(loss0):
            self.reason = "non-finite gradient loss at the starting point"
        else:
            self.offer(loss0, self.best_x, self.best_logits)

    @property
    def failed(self) -> bool:
        return self.reason is not None

    def record(self, iteration: int, loss: float) -> None:
        entry: dict[str, Any] = {"iteration": iteration, "gradient_loss": loss}
        if self.monitor is not None and torch.isfinite(self.x).all():
            entry["mse"] = self.monitor(self.cfg.report(self.x))
        self.history.append(entry)
        self.recorded = iteration

    def offer(self, loss: float, x: torch.Tensor, logits: torch.Tensor | None) -> None:
        if loss < self.best_loss:
            self.best_loss = loss
            self.best_x = x.detach().clone()
            self.best_logits = None if logits is None else logits.detach().clone()

    def bad(self, loss: float) -> str | None:
        if not math.isfinite(loss):
            return "gradient loss became NaN/inf"
        if loss > self.ceiling:
            return f"gradient loss exploded ({loss:.3g} > divergence_factor x initial)"
        return None

    def after_step(self, start_loss: float, before: torch.Tensor,
                   before_logits: torch.Tensor | None) -> bool:
        """Account for one optimiser step; ``start_loss`` is the loss at ``before``.
        Returns whether to continue."""
        self.iterations += 1
        it = self.iterations
        self.reason = self.bad(start_loss)
        if self.reason:
            return False
        self.offer(start_loss, before, before_logits)
        x = self.x.detach()
        if not torch.isfinite(x).all() or (
                self.logits is not None and not torch.isfinite(self.logits).all()):
            self.reason = "the dummy became NaN/inf"
            return False
        if float(x.abs().max()) > _INPUT_LIMIT:
            self.reason = f"the dummy exploded (|x| > {_INPUT_LIMIT:g})"
            return False
        if start_loss <= self.cfg.options["early_stop"]:
            return False
        if torch.equal(before, x) and (
                before_logits is None or torch.equal(before_logits, self.logits.detach())):
            return False  # the optimiser no longer moves: converged or stuck
        if it % self.cfg.track_every == 0:
            loss = self.evaluate()
            self.record(it, loss)
            self.reason = self.bad(loss)
            if self.reason:
                return False
            self.offer(loss, self.x, self.logits)
        return True

    def result(self) -> Attempt:
        if self.reason is None and self.recorded != self.iterations:
            loss = self.evaluate()
            self.record(self.iterations, loss)
            self.reason = self.bad(loss)
            if self.reason is None:
                self.offer(loss, self.x, self.logits)
        if self.reason is not None:
            self.history.append({"iteration": self.iterations, "gradient_loss": math.nan,
                                 "diverged": self.reason})
        return Attempt(inputs=self.best_x, label_logits=self.best_logits,
                       gradient_loss=self.best_loss, iterations=self.iterations,
                       history=self.history, diverged=self.reason is not None,
                       reason=self.reason)


# -------------------------------------------------------------------------------- driver
def run_attack(attack: Attack, model: nn.Module, gradients: Sequence[torch.Tensor], *,
               input_shape: Sequence[int], num_classes: int, batch_size: int,
               max_iterations: int, restarts: int, seed: int, labels: Any, track: Any,
               track_every: int, options: dict[str, Any],
               device: str | torch.device | None = None) -> Reconstruction:
    """Validate everything, then run the attempts and keep the best by gradient loss."""
    t0 = time.perf_counter()
    where = check_device("device", device)
    if where is not None and isinstance(model, nn.Module):
        model = copy.deepcopy(model).to(where)
    cfg, grads, known, truth = _validate(
        attack, model, gradients, input_shape, num_classes, batch_size, max_iterations,
        restarts, seed, labels, track, track_every, options)
    _warn_relu(model)
    monitor: Monitor = None
    if truth is not None:
        def monitor(x: torch.Tensor, truth: torch.Tensor = truth) -> float:
            return matched_mse(x, truth)
    with _threads(cfg.options["num_threads"]), _flush_denormals():
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
            attempt = attack.attempt(problem, start, cfg, monitor)
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
                      stacklevel=3)
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
        converged=bool(best.gradient_loss <= cfg.options["early_stop"]),
        diverged=diverged,
        labels_identifiable=identifiable,
        attempts=[{"seed": s, "gradient_loss": float(a.gradient_loss),
                   "iterations": a.iterations, "diverged": a.diverged, "reason": a.reason}
                  for s, a in zip(seeds, attempts)],
        seconds=time.perf_counter() - t0,
    )


# -------------------------------------------------------------------------------- checks
def trainable(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The model's trainable parameters in ``named_parameters()`` order (as the gradients)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _check_float(name: str, value: object, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be a finite number >= {minimum}, got {value}")
    return value


def _validate(attack: Attack, model: nn.Module, gradients: Sequence[torch.Tensor],
              input_shape: Sequence[int], num_classes: int, batch_size: int,
              max_iterations: int, restarts: int, seed: int, labels: Any, track: Any,
              track_every: int, options: dict[str, Any]
              ) -> tuple[Config, list[torch.Tensor], torch.Tensor | None, torch.Tensor | None]:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    num_classes = check_int("num_classes", num_classes, 2)
    batch_size = check_int("batch_size", batch_size, 1)
    max_iterations = check_int("max_iterations", max_iterations, 1)
    restarts = check_int("restarts", restarts, 1)
    seed = check_int("seed", seed, 0)
    track_every = check_int("track_every", track_every, 1)
    opts = attack.options(dict(options))
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) \
            or not input_shape:
        raise ValueError(f"input_shape must be a non-empty sequence of sizes, got "
                         f"{input_shape!r}")
    shape = tuple(check_int("input_shape", s, 1) for s in input_shape)
    params = trainable(model)
    if not params:
        raise ValueError("model has no trainable parameters")
    grads = _check_gradients(gradients, params)
    _check_forward(model, shape, batch_size, num_classes, params[0][1])
    known = None
    if labels is not None:
        known = torch.as_tensor(labels)
        if known.dtype.is_floating_point or known.dtype == torch.bool or known.ndim != 1 \
                or len(known) != batch_size:
            raise ValueError(f"labels must be {batch_size} integer labels, got {labels!r}")
        if int(known.min()) < 0 or int(known.max()) >= num_classes:
            raise ValueError(f"labels must lie in [0, {num_classes}), got {known.tolist()}")
        known = known.to(torch.int64)
    truth = None
    if track is not None:
        truth = torch.as_tensor(track).detach().to("cpu", torch.float64)
        if tuple(truth.shape) != (batch_size, *shape):
            raise ValueError(f"track must have shape {(batch_size, *shape)}, got "
                             f"{tuple(truth.shape)}")
        if not torch.isfinite(truth).all():
            raise ValueError("track has NaN/inf values")
    cfg = Config(input_shape=shape, num_classes=num_classes, batch_size=batch_size,
                 max_iterations=max_iterations, restarts=restarts, seed=seed,
                 track_every=track_every, options=opts)
    return cfg, grads, known, truth


def _check_gradients(gradients: Sequence[torch.Tensor],
                     params: list[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    if isinstance(gradients, torch.Tensor) or not isinstance(gradients, Sequence):
        raise ValueError("gradients must be a list of tensors in the order of the model's "
                         f"trainable parameters, got {type(gradients).__name__}")
    if len(gradients) != len(params):
        raise ValueError(f"gradients has {len(gradients)} tensors, the model has "
                         f"{len(params)} trainable parameters")
    out = []
    for i, (g, (name, p)) in enumerate(zip(gradients, params)):
        if not isinstance(g, torch.Tensor) or not g.dtype.is_floating_point:
            raise ValueError(f"gradients[{i}] must be a floating-point tensor, got "
                             f"{type(g).__name__}")
        if tuple(g.shape) != tuple(p.shape):
            raise ValueError(f"gradients[{i}] has shape {tuple(g.shape)}, the parameter "
                             f"{name!r} has {tuple(p.shape)}")
        if not torch.isfinite(g).all():
            raise ValueError(f"gradients[{i}] ({name!r}) has NaN/inf values")
        out.append(g.detach())
    return out


def _check_forward(model: nn.Module, shape: tuple[int, ...], batch_size: int,
                   num_classes: int, like: torch.Tensor) -> None:
    tensors = {n: t.detach().clone() for n, t in model.named_buffers()}
    tensors.update({n: p.detach() for n, p in model.named_parameters()})
    x = torch.zeros((batch_size, *shape), dtype=like.dtype, device=like.device)
    try:
        with torch.no_grad():
            out = functional_call(model, tensors, (x,))
    except Exception as exc:  # noqa: BLE001 - any failure here is a shape mismatch to report
        raise ValueError(f"input_shape {shape} is inconsistent with the model: {exc}") from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != batch_size:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"input_shape {shape}: the model outputs {got} for a batch of "
                         f"{batch_size}, expected ({batch_size}, num_classes)")
    if out.shape[1] != num_classes:
        raise ValueError(f"num_classes is {num_classes} but the model outputs "
                         f"{out.shape[1]} logits")


def _warn_relu(model: nn.Module) -> None:
    found = sorted({type(m).__name__ for m in model.modules() if isinstance(m, RELU_TYPES)})
    if found:
        warnings.warn(
            f"the model has ReLU-type activations ({', '.join(found)}): their second "
            "derivative vanishes, so gradient matching is harder than on the sigmoid models "
            "DLG/iDLG/CPL were designed for; attacking anyway", ReLUWarning, stacklevel=4)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """Use ``n`` intra-op threads for the duration (None: leave torch's setting)."""
    old = torch.get_num_threads()
    if n is None or n == old:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
