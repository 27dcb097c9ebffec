"""Tap an Opacus run: :class:`Recorder` records, at each step of a ``DPOptimizer``, what a
type-2 attacker sees (the weights before the step and the privatised gradient about to be
applied) and, apart from it, the batch behind the step as :class:`GroundTruth`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ...records import GroundTruth, Observation
from .loading import import_opacus, plain_module

#: label recorded when the training loop's loss is not a cross-entropy / NLL loss
UNKNOWN_LABEL = -1


_LOSSES = (F.cross_entropy, F.nll_loss)


class _LossTargets(TorchFunctionMode):
    """Records the ``target`` of every cross-entropy / NLL loss computed while active."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _LOSSES:
            target = kwargs.get("target", args[1] if len(args) > 1 else None)
            if isinstance(target, torch.Tensor):
                if target.is_floating_point() and target.ndim == 2:
                    target = target.argmax(dim=1)  # class probabilities: the likeliest class
                self.targets.append(target.detach().clone())
        return func(*args, **kwargs)


class Recorder:
    """Record what a type-2 attacker sees at each step of an Opacus ``DPOptimizer``.

    Use as a context manager around the training loop::

        model, optimizer, loader = PrivacyEngine().make_private(...)
        with Recorder(optimizer, model) as rec:
            for x, y in loader: ...; optimizer.step()
        report = leakaudit.audit_observations(rec.observations, model=net, truths=rec.truths,
                                              ...)

    Args:
        optimizer: the ``opacus.optimizers.DPOptimizer`` that ``make_private`` returned.
        model: the model being trained (Opacus's ``GradSampleModule`` or the module inside);
            with it, the examples behind each step are kept as ground truth (``truths``)
            and the weights are named as in the model. Without it only the observations are
            recorded (weights named ``param0``, ``param1``, ... in parameter order).
        steps: record only these optimizer steps (0-based; default every step).

    After the ``with`` block, ``observations[i]`` and ``truths[i]`` (when ``model`` was
    given) belong to the i-th recorded step. The tensors are the gradient as applied: Opacus
    divides the noised sum by the *expected* batch size, which with Poisson sampling differs
    from the batch's size (``batch_size``, the rows Opacus clipped). Skipped steps (Opacus's
    gradient accumulation, ``signal_skip_step``) are not steps: nothing is applied, nothing
    is recorded.

    An empty Poisson batch (Opacus's ``DPDataLoader`` can draw one) is a legal release: the
    step applies noise only. It holds no example to attack, so it is kept in ``noise_only``
    (its observation, ``batch_size`` 0), not in ``observations``: every recorded observation
    has at least one example behind it and can go to
    :func:`leakaudit.audit_observations` as it is. ``local_step`` names the step either way.
    """

    def __init__(self, optimizer: Any, model: nn.Module | None = None, *,
                 steps: Iterable[int] | None = None) -> None:
        opacus = import_opacus()
        if not isinstance(optimizer, opacus.optimizers.DPOptimizer):
            raise ValueError(
                f"optimizer must be an Opacus DPOptimizer (as returned by "
                f"PrivacyEngine.make_private), got {type(optimizer).__module__}."
                f"{type(optimizer).__name__}: a non-private optimizer applies the raw batch "
                f"gradient, there is no DP step to tap")
        if model is not None and not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module or None, got {type(model)!r}")
        self._steps = None if steps is None else {int(s) for s in steps}
        if self._steps is not None and any(s < 0 for s in self._steps):
            raise ValueError(f"steps must be integers >= 0, got {sorted(self._steps)}")
        self.optimizer = optimizer
        self.model = model
        self.observations: list[Observation] = []
        self.truths: list[GroundTruth] = []
        #: releases of empty batches (noise only): nothing to attack, kept apart
        self.noise_only: list[Observation] = []
        self._names = self._parameter_names()
        self._step = 0
        self._inputs: list[torch.Tensor] = []
        self._targets: _LossTargets | None = None
        self._handle: Any = None
        self._previous_hook: Any = None
        self._active = False

    def _parameter_names(self) -> list[str]:
        params = list(self.optimizer.params)
        if self.model is None:
            return [f"param{i}" for i in range(len(params))]
        by_id = {id(p): n for n, p in plain_module(self.model).named_parameters()}
        missing = [i for i, p in enumerate(params) if id(p) not in by_id]
        if missing:
            raise ValueError(f"model does not hold the optimizer's parameters {missing}: "
                             "give the model the optimizer trains")
        return [by_id[id(p)] for p in params]

    # ------------------------------------------------------------------ context
    def __enter__(self) -> Recorder:
        if self._active:
            raise RuntimeError("this Recorder is already active")
        self._previous_hook = self.optimizer.step_hook
        self.optimizer.attach_step_hook(self._on_step)
        if self.model is not None:
            self._handle = self.model.register_forward_pre_hook(self._on_forward)
            self._targets = _LossTargets()
            self._targets.__enter__()
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._active = False
        self.optimizer.step_hook = self._previous_hook
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._targets is not None:
            self._targets.__exit__(None, None, None)
            self._targets = None

    # ------------------------------------------------------------------ hooks
    def _on_forward(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if torch.is_grad_enabled() and args and isinstance(args[0], torch.Tensor):
            self._inputs.append(args[0].detach().clone())

    def _on_step(self, optimizer: Any) -> None:
        """Opacus calls this after noise and scaling, before the wrapped optimizer's step."""
        step = self._step
        self._step += 1
        if self._steps is None or step in self._steps:
            self._record(optimizer, step)
        self._inputs = []
        if self._targets is not None:
            self._targets.targets = []
        if self._previous_hook is not None:
            self._previous_hook(optimizer)  # the accountant's hook, when attached

    def _record(self, optimizer: Any, step: int) -> None:
        observation_type = Observation
        params = list(optimizer.params)
        batch = _batch_size(params)
        lr = float(optimizer.param_groups[0]["lr"])
        obs = observation_type(
            point=2, round=0, client=0, local_step=step,
            tensors=[p.grad.detach().clone() for p in params],
            weights={n: p.detach().clone() for n, p in zip(self._names, params)},
            lr=lr, local_steps=1, batch_size=batch,
            defense=f"opacus(noise_multiplier={optimizer.noise_multiplier:g}, "
                    f"max_grad_norm={optimizer.max_grad_norm:g})")
        if batch == 0:  # an empty Poisson batch: noise only, no example behind it
            self.noise_only.append(obs)
            return
        self.observations.append(obs)
        if self.model is not None:
            self.truths.append(self._truth(batch))

    def _truth(self, batch: int) -> GroundTruth:
        truth_type = GroundTruth
        inputs = torch.cat(self._inputs) if self._inputs else torch.empty(0)
        targets = self._targets.targets if self._targets is not None else []
        labels = torch.cat([t.reshape(-1) for t in targets]) if targets else None
        if labels is None or labels.shape[0] != inputs.shape[0]:
            labels = torch.full((inputs.shape[0],), UNKNOWN_LABEL, dtype=torch.long)
        return truth_type(inputs=inputs, labels=labels.long())


def _batch_size(params: list[torch.Tensor]) -> int:
    """Examples behind the step: the rows of the per-example gradients Opacus clipped."""
    for p in params:
        gs = getattr(p, "grad_sample", None)
        if isinstance(gs, torch.Tensor):
            return int(gs.shape[0])
        if isinstance(gs, list):
            return int(sum(g.shape[0] for g in gs))
    return 0
