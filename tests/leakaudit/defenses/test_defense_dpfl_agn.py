"""dpfl-agn: threshold-triggered noise decay, median clip (not private), standard Adam, and
releases against the ledgers."""

import math

import pytest
import torch
from conftest import replay_adam

import accounting as A
from leakaudit import defenses as D
from leakaudit.defenses.dpfl_agn import DPFLAGN
from leakaudit.fl import Tap, simulate

TINY = dict(dataset="digits", clients=3, rounds=3, local_steps=2, batch_size=8,
            progress=False, seed=0)


def _ctx(n_examples=100, batch_size=5, round_index=0, seed=0):
    rc = D.RoundContext(round=round_index, rounds=5, clients=2, clients_per_round=2,
                        local_steps=1, batch_size=batch_size, client_sizes=(n_examples,) * 2,
                        participants=(0, 1), claimed=[A.PrivacyLedger() for _ in range(2)],
                        sound=[A.PrivacyLedger() for _ in range(2)])
    return D.ClientContext(round=round_index, client=0, local_step=0, n_examples=n_examples,
                           batch_size=batch_size, lr=0.1,
                           generator=torch.Generator().manual_seed(seed), round_ctx=rc,
                           claimed=rc.claimed[0], sound=rc.sound[0])


def _sigmas(ledger):
    """The noise multiplier of every recorded Gaussian step, in order."""
    return [e.sigma for e in ledger.events for _ in range(e.count)]


def test_decay_fires_exactly_on_rounds_where_improvement_is_below_mu():
    d = DPFLAGN(sigma=2.0, rho=0.5, mu=0.001, sigma_min=0.3)
    d.start(8)
    # improvements: -, 0.5, 0.0005 (< mu), 0.2995, -0.01 (< mu), 0.001 (not < mu), 0.2, 0
    losses = [1.0, 0.5, 0.4995, 0.2, 0.21, 0.209, 0.009, 0.009]
    fired = [False, False, True, False, True, False, False, True]
    expected, sigma = [], 2.0
    for r, (loss, fires) in enumerate(zip(losses, fired)):
        assert d.noise_multiplier(r) == pytest.approx(sigma)  # before the round ends
        expected.append(sigma)
        d.end_round(r, loss)
        if fires:
            sigma = max(0.3, 0.5 * sigma)
        assert d.noise_multiplier(r + 1) == pytest.approx(sigma)
    # sigma per round as it happened, and the floor sigma_min (2 -> 1 -> 0.5 -> 0.3)
    assert [d.noise_multiplier(r) for r in range(8)] == pytest.approx(expected)
    assert expected == pytest.approx([2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    assert d.noise_multiplier(8) == pytest.approx(0.3)
    d.start(8)  # a new run starts again from sigma_0
    assert d.noise_multiplier(0) == 2.0


def test_median_clip_is_the_median_of_unclipped_norms_and_noise_scales_with_it():
    d = DPFLAGN(clip="median", sigma=1e-9, sigma_min=0.0)
    c = _ctx()
    out = d.privatize_batch([torch.tensor([[1.0], [2.0], [3.0], [4.0], [100.0]])], c)
    # Theta = median(1, 2, 3, 4, 100) = 3: clipped 1 + 2 + 3 + 3 + 3 = 12, over B = 5
    assert float(out[0][0]) == pytest.approx(12 / 5, rel=1e-6)
    # one example moves Theta (data-dependent sensitivity): no finite sound guarantee
    with pytest.warns(A.NoPrivacyWarning):
        assert math.isinf(c.sound.epsilon(1e-5))
    assert math.isfinite(c.claimed.epsilon(1e-5, warn=False))
    assert "median" in d.claimed_vs_sound and DPFLAGN().claimed_vs_sound == ""
    # the noise std is sigma_t * Theta / B
    d = DPFLAGN(clip="median", sigma=2.0, sigma_min=0.0)
    grads = [torch.zeros(5, 20000)]
    grads[0][:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    noise = d.privatize_batch(grads, _ctx())[0][1:]
    assert float(noise.std()) == pytest.approx(2.0 * 3.0 / 5, rel=0.03)


def test_fixed_clip_noise_std_and_one_sgm_step_in_both_ledgers():
    d = DPFLAGN(clip=4.0, sigma=1.5)
    c = _ctx(n_examples=50, batch_size=10)
    noise = d.privatize_batch([torch.zeros(10, 30000)], c)[0]
    assert float(noise.std()) == pytest.approx(1.5 * 4.0 / 10, rel=0.03)
    for ledger in (c.sound, c.claimed):
        (e,) = ledger.events
        assert isinstance(e, A.SampledGaussian)
        assert (e.q, e.sigma, e.count) == (pytest.approx(10 / 50), 1.5, 1)


def test_release_count_and_ledger_follows_the_decay_in_a_run(release_counter):
    d = DPFLAGN(clip=4.0, sigma=2.0, rho=0.5, mu=0.05, sigma_min=0.1)
    run = simulate(defense=d, **TINY)
    in_sound = release_counter.in_ledgers(run.sound)  # ReleaseCounter.in_ledgers
    assert release_counter.draws["gaussian"] == in_sound["gaussian"] == 3 * 3 * 2 > 0
    assert release_counter.in_ledgers(run.claimed) == in_sound
    assert run.epsilon(1e-5, "claimed") == pytest.approx(run.epsilon(1e-5, "sound"))
    # every client takes part in every round: its steps use sigma_t of that round
    per_round = [d.noise_multiplier(r) for r in range(3)]
    for ledger in run.sound:
        assert _sigmas(ledger) == pytest.approx([s for s in per_round for _ in range(2)])
    # and sigma_t decayed exactly after the rounds whose validation loss improved < mu
    for r in range(1, 3):
        fired = r >= 2 and run.val_loss[r - 2] - run.val_loss[r - 1] < 0.05
        assert per_round[r] == pytest.approx(per_round[r - 1] * (0.5 if fired else 1.0))


def test_median_mode_in_a_run_sound_is_infinite_claimed_finite(release_counter):
    run = simulate(defense=DPFLAGN(clip="median", sigma=2.0), **TINY)
    assert math.isinf(run.epsilon(1e-5, "sound"))
    assert math.isfinite(run.epsilon(1e-5, "claimed"))
    draws = release_counter.draws["gaussian"]
    assert draws == release_counter.in_ledgers(run.claimed)["gaussian"] == 18
    assert release_counter.in_ledgers(run.sound) == {"gaussian": 0, "laplace": 0, "other": 18}
    assert all(lg.why_infinite() for lg in run.sound)


def test_applied_weights_are_torch_adam_fed_the_same_noisy_gradients():
    steps = 4
    run = simulate(dataset="digits", defense=DPFLAGN(clip=4.0, sigma=1.0), clients=2,
                   clients_per_round=1, rounds=1, local_steps=steps, batch_size=8, lr=0.01,
                   optimizer="sgd", taps=[Tap(2, local_step=s) for s in range(steps)],
                   progress=False, seed=3)
    assert run.settings["optimizer"] == "adam"  # the defense prescribes Adam
    obs = sorted(run.observations_at(2), key=lambda o: o.local_step)
    assert len(obs) == steps
    replay_adam(obs, lr=0.01)


@pytest.mark.parametrize("kwargs, name", [
    (dict(clip=0.0), "clip"), (dict(clip=-1.0), "clip"), (dict(clip="mean"), "clip"),
    (dict(clip=math.nan), "clip"), (dict(sigma=0.0), "sigma"), (dict(sigma=-1.0), "sigma"),
    (dict(rho=0.0), "rho"), (dict(rho=1.5), "rho"), (dict(rho=True), "rho"),
    (dict(mu=-0.1), "mu"), (dict(sigma_min=-1.0), "sigma_min"),
    (dict(sigma=1.0, sigma_min=2.0), "sigma_min"),
])
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DPFLAGN(**kwargs)


def test_declares_where_it_acts():
    d = DPFLAGN()
    assert (d.name, d.sites, d.level, d.optimizer) == ("dpfl-agn", {"example"}, "instance",
                                                       "adam")
    assert d.params()["rho"] == 0.9 and d.params()["mu"] == 0.001
