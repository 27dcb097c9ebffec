"""adap-dp-fl: the budget stop, the plateau decay, C_0 from random noise, claimed vs sound."""

import math

import pytest
import torch

from accounting import PrivacyLedger
from leakaudit.defenses import ops as _ops
from leakaudit.defenses.adap_dp_fl import AdapDPFL, initial_clip
from leakaudit.fl import LocalBatch, simulate
from leakaudit.models import lenet

SMALL = dict(dataset="digits", clients=2, clients_per_round=2, local_steps=2, batch_size=16,
             progress=False, seed=0)


def _reference_stop(n_c: int, budget: float, rounds: int, sigma: float, stat: float,
                    local_steps: int = 2, batch: int = 16, count_stat: bool = True) -> int:
    """The first round whose costs would pass ``budget``, from a plain integer-order ledger."""
    ledger, q = PrivacyLedger(orders=range(2, 65)), min(batch, n_c) / n_c
    for r in range(rounds):
        trial = ledger.copy()
        trial.step(q=q, sigma=sigma, count=local_steps)
        if count_stat:
            trial.step(q=q, sigma=stat)
        if trial.epsilon(1e-5) > budget:
            return r
        ledger = trial
    return rounds


def test_client_stops_uploading_at_the_round_its_budget_would_pass():
    budget, rounds = 1.45, 8
    d = AdapDPFL(sigma=1.0, beta=1.0, sigma_stat=5.0, budget=budget)
    run = simulate(defense=d, rounds=rounds, **SMALL)
    sizes = run.settings["client_sizes"]
    for c in range(2):
        n_c = sizes[c]
        stop = _reference_stop(n_c, budget, rounds, 1.0, 5.0)
        assert 0 < stop < rounds, "the setting must make the stop happen mid-run"
        assert [c in up for up in run.uploads] == [r < stop for r in range(rounds)]
        assert d.stopped[c] == stop
        assert run.sound[c].epsilon(1e-5) <= budget
        assert run.sound[c].orders.min() == 2 and run.sound[c].orders.max() == 64
        assert len(run.sound[c].orders) == 63


def test_paper_budget_on_the_claimed_ledger_overspends_the_sound_one():
    budget, rounds = 1.45, 8
    d = AdapDPFL(sigma=1.0, beta=1.0, sigma_stat=0.5, budget=budget, budget_ledger="claimed")
    run = simulate(defense=d, rounds=rounds, **SMALL)
    n_c = run.settings["client_sizes"][0]
    stop = _reference_stop(n_c, budget, rounds, 1.0, 0.5, count_stat=False)
    assert 0 < stop < rounds
    assert [0 in up for up in run.uploads] == [r < stop for r in range(rounds)]
    assert run.claimed[0].epsilon(1e-5) <= budget < run.sound[0].epsilon(1e-5)


def test_decay_fires_exactly_on_the_third_consecutive_drop():
    d = AdapDPFL(sigma=4.0, beta=0.5)
    d.start(10)
    losses = [1.0, 0.9, 0.8, 0.7, 0.6, 0.7, 0.6, 0.5, 0.4, 0.3]
    for r, loss in enumerate(losses):
        d.end_round(r, loss)
    # drops at rounds 1, 2, 3 -> fires after round 3; the count restarts; the rise at
    # round 5 resets it; drops at 6, 7, 8 -> fires after round 8.
    assert [d.noise_multiplier(r) for r in range(11)] == [4.0] * 4 + [2.0] * 5 + [1.0] * 2


def test_decay_in_a_run_follows_the_validation_losses_and_reaches_the_ledger():
    d = AdapDPFL(sigma=3.0, beta=0.5)
    run = simulate(defense=d, rounds=6, **SMALL)
    sigma, drops, expected = 3.0, 0, []
    for r, loss in enumerate(run.val_loss):
        expected.append(sigma)
        drops = drops + 1 if r > 0 and loss < run.val_loss[r - 1] else 0
        if drops == 3:
            sigma, drops = sigma * 0.5, 0
    assert [d.noise_multiplier(r) for r in range(6)] == expected
    recorded = sorted({e.sigma for e in run.claimed[0].events})
    assert recorded == sorted(set(expected))


def test_initial_clip_uses_random_noise_not_the_clients_data():
    model = lenet(1, 28)
    params = {n: p.detach() for n, p in model.named_parameters()}
    real_a = torch.rand(8, 1, 28, 28)
    real_b = torch.zeros(8, 1, 28, 28)
    clips = []
    for x in (real_a, real_b):
        batch = LocalBatch(model, {}, x, torch.zeros(8, dtype=torch.long), num_classes=10)
        clips.append(initial_clip(batch, params, 2.0, 8, torch.Generator().manual_seed(5)))
    assert clips[0] == clips[1]
    g = torch.Generator().manual_seed(5)
    x = torch.rand((8, 1, 28, 28), generator=g)
    y = torch.randint(10, (8,), generator=g)
    batch = LocalBatch(model, {}, x, y, num_classes=10)
    norms = _ops.flat_norms(batch.gradients_at(params, x, y))
    assert clips[0] == pytest.approx(2.0 * float(norms.mean()), rel=1e-6)


def test_sound_ledger_counts_every_noise_draw_and_claimed_omits_the_statistic(
        release_counter):
    from conftest import ReleaseCounter

    d = AdapDPFL(sigma=1.5)
    run = simulate(defense=d, rounds=3, **SMALL)
    sound = ReleaseCounter.in_ledgers(run.sound)["gaussian"]
    claimed = ReleaseCounter.in_ledgers(run.claimed)["gaussian"]
    participations = sum(len(u) for u in run.uploads)
    assert release_counter.draws["gaussian"] == sound > 0
    assert sound - claimed == participations  # one clip statistic per participation
    assert run.epsilon(1e-5, "claimed") < run.epsilon(1e-5, "sound")
    assert "post-processing" in d.claimed_vs_sound


def test_clip_follows_the_noisy_statistic_and_stays_positive():
    d = AdapDPFL(sigma=1.0, scale=1.0)
    simulate(defense=d, rounds=4, **SMALL)
    for history in d.clip_history.values():
        assert all(c >= d.min_clip and math.isfinite(c) for c in history.values())
        assert len(set(history.values())) > 1  # adapts round to round


@pytest.mark.parametrize("kwargs, name", [
    (dict(sigma=0.0), "sigma"), (dict(beta=1.5), "beta"), (dict(patience=0), "patience"),
    (dict(scale=-1.0), "scale"), (dict(budget=0.0), "budget"), (dict(delta=1.0), "delta"),
    (dict(budget_ledger="both"), "budget_ledger"), (dict(sigma_stat=0), "sigma_stat")])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AdapDPFL(**kwargs)
