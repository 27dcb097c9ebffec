"""cos-adaptive-laplace: the adjustment coefficient, the L1 clip, the Laplace scale, the two
ledgers (data-dependent scale -> no finite eps; public similarity -> sound = claimed)."""

import math

import pytest
import torch
from conftest import ReleaseCounter

import accounting as A
from leakaudit import defenses as D
from leakaudit.defenses import ops as _ops
from leakaudit.defenses.cos_adaptive_laplace import CosAdaptiveLaplace, adjustment_coefficient
from leakaudit.fl import simulate


def ctx(n_examples=50, sizes=(100, 50, 80), round_=0, rounds=5, seed=0):
    rc = D.RoundContext(round=round_, rounds=rounds, clients=len(sizes), clients_per_round=2,
                        local_steps=1, batch_size=10, client_sizes=tuple(sizes),
                        participants=(0, 1), claimed=[A.PrivacyLedger() for _ in sizes],
                        sound=[A.PrivacyLedger() for _ in sizes])
    return D.ClientContext(round=round_, client=1, local_step=0, n_examples=n_examples,
                           batch_size=10, lr=0.1, generator=torch.Generator().manual_seed(seed),
                           round_ctx=rc, claimed=rc.claimed[1], sound=rc.sound[1])


def test_coefficient_formula_on_hand_made_tensors():
    d = CosAdaptiveLaplace(c_min=0.5, c_max=1.5, weights=(0.5, 0.25, 0.25))
    d.observe_global(0, [torch.tensor([1.0, 0.0])])
    update = [torch.tensor([-1.0, 1.0])]  # local = (0, 1): cos = 0 -> s_cos = 1/2
    c = ctx(n_examples=50, sizes=(100, 50, 80))  # s_size = 1/2; no losses, round 0: s_score 0
    assert d.scores(update, c) == pytest.approx((0.5, 0.5, 0.0))
    assert d.coefficient(update, c) == pytest.approx(0.5 + 1.0 * (0.25 + 0.125))
    # later round: losses 2 -> 1 (s_loss 1/2), s_acc = e^-1, s_round = 2/4
    d.end_round(0, 2.0)
    d.end_round(1, 1.0)
    d.observe_global(2, [torch.tensor([1.0, 0.0])])
    c = ctx(n_examples=100, round_=2, rounds=5)
    update = [torch.tensor([1.0, 0.0])]  # local = (2, 0): cos = 1
    s_score = (0.5 + math.exp(-1.0) + 0.5) / 3
    assert d.scores(update, c) == pytest.approx((1.0, 1.0, s_score))
    assert d.coefficient(update, c) == pytest.approx(
        0.5 + 0.5 + 0.25 + 0.25 * s_score)


def test_coefficient_bounds():
    w = (0.2, 0.3, 0.5)
    assert adjustment_coefficient(0, 0, 0, c_min=0.3, c_max=2.0, weights=w) == 0.3
    assert adjustment_coefficient(1, 1, 1, c_min=0.3, c_max=2.0, weights=w) == pytest.approx(2.0)
    g = torch.Generator().manual_seed(1)
    d = CosAdaptiveLaplace(c_min=0.3, c_max=2.0, weights=w)
    for r in range(20):
        d.observe_global(r, [torch.randn(30, generator=g)])
        d.end_round(r, float(torch.rand(1, generator=g)) * 3)
        coef = d.coefficient([torch.randn(30, generator=g) * 5], ctx(round_=r, rounds=20))
        assert 0.3 <= coef <= 2.0


def test_l1_clip(monkeypatch):
    monkeypatch.setattr(_ops, "laplace_like", lambda t, scale, generator: [
        torch.zeros_like(x) for x in t])
    d = CosAdaptiveLaplace(clip=2.0)
    d.observe_global(0, [torch.ones(4), torch.ones(3)])
    big = [torch.tensor([1.0, -2.0, 3.0, 0.0]), torch.tensor([4.0, 0.0, -1.0])]  # L1 = 11
    out = d.privatize_update(big, ctx())
    assert float(_ops.l1_norm(out)) == pytest.approx(2.0)
    assert torch.allclose(out[0], big[0] * 2.0 / 11.0)
    small = [torch.tensor([0.5, -0.5, 0.0, 0.0]), torch.tensor([0.25, 0.0, 0.0])]
    out = d.privatize_update(small, ctx())
    assert all(torch.equal(a, b) for a, b in zip(out, small))


def test_laplace_scale_and_ledgers():
    d = CosAdaptiveLaplace(eps_round=4.0, clip=1.0)
    n = 200_000
    d.observe_global(0, [torch.ones(n)])
    update = [torch.zeros(n)]
    c = ctx()
    eps_t = 4.0 * d.coefficient(update, c)
    out = d.privatize_update(update, c)[0]
    b = 1.0 / eps_t
    assert float(out.abs().mean()) == pytest.approx(b, rel=0.02)  # E|Lap(b)| = b
    assert float(out.var()) == pytest.approx(2 * b * b, rel=0.03)
    (event,) = c.claimed.events
    assert isinstance(event, A.events.Laplace)
    assert event.b == pytest.approx(b) and event.eps == pytest.approx(eps_t)
    assert math.isinf(c.sound.epsilon(1e-5, warn=False))  # default: data-dependent scale
    assert "local model" in c.sound.events[0].note


def test_public_mode_sound_equals_claimed():
    d = CosAdaptiveLaplace(eps_round=2.0, clip=1.0, similarity="public")
    g = torch.Generator().manual_seed(0)
    c = ctx()
    for r in range(3):
        d.observe_global(r, [torch.randn(50, generator=g)])
        d.privatize_update([torch.randn(50, generator=g)], c)
        d.end_round(r, 2.0 - 0.5 * r)
    assert c.sound == c.claimed
    for method in ("rdp", "basic"):
        eps = c.sound.epsilon(1e-5, method, warn=False)
        assert math.isfinite(eps) and eps == c.claimed.epsilon(1e-5, method, warn=False)
    assert d.claimed_vs_sound == ""
    # basic composition: the sum of the per-release eps', each within eps_round * [c_min, c_max]
    per = [e.eps for e in c.claimed.events]
    assert c.claimed.epsilon(1e-5, "basic") == pytest.approx(sum(per))
    assert all(2.0 * 0.5 <= e <= 2.0 * 1.5 for e in per)


def test_public_similarity_ignores_the_local_model():
    d = CosAdaptiveLaplace(similarity="public")
    d.observe_global(0, [torch.tensor([1.0, 0.0])])
    d.observe_global(1, [torch.tensor([0.0, 1.0])])  # cos of the globals = 0
    c = ctx(round_=1)
    for u in ([torch.tensor([5.0, 0.0])], [torch.tensor([0.0, -3.0])]):
        assert d.scores(u, c)[0] == 0.5


def test_data_dependent_laplace_scale_has_unbounded_privacy_loss():
    """Neighbours whose noise scales differ (b1 != b2): the log density ratio grows without
    bound in the tails, so no finite eps covers the release (even with equal means)."""
    b1, b2, delta = 1.0, 1.2, 1.0
    p = torch.distributions.Laplace(torch.tensor(0.0, dtype=torch.float64), b1)
    q = torch.distributions.Laplace(torch.tensor(delta, dtype=torch.float64), b2)
    xs = torch.tensor([-1e1, -1e2, -1e3, -1e4], dtype=torch.float64)
    loss = (p.log_prob(xs) - q.log_prob(xs)).abs()
    assert bool((loss[1:] > loss[:-1]).all())  # grows with |x| ...
    assert float(loss[-1]) > 1000.0  # ... past any eps
    slope = abs(1 / b2 - 1 / b1)
    assert float(loss[-1] - loss[-2]) == pytest.approx(slope * 9e3, rel=1e-6)


def test_validation():
    for kw, name in ((dict(eps_round=0.0), "eps_round"), (dict(clip=-1.0), "clip"),
                     (dict(c_min=0.0), "c_min"), (dict(c_min=2.0, c_max=1.0), "c_max"),
                     (dict(weights=(0.5, 0.5, 0.5)), "weights"),
                     (dict(weights=(1.0, 0.0)), "weights"),
                     (dict(similarity="global"), "similarity")):
        with pytest.raises(ValueError, match=name):
            CosAdaptiveLaplace(**kw)


TINY = dict(dataset="digits", clients=3, rounds=2, local_steps=2, batch_size=8, progress=False)


@pytest.mark.parametrize("similarity", ["local", "public"])
def test_release_count(release_counter, similarity):
    run = simulate(defense=CosAdaptiveLaplace(similarity=similarity), **TINY)
    draws = release_counter.draws["laplace"]
    assert draws > 0 and release_counter.draws["gaussian"] == 0
    assert ReleaseCounter.in_ledgers(run.claimed)["laplace"] == draws
    sound = ReleaseCounter.in_ledgers(run.sound)
    if similarity == "public":
        assert sound["laplace"] == draws and math.isfinite(run.epsilon(1e-5, "sound"))
    else:  # one eps=inf record per release, with its reason
        assert sound["other"] == draws and math.isinf(run.epsilon(1e-5, "sound"))
        assert math.isfinite(run.epsilon(1e-5, "claimed"))


@pytest.mark.slow
def test_learns_above_chance():
    run = simulate(dataset="digits", defense=CosAdaptiveLaplace(eps_round=10_000.0),
                   clients=4, clients_per_round=4, rounds=6, local_steps=10, batch_size=32,
                   lr=0.01, optimizer="adam", progress=False, seed=0)
    assert run.final_accuracy > 0.3
