"""Audit an Opacus (DP-SGD) training run: tap its steps, read its accountant.

:class:`Recorder` records, at each step of an Opacus ``DPOptimizer``, what a type-2 attacker
(Wei et al., "Securing distributed SGD against gradient leakage threats": the gradient a
participant applies at one local step) sees: the weights before the step, the privatised
gradient the optimizer is about to apply (clipped per example, summed, noised and scaled by
Opacus's ``pre_step``), the learning rate and the batch size. With ``model`` given it also
keeps the batch behind each step (inputs from a forward pre-hook, labels from the target of
the cross-entropy / NLL loss) as :class:`GroundTruth`, apart from the observation.

:func:`ledgers` gives the run's ``(claimed, sound)`` pair: *claimed* is Opacus's accountant
history (``(noise_multiplier, sample_rate, steps)`` triples) read as Poisson-sampled Gaussian
steps (:func:`ledger_from_accountant`); *sound* accounts the batches the loader really drew.
Opacus records a sample rate 1 / len(loader) whatever the loader; only its ``DPDataLoader``
samples Poisson batches. A shuffled or in-order loader puts each example in one step per
pass and amplifies nothing; a weighted sampler or one with replacement can put an example
into every step, up to B times. The pair says which relation and sampling the sound ledger
assumes and why it differs.

Names: like :class:`leakaudit.records.Recorder` (the simulator's), :class:`Recorder` records
observations and ground truths; a :class:`leakaudit.fl.Tap` is only the spec of what to
record.

Opacus is imported only when these are used (from a clone: ``pip install -e '.[opacus]'``).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from accounting import PrivacyLedger

from ..neighbours import canary_out, distance
from ..records import GroundTruth, Observation
from ._ledgers import LedgerPair, check_relation, new_ledger
from .replay import ReplayReport

__all__ = ["Recorder", "ledgers", "ledger_from_accountant", "audit_optimizer", "UNKNOWN_LABEL"]


#: label recorded when the training loop's loss is not a cross-entropy / NLL loss
UNKNOWN_LABEL = -1

_LOSSES = (F.cross_entropy, F.nll_loss)


def _import_opacus() -> Any:
    try:
        import opacus
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise ImportError("leakaudit.interop.opacus needs Opacus: "
                          "pip install -e '.[opacus]' (from a clone of leakaudit)") from exc
    return opacus


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


def _plain_module(model: nn.Module) -> nn.Module:
    """The user's module inside Opacus's GradSampleModule wrapper (names without ``_module.``)."""
    inner = getattr(model, "_module", None)
    return inner if isinstance(inner, nn.Module) else model


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
        opacus = _import_opacus()
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
        by_id = {id(p): n for n, p in _plain_module(self.model).named_parameters()}
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


# ---------------------------------------------------------------------------- accountants
_KNOWN = {"RDPAccountant": "rdp", "PRVAccountant": "prv", "GaussianAccountant": "gdp"}
#: Opacus's accountants analyse Poisson-sampled Gaussian steps under add/remove adjacency
#: (Abadi et al. 2016; Mironov et al. 2019)
CLAIMED_RELATION = "add-remove"


def ledger_from_accountant(accountant: Any, *, orders: object = None,
                           data_loader: Any = None) -> PrivacyLedger:
    """The privacy ledger of an Opacus accountant's history: Opacus's claim. Keyword-only
    after ``accountant``.

    Opacus's RDP, PRV and GDP accountants all keep ``history``: a list of
    ``(noise_multiplier, sample_rate, num_steps)``, each ``num_steps`` Poisson-sampled Gaussian
    steps (Abadi et al. 2016; Mironov et al. 2019). Each entry becomes one
    :class:`accounting.SampledGaussian` event, so every method of the ledger applies.

    Opacus records a sample rate (1 / len(loader)) whatever loader ran; the steps are Poisson
    only with its ``DPDataLoader`` (``make_private(poisson_sampling=True)``). Give
    ``data_loader`` and a loader of any other kind is refused; :func:`ledgers` accounts it.

    Args:
        accountant: an ``opacus.accountants`` ``RDPAccountant``, ``PRVAccountant`` or
            ``GaussianAccountant`` (e.g. ``PrivacyEngine(...).accountant``).
        orders: Rényi orders of the ledger; default for an RDP accountant its own
            ``DEFAULT_ALPHAS`` (so that ``ledger.epsilon(delta, "rdp")`` is Opacus's
            ``get_epsilon(delta)``), otherwise the ledger's default grid.
        data_loader: the loader training read (the one ``make_private`` returned); a
            ValueError unless it samples Poisson batches.

    The methods coincide for RDP (same orders, same conversion: Balle et al. 2020, Thm 21)
    and for PRV (``ledger.epsilon_bounds(delta, eps_error=0.01, delta_error=delta/1000)``'s
    upper bound is what Opacus's PRVAccountant reports). Opacus's GDP accountant uses the
    central limit theorem (Bu et al. 2020), an approximation that may under-report; the
    ledger gives sound bounds for the same steps instead.
    """
    opacus = _import_opacus()
    kind = _accountant_kind(accountant, opacus)
    if data_loader is not None:
        sampler = _sampler(data_loader)
        if sampler.kind != "poisson":
            raise ValueError(
                f"data_loader draws {sampler.what}, not Poisson batches: "
                f"ledger_from_accountant would copy Opacus's sample_rate as Poisson steps "
                f"that did not run; use leakaudit.interop.opacus.ledgers(engine, "
                f"data_loader=...), whose .sound accounts this loader")
    return _claimed(accountant, kind, orders)


def ledgers(engine: Any, *, data_loader: Any, relation: str | None = None,
            epochs: int | None = None, orders: object = None) -> LedgerPair:
    """``(claimed, sound)`` ledgers of an Opacus run: Opacus's history, and the loader's:
    ``ledgers(engine, data_loader=loader)`` (keyword-only after ``engine``).

    *claimed* is :func:`ledger_from_accountant`: Opacus's history as Poisson-sampled
    Gaussian steps (add/remove). *sound* accounts the sampling ``data_loader`` really did:

    - Opacus's ``DPDataLoader`` (Poisson, ``poisson_sampling=True``): the same steps at the
      loader's rate, under add/remove (or zero-out, the same analysis); sound == claimed.
    - batches read in order (``SequentialSampler``) or from a shuffled permutation
      (``RandomSampler`` without replacement, ``SubsetRandomSampler``): every example is in
      exactly one batch per pass over the loader, so at most one of each pass's steps
      holds it, and since who is in which batch is fixed or known to a worst-case attacker,
      there is no amplification by sampling (Chua et al. ICML 2024 show how far the
      Poisson number can be from the truth). Default relation replace-one: one example
      moves the noised sum by up to 2C, one Gaussian step of multiplier sigma/2 per pass
      (zero-out: C, sigma). Add/remove is refused by the batching (removing an example
      shifts every later batch) and is accounted as below.
    - any other sampler (``WeightedRandomSampler``, sampling with replacement, a custom
      sampler): an example can be drawn into every step and up to B times into one batch of
      B, and data-dependent weights (class balancing) change who else is drawn: every step
      is a Gaussian of multiplier sigma/(2B) (zero-out: sigma/B). A custom batch sampler
      with no batch size bounds nothing: eps is infinite.

    Args:
        engine: the ``opacus.PrivacyEngine`` (or its accountant) that trained.
        data_loader: the loader training read: the one ``make_private`` returned.
        relation: neighbouring relation of the sound ledger; default "add-remove" for a
            Poisson loader, "replace-one" otherwise. Poisson with "replace-one" is refused
            (this accountant has no replace-one subsampled analysis).
        epochs: passes made over the loader; default ceil(steps / len(loader)), one loader
            batch per optimizer step. Give it with gradient accumulation (several loader
            batches per step), which makes more passes than that.
        orders: Rényi orders of both ledgers (default as :func:`ledger_from_accountant`).

    Returns:
        a :class:`~leakaudit.interop.LedgerPair`: ``claimed``, ``sound``, ``relation``,
        ``sampling`` and ``reason`` (why sound differs from claimed; "" when it does not).

    ``sampling`` names what the loader did: "poisson", "shuffle", "sequential" (in order:
    a fixed permutation, accounted as a shuffle without amplification) or "arbitrary".

    TODO(accounting): record the shuffled passes as ``ledger.step(..., sampling="shuffle")``
    once the accountant has it (today: q = 1 Gaussian steps, one per pass, which is what
    the accountant's no-amplification rule gives); an in-order loader must stay without
    amplification even if "shuffle" ever takes some from the random permutation.
    """
    opacus = _import_opacus()
    accountant = engine.accountant if isinstance(engine, opacus.PrivacyEngine) else engine
    try:
        kind = _accountant_kind(accountant, opacus)
    except ValueError as exc:
        raise ValueError(f"engine must be an Opacus PrivacyEngine or its accountant: "
                         f"{exc}") from None
    sampler = _sampler(data_loader)
    if relation is None:
        relation = "add-remove" if sampler.kind == "poisson" else "replace-one"
    relation = check_relation("relation", relation)
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                               or epochs < 1):
        raise ValueError(f"epochs must be an integer >= 1 or None, got {epochs!r}")
    if sampler.kind == "poisson" and relation == "replace-one":
        raise ValueError(
            "relation='replace-one' with Poisson batches (Opacus's DPDataLoader): the "
            "accountant analyses Poisson-sampled Gaussian steps under 'add-remove' (or "
            "'zero-out') only; ask for one of those")
    history = _history(accountant)
    claimed = _claimed(accountant, kind, orders)
    sound = new_ledger(relation, claimed.orders)
    steps = sum(count for _, _, count in history)
    if sampler.kind == "poisson":
        reason = _poisson(sound, history, sampler)
    elif sampler.kind == "shuffle" and relation != "add-remove":
        reason = _passes(sound, history, sampler, relation, epochs, steps)
    else:
        reason = _every_step(sound, history, sampler, relation)
    return LedgerPair(claimed, sound, relation=relation, sampling=sampler.sampling,
                      claimed_relation=CLAIMED_RELATION, claimed_sampling="poisson",
                      reason=reason)


class _Sampler:
    """What a DataLoader draws: kind ("poisson", "shuffle", "any"), a description, the
    Poisson rate, the largest batch (None: unbounded) and the batches per pass."""

    def __init__(self, kind: str, what: str, *, rate: float = math.nan,
                 batch: int | None = None, per_pass: int = 0) -> None:
        self.kind, self.what, self.rate, self.batch, self.per_pass = (
            kind, what, rate, batch, per_pass)

    @property
    def sampling(self) -> str:
        """The sampling scheme's name as the accountant spells it."""
        if self.kind == "shuffle":
            return "sequential" if self.what.endswith("(no shuffle)") else "shuffle"
        return "poisson" if self.kind == "poisson" else "arbitrary"


def _sampler(data_loader: Any) -> _Sampler:
    """How ``data_loader`` draws its batches (Opacus's Poisson samplers, torch's)."""
    from opacus.utils.uniform_sampler import (
        DistributedUniformWithReplacementSampler,
        UniformWithReplacementSampler,
    )
    from torch.utils.data import (
        BatchSampler,
        DataLoader,
        RandomSampler,
        SequentialSampler,
        SubsetRandomSampler,
    )

    if not isinstance(data_loader, DataLoader):
        raise ValueError(f"data_loader must be a torch DataLoader (the one make_private "
                         f"returned), got {type(data_loader).__module__}."
                         f"{type(data_loader).__name__}")
    batches = data_loader.batch_sampler
    try:
        per_pass, n = len(data_loader), len(data_loader.dataset)
    except TypeError:  # an IterableDataset without a length: nothing known per pass
        per_pass, n = 0, -1
    if isinstance(batches, (UniformWithReplacementSampler,
                            DistributedUniformWithReplacementSampler)):
        return _Sampler("poisson", "Poisson batches (Opacus's DPDataLoader)",
                        rate=float(batches.sample_rate), per_pass=per_pass)
    if not isinstance(batches, BatchSampler):
        size = getattr(batches, "batch_size", None)
        return _Sampler("any", f"batches from a custom {type(batches).__name__}",
                        batch=size if isinstance(size, int) and size >= 1 else None,
                        per_pass=per_pass)
    inner, size = batches.sampler, int(batches.batch_size)
    if isinstance(inner, SequentialSampler):
        return _Sampler("shuffle", f"fixed-size batches of {size} in order (no shuffle)",
                        batch=size, per_pass=per_pass)
    if type(inner) is RandomSampler and not inner.replacement and inner.num_samples == n:
        return _Sampler("shuffle", f"fixed-size batches of {size} from a shuffled "
                                   f"permutation (RandomSampler)", batch=size,
                        per_pass=per_pass)
    if type(inner) is SubsetRandomSampler and len(set(map(int, inner.indices))) == len(
            inner.indices):
        return _Sampler("shuffle", f"fixed-size batches of {size} from a shuffled subset "
                                   f"(SubsetRandomSampler)", batch=size, per_pass=per_pass)
    return _Sampler("any", f"batches of {size} from a {type(inner).__name__}"
                           f"{' with replacement' if getattr(inner, 'replacement', False) else ''}",
                    batch=size, per_pass=per_pass)


def _history(accountant: Any) -> list[tuple[float, float, int]]:
    """The accountant's history, checked: (noise_multiplier, sample_rate, num_steps)."""
    history = getattr(accountant, "history", None)
    if not isinstance(history, list):
        raise ValueError(f"accountant.history must be a list of (noise_multiplier, "
                         f"sample_rate, num_steps), got {type(history).__name__}")
    out = []
    for i, entry in enumerate(history):
        try:
            sigma, q, count = entry
        except (TypeError, ValueError) as exc:
            raise ValueError(f"accountant.history[{i}] must be (noise_multiplier, "
                             f"sample_rate, num_steps), got {entry!r}") from exc
        if not (isinstance(count, int) and count >= 0):
            raise ValueError(f"accountant.history[{i}] has num_steps={count!r}: "
                             "an integer >= 0 is needed")
        if not math.isfinite(float(sigma)) or not math.isfinite(float(q)):
            raise ValueError(f"accountant.history[{i}] has a non-finite value: {entry!r}")
        out.append((float(sigma), float(q), count))
    return out


def _claimed(accountant: Any, kind: str, orders: object) -> PrivacyLedger:
    if orders is None and kind == "rdp":
        orders = list(type(accountant).DEFAULT_ALPHAS)
    ledger = new_ledger(CLAIMED_RELATION, orders)
    for sigma, q, count in _history(accountant):
        ledger.step(q=q, sigma=sigma, count=count, note=f"opacus {kind} accountant")
    return ledger


def _poisson(sound: PrivacyLedger, history: list, sampler: _Sampler) -> str:
    """Poisson batches: the history's steps at the loader's rate (sound == claimed)."""
    for sigma, _, count in history:
        sound.step(q=sampler.rate, sigma=sigma, count=count, note="opacus DPDataLoader")
    rates = sorted({q for _, q, count in history if count})
    if all(math.isclose(q, sampler.rate, rel_tol=1e-12) for q in rates):
        return ""
    return (f"the DPDataLoader samples at rate {sampler.rate:g} while Opacus's history "
            f"records {', '.join(f'{q:g}' for q in rates)}: the loader's rate is accounted")


def pass_sigmas(history: list, per_pass: int, epochs: int | None) -> list[tuple[float, int]]:
    """(sigma, passes): the smallest noise multiplier among each pass's steps, in runs."""
    if epochs is not None:
        return [(min(s for s, _, c in history if c), epochs)]
    passes: list[tuple[float, int]] = []

    def add(sigma: float, k: int = 1) -> None:
        if passes and passes[-1][0] == sigma:
            passes[-1] = (sigma, passes[-1][1] + k)
        else:
            passes.append((sigma, k))

    low, filled = math.inf, 0
    for sigma, _, count in history:
        while count:
            take = min(count, per_pass - filled)
            low, filled, count = min(low, sigma), filled + take, count - take
            if filled == per_pass:
                add(low)
                whole, count = divmod(count, per_pass)
                if whole:
                    add(sigma, whole)
                low, filled = math.inf, 0
    if filled:
        add(low)
    return passes


def _passes(sound: PrivacyLedger, history: list, sampler: _Sampler, relation: str,
            epochs: int | None, steps: int) -> str:
    """Each example in one batch per pass: one Gaussian step per pass, no amplification."""
    if not steps:
        return ""
    per_pass = max(sampler.per_pass, 1)
    if epochs is not None and steps > epochs * per_pass:
        raise ValueError(f"epochs={epochs} passes of {per_pass} batches cannot hold the "
                         f"{steps} optimizer steps Opacus recorded")
    runs = pass_sigmas(history, per_pass, epochs)
    for sigma, k in runs:  # the ledger charges the relation's sensitivity (2C, or C zero-out)
        sound.step(q=1.0, sigma=sigma, count=k, sampling="shuffle",
                   note=f"{relation}: one step per pass over the loader, no amplification")
    passes = sum(k for _, k in runs)
    q = ", ".join(sorted({f"{q:g}" for _, q, c in history if c}))
    half = "" if relation == "zero-out" else "/2"
    return (f"the loader draws {sampler.what}, not Poisson batches: Opacus's sample rate "
            f"q = {q} (1/len(loader)) amplifies nothing here. Each example is in one batch "
            f"per pass ({passes} pass(es), {steps} steps): under {relation} it moves the "
            f"noised sum by up to {'C' if relation == 'zero-out' else '2C'}, so the sound "
            f"ledger is {passes} Gaussian step(s) of multiplier sigma{half}")


def _every_step(sound: PrivacyLedger, history: list, sampler: _Sampler,
                relation: str) -> str:
    """Any sampler: every step can hold an example up to B times (2BC, or BC zero-out)."""
    steps = sum(count for _, _, count in history)
    if not steps:
        return ""
    if sampler.batch is None:
        sound.step(q=1.0, sigma=0.0, count=steps, note="unbounded examples per batch")
        return (f"the loader draws {sampler.what} of no stated size: nothing bounds how many "
                f"times one example enters a step, so eps is infinite")
    b = sampler.batch
    for sigma, _, count in history:
        sound.step(q=1.0, sigma=sigma / b, count=count, sampling="fixed-size",
                   note=f"{relation}: up to {b} copies in every step")
    why = ("removing an example shifts which examples fill every later batch"
           if sampler.kind == "shuffle" else
           "an example can be drawn into every step and up to B times into one batch, and "
           "weights that depend on the data change who else is drawn")
    k = b if relation == "zero-out" else 2 * b
    return (f"the loader draws {sampler.what}, not Poisson batches: {why}; under {relation} "
            f"a step's noised sum moves by up to {k}C (B = {b}), so the sound ledger is "
            f"{steps} Gaussian step(s) of multiplier sigma/{k}")


def _accountant_kind(accountant: Any, opacus: Any) -> str:
    from opacus.accountants import GaussianAccountant, PRVAccountant, RDPAccountant

    for cls in (RDPAccountant, PRVAccountant, GaussianAccountant):
        if isinstance(accountant, cls):
            return _KNOWN[cls.__name__]
    raise ValueError(
        f"accountant must be an Opacus RDPAccountant, PRVAccountant or GaussianAccountant "
        f"(opacus {opacus.__version__}), got {type(accountant).__module__}."
        f"{type(accountant).__name__}: its history cannot be read as sampled Gaussian steps")


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
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # any draw from torch's generator (dropout, a noise
            opt.generator = torch.Generator().manual_seed(seed)  # not on opt.generator)
            with warnings.catch_warnings():  # torch: backward hooks, inputs without grad
                warnings.filterwarnings("ignore", message="Full backward hook")
                self.criterion(self.model(x), y).backward()
            opt.step()
        return torch.cat([p.grad.detach().reshape(-1) for p in opt.params]).double().numpy()


def audit_optimizer(optimizer: Any, model: nn.Module, data_loader: Any, *,
                    engine: Any = None, criterion: Any = None,
                    canary: tuple[torch.Tensor, torch.Tensor] | None = None,
                    background: tuple[torch.Tensor, torch.Tensor] | None = None,
                    rebuild: Any = None, trials: int = 200, pairs: int = 8,
                    delta: float = 1e-5, confidence: float = 0.95, seed: int = 0
                    ) -> ReplayReport:
    """Record/replay Opacus's own DP step: one public call, one report row.

    Runs ``optimizer``'s real step (``DPOptimizer.step``: per-example clipping in whatever
    grad-sample mode ``model`` has (hooks, functorch, ghost), noise from the optimizer's own
    generator, seeded per run, and the scaling) on a fixed background batch with the canary
    in and out, records each release, checks that the canary moves it by at most the
    declared sensitivity and that its noise std is the accountant's, and plays the canary
    game on the releases (:func:`leakaudit.interop.replay.replay_row`). The weights, the
    wrapped optimizer and the accountant are left as they were.

    The relation is the one ``ledgers(engine, data_loader=...)`` states (add-remove for
    Opacus's Poisson ``DPDataLoader``: the out world lacks the canary; replace-one
    otherwise: the canary is replaced by its negative input).

    Args:
        optimizer, model, data_loader: what ``PrivacyEngine.make_private`` returned.
        engine: the ``PrivacyEngine``; its accountant's noise multiplier is the one checked
            (default: the optimizer's ``noise_multiplier``).
        criterion: the loss (for ghost clipping, the criterion ``make_private`` returned);
            default cross-entropy with the optimizer's ``loss_reduction``.
        canary: (inputs, labels) of one example; default the dataset's example after the
            background, its input scaled by 10 (usually a gradient above the clip; a
            ``contribution`` below 1 in the row says it was not).
        background: (inputs, labels) of the rest of the batch; default the dataset's first
            ``expected_batch_size - 1`` examples (none for batches of one: the out world
            is then an empty batch, noise only).
        rebuild: optional ``rebuild(dataset) -> (model, optimizer, ...)``: the user's
            ``make_private`` pipeline; when given, the canary-in world runs the pipeline
            built on the dataset with the canary added (add-remove at the data set), so that
            a normaliser that depends on the data set's size shows (Opacus #819, #571).
        trials: releases per world for the game (>= 8); pairs: runs of both worlds on the
            same noise for the deterministic checks.
    """
    from .._validate import check_int, check_probability
    from .replay import record, replay_row

    opacus = _import_opacus()
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
    sampler = _sampler(data_loader)
    relation = "add-remove" if sampler.kind == "poisson" else "replace-one"
    sigma = float(optimizer.noise_multiplier)  # what the accountant's hook records
    if engine is not None:
        history = _history(engine.accountant if isinstance(engine, opacus.PrivacyEngine)
                           else engine)
        sigma = history[-1][0] if history else sigma
    dataset = data_loader.dataset
    size = max(1, int(optimizer.expected_batch_size or 1))
    background, canary, criterion = _defaults(optimizer, dataset, size, background, canary,
                                              criterion)
    # one backward pass per replayed step: Opacus divides by expected_batch_size x 1
    scale = 1.0 / size if optimizer.loss_reduction == "mean" else 1.0
    clip = float(optimizer.max_grad_norm)
    sensitivity, noise_std = clip * scale, sigma * clip * scale
    bx, by = background
    cx, cy = canary
    if bx.shape[0] == 0:  # batches of one: the out world is an empty batch (noise only)
        bx, by = cx[:0], cy[:0]
    x_in, y_in = torch.cat([bx, cx]), torch.cat([by, cy])
    x_out, y_out = (torch.cat([bx, -cx]), torch.cat([by, cy])) \
        if canary_out(relation) == "replaced" else (bx, by)
    out_step = _Stepper(optimizer, model, criterion)
    in_step, note = out_step, ""
    if rebuild is not None:
        in_step, note = _rebuilt(rebuild, _with(dataset, cx, cy), out_step)
    with out_step, (in_step if in_step is not out_step else contextlib.nullcontext()):
        out, into, p_out, p_in = record(
            lambda world_in, s: in_step(x_in, y_in, s) if world_in else out_step(
                x_out, y_out, s), trials=trials, pairs=pairs, seed=seed)
    mode = _grad_sample_mode(model)
    claimed_mu = 1.0 / sigma if sigma > 0 else math.inf  # Opacus: add-remove, sensitivity C
    sound_mu = distance(relation) / sigma if sigma > 0 else math.inf
    row = replay_row(library="opacus", version=opacus.__version__,
                     mode=f"{mode}, {type(optimizer).__name__}", relation=relation,
                     out=out, into=into, paired_in=p_in, paired_out=p_out,
                     sensitivity=sensitivity, noise_std=noise_std, mu_claimed=claimed_mu,
                     mu_sound=sound_mu, delta=delta, confidence=confidence, seed=seed,
                     note=note)
    row["noise_multiplier"], row["max_grad_norm"] = sigma, float(optimizer.max_grad_norm)
    row["sampling"] = sampler.sampling
    report = ReplayReport(config={"delta": delta, "confidence": confidence, "seed": seed,
                                  "trials": trials, "pairs": pairs})
    report.add(row)
    return report
