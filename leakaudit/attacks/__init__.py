"""Gradient-inversion attacks, registered by name (docs/attacks.md).

``reconstruct("idlg", model, gradients, input_shape=(1, 28, 28), num_classes=10)`` returns a
:class:`Reconstruction`; ``available()`` lists the names. One file per attack (``dlg``,
``idlg``, ``idlg-norm``, ``cpl``, ``ig``, ``fedavg`` with ``fedavg-l2``; the optimiser-free
``exact`` tier, the analytic ``rgap`` tier and the ``prior-aware`` identification
attack), each an
:class:`~leakaudit.attacks.base.Attack` with the same small interface; the optimisation loop,
restarts, divergence handling and validation are shared in :mod:`leakaudit.attacks.base`,
label inference in :mod:`leakaudit.attacks.labels` (counts of repeated labels:
:mod:`leakaudit.attacks.label_counts`).

The attacker sees the model at the leak point, the observed gradients, the input shape, the
class count and the batch size. The ground truth (``track``) never reaches the attack: the
attack keeps its iterates and :func:`leakaudit.metrics.score_history` measures them after.

Layers: the attacks import :mod:`leakaudit.grads` and :mod:`leakaudit.metrics` at most, never
the simulator, the defenses or the audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .. import metrics
from .base import (
    RELU_TYPES,
    Attack,
    AttackDivergedError,
    Reconstruction,
    ReLUWarning,
    run_attack,
)
from .checks import check_track
from .cpl import CPL
from .dlg import DLG
from .exact import ExactLinear
from .fedavg import FedAvg, FedAvgL2
from .idlg import IDLG
from .idlg_norm import LayerNormalizedIDLG, NormalizedIDLG
from .ig import InvertingGradients, LayerInvertingGradients
from .labels import infer_labels
from .prior_aware import CandidateScorer, PriorAware
from .rgap import RecursiveGAP

__all__ = [
    "Attack",
    "AttackDivergedError",
    "CandidateScorer",
    "RELU_TYPES",
    "ReLUWarning",
    "Reconstruction",
    "available",
    "get",
    "infer_labels",
    "reconstruct",
    "register",
]

_REGISTRY: dict[str, Attack] = {}


def register(attack: Attack, *, replace: bool = False) -> None:
    """Register an :class:`Attack` instance under its ``name``."""
    if not isinstance(attack, Attack) or not attack.name:
        raise ValueError(f"attack must be a named Attack instance, got {attack!r}")
    if attack.name in _REGISTRY and not replace:
        raise ValueError(f"an attack named {attack.name!r} is already registered")
    _REGISTRY[attack.name] = attack


def available() -> list[str]:
    """Names of the registered attacks."""
    return sorted(_REGISTRY)


def get(name: str) -> Attack:
    """The attack registered under ``name``."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"name: unknown attack {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def reconstruct(
    name: str,
    model: nn.Module,
    gradients: Sequence[torch.Tensor],
    *,
    input_shape: Sequence[int],
    num_classes: int,
    batch_size: int = 1,
    max_iterations: int = 300,
    restarts: int = 1,
    seed: int = 0,
    labels: torch.Tensor | Sequence[int] | None = None,
    track: torch.Tensor | None = None,
    track_every: int = 10,
    keep_iterates: bool = False,
    device: str | torch.device | None = None,
    **options: Any,
) -> Reconstruction:
    """Reconstruct ``batch_size`` inputs from observed ``gradients`` with attack ``name``.

    ``gradients`` are in the order of the model's trainable parameters (as
    :func:`leakaudit.fl.batch_gradient` returns them); ``model`` holds the weights at the leak
    point and is never modified. ``max_iterations`` counts optimiser steps (L-BFGS
    ``step(closure)`` calls, up to 20 evaluations each; Adam steps for IG). ``restarts``
    attempts from seeds drawn from ``seed``, the best by gradient loss wins. ``labels`` skips
    label inference (DLG then optimises the input only). ``track`` (the ground truth,
    (B, *input_shape)) only adds the matched MSE to the history every ``track_every`` steps,
    measured after the attack on the iterates it kept; ``keep_iterates`` keeps those iterates
    (``"inputs"`` in the history) for a scorer of your own instead.

    Options (all attacks): ``early_stop`` (1e-9: stop when the objective is <= it times its
    scale: ||observed||^2 for the L2 attacks, 1 for the scale-free ones),
    ``divergence_factor`` (1e4), ``max_retries`` (3: extra seeds for diverged attempts),
    ``num_threads`` (1; None keeps torch's setting); L-BFGS attacks: ``line_search``
    ("strong_wolfe", or None for the references); CPL: ``pattern`` (2, 4, 8); IG:
    ``tv_weight`` (0.1), ``lr`` (0.1), ``per_tensor`` (False; ig-layer: True), ``schedule``
    ("steps"; "cosine"), ``prior`` (None or a public mean image); idlg-norm: ``per_tensor``
    (False; idlg-layer: True); fedavg: IG's and ``local_steps`` (1), ``client_lr``
    (0.1), ``client_optimizer`` ("sgd"): what the protocol tells the attacker, and ``method``
    ("cosine"; fedavg-l2: "l2"); exact: ``tolerance`` (1e-6, grouping equal ratios at B > 1);
    prior-aware: ``candidates``, ``candidate_labels``, ``noise_std`` (required), ``clip``,
    ``clip_mode``, ``noise``, ``known_inputs``, ``known_labels``, ``informed``, ``divisor``
    (:mod:`leakaudit.attacks.prior_aware`). Every
    argument is checked before any work (``ValueError`` naming it).

    ``device``: where the attack runs: None (where ``model`` lives), "auto" (CUDA when
    present), "cpu" or "cuda[:i]" (a ValueError when CUDA is absent). The model is copied
    there; the result is on the CPU. Seeds draw on the CPU, so a seed gives the same starts on
    every device.
    """
    attack = get(name)
    truth = check_track(track, batch_size, input_shape)
    rec = run_attack(attack, model, gradients, input_shape=input_shape,
                     num_classes=num_classes, batch_size=batch_size,
                     max_iterations=max_iterations, restarts=restarts, seed=seed,
                     labels=labels, track_every=track_every, options=options,
                     keep_iterates=keep_iterates or truth is not None,
                     device=device)
    if truth is not None:  # the scorer, after the attack
        metrics.score_history(rec.history, truth)
    return rec


for _attack in (DLG(), IDLG(), CPL(), InvertingGradients(), FedAvg(),
                FedAvgL2(), NormalizedIDLG(), LayerNormalizedIDLG(), LayerInvertingGradients(),
                ExactLinear(), PriorAware(), RecursiveGAP()):
    register(_attack)
