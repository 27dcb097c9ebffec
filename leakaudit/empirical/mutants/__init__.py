"""The auditor's regression suite: deliberately broken mechanisms, written as users write them.

Each mutant is a small :class:`~leakaudit.defenses.Defense` that records a DP-SGD ledger
(clip C = 1, noise multiplier ``sigma``) but breaks one part of DP-SGD the way user code does.
:data:`MUTANTS` maps a name to (factory, one-line bug, budget): the held-out runs per side at
which :func:`leakaudit.empirical.audit_release` must flag it ``sound_violated`` on every
seed (tests/leakaudit/empirical/test_mutants.py, benchmarks/empirical_privacy.py).
Correct implementations of the same mechanism (:data:`CORRECT`) must never be flagged.
Add a mutant for every bug the auditor once missed.

The mutants do not declare ``audit_batched`` (users do not): the audit runs them one trial
per call, on one copy brought back to a first-round state before each trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ...defenses import Defense
from .clip import (
    ClipBeforeReshape,
    ClipTheBatch,
    ClipTheMean,
    ClipTheSum,
    MissingClipOnALayer,
    NoiseBeforeClipping,
)
from .laplace import L1LaplaceSGD, L2ClippedLaplace
from .ledger import SigmaNotTheOneDrawn, UnaccountedSampler
from .noise import (
    BroadcastNoise,
    CentredNoise,
    NoiseDrawnOnce,
    NoiseOnSomeTensors,
    NoiseStdFromTheData,
    RealisedNormaliser,
)
from .user import UserDPSGD
from .worlds import (
    ClipFirstRows,
    DecayingNoise,
    LatticeNoise,
    MedianClip,
    NoiseWhereNonzero,
    SeededOnce,
    UnderstatedRate,
)

__all__ = ["MUTANTS", "CORRECT", "SHAPES", "Mutant", "UserDPSGD"]

#: a small model's parameter shapes (6 tensors, 994 values): conv, bias, conv, bias, dense, bias
SHAPES: tuple[tuple[int, ...], ...] = ((8, 1, 3, 3), (8,), (8, 8, 3, 3), (8,), (10, 32), (10,))


class Mutant(NamedTuple):
    factory: Callable[[], Defense]
    bug: str
    budget: int


MUTANTS: dict[str, Mutant] = {
    "missing-clip-on-a-layer": Mutant(
        MissingClipOnALayer, "the last tensor (a bias) is left out of the clip", 500),
    "clip-before-reshape": Mutant(
        ClipBeforeReshape, "per-example norms taken after concatenating the batch and "
        "reshaping to (B, -1): rows mix examples", 2000),
    "clip-the-mean": Mutant(
        ClipTheMean, "the batch mean is clipped, not each example", 500),
    "noise-before-clipping": Mutant(
        NoiseBeforeClipping, "noise added to each example before clipping", 2000),
    "noise-on-some-tensors": Mutant(
        NoiseOnSomeTensors, "noise added to the weights, not the biases", 500),
    "noise-std-from-the-data": Mutant(
        NoiseStdFromTheData, "noise std = sigma x the largest clipped norm in the batch", 500),
    "noise-drawn-once": Mutant(
        NoiseDrawnOnce, "noise drawn on the first call and reused", 500),
    "realised-normaliser": Mutant(
        RealisedNormaliser, "divides by the realised batch size", 2000),
    "sigma-not-the-one-drawn": Mutant(
        SigmaNotTheOneDrawn, "the ledger records sigma 2, the noise is drawn with sigma 1",
        2000),
    "unaccounted-sampler": Mutant(
        UnaccountedSampler, "accounted as Poisson with q = 0.1, every example is used", 2000),
    # correlated noise: a linear functional of the release carries no noise
    "centred-noise": Mutant(
        CentredNoise, "noise centred per tensor: each tensor's sum is noise-free", 2000),
    "broadcast-noise": Mutant(
        BroadcastNoise, "noise of shape (rows,) broadcast over each tensor: a row's "
        "coordinate differences are noise-free", 2000),
    # clipping of the aggregate or the batch: sensitivity 2C against an opposing background
    "clip-the-sum": Mutant(
        ClipTheSum, "the batch's summed gradient is clipped to C, not each example", 2000),
    "clip-the-batch": Mutant(
        ClipTheBatch, "one clip factor for the batch (C over its largest norm)", 2000),
    # bugs that show only in a world the game must choose (a dataset, a call, a statistic)
    "noise-where-nonzero": Mutant(
        NoiseWhereNonzero, "noise drawn only where the summed gradient is nonzero", 2000),
    "median-clip": Mutant(
        MedianClip, "clip and noise scaled by the batch's median per-example norm", 2000),
    "seeded-once": Mutant(
        SeededOnce, "a generator seeded once in __init__ draws the noise", 2000),
    "lattice-noise": Mutant(
        LatticeNoise, "noise rounded to a lattice of spacing sigma C / 2", 2000),
    "clip-first-rows": Mutant(
        ClipFirstRows, "only the first ctx.batch_size rows are clipped", 2000),
    "decaying-noise": Mutant(
        DecayingNoise, "the noise halves every round, the ledger states round 0's sigma", 2000),
    "understated-rate": Mutant(
        UnderstatedRate, "accounted as Poisson with q = 0.25, every example is used", 2000),
    # a bug only the white-box check measures at its size (sqrt(d) x the claim)
    "l2-clipped-laplace": Mutant(
        L2ClippedLaplace, "clipped in L2 to C, Laplace(C / eps) noise, ledger at L1 "
        "sensitivity C", 2000),
}

#: the same mechanisms written correctly (Gaussian at sigma 2 and 1, Laplace clipped in L1)
CORRECT: dict[str, Callable[[], Defense]] = {
    "user-dp-sgd": UserDPSGD,
    "user-dp-sgd-sigma1": lambda: UserDPSGD(sigma=1.0),
    "user-l1-laplace-sgd": L1LaplaceSGD,
}
