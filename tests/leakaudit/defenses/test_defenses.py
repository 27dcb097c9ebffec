"""Each defense does what it promises (no data or model needed: synthetic tensors)."""

import math

import numpy as np
import pytest
import torch

import accounting as A
from leakaudit import defenses as D
from leakaudit.defenses.ops import clip_flat, clip_per_layer, flat_norms, prune_smallest
from leakaudit.fl import simulate


def ctx(n_examples=100, batch_size=10, seed=0, clients=10, k=2, local_steps=3):
    rc = D.RoundContext(round=0, rounds=5, clients=clients, clients_per_round=k,
                        local_steps=local_steps, batch_size=batch_size,
                        client_sizes=tuple([n_examples] * clients), participants=(0, 1),
                        claimed=[A.PrivacyLedger() for _ in range(clients)],
                        sound=[A.PrivacyLedger() for _ in range(clients)])
    return D.ClientContext(round=0, client=0, local_step=0, n_examples=n_examples,
                           batch_size=batch_size, lr=0.1,
                           generator=torch.Generator().manual_seed(seed), round_ctx=rc,
                           claimed=rc.claimed[0], sound=rc.sound[0])


def grads(batch=16, seed=0, scale=10.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 12, 1, 5, 5, generator=g) * scale,
            torch.randn(batch, 12, generator=g) * scale,
            torch.randn(batch, 10, 588, generator=g) * scale]


def test_registry():
    names = D.available()
    for n in ("none", "fed-sdp-server", "fed-sdp-client", "fed-cdp", "fed-alpha-cdp",
              "fed-alpha-cdp-linear", "fed-alpha-cdp-staircase", "fed-alpha-cdp-exp",
              "fed-alpha-cdp-cyclic", "prune", "random-noise"):
        assert n in names
        assert D.get(n).name == n
    d = D.get("fed-cdp", clip=4.0, sigma=6.0)
    assert (d.clip, d.sigma) == (4.0, 6.0) and d.sites == {"example"}
    assert D.get("fed-sdp-server").sites == {"server"}
    assert D.get("fed-sdp-client").sites == {"client"}
    with pytest.raises(ValueError, match="unknown defense 'dp-magic'"):
        D.get("dp-magic")
    with pytest.raises(ValueError, match="bad arguments"):
        D.get("fed-cdp", clipp=1.0)
    with pytest.raises(ValueError, match="clip"):
        D.get("fed-cdp", clip=0.0)
    with pytest.raises(ValueError, match="sigma"):
        D.get("fed-cdp", sigma=-1.0)
    with pytest.raises(ValueError, match="already registered"):
        D.register("none", D.NoDefense)


def test_flat_clip_never_exceeds_c_and_keeps_small_ones():
    g = grads(scale=1.0)
    g[0][0] *= 1e-4  # make example 0 tiny
    for part in g:
        part[0] *= 1e-4
    clipped, norms = clip_flat(g, 4.0)
    after = flat_norms(clipped)
    assert torch.all(after <= 4.0 * (1 + 1e-6))
    assert after[0] == pytest.approx(float(norms[0]), rel=1e-6)  # below C: unchanged
    assert torch.allclose(after[1:], torch.full_like(after[1:], 4.0), rtol=1e-5)


def test_per_layer_clip_bounds_every_layer():
    clipped, layer_norms = clip_per_layer(grads(), 1.5)
    for c in clipped:
        n = c.reshape(c.shape[0], -1).norm(dim=1)
        assert torch.all(n <= 1.5 * (1 + 1e-6))
    assert layer_norms.shape == (16, 3) and float(layer_norms.max()) <= 1.5 * (1 + 1e-6)
    assert torch.all(flat_norms(clipped) <= 1.5 * math.sqrt(3) * (1 + 1e-6))


def _noise_std_check(noise: torch.Tensor, std: float) -> None:
    # sample std of n Gaussians: relative standard error ~ 1/sqrt(2n); allow 5 of them
    n = noise.numel()
    tol = 5.0 / math.sqrt(2 * n)
    assert float(noise.std()) == pytest.approx(std, rel=tol)
    assert abs(float(noise.mean())) < 5.0 * std / math.sqrt(n)


def test_fed_cdp_noise_has_the_stated_std_and_is_recorded():
    d = D.get("fed-cdp", clip=2.0, sigma=3.0)
    g = [torch.zeros(8, 200, 50)]  # zero gradients: the output is noise / B only
    c = ctx(batch_size=8)
    out = d.privatize_batch(g, c)
    _noise_std_check(out[0] * 8, 3.0 * 2.0)
    assert c.sound.events == (A.SampledGaussian(8 / 100, 3.0, 1, "fed-cdp local step"),)


def test_fed_cdp_output_is_mean_of_clipped_plus_noise():
    d = D.get("fed-cdp", clip=1.0, sigma=0.0)
    g = grads(batch=4)
    out = d.privatize_batch(g, ctx(batch_size=4))
    clipped, _ = clip_flat(g, 1.0)
    for o, cl in zip(out, clipped):
        assert torch.allclose(o, cl.mean(dim=0), atol=1e-6)


def test_fed_cdp_claimed_is_papers_convention_and_sound_is_larger():
    d = D.get("fed-cdp", clip=4.0, sigma=2.0)
    c = ctx(n_examples=100, batch_size=10, clients=10, k=2, local_steps=5)
    d.claimed_round(c.round_ctx)
    ev = c.round_ctx.claimed[3].events[0]
    assert ev.q == pytest.approx(10 * 2 / 1000) and ev.count == 5 and ev.sigma == 2.0
    for _ in range(5):
        d.privatize_batch([torch.zeros(10, 3)], c)
    assert c.sound.steps == 5 and c.sound.events[0].q == pytest.approx(0.1)
    assert d.claimed_vs_sound


def test_fed_alpha_cdp_noise_scales_with_l2max_and_sound_is_infinite():
    d = D.get("fed-alpha-cdp", clip=4.0, sigma=6.0)
    g = [torch.zeros(5, 100, 40), torch.zeros(5, 30)]
    g[1][2, 0] = 0.5  # S = 0.5 (largest clipped per-layer norm)
    c = ctx(batch_size=5)
    out = d.privatize_batch(g, c)
    noise = out[0] * 5  # the first layer has zero gradients: pure noise
    _noise_std_check(noise, 6.0 * 0.5)
    # S is data-dependent and sets the noise scale: no finite sound eps
    assert math.isinf(c.sound.epsilon(1e-5, warn=False)) and c.sound.why_infinite()
    ev = d.if_public[c.client].events[0]  # the mean channel only, "if S were public"
    assert ev.sigma == pytest.approx(6.0 * 0.5 / (4.0 * math.sqrt(2)))
    assert "S=0.5" in ev.note
    d.claimed_round(c.round_ctx)
    assert c.claimed.events[0].sigma == 6.0  # the paper counts sigma, not sigma*S/C
    assert d.if_public[c.client].epsilon(1e-5) > c.claimed.epsilon(1e-5)


@pytest.mark.parametrize("decay,formula", [
    ("linear", lambda t, T: 15.0 * (1 - (1 - 4.85 / 15.0) / (T - 1) * t)),
    ("exp", lambda t, T: 15.0 * np.exp(-np.log(15.0 / 4.85) / (T - 1) * t)),
])
def test_decays_follow_their_formula(decay, formula):
    d = D.get(f"fed-alpha-cdp-{decay}")
    d.start(20)
    got = np.array([d.noise_multiplier(t) for t in range(20)])
    np.testing.assert_allclose(got, formula(np.arange(20), 20), rtol=1e-12)
    assert got.min() >= 4.85


@pytest.mark.parametrize("decay", ["staircase", "cyclic"])
def test_other_decays_never_go_below_sigma_end(decay):
    d = D.get(f"fed-alpha-cdp-{decay}", sigma=10.0, sigma_end=2.0)
    d.start(37)
    got = np.array([d.noise_multiplier(t) for t in range(37)])
    assert got[0] == 10.0 and got.min() >= 2.0
    assert np.unique(got).size > 2


def test_fed_sdp_clips_update_and_adds_client_level_noise():
    for where in ("server", "client"):
        d = D.get(f"fed-sdp-{where}", clip=1.0, sigma=0.0)
        upd = [torch.full((10, 10), 1.0)]  # norm 10
        c = ctx()
        out_c = d.privatize_update(upd, c)
        out = d.sanitize_update(out_c, c)
        assert float(out[0].norm()) == pytest.approx(1.0, rel=1e-6)
        if where == "server":
            assert out_c is upd  # leaves the client raw
        else:
            assert float(out_c[0].norm()) == pytest.approx(1.0, rel=1e-6)
    # m = 2 sampled clients: each carries a 1/sqrt(2) share of N(0, (sigma C)^2), the sum
    # of the two shares the whole of it; a round without participants gets it whole
    d = D.get("fed-sdp-server", clip=0.5, sigma=2.0)
    c = ctx()
    shares = [d.sanitize_update([torch.zeros(300, 100)], c)[0] for _ in range(2)]
    _noise_std_check(shares[0], 1.0 / math.sqrt(2))
    _noise_std_check(shares[0] + shares[1], 1.0)
    empty = d.sanitize_sum([torch.zeros(300, 100)], 0, c.round_ctx, c.generator)
    _noise_std_check(empty[0], 1.0)
    assert d.sanitize_sum(shares[:1], 1, c.round_ctx, c.generator)[0] is shares[0]
    # fixed-size client sampling (K = 2 of 10): no amplification, replace-one, sigma/2
    c = ctx(clients=10, k=2)
    d.claimed_round(c.round_ctx)
    for lg in c.round_ctx.sound:  # sigma 2 drawn; a fixed-size draw is charged 2C: sigma/2
        assert lg.events == (A.SampledGaussian(1.0, 2.0, 1, lg.events[0].note,
                                               sampling="fixed-size"),)
        assert A.tightest_epsilon(lg, 1e-5) == pytest.approx(
            A.tightest_epsilon(_one_gaussian(1.0), 1e-5))
    for lg in c.round_ctx.claimed:
        assert lg.events == (A.SampledGaussian(0.2, 2.0, 1, lg.events[0].note),)
    # Poisson client sampling with q = 0.2: amplified, add/remove, sigma
    c = ctx(clients=10, k=2)
    c.round_ctx.client_fraction = 0.2
    d.claimed_round(c.round_ctx)
    for lg in c.round_ctx.sound:
        assert lg.events == (A.SampledGaussian(0.2, 2.0, 1, lg.events[0].note),)


def test_prune_zeroes_exactly_the_requested_share():
    g = torch.Generator().manual_seed(0)
    upd = [torch.randn(7, 13, generator=g), torch.randn(100, generator=g)]
    n = sum(u.numel() for u in upd)
    for rate in (0.1, 0.5, 0.9):
        out = prune_smallest(upd, rate)
        zeros = sum(int((o == 0).sum()) for o in out)
        assert zeros == round(rate * n)
        kept = torch.cat([o.reshape(-1) for o in out])
        orig = torch.cat([u.reshape(-1) for u in upd])
        # every kept magnitude is >= every pruned magnitude
        assert float(orig[kept != 0].abs().min()) >= float(orig[kept == 0].abs().max())
    c = ctx()
    D.get("prune", rate=0.1).privatize_update(upd, c)
    assert math.isinf(c.sound.epsilon(1e-5, warn=False))
    with pytest.raises(ValueError, match="rate"):
        D.get("prune", rate=1.0)


def test_random_noise_variance_and_no_dp_claim():
    c = ctx()
    out = D.get("random-noise", variance=0.01).privatize_update([torch.zeros(400, 100)], c)
    _noise_std_check(out[0], 0.1)
    assert math.isinf(c.sound.epsilon(1e-5, warn=False))
    assert math.isinf(c.claimed.epsilon(1e-5, warn=False))


def test_same_generator_seed_gives_same_noise():
    d = D.get("fed-cdp")
    a = d.privatize_batch([torch.zeros(4, 10)], ctx(seed=3))
    b = d.privatize_batch([torch.zeros(4, 10)], ctx(seed=3))
    assert torch.equal(a[0], b[0])


@pytest.mark.parametrize("name, kwargs", [
    ("fed-cdp", dict(clip=4.0, sigma=2.0)), ("fed-alpha-cdp", dict(clip=4.0, sigma=2.0)),
    ("fed-alpha-cdp-exp", dict(clip=4.0, sigma=6.0, sigma_end=2.0)),
    ("fed-sdp-server", dict(clip=3.0, sigma=1.0)), ("fed-sdp-client", dict(clip=3.0, sigma=1.0))])
def test_sound_ledger_holds_exactly_the_noise_draws_of_the_baselines(name, kwargs,
                                                                     release_counter):
    from conftest import ReleaseCounter

    # every client takes part every round, so the client-level ledgers (one step per client
    # and round, amplified by client sampling) also meet one draw per update
    run = simulate(None, dataset="digits", defense=D.get(name, **kwargs), clients=3,
                   clients_per_round=3, rounds=2, local_steps=2, batch_size=8, progress=False,
                   seed=0)
    held = ReleaseCounter.in_ledgers(run.sound)
    # fed-alpha-cdp's noise scale depends on the data: each draw is one inf-eps release
    alpha = name.startswith("fed-alpha-cdp")
    releases = held["other"] if alpha else held["gaussian"]
    assert release_counter.draws["gaussian"] == releases > 0
    assert held["laplace"] == 0 and held["gaussian" if alpha else "other"] == 0


def _one_gaussian(sigma: float) -> A.PrivacyLedger:
    ledger = A.PrivacyLedger()
    ledger.step(q=1.0, sigma=sigma)
    return ledger
