"""Identification against a defense's own release: Hayes, Mahloujifar, Balle's prior-aware
attack (NeurIPS 2023, Sec. 4, Alg. 1) beside the reconstruction-robustness bound of the
release's sound ledger (their Thm. 2, :func:`leakaudit.metrics.rero_bound_gdp`).

Each trial: a target drawn uniformly from a pool of training examples, a set of ``k``
candidates (the target and k - 1 other pool examples, in random order: a blind guess succeeds
with 1/k), ONE release of the target by the defense's own code (``fl.simulate``: one client
holding the target, one round, one local step, the tap at ``point``), with a noise draw of its
own (the trial's seed derives from the seed, the defense and the trial: two defenses never
share a draw, so two cells are never one measurement counted twice). The attacker scores the
candidates with the release model the defense's PUBLIC parameters state
(:func:`release_model`), on the whole release and on each tensor alone
(:meth:`leakaudit.attacks.CandidateScorer.tensor_scores`): a release whose stated noise is
missing on part of the parameters is caught by the row of that part. The best of the
``1 + tensors`` scorers is reported with its Clopper-Pearson interval at level
``1 - alpha / scorers`` (Bonferroni: the choice of the best after the fact is paid for), so
"interval above the bound" holds with probability <= alpha for a sound ledger.

The bound: Phi(Phi^-1(1/k) + mu), mu the attacked release's add/remove Gaussian mu from its
sound ledger (:func:`release_mu`); 1 where the defense's noise acts after ``point`` or its
ledger is not Gaussian at q = 1 (no bound claimed).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import data as data_mod
from .. import fl, metrics
from ..attacks import CandidateScorer

__all__ = ["IdentificationBudget", "SITE_POINT", "identification", "protected_point",
           "release_model", "release_mu", "trial_seed"]

#: the leak point at which each defense site acts (its noise protects that point and later)
SITE_POINT = {"example": 2, "client": 1, "server": 0}


@dataclass(frozen=True)
class IdentificationBudget:
    """Sizes of one identification cell: ``k`` candidates, ``trials`` releases, targets and
    candidates from a ``pool`` of training examples, two-sided ``confidence``."""

    k: int = 10
    trials: int = 100
    pool: int = 100
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or self.k < 2:
            raise ValueError(f"k must be an integer >= 2, got {self.k!r}")
        if not isinstance(self.trials, int) or self.trials < 1:
            raise ValueError(f"trials must be an integer >= 1, got {self.trials!r}")
        if not isinstance(self.pool, int) or self.pool < self.k:
            raise ValueError(f"pool must be an integer >= k = {self.k}, got {self.pool!r}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence!r}")


def protected_point(defense: Any, points: Sequence[int]) -> int:
    """The leakiest of the audited ``points`` that the defense's noise protects (the
    largest point at or after the earliest site where it acts); the leakiest audited
    point when it protects none of them (e.g. no defense)."""
    acts = [SITE_POINT[s] for s in getattr(defense, "sites", ()) if s in SITE_POINT]
    inside = [p for p in points if acts and p <= max(acts)]
    return max(inside) if inside else max(points)


def release_model(defense: Any, lr: float, point: int) -> dict[str, Any]:
    """What the attacker knows of one release (B = 1, L = 1) at ``point`` from the defense's
    PUBLIC parameters (``defense.params()``), in the units of the gradient it uses
    (g = -dW / lr): fed-cdp: the example clipped to C plus N(0, sigma^2 C^2); fed-sdp (at
    or after its site): the update clipped to C plus N(0, sigma^2 C^2), i.e. clip C / lr and
    noise sigma C / lr; anything else: the clean gradient (nearest mean, the most likely
    candidate under isotropic Gaussian noise of any scale: ``noise_std`` 1 only scales the
    scores)."""
    p = defense.params()
    protected = protected_point(defense, (point,)) == point and any(
        SITE_POINT.get(s, -1) >= point for s in getattr(defense, "sites", ()))
    if protected and defense.name == "fed-cdp":
        clip, sigma = float(p["clip"]), float(p["sigma"])
        return {"clip_mode": "example", "clip": clip,
                "noise_std": sigma * clip if sigma > 0 else 1.0, "divisor": 1.0}
    if protected and defense.name in ("fed-sdp-client", "fed-sdp-server"):
        clip, sigma = float(p["clip"]), float(p["sigma"])
        return {"clip_mode": "update", "clip": clip / lr,
                "noise_std": sigma * clip / lr if sigma > 0 else 1.0}
    return {"clip_mode": None, "clip": None, "noise_std": 1.0}


def release_mu(ledgers: Sequence[Any]) -> float | None:
    """Add/remove Gaussian mu of the worst client's release when its sound ledger holds only
    Gaussian steps at q = 1: mu = sqrt(sum count / sigma^2) (Hayes et al.'s bound compares
    the release with and without the target: add/remove, no group privacy). A fixed-size
    client-sampling step (fed-sdp's ledger charges sensitivity 2C there because a client
    displaces another in the K-subset) counts with its own sigma: the attacked view is the
    upload of a client known to take part, and removing the target example changes its
    clipped update by at most C. None for any other ledger."""
    worst = 0.0
    for ledger in ledgers:
        total = 0.0
        for ev in ledger.events:
            if type(ev).__name__ != "SampledGaussian" or ev.q != 1.0:
                return None
            if ev.sigma == 0.0:
                return math.inf
            total += ev.count / ev.sigma ** 2
        worst = max(worst, math.sqrt(total))
    return worst


def trial_seed(seed: int, *parts: Any) -> int:
    """A seed of its own for each (seed, parts...) (CRC-32 of their text): distinct
    defenses, cells and trials never share a noise draw."""
    return zlib.crc32("|".join(map(str, (seed, *parts))).encode()) & 0x7FFFFFFF


def _release(model: nn.Module, ds: data_mod.Dataset, defense: Any, index: int, point: int,
             lr: float, seed: int) -> fl.Run:
    """One client holding training example ``index`` takes one SGD step under ``defense``
    (a fresh copy: no state carried between trials); the tap records ``point``."""
    import copy

    config = fl.FLConfig.make(clients=1, clients_per_round=1, rounds=1, local_steps=1,
                              batch_size=1, lr=lr, partition=[[index]],
                              taps=[fl.Tap(point)], seed=seed, progress=False)
    return fl.simulate(model, dataset=ds, defense=copy.deepcopy(defense), config=config)


def identification(model: nn.Module, ds: data_mod.Dataset, defense: Any, *, point: int,
                   budget: IdentificationBudget = IdentificationBudget(), lr: float = 1.0,
                   seed: int = 0, cell: str = "") -> dict[str, Any]:
    """The prior-aware attack against ``defense``'s release at ``point`` from ``model``'s
    weights (see the module docstring); ``cell`` names the cell in the trials' seeds.
    Returns k, trials, the best scorer ("all" or a tensor name), its successes, success
    and Bonferroni interval, the whole-release scorer's success, the clean success (the same
    candidates identified from the release without the defense: whether this tier could
    succeed at all on these weights), mu and the bound."""
    rng = np.random.default_rng([seed, 7])
    members = np.sort(rng.choice(len(ds.y_train), size=budget.pool, replace=False))
    xs, ys = ds.x_train[members], ds.y_train[members]
    scorer = CandidateScorer(model, xs, ys, **release_model(defense, lr, point))
    clean = CandidateScorer(model, xs, ys, noise_std=1.0, clip=None, clip_mode=None)
    names = ["all", *(n for n, _ in scorer.tensors)]
    hits = np.zeros(len(names), dtype=int)
    clean_hits = 0
    mu: float | None = math.inf
    key = defense.describe() if hasattr(defense, "describe") else str(defense)
    for t in range(budget.trials):
        target = int(rng.integers(budget.pool))
        others = rng.permutation(np.delete(np.arange(budget.pool), target))[:budget.k - 1]
        cand = np.concatenate([[target], others])
        rng.shuffle(cand)
        run = _release(model, ds, defense, int(members[target]), point, lr,
                       trial_seed(seed, key, cell, t))
        if t == 0:
            mu = _attacked_mu(run, defense, point)
        rows = scorer.tensor_scores(run.observations[0].as_gradient(), torch.as_tensor(cand))
        hits += (cand[rows.argmax(dim=1).numpy()] == target).astype(int)
        clean_hits += int(cand[clean.identify(clean.means[target], cand)] == target)
    return summarise(hits, names, budget, mu, clean_hits, point)


def _attacked_mu(run: fl.Run, defense: Any, point: int) -> float | None:
    """mu of the attacked release; inf where the defense's noise acts after ``point``."""
    if not any(SITE_POINT.get(s, -1) >= point for s in getattr(defense, "sites", ())):
        return math.inf
    return release_mu(run.sound)


def summarise(hits: np.ndarray, names: Sequence[str], budget: IdentificationBudget,
              mu: float | None, clean_hits: int, point: int) -> dict[str, Any]:
    """The record of one cell from the hits of each scorer (row 0: the whole release):
    the best scorer with its Bonferroni-corrected Clopper-Pearson interval."""
    n, scorers = budget.trials, len(names)
    best = int(np.argmax(hits))
    low, high = metrics.success_interval(int(hits[best]), n,
                                         1.0 - (1.0 - budget.confidence) / scorers)
    kappa = metrics.prior_success_identification(budget.k)
    bound = 1.0 if mu is None else metrics.rero_bound_gdp(kappa, mu)
    return {"k": budget.k, "trials": n, "point": point, "scorer": names[best],
            "scorers": scorers, "successes": int(hits[best]), "success": float(hits[best] / n),
            "ci_low": low, "ci_high": high,
            "success_all": float(hits[0] / n), "clean": clean_hits / n,
            "mu": math.nan if mu is None else mu, "bound": bound}


def above_bound(record: dict[str, Any]) -> bool:
    """Whether the interval of the measured success lies above the bound: the sound
    ledger, the bound or the release model is wrong."""
    return record["ci_low"] > record["bound"] + 1e-12
