"""White-box checks of an additive-noise release on its own code: how far the canary moves it
on the same noise, how much noise it carries, and the eps that follows.

Record/replay (:mod:`leakaudit.interop.replay`) and the empirical audit
(:mod:`leakaudit.empirical.whitebox`) share these. Run a release in the canary-in and
canary-out worlds on identically seeded generators: when the noise is additive and drawn only
from that generator, the difference is the noise-free move Delta of the release (the
sensitivity vector of this pair of datasets), the same on every seed. Runs on different seeds
differ by noise alone, whose scale is measured from half-differences of independent runs.

For a Laplace mechanism with i.i.d. Laplace(b) noise the release is eps-DP with
eps = ||Delta||_1 / b (Dwork, Roth 2014, Thm. 3.6); for a Gaussian one with std s it is
mu-GDP with mu = ||Delta||_2 / s (Dong, Roth, Su 2019, Thm. 2.7). Per parameter tensor the
scales may differ: eps = sum_k ||Delta_k||_1 / b_k and mu^2 = sum_k ||Delta_k||_2^2 / s_k^2.
Compared with the ledger's own eps (Laplace) or mu (Gaussian), the ratio is the ledger's
"sensitivity x contribution / noise_ratio" of record/replay: eps scales linearly for Laplace,
mu for Gaussian.

Numpy and the accountant only.
"""

from __future__ import annotations

import math

import numpy as np

from accounting import PrivacyLedger
from accounting.registry import LaplacePart, UnsupportedEventError, parts

from .fdp import ledger_mu

__all__ = ["noise_tolerance", "same_noise_moves", "contribution", "noise_std", "world_std",
           "laplace_scale", "ledger_noise", "release_value", "FAMILIES"]

#: the noise families a ledger can state for the white-box check
FAMILIES = ("gaussian", "laplace")

#: E|L1 - L2| / b for two independent Laplace(b) draws
_LAPLACE_DIFF_MAD = 1.5


def noise_tolerance(pairs: int, dim: int) -> float:
    """Relative tolerance of a std estimated from ``pairs`` differences of two noise draws
    over ``dim`` coordinates: 6 standard errors (sd of a std estimate from m normal draws is
    about std / sqrt(2 m)), and at least 1e-3 for float32 rounding."""
    return max(1e-3, 6.0 / math.sqrt(2.0 * max(1, pairs * dim)))


def same_noise_moves(paired_in: np.ndarray, paired_out: np.ndarray, order: int = 2
                     ) -> np.ndarray:
    """Per pair of runs on the same noise (row i of both), the ``order``-norm of the move."""
    return np.linalg.norm(paired_in - paired_out, ord=order, axis=1)


def contribution(paired_in: np.ndarray, paired_out: np.ndarray, sensitivity: float,
                 order: int = 2) -> float:
    """The largest same-noise move of the release in units of the declared ``sensitivity``
    (inf when the declared sensitivity is 0)."""
    if sensitivity <= 0:
        return math.inf
    return float(same_noise_moves(paired_in, paired_out, order).max()) / sensitivity


def _halves(a: np.ndarray) -> np.ndarray:
    """Noise-only draws: half-differences of independent runs, scaled by 1/sqrt(2)."""
    half = a.shape[0] // 2
    return (a[:half] - a[half:2 * half]) / math.sqrt(2.0)


def noise_std(out: np.ndarray, into: np.ndarray) -> float:
    """The noise std of both worlds pooled, from runs on distinct seeds (rows)."""
    noise = np.concatenate([_halves(out), _halves(into)])
    return float(np.sqrt(np.mean(noise ** 2)))


def world_std(a: np.ndarray) -> float:
    """The noise std of one world's runs on distinct seeds."""
    return float(np.sqrt(np.mean(_halves(a) ** 2)))


def laplace_scale(a: np.ndarray) -> float:
    """Scale b of i.i.d. Laplace noise from runs on distinct seeds: E|L1 - L2| = 1.5 b."""
    half = a.shape[0] // 2
    return float(np.mean(np.abs(a[:half] - a[half:2 * half]))) / _LAPLACE_DIFF_MAD


def ledger_noise(ledger: PrivacyLedger) -> tuple[str, float] | str:
    """(family, value) of a ledger of one noise family, read through the event registry:
    ("gaussian", mu) for a composition of Gaussians at q = 1 (:func:`fdp.ledger_mu`),
    ("laplace", eps) for Laplace steps (sum of count x sensitivity / b); else why not."""
    if not ledger.events:
        return "the ledger records nothing"
    mu = ledger_mu(ledger)
    if mu is not None:
        return "gaussian", mu
    try:
        items = parts(ledger.events, "pld", "white-box check")
    except UnsupportedEventError as err:
        return f"an event has no rule ({err})"
    if items and all(isinstance(p, LaplacePart) for p in items):
        return "laplace", float(sum(p.count * p.eps for p in items))
    kinds = sorted({type(p).__name__ for p in items})
    return f"the ledger is not all Gaussian at q = 1 nor all Laplace ({', '.join(kinds)})"


def release_value(delta: np.ndarray, noise_runs: np.ndarray, slices: list[slice],
                  family: str) -> tuple[float, float]:
    """(value, relative tolerance): eps = sum_k ||Delta_k||_1 / b_k (``laplace``) or
    mu = sqrt(sum_k ||Delta_k||_2^2 / s_k^2) (``gaussian``) of the release with same-noise
    move ``delta`` (one vector) and noise measured per tensor ``slices`` from ``noise_runs``
    (rows on distinct seeds). The tolerance is 6 standard errors of the scale estimates,
    weighted by each tensor's share (at least 1e-3)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be among {FAMILIES}, got {family!r}")
    terms, rel_se = [], []
    pairs = noise_runs.shape[0] // 2
    for sl in slices:
        d, runs = delta[sl], noise_runs[:, sl]
        if family == "laplace":
            move, scale = float(np.abs(d).sum()), laplace_scale(runs)
            se = 0.9 / math.sqrt(max(1, pairs * d.size))      # sd |L1 - L2| / E = 0.88
        else:
            move, scale = float(np.sum(d ** 2)), world_std(runs) ** 2
            se = 2.0 / math.sqrt(2.0 * max(1, pairs * d.size))  # of a variance: 2x a std's
        if move == 0.0:
            continue
        terms.append(math.inf if scale <= 0 else move / scale)
        rel_se.append(se)
    total = float(sum(terms))
    if not math.isfinite(total) or total == 0.0:
        return (total if family == "laplace" else math.sqrt(total)), 1e-3
    share = np.asarray(terms) / total
    rel = 6.0 * float(np.sqrt(np.sum((share * np.asarray(rel_se)) ** 2)))
    if family == "gaussian":
        return math.sqrt(total), max(1e-3, 0.5 * rel)
    return total, max(1e-3, rel)
