"""adaclip (Pichapati et al. 2019): the transform is undone exactly without noise or clipping,
the clipped transformed gradients stay inside the clip, the estimators on hand-made tensors,
one noise draw per ledger step, learning above chance."""

import math

import pytest
import torch

import accounting as A
from leakaudit import defenses as D
from leakaudit.defenses.adaclip import AdaClip, optimal_scale, update_estimates
from leakaudit.defenses.ops import flat_norms
from leakaudit.fl import simulate

TINY = dict(dataset="digits", clients=3, rounds=2, local_steps=2, batch_size=8, progress=False)


def ctx(client=0, seed=0):
    rc = D.RoundContext(round=0, rounds=5, clients=2, clients_per_round=2, local_steps=1,
                        batch_size=8, client_sizes=(100, 100), participants=(0, 1),
                        claimed=[A.PrivacyLedger() for _ in range(2)],
                        sound=[A.PrivacyLedger() for _ in range(2)])
    return D.ClientContext(round=0, client=client, local_step=0, n_examples=100, batch_size=8,
                           lr=0.1, generator=torch.Generator().manual_seed(seed), round_ctx=rc,
                           claimed=rc.claimed[client], sound=rc.sound[client])


def grads(batch=8, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 4, 3, generator=g) * scale, torch.randn(batch, 5, generator=g)]


def test_no_noise_no_clip_gives_the_batch_mean():
    d = AdaClip(clip=1e9, sigma=0.0, init_clip=2.0)
    c = ctx()
    for seed in range(4):  # the estimates move after every step; the identity holds each time
        g = grads(seed=seed, scale=1.0 + seed)
        out = d.privatize_batch(g, c)
        for o, gi in zip(out, g):
            assert torch.allclose(o, gi.mean(dim=0), atol=1e-5)
    m, s, b = d.state[0]
    assert any(float(x.abs().sum()) > 0 for x in m)  # m moved away from 0
    assert c.sound.steps == 4 and c.claimed.steps == 4


def test_first_step_is_dp_sgd_with_init_clip():
    # b_0 = init_clip everywhere, m_0 = 0: clip C=1 on g / init_clip == clip init_clip on g
    d = AdaClip(clip=1.0, sigma=0.0, init_clip=0.5)
    g = grads(scale=3.0)
    m, s, b = d.initial_state([x[0] for x in g])
    for bi in b:
        assert torch.allclose(bi, torch.full_like(bi, 0.5))
    out = d.privatize_batch(g, ctx())
    norms = flat_norms(g)
    factor = (0.5 / norms).clamp(max=1.0)
    for o, gi in zip(out, g):
        ref = (gi * factor.view(-1, *([1] * (gi.dim() - 1)))).mean(dim=0)
        assert torch.allclose(o, ref, atol=1e-6)


def test_clipped_transformed_norm_at_most_clip():
    d = AdaClip(clip=1.0, sigma=0.0)
    g = grads(scale=50.0)
    m, s, b = d.initial_state([x[0] for x in g])
    w = [(gi - mi) / bi for gi, mi, bi in zip(g, m, b)]
    sums, clipped = D.ops.clipped_sum(w, 1.0)
    assert torch.all(clipped <= 1.0 + 1e-6)
    assert float(flat_norms([s_.unsqueeze(0) for s_ in sums])[0]) <= 8 * (1 + 1e-6)


def test_optimal_scale_by_hand():
    s = [torch.tensor([1.0, 4.0]), torch.tensor([16.0])]
    # sum sqrt(s) = 1 + 2 + 4 = 7; b_j = sqrt(sqrt(s_j) * 7)
    b = optimal_scale(s)
    assert torch.allclose(b[0], torch.tensor([math.sqrt(7.0), math.sqrt(14.0)]))
    assert torch.allclose(b[1], torch.tensor([math.sqrt(28.0)]))
    # the constraint is tight: sum s_j / b_j^2 = 1 (expected transformed norm^2 = 1)
    assert sum(float((si / bi ** 2).sum()) for si, bi in zip(s, b)) == pytest.approx(1.0)
    # and the noise sum b_j^2 = (sum sqrt s)^2 = 49 <= d * sum s = 3 * 21
    assert sum(float((bi ** 2).sum()) for bi in b) == pytest.approx(49.0)


def test_estimator_update_by_hand():
    g_tilde = [torch.tensor([1.0, 3.0])]
    m = [torch.tensor([0.0, 1.0])]
    s = [torch.tensor([0.5, 0.5])]
    b = [torch.tensor([1.0, 2.0])]
    m2, s2, b2 = update_estimates(g_tilde, m, s, b, noise_var=0.25, beta1=0.9, beta2=0.8,
                                  h1=0.01, h2=2.0)
    assert torch.allclose(m2[0], torch.tensor([0.1, 1.2]))
    # v = (g~ - m)^2 - b^2 * 0.25 = [1 - 0.25, 4 - 1] = [0.75, 3.0] -> clamp to [0.75, 2.0]
    assert torch.allclose(s2[0], torch.tensor([0.8 * 0.5 + 0.2 * 0.75, 0.8 * 0.5 + 0.2 * 2.0]))
    assert torch.allclose(b2[0], optimal_scale(s2)[0])
    # the noise term can push v below h1: clamped there
    _, s3, _ = update_estimates(g_tilde, m, s, b, noise_var=100.0, beta1=0.9, beta2=0.0,
                                h1=0.01, h2=2.0)
    assert torch.allclose(s3[0], torch.tensor([0.01, 0.01]))


def test_noise_std_and_state_per_client():
    d = AdaClip(clip=1.0, sigma=2.0, init_clip=3.0)
    g = [torch.zeros(4, 50_000)]  # 4 realised rows, expected batch size B = 8
    out = d.privatize_batch(g, ctx(client=1))
    # g~ = b * (0 + N(0, (sigma C)^2)) / B + 0, b = 3, B the EXPECTED size: std 3 * 2 / 8
    assert float(out[0].std()) == pytest.approx(0.75, rel=0.02)
    assert set(d.state) == {1}
    d.start(2)
    assert d.state == {}


def test_release_count(release_counter):
    run = simulate(defense=AdaClip(sigma=1.0), clients_per_round=2, **TINY)
    draws = release_counter.draws["gaussian"]
    assert draws == 2 * 2 * 2
    assert draws == release_counter.in_ledgers(run.sound)["gaussian"] > 0
    assert run.epsilon(1e-5, "claimed") == run.epsilon(1e-5, "sound")
    assert AdaClip().claimed_vs_sound == ""


@pytest.mark.parametrize("kwargs, name", [
    (dict(clip=0.0), "clip"), (dict(sigma=-1.0), "sigma"), (dict(init_clip=0.0), "init_clip"),
    (dict(beta1=1.0), "beta1"), (dict(beta2=-0.1), "beta2"), (dict(h1=0.0), "h1"),
    (dict(h2=float("inf")), "h2"), (dict(h1=1.0, h2=0.5), "h1"),
])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AdaClip(**kwargs)


@pytest.mark.slow
def test_learns_above_chance():
    """The quick utility profile, shortened to 8 rounds with less noise than the
    benchmark's (chance: 10%; the 30-round benchmark numbers are in the module report)."""
    run = simulate(dataset="digits", defense=AdaClip(clip=1.0, sigma=1.0, init_clip=4.0),
                   clients=10, clients_per_round=5, rounds=8, local_steps=10, batch_size=32,
                   lr=0.01, optimizer="adam", progress=False, seed=0)
    assert max(run.accuracy) > 0.2
