"""quantile-clip (Andrew et al. 2021): the z / sigma_Delta relation, the clip tracking the
target quantile, one noise draw per combined release, claimed < sound, bad arguments."""

import math

import numpy as np
import pytest
import torch

import accounting as A
from leakaudit import defenses as D
from leakaudit.defenses.quantile_clip import (
    QuantileClip,
    geometric_clip_update,
    update_noise_multiplier,
)
from leakaudit.fl import simulate

TINY = dict(dataset="digits", clients=3, rounds=3, local_steps=2, batch_size=8, progress=False)


def ctx(clients=4, k=4, seed=0):
    rc = D.RoundContext(round=0, rounds=5, clients=clients, clients_per_round=k, local_steps=1,
                        batch_size=8, client_sizes=tuple([100] * clients),
                        participants=tuple(range(k)),
                        claimed=[A.PrivacyLedger() for _ in range(clients)],
                        sound=[A.PrivacyLedger() for _ in range(clients)])
    return D.ClientContext(round=0, client=0, local_step=0, n_examples=100, batch_size=8, lr=0.1,
                           generator=torch.Generator().manual_seed(seed), round_ctx=rc,
                           claimed=rc.claimed[0], sound=rc.sound[0])


def test_update_multiplier_by_hand():
    # z = 1, sigma_b = 1: sigma_Delta^-2 = 1 - 1/4 = 3/4
    assert update_noise_multiplier(1.0, 1.0) == pytest.approx(math.sqrt(4.0 / 3.0))
    # z = 0.5, sigma_b = 5: 4 - 0.01 = 3.99
    assert update_noise_multiplier(0.5, 5.0) == pytest.approx(3.99 ** -0.5)
    for z, sb in ((0.3, 0.2), (1.0, 2.0), (2.0, 10.0)):
        sd = update_noise_multiplier(z, sb)
        assert sd > z
        assert sd ** -2 + (2 * sb) ** -2 == pytest.approx(z ** -2)  # the theorem's relation
    # a huge count noise leaves (almost) all of the budget to the update
    assert update_noise_multiplier(1.0, 1e6) == pytest.approx(1.0)


def test_geometric_update_by_hand():
    assert geometric_clip_update(2.0, 0.5, 0.5, 0.2) == 2.0
    assert geometric_clip_update(2.0, 1.0, 0.5, 0.2) == pytest.approx(2.0 * math.exp(-0.1))
    assert geometric_clip_update(2.0, 0.0, 0.5, 0.2) == pytest.approx(2.0 * math.exp(0.1))


@pytest.mark.parametrize("gamma", [0.3, 0.5, 0.8])
def test_clip_converges_to_target_quantile(gamma):
    """Synthetic log-normal norms through the pure update rule with a noisy count: after many
    rounds the share of norms below C is near gamma (exactly what the rule's fixed point
    says), whatever the starting clip."""
    rng = np.random.default_rng(0)
    population = rng.lognormal(mean=1.0, sigma=0.5, size=100_000)
    m, sigma_b = 50, 50 / 20  # the paper's suggestion: sigma_b = m / 20
    for start in (0.01, 100.0):
        clip, tail = start, []
        for t in range(1500):
            norms = rng.choice(population, size=m)
            noisy = (np.sum(norms <= clip) + rng.normal(0.0, sigma_b)) / m
            clip = geometric_clip_update(clip, noisy, gamma, 0.2)
            if t >= 1000:
                tail.append(clip)
        share = float(np.mean(population <= np.mean(tail)))
        assert share == pytest.approx(gamma, abs=0.05), (start, share)


def test_one_draw_per_client_and_clip_adapts(monkeypatch):
    d = QuantileClip(clip=1.0, noise_multiplier=1.0, sigma_b=2.0)
    d.start(3)
    c = ctx()
    update = [torch.full((10,), 10.0), torch.full((3, 3), 10.0)]  # norm ~ 36 > clip: bit 0
    calls = []
    real = D.ops.gaussian_like

    def counted(tensors, std, generator):
        calls.append([t.shape for t in tensors])
        return real(tensors, std, generator)

    monkeypatch.setattr(D.ops, "gaussian_like", counted)
    out = d.sanitize_update(update, c)
    assert len(calls) == 1 and calls[0] == [torch.Size([10]), torch.Size([3, 3]), torch.Size([])]
    assert [o.shape for o in out] == [u.shape for u in update]
    for _ in range(3):
        d.sanitize_update(update, c)
    d.end_round(0, 1.0)
    # four clipped updates: the noisy fraction is ~0 (noise std 2/4), so C grows ~exp(0.1)
    assert d.clip_history[0] == 1.0 and d.clip == d.clip_history[-1]
    assert d.clip != 1.0


def test_noise_std_of_the_update():
    # each of the m sampled clients carries a 1/sqrt(m) share: the sum has the full
    # N(0, (sigma_Delta C)^2) whatever m
    expected = update_noise_multiplier(0.5, 1.0) * 2.0
    for m in (1, 4):
        d = QuantileClip(clip=2.0, noise_multiplier=0.5, sigma_b=1.0)
        c = ctx(clients=4, k=m)
        outs = [d.sanitize_update([torch.zeros(200_000)], c)[0] for _ in range(m)]
        assert float(outs[0].std()) == pytest.approx(expected / math.sqrt(m), rel=0.02)
        assert float(sum(outs).std()) == pytest.approx(expected, rel=0.02)


def test_centred_bits_over_a_fixed_denominator():
    # Andrew et al. 2021 / tensorflow-privacy: b~ = (sum (b_i - 1/2) + noise) / D + 1/2, D
    # the expected number of participants, never the realised count
    d = QuantileClip(clip=1.0, noise_multiplier=1e-3, sigma_b=1.0)   # count noise ~ 0
    d.sigma_b = 1e-9
    c = ctx(clients=8, k=2)          # fixed-size, K = 2 of 8: D = 2
    for _ in range(2):
        d.sanitize_update([torch.zeros(5)], c)   # norm 0 <= C: unclipped
    d.sanitize_sum([torch.zeros(5)], 2, c.round_ctx, c.generator)
    assert float(d.noisy_fraction()) == pytest.approx(1.0)
    # Poisson with q = 0.5 of 8: D = 4; two unclipped and one clipped report
    d.start(1)
    rc = D.RoundContext(round=0, rounds=1, clients=8, clients_per_round=4, local_steps=1,
                        batch_size=8, client_sizes=(100,) * 8, participants=(0, 1, 2),
                        client_fraction=0.5)
    c = D.ClientContext(round=0, client=0, local_step=0, n_examples=100, batch_size=8,
                        lr=0.1, generator=torch.Generator().manual_seed(0), round_ctx=rc,
                        claimed=A.PrivacyLedger(), sound=A.PrivacyLedger())
    for norm in (0.0, 0.5, 3.0):
        d.sanitize_update([torch.full((1,), norm)], c)
    d.sanitize_sum([torch.zeros(1)], 3, rc, c.generator)
    assert float(d.noisy_fraction()) == pytest.approx((0.5 + 0.5 - 0.5) / 4 + 0.5)
    # nobody sampled: the count is pure noise around 1/2, the update noise whole
    d.start(1)
    d.sigma_b = 1.0
    out = d.sanitize_sum([torch.zeros(100_000)], 0, rc, c.generator)
    assert float(out[0].std()) == pytest.approx(d.sigma_delta * d.clip, rel=0.02)


@pytest.mark.parametrize("fraction, multiplier", [(0.5, 1.0), (None, 0.5)])
def test_sound_step_follows_the_client_sampling(fraction, multiplier):
    # Poisson: (q, z), add/remove; fixed-size: no amplification, replace-one, z/2 at q = 1
    rc = D.RoundContext(round=0, rounds=1, clients=4, clients_per_round=2, local_steps=1,
                        batch_size=8, client_sizes=(100,) * 4, participants=(0, 1),
                        claimed=[A.PrivacyLedger() for _ in range(4)],
                        sound=[A.PrivacyLedger() for _ in range(4)], client_fraction=fraction)
    QuantileClip(noise_multiplier=1.0, sigma_b=2.0).claimed_round(rc)
    from accounting.relations import gaussian_upper

    (event,) = rc.sound[3].events
    q, sigma = gaussian_upper(event.q, event.sigma, event.sampling, event.relation)
    assert float(sigma) == multiplier and float(q) == (fraction or 1.0)


def test_release_count_all_clients(release_counter):
    """With clients_per_round = all clients every client is sanitised once per round, and
    every client's ledger gets one step per round (client-level accounting records a step
    for all N clients), so draws == ledger steps."""
    run = simulate(defense=QuantileClip(), clients_per_round=3, **TINY)
    n = release_counter.draws["gaussian"]
    assert n == 3 * 3
    assert release_counter.draws["gaussian"] == \
        release_counter.in_ledgers(run.sound)["gaussian"] > 0
    assert release_counter.in_ledgers(run.claimed)["gaussian"] == n
    assert release_counter.draws["laplace"] == 0


def test_claimed_below_sound():
    d = QuantileClip(clip=1.0, noise_multiplier=1.0, sigma_b=1.0)
    run = simulate(defense=d, clients_per_round=2, **TINY)
    claimed, sound = run.epsilon(1e-5, "claimed"), run.epsilon(1e-5, "sound")
    assert math.isfinite(sound) and claimed < sound
    assert "count" in d.claimed_vs_sound
    assert d.params()["noise_multiplier"] == 1.0 and d.noise_multiplier(0) == 1.0
    assert d.level == "client" and d.sites == {"server"}


@pytest.mark.parametrize("kwargs, name", [
    (dict(clip=0.0), "clip"), (dict(clip=-1.0), "clip"),
    (dict(noise_multiplier=0.0), "noise_multiplier"),
    (dict(noise_multiplier=float("nan")), "noise_multiplier"),
    (dict(sigma_b=-1.0), "sigma_b"),
    (dict(noise_multiplier=2.0, sigma_b=1.0), "noise_multiplier"),  # z >= 2 sigma_b
    (dict(noise_multiplier=3.0, sigma_b=1.0), "noise_multiplier"),
    (dict(target_quantile=0.0), "target_quantile"), (dict(target_quantile=1.0), "target_quantile"),
    (dict(target_quantile="half"), "target_quantile"),
    (dict(clip_lr=0.0), "clip_lr"),
])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        QuantileClip(**kwargs)


@pytest.mark.slow
def test_learns_above_chance():
    """The quick utility profile, shortened to 8 rounds with less noise than the
    benchmark's (chance: 10%; the 30-round benchmark numbers are in the module report)."""
    d = QuantileClip(clip=3.0, noise_multiplier=0.05, sigma_b=0.25)
    run = simulate(dataset="digits", defense=d, clients=10, clients_per_round=5, rounds=8,
                   local_steps=10, batch_size=32, lr=0.01, optimizer="adam", progress=False,
                   seed=0)
    assert max(run.accuracy) > 0.2
