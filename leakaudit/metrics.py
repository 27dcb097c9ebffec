"""Reconstruction metrics of the audit (docs/glossary.md: success, ASR, tau).

Pure functions of tensors or arrays; nothing here sees an attack's internals.

Shapes: a 4-D input is a batch of images ``(B, C, H, W)``, a 3-D input one image
``(C, H, W)``, a 2-D input a batch of tabular rows ``(B, F)`` and a 1-D input one row ``(F,)``
(a single-channel image is ``(1, H, W)``, never ``(H, W)``). Images live in [0, 1], hence
``data_range=1`` for PSNR and SSIM. Batch metrics are means over examples; the examples of a
batch reconstruction must be put in the order of the ground truth first with :func:`match`.

The Fed-alphaCDP paper reports as "RMSE" the formula ``(1/U) sum (x - x_rec)^2``, which is the
MSE; we call the paper's "reconstruction distance" MSE and report :func:`rmse` (its square
root) separately.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from ._validate import check_int, check_number

__all__ = [
    "SUCCESS_PSNR",
    "certified_prior_psnr",
    "identified",
    "prior_success_identification",
    "prior_success_psnr",
    "rero_bound_dp",
    "rero_bound_gdp",
    "score_history",
    "success_interval",
    "attack_success_rate",
    "image_scores",
    "label_accuracy",
    "match",
    "matched_mse",
    "mse",
    "psnr",
    "rmse",
    "ssim",
    "success",
    "tau",
]

#: SSIM window side for images of side >= 7 (skimage's default, uniform window)
SSIM_WINDOW = 7


def _array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().to(torch.float64).numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim < 1 or arr.ndim > 4:
        raise ValueError(f"{name} must have 1 to 4 dimensions, got shape {arr.shape}")
    return arr


def _pair(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = _array(x, "x"), _array(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same shape, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError("x and y are empty")
    return a, b


def _examples(a: np.ndarray) -> np.ndarray:
    """View as a batch: (B, C, H, W) or (B, F)."""
    return a[None] if a.ndim in (1, 3) else a


def mse(x: Any, y: Any) -> float:
    """Mean over all elements of ``(x - y)^2`` (for a batch, the mean of per-example MSEs)."""
    a, b = _pair(x, y)
    return float(np.mean((a - b) ** 2))


def rmse(x: Any, y: Any) -> float:
    """Square root of :func:`mse` (not the Fed-alphaCDP paper's "RMSE", which is the MSE)."""
    return math.sqrt(mse(x, y))


def psnr(x: Any, y: Any) -> float:
    """Peak signal-to-noise ratio in dB, ``skimage.metrics.peak_signal_noise_ratio`` with
    ``data_range=1``: ``10 log10(1 / MSE)``; inf for identical inputs; batches: mean over
    examples. Defined for tabular rows too (same formula), though a "peak" of 1 only means
    something for data in [0, 1]."""
    a, b = _pair(x, y)
    values = []
    for ea, eb in zip(_examples(a), _examples(b)):
        if np.array_equal(ea, eb):
            values.append(math.inf)
        else:
            values.append(float(peak_signal_noise_ratio(eb, ea, data_range=1.0)))
    return float(np.mean(values))


def ssim(x: Any, y: Any) -> float:
    """Structural similarity, ``skimage.metrics.structural_similarity`` with ``data_range=1``,
    ``channel_axis`` on the channels of ``(C, H, W)`` images; batches: mean over examples.

    Window: skimage's default 7x7 uniform window for images of side >= 7 (8x8 digits, 28x28,
    32x32); for smaller images the largest odd side that fits (3 or 5); images with a side
    below 3 and tabular data (1-D or 2-D inputs) have no SSIM: ``math.nan``.
    """
    a, b = _pair(x, y)
    if a.ndim < 3:
        return math.nan
    batch_a, batch_b = _examples(a), _examples(b)
    side = min(batch_a.shape[-2:])
    win = min(SSIM_WINDOW, side if side % 2 else side - 1)
    if win < 3:
        return math.nan
    values = [
        structural_similarity(ea, eb, win_size=win, data_range=1.0, channel_axis=0)
        for ea, eb in zip(batch_a, batch_b)
    ]
    return float(np.mean(values))


def match(reconstructed: Any, truth: Any) -> np.ndarray:
    """The order of the reconstructions that best matches the ground truth.

    Returns ``perm`` (int64 array) such that ``reconstructed[perm][i]`` is paired with
    ``truth[i]``, minimising the total MSE over pairs (``scipy.optimize.linear_sum_assignment``
    on the B x B matrix of pairwise MSEs). Inputs are batches ``(B, ...)`` of equal shapes.
    """
    r = _batch(reconstructed, "reconstructed")
    t = _batch(truth, "truth")
    if r.shape != t.shape:
        raise ValueError(
            f"reconstructed and truth must have the same shape, got {r.shape} and {t.shape}"
        )
    rf, tf = r.reshape(len(r), -1), t.reshape(len(t), -1)
    cost = ((tf[:, None, :] - rf[None, :, :]) ** 2).mean(axis=2)
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(len(rows), dtype=np.int64)
    perm[rows] = cols
    return perm


def matched_mse(reconstructed: Any, truth: Any) -> float:
    """:func:`mse` of a batch reconstruction after :func:`match` (B >= 1 examples)."""
    r = _batch(reconstructed, "reconstructed")
    t = _batch(truth, "truth")
    return mse(r[match(r, t)], t)


#: PSNR (dB) at or above which one rebuilt image counts: 20 dB on [0, 1] images is MSE <= 0.01
SUCCESS_PSNR = 20.0
#: per-image PSNR is capped here for means (an exact copy has infinite PSNR)
PSNR_CAP = 100.0


def image_scores(reconstructed: Any, truth: Any,
                 threshold_db: float = SUCCESS_PSNR, pool: Any = None) -> dict[str, Any]:
    """Per-image scores of a batch reconstruction: the reconstructions are
    put in the order of the truth by :func:`match` (Hungarian, total MSE), then each image
    gets its PSNR (capped at ``PSNR_CAP``), its SSIM, and succeeds when its PSNR is >=
    ``threshold_db``. With ``pool`` (the data set the truth was drawn from, truth included),
    also whether each image is :func:`identified`.

    Returns ``{"psnr": [...], "ssim": [...], "success": [...], "asr": share rebuilt,
    "mean_psnr", "mean_ssim"[, "identified": [...], "identification": share]}``.
    """
    _check_threshold(threshold_db)
    r = _batch(reconstructed, "reconstructed")
    t = _batch(truth, "truth")
    r = r[match(r, t)]
    values = [min(psnr(a, b), PSNR_CAP) for a, b in zip(r, t)]
    sims = [ssim(a, b) for a, b in zip(r, t)]
    flags = [v >= threshold_db for v in values]
    out = {"psnr": values, "ssim": sims, "success": flags, "asr": sum(flags) / len(flags),
           "mean_psnr": float(np.mean(values)), "mean_ssim": float(np.mean(sims))}
    if pool is not None:
        hits = identified(r, t, pool)
        out["identified"] = hits
        out["identification"] = sum(hits) / len(hits)
    return out


def identified(reconstructed: Any, truth: Any, pool: Any) -> list[bool]:
    """Identifiability: for each pair ``(reconstructed[i], truth[i])`` (already
    matched), whether the image of ``pool`` nearest to the reconstruction (MSE) is the truth:
    a person holding the data set would pick out the right record. ``pool`` (N, ...) must
    contain every truth image (a ValueError otherwise); ties count as failures unless every
    tied image equals the truth.

    When the truth is drawn uniformly from ``pool``, any guess made without the release
    succeeds with probability exactly 1/N (one pool image is nearest to it):
    :func:`prior_success_identification`, the kappa of :func:`rero_bound_gdp`."""
    r = _batch(reconstructed, "reconstructed")
    t = _batch(truth, "truth")
    p = _batch(pool, "pool")
    if r.shape != t.shape or p.shape[1:] != t.shape[1:]:
        raise ValueError(f"reconstructed {r.shape}, truth {t.shape} and pool {p.shape} must "
                         "share the example shape")
    pf, rf, tf = p.reshape(len(p), -1), r.reshape(len(r), -1), t.reshape(len(t), -1)
    out = []
    for a, b in zip(rf, tf):
        same = np.all(pf == b, axis=1)
        if not same.any():
            raise ValueError("pool must contain every truth image")
        d = ((pf - a) ** 2).mean(axis=1)
        nearest = d <= d.min()
        out.append(bool(np.all(same[nearest])))
    return out


def prior_success_identification(pool_size: int, guesses: int = 1) -> float:
    """kappa of identification for a target drawn uniformly from a pool of ``pool_size``
    distinct images, for an attacker that outputs ``guesses`` images (B guesses at batch
    size B: the matched reconstruction of each image is one of them): ``min(1, guesses /
    pool_size)`` (a k-candidate prior-aware attack: ``pool_size = k``, one guess)."""
    pool_size = check_int("pool_size", pool_size, 1)
    guesses = check_int("guesses", guesses, 1)
    return min(1.0, guesses / pool_size)


def prior_success_psnr(pool: Any, threshold_db: float = SUCCESS_PSNR) -> float:
    """A LOWER estimate of kappa of "PSNR >= threshold" for a target drawn uniformly from
    ``pool``: the largest share of the pool within ``threshold_db`` of one pool image
    (guesses taken from the pool only; a guess outside it can do better, so this is not a
    certified prior: use :func:`certified_prior_psnr` for a bound)."""
    _check_threshold(threshold_db)
    return _largest_share_within(_batch(pool, "pool"), 10.0 ** (-threshold_db / 10.0))


def certified_prior_psnr(pool: Any, threshold_db: float = SUCCESS_PSNR,
                         guesses: int = 1) -> float:
    """A certified upper bound on kappa of "PSNR >= threshold" (the best blind guess over ALL
    images, in [0, 1]^d or not) for a target drawn uniformly from ``pool``, with ``guesses``
    guesses (multiplied, capped at 1).

    Why it holds: with r^2 = 10^(-threshold/10) the MSE at the threshold, every pool image
    within r of a guess y (in RMS distance) is within 2r of every other such image (triangle
    inequality), so the images one guess rebuilds all lie in the ball of radius 2r (MSE
    4 r^2, i.e. threshold - 6.02 dB) around any one of them: their share is at most the
    largest share of the pool within MSE 4 r^2 of a pool image. A guess that rebuilds no
    pool image scores 0."""
    _check_threshold(threshold_db)
    guesses = check_int("guesses", guesses, 1)
    limit = 4.0 * 10.0 ** (-threshold_db / 10.0)
    return min(1.0, guesses * _largest_share_within(_batch(pool, "pool"), limit))


def _largest_share_within(p: np.ndarray, limit: float) -> float:
    """The largest share of the pool within MSE ``limit`` of one pool image."""
    pf = p.reshape(len(p), -1)
    sq = (pf ** 2).sum(axis=1)
    best = 0
    for start in range(0, len(pf), 256):
        block = pf[start:start + 256]
        d = (sq[start:start + 256, None] + sq[None, :] - 2.0 * block @ pf.T) / pf.shape[1]
        best = max(best, int((d <= limit + 1e-12).sum(axis=1).max()))
    return best / len(pf)


def rero_bound_gdp(kappa: float, mu: float) -> float:
    """Reconstruction robustness of a mu-GDP release (Hayes, Mahloujifar, Balle, "Bounding
    training data reconstruction in DP-SGD", NeurIPS 2023, Thm. 2 with the Gaussian tradeoff
    curve of Dong, Roth, Su 2022): no reconstruction attack succeeds with probability above
    ``Phi(Phi^-1(kappa) + mu)``, where ``kappa`` is the success of the best guess made
    without the release. mu = inf (or kappa = 1) gives 1; mu = 0 gives kappa.

    The theorem compares the release with and without the target (add/remove of one
    record): mu is the release's add/remove mu (e.g. sqrt(T) / sigma for T full-batch
    Gaussian steps of noise multiplier sigma), not a replace-one mu doubled by group
    privacy (valid too, but 4-8x looser at sigma 0.5-2)."""
    from scipy.stats import norm

    kappa = check_number("kappa", kappa, minimum=0.0, maximum=1.0)
    if not (isinstance(mu, (int, float)) and mu == math.inf):
        mu = check_number("mu", mu, minimum=0.0)
    if mu == math.inf or kappa >= 1.0:
        return 1.0
    if kappa == 0.0:
        return 0.0
    return float(norm.cdf(norm.ppf(kappa) + mu))


def success_interval(successes: int, trials: int, confidence: float = 0.95
                     ) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval (Clopper & Pearson 1934) on a success rate from
    ``successes`` in ``trials``: the alpha/2 quantile of Beta(k, n - k + 1) and the
    1 - alpha/2 quantile of Beta(k + 1, n - k), alpha = 1 - ``confidence``; 0 at k = 0 and
    1 at k = n: the one-sided bounds of :mod:`leakaudit.scoring.bounds` at alpha / 2 each."""
    from .scoring.bounds import clopper_pearson_lower, clopper_pearson_upper

    n = check_int("trials", trials, 1)
    k = check_int("successes", successes, 0)
    if k > n:
        raise ValueError(f"successes must be at most trials = {n}, got {k}")
    alpha = 1.0 - check_number("confidence", confidence, minimum=0.0, maximum=1.0)
    return clopper_pearson_lower(k, n, alpha / 2), clopper_pearson_upper(k, n, alpha / 2)


def rero_bound_dp(kappa: float, pairs: Iterable[tuple[float, float]]) -> float:
    """The same bound from (eps, delta(eps)) pairs of one release (the PLD/RDP bracket's
    upper side): each pair limits the power at level kappa to
    ``min(1, e^eps kappa + delta, 1 - e^-eps (1 - delta - kappa))`` (the (eps, delta)
    tradeoff curve, Kairouz, Oh, Viswanath 2015); the bound is the least over pairs; no
    pairs give 1."""
    kappa = check_number("kappa", kappa, minimum=0.0, maximum=1.0)
    best = 1.0
    for eps, delta in pairs:
        if eps == math.inf or eps > 700:
            continue
        eps = check_number("eps", eps, minimum=0.0)
        delta = check_number("delta", delta, minimum=0.0, maximum=1.0)
        power = min(1.0, math.exp(eps) * kappa + delta,
                    1.0 - math.exp(-eps) * max(0.0, 1.0 - delta - kappa))
        best = min(best, power)
    return best


def _batch(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x.detach().cpu().to(torch.float64).numpy() if isinstance(x, torch.Tensor)
                     else x, dtype=np.float64)
    if arr.ndim < 2 or len(arr) == 0:
        raise ValueError(f"{name} must be a non-empty batch (B, ...), got shape {arr.shape}")
    return arr


def success(value: float, threshold: float = 0.01, *, metric: str = "mse") -> bool:
    """Attack success test: ``MSE <= threshold`` (default 0.01), or with ``metric="ssim"``
    ``SSIM >= threshold``. NaN never succeeds."""
    _check_threshold(threshold)
    value = float(value)
    if math.isnan(value):
        return False
    if metric == "mse":
        return value <= threshold
    if metric == "ssim":
        return value >= threshold
    raise ValueError(f"metric must be 'mse' or 'ssim', got {metric!r}")


def attack_success_rate(values: Iterable[float], threshold: float = 0.01, *,
                        metric: str = "mse") -> float:
    """ASR: the fraction of attacked examples whose value passes :func:`success`; NaN for
    no examples."""
    flags = [success(v, threshold, metric=metric) for v in values]
    return sum(flags) / len(flags) if flags else math.nan


def tau(history: Sequence[Mapping[str, Any]], threshold: float = 0.01,
        limit: int = 300) -> int:
    """Iterations to success: the first recorded ``"iteration"`` of an attack history whose
    ``"mse"`` is ``<= threshold``, else ``limit`` (the paper's tables use 300). The resolution
    is the attack's ``track_every``. A history without any ``"mse"`` (an attack run without
    ``track``) is refused."""
    _check_threshold(threshold)
    check_int("limit", limit, 0)
    recorded = [h for h in history if "mse" in h]
    if history and not recorded:
        raise ValueError("history has no 'mse' entries: run the attack with track= to record it")
    for entry in recorded:
        if success(entry["mse"], threshold):
            return int(entry["iteration"])
    return int(limit)


def score_history(history: Sequence[dict[str, Any]], truth: Any) -> None:
    """Replace the reported dummies an attack kept in its history (``"inputs"``) by their
    :func:`matched_mse` against the truth (``"mse"``), in place: the attack never sees the
    truth, the scorer measures its iterates afterwards."""
    for entry in history:
        if "inputs" in entry:
            entry["mse"] = matched_mse(entry.pop("inputs"), truth)


def label_accuracy(predicted: Any, true: Any) -> float:
    """Fraction of labels recovered, as multisets (the order of a batch is unknown): the
    size of the multiset intersection divided by the batch size. For one example: 1.0 or 0.0."""
    p = _labels(predicted, "predicted")
    t = _labels(true, "true")
    if len(p) != len(t):
        raise ValueError(f"predicted has {len(p)} labels, true has {len(t)}")
    if not t:
        raise ValueError("no labels")
    common = Counter(p) & Counter(t)
    return sum(common.values()) / len(t)


def _labels(x: Any, name: str) -> list[int]:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().reshape(-1).tolist()
    arr = np.asarray(x).reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer labels, got dtype {arr.dtype}")
    return [int(v) for v in arr]


def _check_threshold(threshold: float) -> None:
    check_number("threshold", threshold)
