"""Record/replay of Flower's client-side adaptive clipping: the wrapper's real configure and
aggregate around Flower's own adaptiveclipping_mod at each client, either import path."""

import importlib
import math

import pytest
from _extras import effective_steps, require

require("flwr", "flower")

from leakaudit.interop import flower as lf  # noqa: E402

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


def test_client_side_adaptive_ledger_names_what_it_does_not_bound():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a plain mapping: the rounds are not checked
        pair = lf.ledgers(_wrapper(False, lr=0.2), participation={0: [1]}, num_clients=4,
                          rounds=1)
    # the update's Gaussian (z_Delta / 2 under replace-one) and the count's (std 2)
    assert [s for _, s, _ in effective_steps(pair.sound[0])] == pytest.approx(
        [(1.0 - 1.0 / 16.0) ** -0.5 / 2, 2.0])
    assert pair.claimed[0].events[0].sigma == pytest.approx(1.0)  # the requested z
    assert "clip already moved" in pair.reason and "does not bound" in pair.reason
