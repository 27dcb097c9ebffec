"""Record/replay of Flower's client-side adaptive clipping: the wrapper's real configure and
aggregate around Flower's own adaptiveclipping_mod at each client, either import path."""

import importlib
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from _extras import effective_steps, require

require("flwr", "flower")

from accounting import PrivacyLedger  # noqa: E402
from leakaudit.interop import flower as lf  # noqa: E402
from leakaudit.interop.flower import dp_ledgers as dl  # noqa: E402

PATHS = {False: "flwr.serverapp.strategy", True: "flwr.server.strategy"}


def _wrapper(legacy, lr, cls=None):
    strategies = importlib.import_module(PATHS[legacy])
    wrapper = cls or strategies.DifferentialPrivacyClientSideAdaptiveClipping
    return wrapper(strategies.FedAvg(), noise_multiplier=1.0, num_sampled_clients=4,
                   initial_clipping_norm=1.0, clipped_count_stddev=2.0, clip_norm_lr=lr)


@pytest.mark.parametrize("legacy", [False, True])
def test_client_side_adaptive_clipping_is_replayed_not_refused(legacy):
    dp = _wrapper(legacy, lr=1e-12)  # a clip that does not move within the round
    row = lf.audit_dp(dp, dim=300, trials=100, pairs=4, neighbouring="zero-out").rows()[0]
    assert PATHS[legacy] in row["mode"] and "K=4" in row["mode"]
    assert dp.clipping_norm == 1.0  # each replay is round 1, and left as it was
    # Flower's split of the requested z = 1 with the count's std 2 (Andrew et al. 2021,
    # Thm 1): z_Delta = (1 - 1/16)^(-1/2) on the update, stated in the row
    z_delta = (1.0 - 1.0 / 16.0) ** -0.5
    assert dp.noise_multiplier == pytest.approx(z_delta)
    assert lf.requested_noise_multiplier(z_delta, 2.0) == pytest.approx(1.0)
    assert "z_Delta = 1.033" in row["finding"] and "adaptiveclipping_mod" in row["finding"]
    # the canary's update (norm 10 C) clipped by the client's mod at the clip the wrapper
    # sent: the mean moves by exactly C / K; the noise is z_Delta C / K
    assert row["contribution"] == pytest.approx(1.0, abs=1e-6)
    assert abs(row["noise_ratio"] - 1.0) < row["noise_tolerance"]
    assert row["mu_claimed"] == pytest.approx(1.0)
    assert row["mu_sound"] == pytest.approx(math.hypot(1.0 / z_delta, 0.5))  # + the count
    assert not row["flagged"], row["finding"]


def test_client_side_adaptive_clipping_with_half_the_noise_is_flagged():
    strategies = importlib.import_module(PATHS[False])

    class HalfNoise(strategies.DifferentialPrivacyClientSideAdaptiveClipping):
        """Adds half the update noise its z_Delta declares."""

        def _add_noise_to_aggregated_arrays(self, aggregated):
            self.noise_multiplier /= 2
            try:
                return super()._add_noise_to_aggregated_arrays(aggregated)
            finally:
                self.noise_multiplier *= 2

    dp = _wrapper(False, lr=1e-12, cls=HalfNoise)
    row = lf.audit_dp(dp, dim=300, trials=100, pairs=4, neighbouring="zero-out").rows()[0]
    assert row["flagged"] and row["noise_ratio"] == pytest.approx(0.5, rel=0.05)
    assert "x the accountant's" in row["finding"], row["finding"]


def test_client_side_adaptive_clipping_noises_with_the_moved_clip():
    """Flower moves the clip by the round's noisy count before it noises the aggregate: at
    Flower's default clip_norm_lr 0.2 the noise std is not the one declared for the round's
    clip, and under zero-out the canary's norm bit moves the clip, so the noise scale (and
    the release on the same noise) depends on the canary."""
    row = lf.audit_dp(_wrapper(False, lr=0.2), dim=300, trials=100, pairs=4,
                      neighbouring="zero-out").rows()[0]
    assert row["flagged"] and "noise std" in row["finding"], row["finding"]
    assert row["contribution"] > 1.0 + 1e-3


def test_client_side_wrapper_that_sends_no_clip_is_an_error():
    strategies = importlib.import_module(PATHS[False])

    class Silent(strategies.DifferentialPrivacyClientSideAdaptiveClipping):
        def configure_train(self, server_round, arrays, config, grid):
            return self.strategy.configure_train(server_round, arrays, config, grid)

    with pytest.raises(ValueError, match="clipping_norm"):
        lf.audit_dp(_wrapper(False, lr=1e-12, cls=Silent), dim=50, trials=8, pairs=1)


def _sound(lr, delta_cut=dl.DELTA_CUT, rounds=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a plain mapping: the rounds are not checked
        return lf.ledgers(_wrapper(False, lr=lr), participation={0: list(range(1, rounds + 1))},
                          num_clients=4, rounds=rounds, delta_cut=delta_cut)


def _old_sound(rounds=1):
    """Today's ledger before the moved clip was paid: z_Delta at the round's clip."""
    ledger = PrivacyLedger(relation="replace-one")
    ledger.step(q=1.0, sigma=Z_DELTA, count=rounds, sampling="fixed-size")
    ledger.step(q=1.0, sigma=2.0 * 2.0, count=rounds, sampling="fixed-size")
    return ledger


Z_DELTA = (1.0 - 1.0 / 16.0) ** -0.5  # Flower's split of z = 1 with the count's std 2


def test_client_side_adaptive_ledger_pays_for_the_moved_clip():
    pair = _sound(0.2)
    # the update's Gaussian at the worst moved clip (halved, replace-one), the count's
    # (std 2, sensitivity 1) and the tail's pure delta
    update, count, tail = pair.sound[0].events
    worst = Z_DELTA * math.exp(-0.2 * (1.0 + 2.0 * 6.3613 / 4 - 0.5))  # Phi^-1(1 - 1e-10)
    assert update.sigma == pytest.approx(worst, rel=1e-4)
    assert [s for _, s, _ in effective_steps(SimpleNamespace(events=[update, count]))] == \
        pytest.approx([worst / 2, 2.0], rel=1e-4)
    assert tail.eps == 0.0 and tail.delta == dl.DELTA_CUT and tail.count == 1
    assert pair.claimed[0].events[0].sigma == pytest.approx(1.0)  # the requested z
    assert "clip already moved" in pair.reason and "1 - 1e-10 quantile" in pair.reason


@pytest.mark.parametrize("rounds", [1, 5])
def test_adaptive_sound_ledger_is_at_least_the_old_one_and_equal_as_eta_vanishes(rounds):
    old = _old_sound(rounds).epsilon(1e-5)
    for lr in (1e-3, 0.05, 0.2, 1.0):
        assert _sound(lr, rounds=rounds).sound[0].epsilon(1e-5) > old
    assert dl.adaptive_update_multiplier(Z_DELTA, 1e-12, 0.5, 2.0, 4, 1e-10) == \
        pytest.approx(Z_DELTA, rel=1e-10)
    assert _sound(1e-12, rounds=rounds).sound[0].epsilon(1e-5) == pytest.approx(old, rel=1e-4)


def test_adaptive_multiplier_is_monotone_in_eta_and_delta_cut():
    lrs, cuts = [0.0, 1e-6, 0.01, 0.1, 0.2, 0.5, 1.0], [1e-15, 1e-10, 1e-6, 1e-3, 0.1, 0.5]
    by_lr = [dl.adaptive_update_multiplier(Z_DELTA, lr, 0.5, 2.0, 4, 1e-10) for lr in lrs]
    by_cut = [dl.adaptive_update_multiplier(Z_DELTA, 0.2, 0.5, 2.0, 4, d) for d in cuts]
    assert by_lr[0] == Z_DELTA and all(a > b for a, b in zip(by_lr, by_lr[1:]))
    assert all(a < b for a, b in zip(by_cut, by_cut[1:])) and by_cut[-1] < Z_DELTA
    # a tail cut of 1/2 leaves b_max = 1 (every update clipped, noise-free count)
    assert by_cut[-1] == pytest.approx(Z_DELTA * math.exp(-0.2 * 0.5))
    eps = [_sound(lr).sound[0].epsilon(1e-5) for lr in lrs[1:]]
    assert all(a < b for a, b in zip(eps, eps[1:]))
    with pytest.raises(ValueError, match="delta_cut"):
        _sound(0.2, delta_cut=0.0)


@pytest.mark.parametrize("delta_cut,count", [(0.05, 4), (0.01, 4), (0.05, 2), (0.2, 4)])
def test_the_tail_cut_holds_on_flowers_own_clip_update(delta_cut, count):
    """Monte Carlo through Flower's own noisy fraction and geometric update: the update's
    multiplier z_Delta C_next / C falls below the bound with probability delta_cut when
    every update was clipped (count = K = 4, the worst case) and less otherwise."""
    dp, draws = _wrapper(False, lr=0.2), 20_000
    bound = dl.adaptive_update_multiplier(dp.noise_multiplier, 0.2, 0.5, 2.0, 4, delta_cut)
    state = np.random.get_state()
    np.random.seed(int(1e6 * delta_cut) + count)  # Flower draws from numpy's global state
    try:
        below = 0
        for _ in range(draws):
            dp.clipping_norm = 1.0
            dp._geometric_update(dp._noisy_fraction(count, 4))
            below += dp.noise_multiplier * dp.clipping_norm < bound
    finally:
        np.random.set_state(state)
    sd = math.sqrt(delta_cut * (1 - delta_cut) / draws)
    assert below / draws <= delta_cut + 4 * sd
    if count == 4:
        assert below / draws >= delta_cut - 4 * sd  # the cut is tight at the worst count
    else:
        assert below / draws < delta_cut / 10


@pytest.mark.slow
@pytest.mark.parametrize("relation", ["zero-out", "replace-one"])
def test_replay_at_flowers_default_rate_stays_below_the_new_sound_ledger(relation):
    """Flower's default clip_norm_lr 0.2 is flagged against its claim (the noise is not at
    the round's clip), yet the game's lower bounds stay at or below the sound ledger that
    pays for the moved clip (200 runs per side)."""
    row = lf.audit_dp(_wrapper(False, lr=0.2), dim=300, trials=200, pairs=4,
                      neighbouring=relation).rows()[0]
    assert row["flagged"]
    assert row["mu_lower"] <= row["mu_sound"] and row["eps_lower"] <= row["eps_sound"]
    assert row["delta_cut"] == dl.DELTA_CUT
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pair = lf.ledgers(_wrapper(False, lr=0.2), participation={0: [1]}, num_clients=4,
                          rounds=1, neighbouring=relation)
    # the row's sound eps (exact GDP, the tail paid from delta) within the ledger's (RDP,
    # an upper bound on the same two Gaussians and tail)
    assert row["eps_lower"] <= row["eps_sound"] <= pair.sound[0].epsilon(1e-5)
