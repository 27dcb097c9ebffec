"""One optimisation attempt: its inputs (:class:`Config`, :class:`Start`), its book-keeping
(:class:`AttemptRun`: history, best iterate, divergence and stopping tests), the evaluation
memo of the L-BFGS loop (:class:`Memo`) and its result (:class:`Attempt`).

With ``Config.keep_iterates`` the history keeps the reported dummy of every recorded step
(``"inputs"``), so that a scorer can measure them against the truth afterwards: the attack
itself never sees the truth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Attempt", "AttemptRun", "Config", "Memo", "Start", "INPUT_LIMIT"]

INPUT_LIMIT = 1e6


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
    #: keep the reported dummy of every recorded step in the history (for a scorer)
    keep_iterates: bool = False

    @property
    def is_image(self) -> bool:
        return len(self.input_shape) >= 2

    def report(self, x: torch.Tensor) -> torch.Tensor:
        """What the attacker reports for a dummy: images clamped to [0, 1]."""
        x = x.detach()
        return x.clamp(0.0, 1.0) if self.is_image else x.clone()



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


class Memo:
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


class AttemptRun:
    """Book-keeping of one attempt: history, best iterate, divergence and stopping tests."""

    def __init__(self, cfg: Config, x: torch.Tensor, logits: torch.Tensor | None,
                 evaluate: Callable[[], float], stop_at: float | None = None) -> None:
        self.cfg, self.x, self.logits, self.evaluate = cfg, x, logits, evaluate
        #: the loss at or below which the attempt stops (``early_stop`` times the
        #: objective's scale, :meth:`leakaudit.attacks.base.Attack.loss_scale`)
        self.stop_at = cfg.options["early_stop"] if stop_at is None else stop_at
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
        if self.cfg.keep_iterates and torch.isfinite(self.x).all():
            entry["inputs"] = self.cfg.report(self.x)
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
        if float(x.abs().max()) > INPUT_LIMIT:
            self.reason = f"the dummy exploded (|x| > {INPUT_LIMIT:g})"
            return False
        if start_loss <= self.stop_at:
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


