"""The prior-aware identification attack (Hayes, Mahloujifar, Balle 2023), the exact tier
(ratio of a biased linear layer's gradients) and the priors of the reconstruction bound."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from leakaudit import attacks, data, fl, grads, metrics, models
from leakaudit.attacks.exact import applicable
from leakaudit.attacks.prior_aware import CandidateScorer


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", seed=0)


def _mlp(hidden=(8,), seed=0):
    return models.mlp(784, 10, hidden, "relu", generator=torch.Generator().manual_seed(seed))


def test_prior_aware_picks_the_target_without_seeing_it(digits):
    model = _mlp()
    cand, labels = digits.x_train[:12], digits.y_train[:12]
    for target in (0, 5, 11):
        g = fl.batch_gradient(model, cand[target:target + 1], labels[target:target + 1])
        rec = attacks.reconstruct("prior-aware", model, g, input_shape=(1, 28, 28),
                                  num_classes=10, candidates=cand, candidate_labels=labels,
                                  noise_std=1e-4)
        assert rec.history[0]["chosen"] == target
        assert torch.equal(rec.inputs[0], cand[target].to(rec.inputs.dtype))
        assert int(rec.labels[0]) == int(labels[target])


def test_map_rule_matches_the_two_candidate_error_rate(digits):
    """Gaussian release m_t + s N: the MAP choice between two candidates errs with
    probability Phi(-||m_1 - m_2|| / 2s); a wrong sign or scale in the score fails this."""
    model = _mlp()
    scorer = CandidateScorer(model, digits.x_train[:2], digits.y_train[:2], noise_std=1.0,
                             clip=0.5, clip_mode="example")
    means = scorer.means.double()
    dist = float((means[0] - means[1]).norm())
    s = dist / 2.0  # expected success Phi(1) = 0.841
    scorer.noise_std = s
    gen = torch.Generator().manual_seed(1)
    n, hits = 2000, 0
    for t in range(n):
        target = t % 2
        y = means[target] + s * torch.randn(means.shape[1], generator=gen, dtype=torch.float64)
        hits += scorer.identify(y) == target
    expected = norm.cdf(dist / (2 * s))
    assert abs(hits / n - expected) < 4 * math.sqrt(expected * (1 - expected) / n)


def test_laplace_scores_by_l1_and_informed_means_add_the_known_rest(digits):
    model = _mlp()
    x, y = digits.x_train[:4], digits.y_train[:4]
    lap = CandidateScorer(model, x[:3], y[:3], noise_std=1e-3, noise="laplace")
    g = fl.batch_gradient(model, x[1:2], y[1:2])
    assert lap.identify(g) == 1
    # informed, clip per example, B = 2: mean_i = (clip(g(z_i)) + clip(g(rest))) / 2
    inf = CandidateScorer(model, x[:3], y[:3], noise_std=1.0, clip=0.3, clip_mode="example",
                          known_inputs=x[3:4], known_labels=y[3:4])
    params = {n: p.detach() for n, p in model.named_parameters()}
    per = grads.per_example_gradients(model, params, {}, x, y)
    flat = torch.cat([t.reshape(4, -1) for t in per], 1).double()
    clipped = flat * torch.clamp(0.3 / flat.norm(dim=1, keepdim=True), max=1.0)
    expect = (clipped[:3] + clipped[3]) / 2
    assert torch.allclose(inf.means.double(), expect, rtol=1e-5, atol=1e-7)
    # update clipping (fed-sdp): the mean gradient of the batch, clipped as a whole
    upd = CandidateScorer(model, x[:3], y[:3], noise_std=1.0, clip=0.3, clip_mode="update",
                          known_inputs=x[3:4], known_labels=y[3:4])
    mean = (flat[:3] + flat[3]) / 2
    mean = mean * torch.clamp(0.3 / mean.norm(dim=1, keepdim=True), max=1.0)
    assert torch.allclose(upd.means.double(), mean, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="uninformed"):
        CandidateScorer(model, x[:3], y[:3], noise_std=1.0, informed=False,
                        known_inputs=x[3:4], known_labels=y[3:4])
    with pytest.raises(ValueError, match="noise_std"):
        CandidateScorer(model, x[:3], y[:3], noise_std=0.0)
    with pytest.raises(ValueError, match="candidates is required"):
        attacks.reconstruct("prior-aware", model, g, input_shape=(1, 28, 28), num_classes=10,
                            noise_std=1.0)


def test_exact_tier_rebuilds_one_example_in_one_pass(digits):
    model = _mlp()
    x, y = digits.x_train[7:8], digits.y_train[7:8]
    g = fl.batch_gradient(model, x, y)
    rec = attacks.reconstruct("exact", model, g, input_shape=(1, 28, 28), num_classes=10)
    assert metrics.mse(rec.inputs, x) <= 1e-10
    assert rec.iterations == 1 and int(rec.labels[0]) == int(y[0])


def test_exact_tier_batch_recovers_inputs_seen_alone_by_a_unit(digits):
    model = _mlp(hidden=(400,))
    x, y = digits.x_train[:2], digits.y_train[:2]
    g = fl.batch_gradient(model, x, y)
    rec = attacks.reconstruct("exact", model, g, input_shape=(1, 28, 28), num_classes=10,
                              batch_size=2)
    assert metrics.matched_mse(rec.inputs, x) <= 1e-10


def test_exact_tier_is_not_applicable_to_a_convolution_first():
    lenet = models.lenet(1, 28, 10)
    assert not applicable(lenet) and applicable(_mlp())
    assert not applicable(nn.Sequential(nn.Flatten(), nn.Linear(784, 10, bias=False)))
    g = fl.batch_gradient(lenet, torch.rand(1, 1, 28, 28), torch.tensor([3]))
    with pytest.raises(ValueError, match="not applicable"):
        attacks.reconstruct("exact", lenet, g, input_shape=(1, 28, 28), num_classes=10)


def test_priors_count_guesses_and_the_psnr_prior_is_certified():
    assert metrics.prior_success_identification(100, 8) == pytest.approx(0.08)
    assert metrics.prior_success_identification(4, 8) == 1.0
    # two one-pixel "images" 0.18 apart: no pool image is within 20 dB (RMS 0.1) of the
    # other, but the guess 0.09 is within 0.1 of both: the pool-only estimate says 1/2, the
    # true best blind guess scores 1, the certified bound says 1
    pool = np.array([[[[0.0]]], [[[0.18]]]])
    assert metrics.prior_success_psnr(pool) == pytest.approx(0.5)
    assert metrics.certified_prior_psnr(pool) == pytest.approx(1.0)
    # on random pools the certified value bounds the best of many off-pool guesses
    rng = np.random.default_rng(0)
    pool = rng.uniform(0.3, 0.7, size=(40, 1, 2, 2))
    guesses = rng.uniform(0, 1, size=(4000, 4))
    d = ((guesses[:, None, :] - pool.reshape(40, -1)[None]) ** 2).mean(axis=2)
    best = (d <= 0.01).sum(axis=1).max() / 40
    assert metrics.certified_prior_psnr(pool) >= best
    assert metrics.certified_prior_psnr(pool, guesses=3) == pytest.approx(
        min(1.0, 3 * metrics.certified_prior_psnr(pool)))
