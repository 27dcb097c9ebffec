"""dssgd (Shokri & Shmatikov 2015): an exact random share of the coordinates above tau, values
from the update, truncation, Laplace noise and the claimed / sound ledgers."""

import math

import pytest
import torch
from conftest import ReleaseCounter

import accounting as A
from leakaudit import defenses as D
from leakaudit.defenses.dssgd import DSSGD
from leakaudit.fl import simulate


def ctx(seed=0):
    rc = D.RoundContext(round=0, rounds=5, clients=3, clients_per_round=2, local_steps=1,
                        batch_size=10, client_sizes=(100, 100, 100), participants=(0, 1),
                        claimed=[A.PrivacyLedger() for _ in range(3)],
                        sound=[A.PrivacyLedger() for _ in range(3)])
    return D.ClientContext(round=0, client=0, local_step=0, n_examples=100, batch_size=10,
                           lr=0.1, generator=torch.Generator().manual_seed(seed), round_ctx=rc,
                           claimed=rc.claimed[0], sound=rc.sound[0])


def update(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(20, 30, generator=g), torch.randn(400, generator=g)]


def flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


@pytest.mark.parametrize("share,tau", [(0.1, 0.5), (0.37, 1.0), (1.0, 2.0), (0.05, 0.0)])
def test_share_is_exact_random_and_from_the_update(share, tau):
    u = update()
    f = flat(u)
    above = f.abs() > tau
    out = flat(DSSGD(share=share, tau=tau).privatize_update(u, ctx(seed=3)))
    shared = out != 0
    assert int(shared.sum()) == round(share * int(above.sum()))
    assert bool((shared <= above).all())  # only coordinates above tau
    assert torch.equal(out[shared], f[shared])  # values are the update's own
    again = flat(DSSGD(share=share, tau=tau).privatize_update(u, ctx(seed=3)))
    assert torch.equal(out, again)  # deterministic under the seed
    if share < 1.0:
        other = flat(DSSGD(share=share, tau=tau).privatize_update(u, ctx(seed=4)))
        assert not torch.equal(out != 0, other != 0)  # a random subset, not the largest


def test_random_subset_is_not_the_largest():
    f = torch.arange(1.0, 1001.0)  # all above tau = 0
    out = DSSGD(share=0.1, tau=0.0).privatize_update([f], ctx())[0]
    chosen = f[out != 0]
    assert chosen.numel() == 100
    assert 300 < float(chosen.mean()) < 700  # the largest 100 would average 950.5


def test_truncation_to_gamma():
    u = update()
    f = flat(u)
    out = flat(DSSGD(share=0.5, tau=0.2, gamma=0.7).privatize_update(u, ctx()))
    shared = out != 0
    assert float(out.abs().max()) <= 0.7
    assert torch.equal(out[shared], f[shared].clamp(-0.7, 0.7))


def test_no_noise_has_no_guarantee():
    c = ctx()
    d = DSSGD(share=0.1)
    d.privatize_update(update(), c)
    assert d.level == "none"
    assert math.isinf(c.claimed.epsilon(1e-5, warn=False))
    assert math.isinf(c.sound.epsilon(1e-5, warn=False))


def test_random_selection_with_noise_is_the_laplace_mechanism():
    u = update()
    dim = flat(u).numel()  # 1000
    d = DSSGD(share=0.2, tau=None, gamma=0.5, laplace_eps=4.0)
    c = ctx(seed=7)
    out = flat(d.privatize_update(u, c))
    chosen = d.select(flat(u), torch.Generator().manual_seed(7))  # the same draw
    assert chosen.numel() == 200 == d.max_shared(dim)
    mask = torch.zeros(dim, dtype=torch.bool)
    mask[chosen] = True
    assert bool((out[~mask] == 0).all())  # unshared coordinates stay zero
    b = 2 * 0.5 * 200 / 4.0
    assert d.laplace_scale(dim) == b
    noise = out[mask] - flat(u)[mask].clamp(-0.5, 0.5)
    assert float(noise.abs().mean()) == pytest.approx(b, rel=0.15)  # E|Lap(b)| = b
    # sound: L1 sensitivity 2 gamma c (replacement), scale b -> eps = laplace_eps; = claimed
    (event,) = c.sound.events
    assert isinstance(event, A.events.Laplace)
    assert (event.b, event.sensitivity) == (b, 2 * 0.5 * 200) and event.eps == 4.0
    assert c.sound == c.claimed
    assert c.sound.epsilon(1e-5, "basic") == pytest.approx(4.0)
    assert d.claimed_vs_sound == "" and d.level == "client"


def test_threshold_selection_with_noise_is_unbounded():
    c = ctx()
    d = DSSGD(share=0.2, tau=0.5, gamma=0.5, laplace_eps=4.0)
    d.privatize_update(update(), c)
    assert c.claimed.epsilon(1e-5, "basic") == pytest.approx(4.0)
    assert math.isinf(c.sound.epsilon(1e-5, warn=False))
    assert "tau" in c.sound.events[0].note and "tau" in d.claimed_vs_sound


def test_validation():
    for kw, name in ((dict(share=0.0), "share"), (dict(share=1.5), "share"),
                     (dict(tau=-1.0), "tau"), (dict(gamma=0.0), "gamma"),
                     (dict(laplace_eps=1.0), "gamma"), (dict(gamma=1.0, laplace_eps=-1.0),
                                                        "laplace_eps")):
        with pytest.raises(ValueError, match=name):
            DSSGD(**kw)


TINY = dict(dataset="digits", clients=3, rounds=2, local_steps=2, batch_size=8, progress=False)


@pytest.mark.parametrize("tau", [None, 0.0])
def test_release_count(release_counter, tau):
    run = simulate(defense=DSSGD(share=0.1, tau=tau, gamma=0.05, laplace_eps=100.0), **TINY)
    draws = release_counter.draws["laplace"]
    assert draws > 0 and release_counter.draws["gaussian"] == 0
    assert ReleaseCounter.in_ledgers(run.claimed)["laplace"] == draws
    sound = ReleaseCounter.in_ledgers(run.sound)
    if tau is None:
        assert sound["laplace"] == draws and math.isfinite(run.epsilon(1e-5, "sound"))
    else:  # the exact threshold selection: one eps=inf record per release
        assert sound["other"] == draws and math.isinf(run.epsilon(1e-5, "sound"))


@pytest.mark.slow
def test_learns_above_chance():
    # share 0.5 keeps the test short (FedAvg of sparse updates moves each coordinate by about
    # share x the dense step); the quick profile learns with share 0.1 in 30 rounds (84%)
    run = simulate(dataset="digits", defense=DSSGD(share=0.5), clients=4, clients_per_round=4,
                   rounds=6, local_steps=10, batch_size=32, lr=0.01, optimizer="adam",
                   progress=False, seed=0)
    assert run.final_accuracy > 0.2
