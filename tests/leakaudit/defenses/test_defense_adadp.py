"""adadp: the extrapolation learning-rate rule, the iteration, two SGM steps per iteration (one
sigma/sqrt(2) step when both gradients share a batch), and the non-private rejection."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import accounting as A
from accounting import rdp
from leakaudit import defenses as D
from leakaudit.defenses.adadp import AdaDP, adapt_lr
from leakaudit.fl import LocalBatch, simulate

TINY = dict(dataset="digits", clients=3, rounds=2, local_steps=2, batch_size=8,
            progress=False, seed=0)


def _ctx(lr=0.1, n_examples=40, batch_size=8, client=0):
    rc = D.RoundContext(round=0, rounds=1, clients=2, clients_per_round=2, local_steps=1,
                        batch_size=batch_size, client_sizes=(n_examples,) * 2,
                        participants=(0, 1), claimed=[A.PrivacyLedger() for _ in range(2)],
                        sound=[A.PrivacyLedger() for _ in range(2)])
    return D.ClientContext(round=0, client=client, local_step=0, n_examples=n_examples,
                           batch_size=batch_size, lr=lr,
                           generator=torch.Generator().manual_seed(0), round_ctx=rc,
                           claimed=rc.claimed[client], sound=rc.sound[client])


def _problem(seed=0, n=8):
    """A linear softmax model, its weights and a batch whose ``fresh()`` draws are counted."""
    g = torch.Generator().manual_seed(seed)
    model = nn.Linear(4, 3)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    draws = []

    def draw():
        draws.append(1)
        return LocalBatch(model, {}, torch.randn(n, 4, generator=g),
                          torch.randint(0, 3, (n,), generator=g), num_classes=3, draw=draw)

    batch = LocalBatch(model, {}, torch.randn(n, 4, generator=g),
                       torch.randint(0, 3, (n,), generator=g), num_classes=3, draw=draw)
    return model, params, batch, draws


def _mean_grad(model, params, batch):
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    loss = F.cross_entropy(torch.func.functional_call(model, p, (batch.x,)), batch.y)
    return list(torch.autograd.grad(loss, list(p.values())))


# ------------------------------------------------------------------------------ the rule
def test_adapt_lr_error_formula_and_clamping_on_hand_made_tensors():
    full = [torch.tensor([0.0, 0.0]), torch.tensor([5.0])]
    two = [torch.tensor([0.3, -0.4]), torch.tensor([2.0])]
    # err = ||(0.3/1, -0.4/1, (2-5)/max(1, |2|))|| = sqrt(0.09 + 0.16 + 2.25)
    d = adapt_lr(full, two, eta=0.1, tol=1.0)
    assert d.err == pytest.approx(math.sqrt(2.5))
    assert d.eta == pytest.approx(0.9 * 0.1) and d.accept  # tol/err = 0.63 -> clamped 0.9
    # tiny error: tol/err huge -> clamped at 1.1
    d = adapt_lr([torch.zeros(3)], [torch.full((3,), 1e-4)], eta=0.2, tol=1.0)
    assert d.eta == pytest.approx(1.1 * 0.2)
    # inside the clamp: factor tol/err exactly
    d = adapt_lr([torch.zeros(1)], [torch.tensor([0.95])], eta=1.0, tol=1.0)
    assert d.err == pytest.approx(0.95) and d.eta == pytest.approx(1.0 / 0.95)
    # err = 0: the largest factor
    assert adapt_lr([torch.ones(2)], [torch.ones(2)], 1.0, 1.0).eta == pytest.approx(1.1)


def test_adapt_lr_rejects_only_when_asked_and_err_above_tol():
    full, two = [torch.zeros(1)], [torch.tensor([0.2])]
    assert not adapt_lr(full, two, 1.0, tol=0.1, reject=True).accept
    assert adapt_lr(full, two, 1.0, tol=0.1, reject=False).accept
    assert adapt_lr(full, two, 1.0, tol=0.25, reject=True).accept
    assert adapt_lr(full, two, 1.0, tol=0.1, reject=True).eta == pytest.approx(0.9)


# ------------------------------------------------------------------------------ iteration
def test_nonprivate_iteration_is_full_step_versus_two_half_steps():
    model, params, batch, draws = _problem()
    d = AdaDP(private=False, same_batch=True)
    ctx = _ctx(lr=0.5)
    new, g = d.local_step(params, batch, None, ctx)
    g1 = _mean_grad(model, params, batch)
    half = {k: p - 0.25 * a for (k, p), a in zip(params.items(), g1)}
    two = [p - 0.25 * b for p, b in zip(half.values(), _mean_grad(model, half, batch))]
    full = [p - 0.5 * a for p, a in zip(params.values(), g1)]
    expected = adapt_lr(full, two, 0.5, 0.1, reject=True)
    assert expected.accept and d.eta[0] == pytest.approx(expected.eta)
    for a, b in zip(g, g1):
        torch.testing.assert_close(a, b)
    for a, b in zip(new.values(), two):
        torch.testing.assert_close(a, b)
    assert draws == []  # same_batch: no fresh batch drawn
    d.local_step(params, batch, None, _ctx(lr=123.0))  # eta is kept per client, not reset
    assert d.eta[0] != 123.0


def test_nonprivate_rejects_the_step_when_err_exceeds_tol_and_shrinks_eta():
    _, params, batch, draws = _problem()
    d = AdaDP(private=False)
    ctx = _ctx(lr=1e4)
    etas = []
    for _ in range(3):
        new, _g = d.local_step(params, batch, None, ctx)
        for a, b in zip(new.values(), params.values()):
            assert torch.equal(a, b)  # rejected: the weights stay unchanged
        etas.append(d.eta[0])
    assert etas == pytest.approx([0.9e4, 0.81e4, 0.729e4])
    assert len(draws) == 3  # G2 on a fresh batch by default


def test_private_iteration_records_two_sgm_steps_and_uses_a_fresh_batch():
    _, params, batch, draws = _problem()
    d = AdaDP(clip=1.0, sigma=2.0)
    ctx = _ctx(lr=0.1, n_examples=40, batch_size=8)
    d.local_step(params, batch, None, ctx)
    assert len(draws) == 1
    for ledger in (ctx.sound, ctx.claimed):
        (e,) = ledger.events
        assert (e.q, e.sigma, e.count) == (pytest.approx(0.2), 2.0, 2)
    assert d.claimed_vs_sound == ""


def test_same_batch_is_one_sgm_step_with_sigma_over_sqrt2():
    _, params, batch, draws = _problem()
    d = AdaDP(clip=1.0, sigma=2.0, same_batch=True)
    ctx = _ctx(n_examples=40, batch_size=8)
    d.local_step(params, batch, None, ctx)
    assert draws == []
    (s,) = ctx.sound.events
    assert (s.q, s.sigma, s.count) == (pytest.approx(0.2), pytest.approx(2 / math.sqrt(2)), 1)
    (c,) = ctx.claimed.events
    assert (c.sigma, c.count) == (2.0, 2)
    assert "sqrt(2)" in d.claimed_vs_sound


@pytest.mark.parametrize("q", [0.01, 0.2, 0.5])
@pytest.mark.parametrize("sigma", [0.8, 2.0, 6.0])
def test_same_batch_pair_costs_more_than_two_independent_sgm_steps(q, sigma):
    # Two Gaussian releases (sensitivity C, noise sigma C each) on one subsample are one
    # Gaussian with multiplier sigma/sqrt(2) on it; counting them as two independent SGM
    # steps applies the subsampling amplification twice and under-reports.
    orders = np.array([1.5, 2, 3, 4, 8, 16, 32, 64, 128])
    one = rdp.rdp_sgm(q, sigma / math.sqrt(2), orders)
    two = 2 * rdp.rdp_sgm(q, sigma, orders)
    assert np.all(one >= two * (1 - 1e-9)) and np.any(one > two * 1.01)
    # without subsampling the two conventions agree exactly (Gaussian composition)
    np.testing.assert_allclose(rdp.rdp_sgm(1.0, sigma / math.sqrt(2), orders),
                               2 * rdp.rdp_sgm(1.0, sigma, orders))


# ------------------------------------------------------------------------------ in a run
def test_release_count_two_sgm_steps_per_iteration(release_counter):
    run = simulate(defense=AdaDP(clip=4.0, sigma=2.0), **TINY)
    in_sound = release_counter.in_ledgers(run.sound)  # ReleaseCounter.in_ledgers
    # 3 clients x 2 rounds x 2 local iterations x 2 gradients
    assert release_counter.draws["gaussian"] == in_sound["gaussian"] == 24 > 0
    assert release_counter.in_ledgers(run.claimed) == in_sound
    assert run.epsilon(1e-5, "claimed") == pytest.approx(run.epsilon(1e-5, "sound"))


def test_release_count_same_batch_two_draws_one_combined_step(release_counter):
    run = simulate(defense=AdaDP(clip=4.0, sigma=2.0, same_batch=True), **TINY)
    in_sound = release_counter.in_ledgers(run.sound)["gaussian"]
    # two noise draws per iteration, recorded as ONE combined SGM step (sigma/sqrt(2))
    assert release_counter.draws["gaussian"] == 2 * in_sound == 24
    assert release_counter.in_ledgers(run.claimed)["gaussian"] == 24
    assert run.epsilon(1e-5, "sound") > run.epsilon(1e-5, "claimed")


def test_nonprivate_run_records_no_privacy_once_per_client_update(release_counter):
    d = AdaDP(private=False)
    assert (d.name, d.level, d.sites) == ("adadp-nonprivate", "none", frozenset())
    run = simulate(defense=d, **TINY)
    assert release_counter.draws == {"gaussian": 0, "laplace": 0}
    for ledger in run.sound + run.claimed:
        assert release_counter.in_ledgers([ledger]) == {"gaussian": 0, "laplace": 0,
                                                        "other": 2}
    assert set(d.eta) == {0, 1, 2}


def test_learns_above_chance():
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
    d = AdaDP(clip=1.0, sigma=1.0)
    run = simulate(model=model, dataset="digits", defense=d, clients=3, rounds=2,
                   local_steps=10, batch_size=32, lr=0.1, progress=False, seed=0)
    assert run.final_accuracy > 0.3
    assert math.isfinite(run.epsilon(1e-5, "sound"))
    assert all(eta > 0.1 for eta in d.eta.values())  # the rate adapted upwards from 0.1


@pytest.mark.parametrize("kwargs, name", [
    (dict(clip=0.0), "clip"), (dict(clip=math.inf), "clip"), (dict(sigma=-1.0), "sigma"),
    (dict(tol=0.0), "tol"), (dict(same_batch=1), "same_batch"), (dict(private="no"), "private"),
])
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AdaDP(**kwargs)


def test_declares_where_it_acts():
    d = AdaDP()
    assert (d.name, d.level, d.sites, d.tol) == ("adadp", "instance", {"example"}, 1.0)
    assert AdaDP(private=False).tol == 0.1
