"""Reconstruction metrics against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from leakaudit import metrics


def constant(value, shape=(1, 28, 28)):
    return torch.full(shape, float(value))


def test_mse_rmse_psnr_of_a_constant_offset():
    x, y = constant(0.5), constant(0.6)
    assert metrics.mse(x, y) == pytest.approx(0.01)
    assert metrics.rmse(x, y) == pytest.approx(0.1)
    assert metrics.psnr(x, y) == pytest.approx(20.0)
    # 0.01 offset: MSE 1e-4, 40 dB; numpy arrays work the same
    assert metrics.psnr(np.full((3, 8, 8), 0.2), np.full((3, 8, 8), 0.21)) == pytest.approx(40.0)


def test_identical_images():
    x = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert metrics.mse(x, x) == 0.0
    assert metrics.psnr(x, x) == math.inf
    assert metrics.ssim(x, x) == pytest.approx(1.0)
    assert metrics.ssim(constant(0.3), constant(0.3)) == pytest.approx(1.0)


def test_batches_average_over_examples():
    truth = torch.stack([constant(0.5), constant(0.5)])
    rec = torch.stack([constant(0.6), constant(0.51)])  # MSE 1e-2 and 1e-4: 20 and 40 dB
    assert metrics.mse(rec, truth) == pytest.approx((1e-2 + 1e-4) / 2)
    assert metrics.psnr(rec, truth) == pytest.approx(30.0)
    s = [metrics.ssim(rec[i], truth[i]) for i in range(2)]
    assert metrics.ssim(rec, truth) == pytest.approx(sum(s) / 2)


def test_ssim_small_images_and_tabular():
    gen = torch.Generator().manual_seed(1)
    x, y = torch.rand(1, 8, 8, generator=gen), torch.rand(1, 8, 8, generator=gen)
    value = metrics.ssim(x, y)
    assert -1.0 <= value < 0.5  # two independent noise images are dissimilar
    assert math.isfinite(metrics.ssim(x[:, :5, :5], y[:, :5, :5]))  # 5x5 window
    assert math.isnan(metrics.ssim(x[:, :2, :2], y[:, :2, :2]))  # no valid window
    assert math.isnan(metrics.ssim(torch.zeros(30), torch.ones(30)))  # tabular
    assert math.isnan(metrics.ssim(torch.zeros(4, 30), torch.ones(4, 30)))
    assert metrics.mse(torch.zeros(4, 30), torch.ones(4, 30)) == 1.0


def test_ssim_falls_with_noise():
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(3, 32, 32, generator=gen)
    slightly = (x + 0.01 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    very = (x + 0.3 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    assert 1.0 > metrics.ssim(slightly, x) > metrics.ssim(very, x)


def test_match_recovers_a_permutation():
    gen = torch.Generator().manual_seed(3)
    truth = torch.rand(5, 1, 8, 8, generator=gen)
    order = torch.tensor([3, 0, 4, 1, 2])
    rec = truth[order] + 0.01
    perm = metrics.match(rec, truth)
    assert torch.equal(rec[perm], truth + 0.01)
    assert metrics.matched_mse(rec, truth) == pytest.approx(1e-4, rel=1e-5)
    assert metrics.mse(rec, truth) > 1e-2  # unmatched order is far off
    assert metrics.match(truth[:1], truth[:1]).tolist() == [0]


def test_success_asr_and_tau():
    assert metrics.success(0.01) and not metrics.success(0.0101)
    assert metrics.success(0.005, threshold=0.005)
    assert not metrics.success(math.nan)
    assert metrics.success(0.8, 0.5, metric="ssim") and not metrics.success(0.4, 0.5, metric="ssim")
    assert metrics.attack_success_rate([0.001, 0.02, 0.01, math.nan]) == 0.5
    assert math.isnan(metrics.attack_success_rate([]))
    history = [{"iteration": 0, "gradient_loss": 9.0, "mse": 0.3},
               {"iteration": 10, "gradient_loss": 1.0, "mse": 0.02},
               {"iteration": 20, "gradient_loss": 0.1, "mse": 0.009},
               {"iteration": 23, "gradient_loss": 0.01, "mse": 0.001}]
    assert metrics.tau(history) == 20
    assert metrics.tau(history, threshold=0.001) == 23
    assert metrics.tau(history, threshold=1e-4) == 300
    assert metrics.tau(history, threshold=1e-4, limit=50) == 50
    assert metrics.tau([]) == 300
    with pytest.raises(ValueError, match="track"):
        metrics.tau([{"iteration": 0, "gradient_loss": 1.0}])


def test_label_accuracy_is_multiset_aware():
    assert metrics.label_accuracy([3], [3]) == 1.0
    assert metrics.label_accuracy(torch.tensor([2]), torch.tensor([3])) == 0.0
    assert metrics.label_accuracy([1, 2, 3, 3], [3, 1, 3, 2]) == 1.0
    assert metrics.label_accuracy([1, 1, 1, 2], [1, 2, 2, 3]) == 0.5
    with pytest.raises(ValueError, match="labels"):
        metrics.label_accuracy([1, 2], [1])
    with pytest.raises(ValueError, match="integer"):
        metrics.label_accuracy([1.5], [1])


def test_bad_inputs():
    with pytest.raises(ValueError, match="same shape"):
        metrics.mse(torch.zeros(1, 8, 8), torch.zeros(1, 8, 7))
    with pytest.raises(ValueError, match="same shape"):
        metrics.match(torch.zeros(2, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="threshold"):
        metrics.success(0.1, threshold=math.nan)
    with pytest.raises(ValueError, match="metric"):
        metrics.success(0.1, metric="psnr")
    with pytest.raises(ValueError, match="limit"):
        metrics.tau([], limit=-1)


# ---------------------------------------------------------------- scores and bound
def test_image_scores_report_ssim_and_identification():
    gen = torch.Generator().manual_seed(0)
    pool = torch.rand(20, 1, 8, 8, generator=gen)
    truth = pool[[3, 7]]
    rebuilt = torch.stack([truth[1] + 0.01, pool[0] * 0 + 0.5])  # a near copy of 7, a blur
    s = metrics.image_scores(rebuilt, truth, pool=pool)
    # matching pairs the near copy with image 7; it is identified, the grey blur is not
    # (unless image 3 happens to be the pool image nearest to grey)
    nearest_to_grey = int(((pool - 0.5) ** 2).flatten(1).mean(1).argmin())
    assert s["identified"] == [nearest_to_grey == 3, True]
    assert s["ssim"][1] == pytest.approx(metrics.ssim(rebuilt[0], truth[1]))
    assert s["mean_ssim"] == pytest.approx(float(np.mean(s["ssim"])))
    with pytest.raises(ValueError, match="pool must contain"):
        metrics.identified(truth, truth, pool[10:])


def test_identification_prior_is_one_over_the_pool():
    """A fixed guess identifies exactly one pool image: over a uniform target its success
    rate is 1 / N (checked by brute force)."""
    pool = torch.rand(15, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    guess = torch.full((1, 1, 4, 4), 0.3)
    hits = sum(metrics.identified(guess, pool[i:i + 1], pool)[0] for i in range(15))
    assert hits / 15 == pytest.approx(metrics.prior_success_identification(15))


def test_prior_success_psnr_counts_the_densest_neighbourhood():
    a = torch.zeros(1, 4, 4)
    pool = torch.stack([a, a + 0.05, a + 0.09, a + 0.5, a + 1.0])  # MSE 0.0025, 0.0081
    assert metrics.prior_success_psnr(pool, 20.0) == pytest.approx(3 / 5)
    assert metrics.prior_success_psnr(pool, 40.0) == pytest.approx(1 / 5)


def test_rero_bound_gdp_values_and_limits():
    from scipy.stats import norm

    # Hayes, Mahloujifar, Balle 2023: Phi(Phi^-1(kappa) + mu)
    assert metrics.rero_bound_gdp(0.5, 1.0) == pytest.approx(norm.cdf(1.0))
    assert metrics.rero_bound_gdp(0.1, 0.0) == pytest.approx(0.1)
    assert metrics.rero_bound_gdp(0.1, math.inf) == 1.0
    values = [metrics.rero_bound_gdp(1e-3, mu) for mu in (0.1, 0.5, 1, 2, 4, 8)]
    assert all(a < b for a, b in zip(values, values[1:]))  # more privacy loss, weaker bound
    with pytest.raises(ValueError, match="kappa"):
        metrics.rero_bound_gdp(1.5, 1.0)
    with pytest.raises(ValueError, match="mu"):
        metrics.rero_bound_gdp(0.1, -1.0)


def test_rero_bound_from_eps_delta_pairs_meets_the_gdp_curve():
    """The mu-GDP release's exact (eps, delta(eps)) profile (Balle & Wang 2018, Thm. 8)
    rebuilds its tradeoff curve, so the pair bound converges to the GDP bound from above."""
    from scipy.stats import norm

    mu, kappa = 2.0, 1 / 1347
    pairs = [(e, norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2))
             for e in np.linspace(0.0, 20.0, 4001)]
    gdp = metrics.rero_bound_gdp(kappa, mu)
    dp = metrics.rero_bound_dp(kappa, pairs)
    assert gdp <= dp <= gdp * 1.001
    assert metrics.rero_bound_dp(kappa, []) == 1.0
    assert metrics.rero_bound_dp(0.2, [(0.0, 0.0)]) == pytest.approx(0.2)  # perfect privacy
    assert metrics.rero_bound_dp(0.2, [(math.inf, 0.0)]) == 1.0
