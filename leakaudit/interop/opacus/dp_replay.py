"""Record/replay Opacus's own DP step (:func:`audit_optimizer`): the real
``DPOptimizer.step`` on canary batches, checked against its accountant."""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...neighbours import canary_out, distance
from ..replay import ReplayReport, record, replay_row
from .dp_ledgers import Sampler, accountant_history, ledgers, sampler_of
from .loading import import_opacus, plain_module


# ---------------------------------------------------------------------------- record/replay
def _grad_sample_mode(model: Any) -> str:
    """Opacus's grad_sample_mode of a wrapped model: hooks, functorch, ew, ghost, ..."""
    from opacus.grad_sample import (
        GradSampleModule,
        GradSampleModuleExpandedWeights,
        GradSampleModuleFastGradientClipping,
    )

    if isinstance(model, GradSampleModuleFastGradientClipping):
        return "ghost"
    if isinstance(model, GradSampleModuleExpandedWeights):
        return "ew"
    if isinstance(model, GradSampleModule):
        return "functorch" if getattr(model, "force_functorch", False) else "hooks"
    return type(model).__name__


def _examples(dataset: Any, indices: range) -> tuple[torch.Tensor, torch.Tensor]:
    """The examples ``indices`` of ``dataset`` as (inputs, labels); a ValueError naming
    ``background`` and ``canary`` when its items are not (input, label) pairs."""
    try:
        items = [dataset[i] for i in indices]
        xs = [torch.as_tensor(item[0]) for item in items]
        ys = torch.as_tensor([int(item[1]) for item in items], dtype=torch.long)
    except (TypeError, IndexError, ValueError) as exc:
        raise ValueError(f"data_loader.dataset items must be (input, label) pairs to draw "
                         f"the default background and canary ({exc}); pass background= "
                         f"and canary= as (inputs, labels) tensors") from None
    if not xs:
        return torch.empty(0), ys
    return torch.stack(xs), ys


def _defaults(optimizer: Any, dataset: Any, size: int, background: Any, canary: Any,
              criterion: Any) -> tuple[Any, Any, Any]:
    """The background (the data set's first ``size - 1`` examples), the canary (the next
    one, its input x10: far above the clip) and the loss (cross-entropy with the optimizer's
    ``loss_reduction``) where the caller gave none."""
    if background is None:
        background = _examples(dataset, range(size - 1))
    if canary is None:
        x, y = _examples(dataset, range(size - 1, size))
        canary = (10.0 * x, y)
    if criterion is None:
        reduction = optimizer.loss_reduction

        def criterion(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(out, target, reduction=reduction)

    return background, canary, criterion


def _rebuilt(rebuild: Any, dataset: Any, out_step: _Stepper) -> tuple[_Stepper, str]:
    """The step of the user's pipeline built on the neighbouring ``dataset`` (its model
    loaded with the same weights), and what its normaliser is next to the original's."""
    built = rebuild(dataset)
    model, opt = built[0], built[1]
    model.load_state_dict(out_step.model.state_dict())
    criterion = built[2] if len(built) == 4 else out_step.criterion
    return _Stepper(opt, model, criterion), (
        f"expected batch size {out_step.optimizer.expected_batch_size} on the data set, "
        f"{opt.expected_batch_size} with the canary added")


def _with(dataset: Any, x: torch.Tensor, y: torch.Tensor) -> Any:
    """``dataset`` with the canary example appended (its add-remove neighbour)."""
    from torch.utils.data import ConcatDataset, TensorDataset

    return ConcatDataset([dataset, TensorDataset(x, y)])


class _Stepper:
    """Runs ``optimizer``'s real DP step (clip, noise, scale, its hooks) on a given batch and
    a seeded noise draw, and returns the gradient it would apply, flattened; the wrapped
    optimizer's own step, the accountant's hook and the weights are left untouched."""

    def __init__(self, optimizer: Any, model: nn.Module, criterion: Any) -> None:
        self.optimizer, self.model, self.criterion = optimizer, model, criterion

    def __enter__(self) -> _Stepper:
        opt = self.optimizer
        self._saved = (opt.generator, opt.step_hook, opt.original_optimizer.__dict__.get("step"))
        opt.step_hook = None  # the accountant's: a replayed step is not a training step
        opt.original_optimizer.step = lambda *a, **k: None  # the weights stay as they are
        return self

    def __exit__(self, *exc: object) -> None:
        opt = self.optimizer
        opt.generator, opt.step_hook, step = self._saved
        if step is None:
            del opt.original_optimizer.step
        else:
            opt.original_optimizer.step = step
        opt.zero_grad(set_to_none=True)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, seed: int) -> np.ndarray:
        opt = self.optimizer
        opt.zero_grad(set_to_none=True)
        for p in self.model.parameters():   # also those outside the DP optimizer (a second
            p.grad = None                   # optimizer's): one replayed step each time
            if getattr(p, "grad_sample", None) is not None:
                p.grad_sample = None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # any draw from torch's generator (dropout, a noise
            opt.generator = torch.Generator().manual_seed(seed)  # not on opt.generator)
            with warnings.catch_warnings():  # torch: backward hooks, inputs without grad
                warnings.filterwarnings("ignore", message="Full backward hook")
                self.criterion(self.model(x), y).backward()
            opt.step()
        return torch.cat([p.grad.detach().reshape(-1) for p in opt.params]).double().numpy()


def setup_findings(optimizer: Any, model: nn.Module, sampler: Sampler) -> list[str]:
    """What is wrong in the setup before any step runs: a loader that is not the Poisson
    sampling every Opacus accountant assumes (its eps then holds for no run of this loader),
    and parameters of ``model`` that are trained (``requires_grad``) but not held by the DP
    optimizer (updated, if at all, by another optimizer, without clipping or noise)."""
    found = []
    if sampler.kind != "poisson":
        rate = getattr(optimizer, "expected_batch_size", None)
        found.append(f"the loader draws {sampler.what}, while Opacus's accountant assumes "
                     f"Poisson sampling (expected batch {rate}): its eps does not hold for "
                     "this loader (interop.opacus.ledgers gives the sound one)")
    held = {id(p) for p in optimizer.params}
    names = [n for n, p in plain_module(model).named_parameters()
             if p.requires_grad and id(p) not in held]
    if names:
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        found.append(f"parameters trained outside the DP optimizer: {shown} (another "
                     "optimizer would update them without clipping or noise)")
    return found


def _check_call(optimizer: Any, model: Any, rebuild: Any, trials: int, pairs: int,
                delta: float, confidence: float) -> Any:
    """Opacus, once every argument of :func:`audit_optimizer` is checked (ValueErrors name
    the argument)."""
    from ..._validate import check_int, check_probability

    opacus = import_opacus()
    for name, value, cls in (("optimizer", optimizer, opacus.optimizers.DPOptimizer),
                             ("model", model, nn.Module)):
        if not isinstance(value, cls):
            raise ValueError(f"{name} must be an Opacus {cls.__name__} (what make_private "
                             f"returned), got {type(value).__name__}")
    for name, value, low in (("trials", trials, 8), ("pairs", pairs, 1)):
        check_int(name, value, low)
    for name, value in (("delta", delta), ("confidence", confidence)):
        check_probability(name, value)
    if rebuild is not None and not callable(rebuild):
        raise ValueError("rebuild must be a callable dataset -> make_private's outputs")
    return opacus


def _accountant_sigma(optimizer: Any, engine: Any, opacus: Any) -> float:
    """The noise multiplier the accountant recorded last (the optimizer's without one)."""
    sigma = float(optimizer.noise_multiplier)  # what the accountant's hook records
    if engine is not None:
        history = accountant_history(engine.accountant if isinstance(
            engine, opacus.PrivacyEngine) else engine)
        sigma = history[-1][0] if history else sigma
    return sigma


def _batches(background: Any, canary: Any, relation: str) -> tuple[tuple[torch.Tensor, ...], ...]:
    """((x_in, y_in), (x_out, y_out)): the background with the canary, and without it
    (add-remove, zero-out) or with its negative input in its place (replace-one); a
    background of none (batches of one) leaves an empty out batch, noise only."""
    bx, by = background
    cx, cy = canary
    if bx.shape[0] == 0:
        bx, by = cx[:0], cy[:0]
    into = (torch.cat([bx, cx]), torch.cat([by, cy]))
    out = (torch.cat([bx, -cx]), torch.cat([by, cy])) \
        if canary_out(relation) == "replaced" else (bx, by)
    return into, out


def run_epsilons(engine: Any, data_loader: Any, relation: str, delta: float
                 ) -> dict[str, Any]:
    """The whole run's claimed and sound eps at ``delta``, from the same
    :func:`~leakaudit.interop.opacus.ledgers` call a user makes (``{}`` without the
    engine): the row's ``eps_claimed`` / ``eps_sound`` are one release, these the run."""
    if engine is None:
        return {}
    pair = ledgers(engine, data_loader=data_loader, relation=relation)
    return {"eps_claimed_run": pair.claimed.epsilon(delta),
            "eps_sound_run": pair.sound.epsilon(delta), "sampling_run": pair.sampling}


def audit_optimizer(optimizer: Any, model: nn.Module, data_loader: Any, *,
                    engine: Any = None, criterion: Any = None,
                    canary: tuple[torch.Tensor, torch.Tensor] | None = None,
                    background: tuple[torch.Tensor, torch.Tensor] | None = None,
                    rebuild: Any = None, trials: int = 200, pairs: int = 8,
                    delta: float = 1e-5, confidence: float = 0.95, seed: int = 0
                    ) -> ReplayReport:
    """Record/replay Opacus's own DP step: one public call, one report row.

    Runs ``optimizer``'s real step (per-example clipping in the grad-sample mode ``model``
    has, noise from its own generator seeded per run, the scaling) on a fixed background
    batch with the canary in and out, checks the canary's move against the declared
    sensitivity and the noise std against the accountant's, and plays the canary game
    (:func:`leakaudit.interop.replay.replay_row`); weights, optimizer and accountant are left
    as they were. The relation is the one ``ledgers(engine, data_loader=...)`` states
    (add-remove for a Poisson ``DPDataLoader``, replace-one otherwise: the canary's input
    negated). ``eps_claimed`` / ``eps_sound`` are one release (no sampling); with ``engine``
    the row also gives the whole run's (``eps_claimed_run`` / ``eps_sound_run``, the same
    :func:`ledgers` call), and a loader the accountant does not assume is a finding.

    Args:
        optimizer, model, data_loader: what ``PrivacyEngine.make_private`` returned.
        engine: the ``PrivacyEngine`` (its accountant's multiplier is checked).
        criterion: the loss (ghost clipping: the criterion ``make_private`` returned);
            default cross-entropy with the optimizer's ``loss_reduction``.
        canary, background: (inputs, labels); default the data set's first
            ``expected_batch_size - 1`` examples and the next one, its input x10.
        rebuild: optional ``rebuild(dataset) -> (model, optimizer, ...)``, the user's
            ``make_private`` pipeline: the canary-in world runs it on the data set with the
            canary added, so that a normaliser that depends on its size shows (Opacus #819).
        trials: releases per world for the game (>= 8); pairs: runs of both worlds on the
            same noise for the deterministic checks.
    """
    opacus = _check_call(optimizer, model, rebuild, trials, pairs, delta, confidence)
    sampler = sampler_of(data_loader)
    relation = "add-remove" if sampler.kind == "poisson" else "replace-one"
    sigma = _accountant_sigma(optimizer, engine, opacus)
    dataset = data_loader.dataset
    size = max(1, int(optimizer.expected_batch_size or 1))
    background, canary, criterion = _defaults(optimizer, dataset, size, background, canary,
                                              criterion)
    # one backward pass per replayed step: Opacus divides by expected_batch_size x 1
    scale = (1.0 / size if optimizer.loss_reduction == "mean" else 1.0) * float(
        optimizer.max_grad_norm)
    (x_in, y_in), (x_out, y_out) = _batches(background, canary, relation)
    out_step = _Stepper(optimizer, model, criterion)
    in_step, note = out_step, ""
    if rebuild is not None:
        in_step, note = _rebuilt(rebuild, _with(dataset, *canary), out_step)
    with out_step, (in_step if in_step is not out_step else contextlib.nullcontext()):
        out, into, p_out, p_in = record(
            lambda world_in, s: in_step(x_in, y_in, s) if world_in else out_step(
                x_out, y_out, s), trials=trials, pairs=pairs, seed=seed)
    row = replay_row(library="opacus", version=opacus.__version__,
                     mode=f"{_grad_sample_mode(model)}, {type(optimizer).__name__}",
                     relation=relation, out=out, into=into, paired_in=p_in, paired_out=p_out,
                     sensitivity=scale, noise_std=sigma * scale,
                     mu_claimed=1.0 / sigma if sigma > 0 else math.inf,  # Opacus: add-remove
                     mu_sound=distance(relation) / sigma if sigma > 0 else math.inf,
                     delta=delta, confidence=confidence, seed=seed, note=note,
                     findings=setup_findings(optimizer, model, sampler))
    row.update(noise_multiplier=sigma, max_grad_norm=float(optimizer.max_grad_norm),
               sampling=sampler.sampling, **run_epsilons(engine, data_loader, relation, delta))
    report = ReplayReport(config={"delta": delta, "confidence": confidence, "seed": seed,
                                  "trials": trials, "pairs": pairs})
    report.add(row)
    return report
