"""The federated simulator: determinism, taps, leak points, accounting, errors."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from leakaudit import data, defenses, fl, models

SMALL = dict(clients=4, clients_per_round=2, rounds=3, local_steps=2, batch_size=8, lr=0.05,
             progress=False)


def weights(run):
    return [p.detach().clone() for p in run.model.parameters()]


def test_same_seed_same_result_other_seed_differs(digits):
    a = fl.simulate(None, dataset=digits, defense="fed-cdp", seed=3, **SMALL)
    b = fl.simulate(None, dataset=digits, defense="fed-cdp", seed=3, **SMALL)
    c = fl.simulate(None, dataset=digits, defense="fed-cdp", seed=4, **SMALL)
    assert all(torch.equal(x, y) for x, y in zip(weights(a), weights(b)))
    assert a.accuracy == b.accuracy
    assert not all(torch.equal(x, y) for x, y in zip(weights(a), weights(c)))


@pytest.mark.slow
@pytest.mark.parametrize("defense", ["none", "fed-cdp", "fed-sdp-client", "random-noise"])
def test_taps_never_change_the_trajectory(digits, defense):
    taps = [fl.Tap(2, round=1, local_step=1, clients=2), fl.Tap(1, round=0), fl.Tap(0, round=2)]
    plain = fl.simulate(None, dataset=digits, defense=defense, seed=1, **SMALL)
    tapped = fl.simulate(None, dataset=digits, defense=defense, seed=1, taps=taps, **SMALL)
    assert all(torch.equal(x, y) for x, y in zip(weights(plain), weights(tapped)))
    assert [o.point for o in tapped.observations] == [1, 2, 2, 0]


def test_type2_observation_is_the_batch_gradient_for_no_defense(digits):
    run = fl.simulate(None, dataset=digits, defense="none", seed=0,
                      taps=[fl.Tap(2, round=1, local_step=1)], **SMALL)
    obs = run.observations_at(2)[0]
    truth = run.truth(obs)
    model = models.default_for(digits)
    model.load_state_dict(obs.weights)
    expected = fl.batch_gradient(model, truth.inputs, truth.labels)
    assert obs.batch_size == 8 and truth.inputs.shape == (8, 1, 28, 28)
    for t, e in zip(obs.tensors, expected):
        assert torch.allclose(t, e, atol=1e-6)


def test_type1_update_is_minus_lr_times_gradient_with_one_local_step(digits):
    run = fl.simulate(None, dataset=digits, defense="none", seed=0, taps=[fl.Tap(1)],
                      **{**SMALL, "local_steps": 1})
    obs = run.observations_at(1)[0]
    truth = run.truth(obs)
    model = models.default_for(digits)
    model.load_state_dict(obs.weights)
    g = fl.batch_gradient(model, truth.inputs, truth.labels)
    for u, gi in zip(obs.tensors, g):
        assert torch.allclose(u, -0.05 * gi, atol=1e-6)
    assert obs.local_steps == 1 and obs.lr == 0.05


def test_per_example_gradients_average_to_the_batch_gradient(digits):
    model = models.lenet()
    x, y = digits.x_train[:6], digits.y_train[:6]
    params = {k: v.detach() for k, v in model.named_parameters()}
    pex = fl.per_example_gradients(model, params, {}, x, y)
    for p, g in zip(pex, fl.batch_gradient(model, x, y)):
        assert p.shape[0] == 6
        assert torch.allclose(p.mean(dim=0), g, atol=1e-6)


def test_fed_cdp_without_noise_or_clipping_is_plain_training(digits):
    # same (fixed-size) batches for both: fed-cdp alone would default to Poisson batches
    plain = fl.simulate(None, dataset=digits, defense="none", seed=2, batch_sampling="shuffle",
                        **SMALL)
    dp = fl.simulate(None, dataset=digits, defense=defenses.get("fed-cdp", clip=1e9, sigma=0.0),
                     seed=2, batch_sampling="shuffle", **SMALL)
    for x, y in zip(weights(plain), weights(dp)):
        assert torch.allclose(x, y, atol=1e-5)


def test_fed_sdp_server_leaves_type1_raw_and_sanitises_type0(digits):
    d = defenses.get("fed-sdp-server", clip=0.01, sigma=0.0)
    run = fl.simulate(None, dataset=digits, defense=d, seed=0, taps=[fl.Tap(1), fl.Tap(0)], **SMALL)
    raw = float(torch.sqrt(sum(t.pow(2).sum() for t in run.observations_at(1)[0].tensors)))
    san = float(torch.sqrt(sum(t.pow(2).sum() for t in run.observations_at(0)[0].tensors)))
    assert raw > 0.01 and san == pytest.approx(0.01, rel=1e-4)


def test_ledgers_count_exactly_the_releases(digits):
    d = defenses.get("fed-cdp", clip=1.0, sigma=1.5)
    run = fl.simulate(None, dataset=digits, defense=d, seed=0, **SMALL)
    # sound: L steps per participation; 3 rounds x 2 participants = 6 participations
    assert sum(lg.steps for lg in run.sound) == 3 * 2 * 2
    # claimed (the paper): T x L steps for every client, q = B K / |D|
    assert all(lg.steps == 3 * 2 for lg in run.claimed)
    assert run.epsilon(1e-5, "sound") > 0 and run.epsilon(1e-5, "claimed") > 0
    none = fl.simulate(None, dataset=digits, defense="none", seed=0, **SMALL)
    assert math.isinf(none.epsilon(1e-5)) and math.isinf(none.epsilon(1e-5, "claimed"))


def test_decaying_defense_uses_the_schedule_over_rounds(digits):
    d = defenses.get("fed-alpha-cdp-exp", sigma=8.0, sigma_end=2.0)
    fl.simulate(None, dataset=digits, defense=d, seed=0, **SMALL)
    assert [d.noise_multiplier(t) for t in range(3)] == pytest.approx([8.0, 4.0, 2.0])


@pytest.mark.slow
def test_non_private_model_learns_digits(digits):
    run = fl.simulate(None, dataset=digits, defense="none", clients=5, clients_per_round=5,
                      rounds=8, local_steps=10, batch_size=32, lr=0.01, optimizer="adam", seed=0,
                      progress=False)
    assert run.final_accuracy > 0.8
    assert run.accuracy[-1] > run.accuracy[0]


def test_poisson_batches_and_tabular_data():
    ds = data.load("breast-cancer")
    run = fl.simulate(None, dataset=ds, defense=defenses.get("fed-cdp", clip=1.0, sigma=0.5),
                      clients=3, clients_per_round=3, rounds=2, local_steps=3, batch_size=16,
                      lr=0.05, batch_sampling="poisson", progress=False)
    assert 0.0 <= run.final_accuracy <= 1.0 and len(run.accuracy) == 2


def test_bad_input_is_rejected_before_training(digits):
    with pytest.raises(ValueError, match="clients_per_round"):
        fl.simulate(None, dataset=digits, defense="none", clients=3, clients_per_round=5,
                    progress=False)
    with pytest.raises(ValueError, match="client 1 has no data"):
        fl.simulate(None, dataset=digits, defense="none", clients=2, partition=[[0, 1, 2], []],
                    progress=False)
    with pytest.raises(ValueError, match="local_step"):
        fl.simulate(None, dataset=digits, defense="none", local_steps=1,
                    taps=[fl.Tap(2, local_step=3)], progress=False)
    with pytest.raises(ValueError, match="round"):
        fl.simulate(None, dataset=digits, defense="none", rounds=2, taps=[fl.Tap(0, round=2)],
                    progress=False)
    with pytest.raises(ValueError, match="point"):
        fl.Tap(3)
    with pytest.raises(ValueError, match="classes"):
        fl.simulate(models.lenet(num_classes=4), dataset=digits, defense="none", progress=False)
    with pytest.raises(ValueError, match="cannot process"):
        fl.simulate(models.mlp(30, 10), dataset=digits, defense="none", progress=False)
    with pytest.raises(ValueError, match="lr"):
        fl.simulate(None, dataset=digits, defense="none", lr=-1.0, progress=False)
    with pytest.raises(ValueError, match="defense"):
        fl.simulate(None, dataset=digits, defense="no-such-defense", progress=False)
    with pytest.raises(ValueError, match="sigma"):
        fl.simulate(None, dataset=digits, defense=defenses.get("fed-cdp", sigma=-1.0),
                    progress=False)


class _Exploding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x.reshape(x.shape[0], -1))
        return out * torch.where(x.sum() > 1e9, 1.0, float("nan"))


def test_nan_gradient_stops_naming_client_and_round(digits):
    model = _Exploding()
    with torch.no_grad():
        model.fc.weight.zero_()
    # the forward pass check passes shapes; NaN appears in the loss gradient
    with pytest.raises(fl.NonFiniteGradientError, match=r"client \d+ in round 0"):
        fl.simulate(model, dataset=digits, defense="none", **SMALL)


def test_user_model_is_not_mutated(digits):
    model = models.lenet(generator=torch.Generator().manual_seed(5))
    before = [p.clone() for p in model.parameters()]
    run = fl.simulate(model, dataset=digits, defense="none", **SMALL)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, run.model.parameters()))


def test_partitions_by_name(digits):
    run = fl.simulate(None, dataset=digits, defense="none", partition="dirichlet",
                      partition_kwargs={"alpha": 0.5}, seed=0, **SMALL)
    assert len(run.accuracy) == 3
    assert np.isfinite(run.val_loss).all()


def test_eps_history_tracks_privacy_spent_at_every_evaluation():
    run = fl.simulate(dataset="digits", defense="fed-cdp", clients=3, clients_per_round=2,
                   rounds=3, local_steps=1, batch_size=8, progress=False, seed=0,
                   track_epsilon=1e-5)
    assert [r for r, _, _ in run.eps_history] == run.eval_rounds == [0, 1, 2]
    sound = [s for _, _, s in run.eps_history]
    assert sound == sorted(sound) and sound[0] > 0
    assert sound[-1] == pytest.approx(run.epsilon(1e-5, "sound"))
    assert run.accuracy_within(math.inf) == (2, run.accuracy[-1])
    assert run.accuracy_within(sound[0] / 2) is None
    assert run.accuracy_within(sound[1]) == (1, run.accuracy[1])
    with pytest.raises(ValueError, match="track_epsilon"):
        fl.simulate(dataset="digits", rounds=1, progress=False, track_epsilon=1.5)


def test_an_update_says_how_many_examples_are_behind_it_without_the_truth():
    """adadp draws a second, fresh batch per iteration: the type-1 update comes from two
    examples at B = 1, and the observation says so (what the audit attacks), while a type-2
    view is one batch."""
    run = fl.simulate(None, dataset="digits", defense=defenses.get("adadp"), clients=4,
                      clients_per_round=1, rounds=1, local_steps=1, batch_size=1,
                      batch_sampling="shuffle", progress=False, taps=[fl.Tap(1), fl.Tap(2)], seed=0)
    update = run.observations_at(1)[0]
    assert update.examples_behind == 2 == run.truth(update).inputs.shape[0]
    step = run.observations_at(2)[0]
    assert step.examples_behind == 1 == step.batch_size


# ----------------------------------------------------------------- client sampling
def test_clients_per_round_is_a_count_and_client_fraction_a_rate(digits):
    with pytest.raises(ValueError, match="client_fraction"):
        fl.simulate(None, dataset=digits, defense="none", clients=4, clients_per_round=0.5,
                    progress=False)
    with pytest.raises(ValueError, match="clients_per_round must be an int"):
        fl.simulate(None, dataset=digits, defense="none", clients=4, clients_per_round=1.0,
                    progress=False)
    with pytest.raises(ValueError, match="not both"):
        fl.simulate(None, dataset=digits, defense="none", clients=4, clients_per_round=2,
                    client_fraction=0.5, progress=False)
    for bad in (0.0, 1.5, -0.1, "half", True):
        with pytest.raises(ValueError, match="client_fraction"):
            fl.simulate(None, dataset=digits, defense="none", clients=4, client_fraction=bad,
                        progress=False)
    with pytest.raises(ValueError, match="expected_weight"):
        fl.simulate(None, dataset=digits, defense="fed-sdp-server", clients=4, expected_weight=0.0,
                    progress=False)
    cfg = fl.FLConfig.make(clients=4)            # default: every client, fixed-size
    assert (cfg.clients_per_round, cfg.client_sampling, cfg.denominator) == (4, "fixed-size", 4)
    cfg = fl.FLConfig.make(clients=10, client_fraction=0.3)
    assert (cfg.client_sampling, cfg.client_rate, cfg.denominator) == ("poisson", 0.3, 3.0)


def test_poisson_client_sampling_draws_a_random_count(digits):
    run = fl.simulate(None, dataset=digits, defense="none", clients=6, client_fraction=0.5,
                      rounds=12, local_steps=1, batch_size=8, progress=False, eval_every=12)
    counts = {len(u) for u in run.uploads}
    assert len(counts) > 1 and run.settings["client_sampling"] == "poisson"
    fixed = fl.simulate(None, dataset=digits, defense="none", clients=6, clients_per_round=2,
                        rounds=4, local_steps=1, batch_size=8, progress=False, eval_every=4)
    assert {len(u) for u in fixed.uploads} == {2}


def test_client_level_dp_divides_by_the_fixed_denominator(digits):
    # one client, clipped to C, no noise: the model moves by C / D, not by C (the realised
    # weighted mean), whatever the client's data size
    for d in (2.0, 8.0):
        run = fl.simulate(None, dataset=digits,
                          defense=defenses.get("fed-sdp-server", clip=0.01, sigma=0.0), clients=1,
                          client_fraction=1.0, expected_weight=d, rounds=1, local_steps=1,
                          batch_size=8, progress=False, seed=0)
        start = fl.simulate(None, dataset=digits, defense="none", clients=1, rounds=1, lr=1e-12,
                            progress=False, seed=0)
        moved = torch.cat([(a - b).reshape(-1) for a, b in zip(weights(run), weights(start))])
        assert float(moved.norm()) == pytest.approx(0.01 / d, rel=1e-3)


def test_sound_eps_is_the_tightest_bound_of_the_worst_client(digits):
    import accounting as A
    run = fl.simulate(None, dataset=digits, defense="fed-sdp-server", clients=4,
                      client_fraction=0.5, expected_weight=2.0, rounds=2, local_steps=1,
                      batch_size=8, progress=False)
    tight = max(A.tightest_epsilon(lg, 1e-5) for lg in run.sound)
    assert run.epsilon(1e-5, "sound") == pytest.approx(tight)
    assert run.epsilon(1e-5, "sound", method="rdp") >= tight
    assert run.relation == "add-remove"
    text = run.describe_epsilon(1e-5)
    assert "delta = 1e-05" in text and "add-remove" in text and "poisson" in text
    assert "fixed public denominator D = 2" in text   # the guarantee's assumption, stated
    assert any("D=2" in e.note for e in run.sound[0].events)
    fixed = fl.simulate(None, dataset=digits, defense="fed-sdp-server", clients=4,
                        clients_per_round=2, rounds=2, local_steps=1, batch_size=8, progress=False)
    assert fixed.relation == "replace-one"
    # no amplification from fixed-size client sampling: two Gaussian steps at sigma / 2
    both = A.PrivacyLedger()
    both.step(q=1.0, sigma=3.0, count=2)
    assert fixed.epsilon(1e-5) == pytest.approx(A.tightest_epsilon(both, 1e-5))


@pytest.mark.parametrize("name", ["fed-sdp-server", "fed-sdp-client", "quantile-clip"])
def test_client_level_dp_with_poisson_clients_requires_a_public_denominator(digits, name):
    # q N follows the population (one more client, another noise scale); the
    # refusal names the argument and comes before any training
    with pytest.raises(ValueError, match="expected_weight is required"):
        fl.simulate(None, dataset=digits, defense=name, clients=6, client_fraction=0.5,
                    rounds=1, progress=False)
    # fixed-size sampling divides by K, and a defense without DP-FedAvg aggregation needs none
    fl.simulate(None, dataset=digits, defense=name, clients=2, clients_per_round=1,
                rounds=1, local_steps=1, batch_size=4, progress=False, eval_every=1)
    fl.simulate(None, dataset=digits, defense="fed-cdp", clients=2, client_fraction=0.5,
                rounds=1, local_steps=1, batch_size=4, progress=False)


def test_run_ledgers_are_the_one_pair_type(digits):
    from leakaudit.records import LedgerPair

    run = fl.simulate(None, dataset=digits, defense="fed-sdp-server", clients=4,
                      clients_per_round=2, rounds=1, local_steps=1, batch_size=8, progress=False)
    pair = run.ledgers
    assert isinstance(pair, LedgerPair)
    claimed, sound = pair
    assert claimed is run.claimed and sound is run.sound
    assert pair.relation == run.relation == "replace-one"
    assert "replace-one" in pair.describe(1e-5) and "delta 1e-05" in pair.describe(1e-5)


def test_positional_dataset_and_defense_still_work_and_warn(digits):
    kw = {**SMALL, "rounds": 1}
    new = fl.simulate(None, dataset=digits, defense="fed-cdp", seed=5, **kw)
    with pytest.warns(DeprecationWarning, match="dataset=..., defense=..."):
        old = fl.simulate(None, digits, "fed-cdp", seed=5, **kw)
    assert all(torch.equal(x, y) for x, y in zip(weights(new), weights(old)))
    with pytest.warns(DeprecationWarning, match="by keyword"):
        only = fl.simulate(None, digits, seed=5, **kw)  # defense: the default, "none"
    assert only.defense.name == "none"
    with pytest.raises(TypeError, match="1 positional argument"):
        fl.simulate(None, digits, "none", 3, **kw)


def test_the_settings_are_one_object_and_the_old_keywords_fold_into_it(digits):
    """``config=FLConfig.make(...)`` is the form; the keywords it replaced still work, warn
    once naming them, and give the very same run."""
    cfg = fl.FLConfig.make(clients_per_round=3, local_steps=2, batch_size=4, lr=0.05)
    new = fl.simulate(None, dataset=digits, defense="fed-cdp", config=cfg, rounds=1, seed=5,
                      progress=False)
    with pytest.warns(DeprecationWarning, match=r"simulate\(clients_per_round=\.\.\., "
                      r"local_steps=\.\.\., batch_size=\.\.\., lr=\.\.\.\) is deprecated: "
                      r"pass config=FLConfig.make"):
        old = fl.simulate(None, dataset=digits, defense="fed-cdp", clients_per_round=3,
                          local_steps=2, batch_size=4, lr=0.05, rounds=1, seed=5,
                          progress=False)
    assert all(torch.equal(x, y) for x, y in zip(weights(new), weights(old)))
    assert new.settings == old.settings and new.settings["batch_sampling"] == "poisson"
    with pytest.raises(ValueError, match="config must be an FLConfig"):
        fl.simulate(None, dataset=digits, config={"rounds": 1})


def test_a_config_is_rebuilt_checked():
    every = fl.FLConfig.make(clients=4)
    assert every.replace(clients=8).clients_per_round == 8        # every client stays every
    assert fl.FLConfig.make(clients=8, clients_per_round=3).replace(clients=9) \
        .clients_per_round == 3
    poisson = every.replace(client_fraction=0.5)                  # a rate drops the count
    assert poisson.client_sampling == "poisson"
    assert poisson.replace(clients_per_round=2).client_sampling == "fixed-size"
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        every.replace(rounds=0)
    with pytest.raises(ValueError, match="not a setting of FLConfig"):
        every.replace(defense="none")
    assert fl.FLConfig().batch_sampling is None   # the defense's default, set by simulate


def test_a_defense_is_resolved_in_one_place():
    d = fl.resolve_defense("fed-cdp")
    assert fl.resolve_defense(d) is d
    with pytest.raises(ValueError, match="defenses: unknown defense 'fed-cpd'"):
        fl.resolve_defense("fed-cpd")
    with pytest.raises(ValueError, match="defense_params has an unknown defense"):
        fl.resolve_defenses(["fed-cdp"], {"fed-cpd": {"sigma": 1.0}})


def test_an_unknown_partition_option_is_refused_when_the_config_is_built():
    # it was a TypeError from inside the data split
    with pytest.raises(ValueError, match="partition_kwargs has an unknown option 'alhpa'"):
        fl.FLConfig.make(partition="dirichlet", partition_kwargs={"alhpa": 0.5})
    assert fl.FLConfig.make(partition="dirichlet", partition_kwargs={"alpha": 0.5}) \
        .partition_kwargs == (("alpha", 0.5),)
