"""Record/replay of the libraries' own DP code: Opacus's DPOptimizer (hooks, functorch,
ghost clipping) and Flower's central fixed clipping and LocalDpMod, each from one call."""

import json
import math
import typing
import warnings

import pytest
import torch
from _extras import require

opacus = require("opacus", "opacus")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from leakaudit.interop.opacus import audit_optimizer  # noqa: E402
from leakaudit.interop.replay import ReplayReport, noise_tolerance  # noqa: E402
from leakaudit.reporting import Report  # noqa: E402


def _data(n):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def _private(dataset, mode="hooks", batch=8, sigma=1.0, poisson=True):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    engine = opacus.PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure RNG off
        out = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=DataLoader(dataset, batch_size=batch), noise_multiplier=sigma,
            max_grad_norm=1.0, poisson_sampling=poisson, grad_sample_mode=mode,
            criterion=torch.nn.CrossEntropyLoss(),
            noise_generator=torch.Generator().manual_seed(1))
    if mode == "ghost":
        model, opt, criterion, loader = out
    else:
        (model, opt, loader), criterion = out, None
    return engine, model, opt, loader, criterion


class _HalfNoise(opacus.optimizers.DPOptimizer):
    """A DPOptimizer that draws its noise at half the multiplier it reports (and the
    accountant's hook reads): the bug class "noise std off by a factor"."""

    def add_noise(self):
        self.noise_multiplier /= 2
        try:
            super().add_noise()
        finally:
            self.noise_multiplier *= 2


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hooks", "functorch", "ghost"])
def test_opacus_real_step_passes_in_every_grad_sample_mode(mode):
    engine, model, opt, loader, criterion = _private(_data(64), mode)
    weights = [p.detach().clone() for p in model.parameters()]
    report = audit_optimizer(opt, model, loader, engine=engine, criterion=criterion,
                             trials=100, pairs=4)
    (row,) = report.rows()
    assert row["library"] == "opacus" and row["version"] == opacus.__version__
    assert row["mode"].startswith(mode) and row["relation"] == "add-remove"
    # the canary's input x10 is far above the clip: it moves the sum by exactly C
    assert row["contribution"] == pytest.approx(1.0, abs=1e-4)
    assert abs(row["noise_ratio"] - 1.0) < row["noise_tolerance"]
    assert row["mu_claimed"] == 1.0 and row["mu_lower"] <= 1.0 and not row["flagged"]
    assert row["finding"] == "none"
    # nothing of the user's run moved: weights, accountant, step hook
    assert all(torch.equal(a, p) for a, p in zip(weights, model.parameters()))
    assert engine.accountant.history == [] and opt.step_hook is not None


@pytest.mark.slow
def test_opacus_optimizer_with_half_the_noise_is_flagged_and_the_real_one_not():
    engine, model, opt, loader, _ = _private(_data(64))
    fine = audit_optimizer(opt, model, loader, engine=engine, trials=100, pairs=4).rows()[0]
    opt.__class__ = _HalfNoise
    bad = audit_optimizer(opt, model, loader, engine=engine, trials=100, pairs=4).rows()[0]
    assert not fine["flagged"]
    assert bad["flagged"] and bad["noise_ratio"] == pytest.approx(0.5, rel=0.02)
    assert "noise std 0.5" in bad["finding"]
    assert bad["contribution"] == pytest.approx(1.0, abs=1e-4)  # clipping is right


@pytest.mark.slow
def test_opacus_normaliser_that_depends_on_the_data_set_is_flagged():
    """Opacus #819 / #571: make_private divides by expected_batch_size =
    int(len(dataset) / len(loader)), a floor of the data set's size. With 11 examples in
    batches of 4 it is 3; add one example (the canary, add/remove at the data set) and it is
    4: the noise std of the release moves with the data set, which the accountant's
    sampled-Gaussian analysis does not have (audited 2.5 vs reported 1.2 in #571)."""
    data = _data(11)
    engine, model, opt, loader, _ = _private(data, batch=4)
    assert opt.expected_batch_size == 3

    def rebuild(dataset):
        _, m, o, lo, _ = _private(dataset, batch=4)
        return m, o, lo

    row = audit_optimizer(opt, model, loader, engine=engine, rebuild=rebuild, trials=100,
                          pairs=4).rows()[0]
    assert row["flagged"]
    assert "noise std differs between the worlds" in row["finding"]
    assert row["noise_in_out"] == pytest.approx(3 / 4, rel=0.05)  # 1/4 against 1/3
    assert "expected batch size 3 on the data set, 4 with the canary added" in row["finding"]
    assert row["mu_lower"] > row["mu_claimed"]  # the energy statistic sees the scale
    # without the rebuild (the same pipeline in both worlds) nothing is found
    assert not audit_optimizer(opt, model, loader, engine=engine, trials=100,
                               pairs=4).rows()[0]["flagged"]


@pytest.mark.slow
def test_opacus_in_order_loader_is_replayed_under_replace_one():
    engine, model, opt, loader, _ = _private(_data(64), poisson=False)
    row = audit_optimizer(opt, model, loader, engine=engine, trials=100, pairs=4).rows()[0]
    assert row["relation"] == "replace-one" and row["bound"] == 2.0
    assert 1.0 < row["contribution"] <= 2.0  # the canary and its replacement, each <= C
    assert row["eps_sound"] > row["eps_claimed"] and row["flagged"]
    # the replayed step itself is right: the only finding is the loader the accountant
    # does not assume
    assert row["finding"].startswith("the loader draws fixed-size batches of 8 in order")
    assert "assumes Poisson sampling" in row["finding"] and ";" not in row["finding"]


def _loader_of(dataset, sampler):
    engine, model, opt, _, _ = _private(dataset)
    return engine, model, opt, DataLoader(dataset, batch_size=8, sampler=sampler)


@pytest.mark.parametrize("kind", ["shuffle", "weighted"])
def test_a_loader_the_accountant_does_not_assume_is_a_named_finding(kind):
    from torch.utils.data import RandomSampler, WeightedRandomSampler

    data = _data(64)
    sampler = RandomSampler(data) if kind == "shuffle" else WeightedRandomSampler(
        torch.ones(64), 64, replacement=True)
    engine, model, opt, loader = _loader_of(data, sampler)
    row = audit_optimizer(opt, model, loader, engine=engine, trials=16, pairs=2).rows()[0]
    assert row["flagged"] and "assumes Poisson sampling" in row["finding"], row["finding"]
    what = "shuffled permutation" if kind == "shuffle" else \
        "WeightedRandomSampler with replacement"
    assert what in row["finding"]
    # Opacus's own Poisson loader: no such finding
    engine, model, opt, loader, _ = _private(data)
    row = audit_optimizer(opt, model, loader, engine=engine, trials=16, pairs=2).rows()[0]
    assert "Poisson" not in row["finding"]


def _train(model, opt, loader, steps):
    """A few real DP-SGD steps, so that the accountant has a history."""
    for _, (x, y) in zip(range(steps), loader):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


@pytest.mark.parametrize("kind", ["poisson", "shuffle", "weighted"])
def test_the_row_states_the_whole_runs_eps_from_the_same_ledgers_call(kind):
    """The row's eps_claimed / eps_sound are one release; with the engine it also states the
    run's, equal to what ledgers() gives for the same loader (they cannot disagree)."""
    from torch.utils.data import RandomSampler, WeightedRandomSampler

    from leakaudit.interop.opacus import ledgers

    data = _data(64)
    if kind == "poisson":
        engine, model, opt, loader, _ = _private(data)
    else:
        sampler = RandomSampler(data) if kind == "shuffle" else WeightedRandomSampler(
            torch.ones(64), 64, replacement=True)
        engine, model, opt, loader = _loader_of(data, sampler)
    _train(model, opt, loader, steps=12)
    row = audit_optimizer(opt, model, loader, engine=engine, trials=16, pairs=2).rows()[0]
    pair = ledgers(engine, data_loader=loader, relation=row["relation"])
    assert row["eps_claimed_run"] == pair.claimed.epsilon(1e-5)
    assert row["eps_sound_run"] == pair.sound.epsilon(1e-5)
    assert row["sampling_run"] == pair.sampling
    if kind == "poisson":
        assert row["eps_sound_run"] == row["eps_claimed_run"]
    else:  # no amplification: the run spends at least one release, and more than claimed
        assert row["eps_sound_run"] >= row["eps_sound"] > 0
        assert row["eps_sound_run"] > row["eps_claimed_run"]
    # without the engine the row has no run eps (it does not guess one)
    bare = audit_optimizer(opt, model, loader, trials=16, pairs=2).rows()[0]
    assert "eps_sound_run" not in bare


def test_parameters_trained_outside_the_dp_optimizer_are_a_named_finding():
    data = _data(32)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    engine = opacus.PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net[2].parameters(), lr=0.1),
            data_loader=DataLoader(data, batch_size=8), noise_multiplier=1.0,
            max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(1))
    torch.optim.SGD(net[0].parameters(), lr=0.1)   # the user's second, non-private optimizer
    row = audit_optimizer(opt, model, loader, engine=engine, trials=16, pairs=2).rows()[0]
    assert row["flagged"]
    assert "parameters trained outside the DP optimizer: 0.weight, 0.bias" in row["finding"]


def test_replay_report_follows_the_report_protocol(tmp_path):
    engine, model, opt, loader, _ = _private(_data(32))
    report = audit_optimizer(opt, model, loader, engine=engine, trials=16, pairs=2)
    assert isinstance(report, Report)
    again = ReplayReport.from_json(report.to_json())
    assert again.rows()[0]["mode"] == report.rows()[0]["mode"]
    assert "| opacus | " in report.to_markdown() and report.to_latex().startswith("\\begin")
    assert set(report.save(tmp_path)) == {"md", "csv", "tex", "json"}
    assert json.loads(report.to_json())["config"]["trials"] == 16
    report.add(dict(report.rows()[0], eps_sound=math.inf, mu_lower=math.nan, finding="a & b_c"))
    back = ReplayReport.from_json(report.to_json()).rows()[1]
    assert math.isinf(back["eps_sound"]) and math.isnan(back["mu_lower"])
    assert "a \\& b\\_c" in report.to_latex() and "| inf |" in report.to_markdown()
    assert typing.get_type_hints(audit_optimizer)["return"] is ReplayReport


def test_opacus_batches_of_one_replay_an_empty_out_batch():
    """expected_batch_size 1 (the setting of examples/opacus_audit.py): no background, the
    canary-out world is an empty batch, which Opacus releases as noise only."""
    engine, model, opt, loader, _ = _private(_data(8), batch=1)
    row = audit_optimizer(opt, model, loader, engine=engine, trials=16, pairs=2).rows()[0]
    assert opt.expected_batch_size == 1 and row["relation"] == "add-remove"
    assert 0.0 < row["contribution"] <= 1.0 + 1e-4
    assert abs(row["noise_ratio"] - 1.0) < row["noise_tolerance"] and not row["flagged"]


def test_audit_optimizer_bad_input_is_named():
    engine, model, opt, loader, _ = _private(_data(32))
    with pytest.raises(ValueError, match="optimizer must be an Opacus DPOptimizer"):
        audit_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, loader)
    with pytest.raises(ValueError, match="trials"):
        audit_optimizer(opt, model, loader, trials=2)
    assert noise_tolerance(100, 1000) == pytest.approx(6 / math.sqrt(2e5))


# ------------------------------------------------------------------------------ Flower
def _flower():
    require("flwr", "flower")
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

    from leakaudit.interop import flower as lf

    return lf, DifferentialPrivacyServerSideFixedClipping, FedAvg


@pytest.mark.slow
def test_flower_central_fixed_clipping_real_aggregate_from_one_call():
    lf, Fixed, FedAvg = _flower()
    dp = Fixed(FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=3)
    (row,) = lf.audit_dp(dp, dim=300, trials=60, pairs=2, neighbouring="zero-out").rows()
    assert row["library"] == "flower" and "K=3" in row["mode"]
    # the canary's update (norm 10 C) is clipped to C: the mean moves by exactly C/K
    assert row["contribution"] == pytest.approx(1.0, abs=1e-6)
    assert abs(row["noise_ratio"] - 1.0) < row["noise_tolerance"]  # z C / K
    assert not row["flagged"]
    # replace-one: the canary replaced by its negative moves the mean by 2C/K, mu 2 = 2/z:
    # more than DP-FedAvg's claimed multiplier z gives (the sound ledger's halved z)
    swap = lf.audit_dp(dp, dim=300, trials=60, pairs=2).rows()[0]
    assert swap["contribution"] == pytest.approx(2.0, abs=1e-6)
    assert swap["eps_sound"] > swap["eps_claimed"]


def test_flower_server_side_adaptive_clipping_is_replayed_with_its_effective_multiplier():
    lf, _, FedAvg = _flower()
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping

    def audit(lr):
        dp = DifferentialPrivacyServerSideAdaptiveClipping(
            FedAvg(), noise_multiplier=1.0, num_sampled_clients=4, initial_clipping_norm=1.0,
            clipped_count_stddev=2.0, clip_norm_lr=lr)
        row = lf.audit_dp(dp, dim=300, trials=100, pairs=4).rows()[0]
        assert dp.clipping_norm == 1.0          # each replay is round 1, and left as it was
        return dp, row

    # a clip that does not move: the update's share of the requested z (z_Delta), no finding
    dp, row = audit(1e-12)
    assert dp.noise_multiplier == pytest.approx((1.0 - 1.0 / 16.0) ** -0.5)
    assert "z_Delta = 1.033" in row["finding"] and not row["flagged"], row["finding"]
    assert row["mu_claimed"] == pytest.approx(1.0) and 1.0 < row["contribution"] <= 2.0 + 1e-9
    # Flower noises the aggregate with the clip already moved by this round's noisy count:
    # the noise std is not the one declared for the round's sensitivity
    _, row = audit(0.2)
    assert row["flagged"] and "noise std" in row["finding"], row["finding"]


def test_flower_wrapper_with_half_the_noise_is_flagged():
    lf, Fixed, FedAvg = _flower()

    class HalfNoise(Fixed):
        def _add_noise_to_aggregated_arrays(self, arrays):
            self.noise_multiplier /= 2
            try:
                return super()._add_noise_to_aggregated_arrays(arrays)
            finally:
                self.noise_multiplier *= 2

    dp = HalfNoise(FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2)
    row = lf.audit_dp(dp, dim=300, trials=60, pairs=2, neighbouring="zero-out").rows()[0]
    assert row["flagged"] and row["noise_ratio"] == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize("path", ["flwr.clientapp.mod", "flwr.client.mod"])
def test_flower_local_dp_mod_real_call_from_one_call(path):
    lf, _, _ = _flower()
    import importlib

    mod = importlib.import_module(path).LocalDpMod(clipping_norm=1.0, sensitivity=1.0,
                                                   epsilon=1.0, delta=1e-5)
    row = lf.audit_dp(mod, dim=300, trials=60, pairs=2).rows()[0]
    assert path in row["mode"]
    # Dwork & Roth's std for sensitivity 1, eps 1, delta 1e-5 (Flower logs 4.8448)
    assert abs(row["noise_ratio"] - 1.0) < row["noise_tolerance"]
    assert row["contribution"] == pytest.approx(2.0, abs=1e-6)  # 2C under replace-one
    assert "moves by up to 2" in row["finding"] and row["eps_sound"] > row["eps_claimed"]
    assert not row["flagged"]  # information, not a check that failed


@pytest.mark.slow
@pytest.mark.parametrize("legacy", [False, True])
def test_flower_client_side_fixed_clipping_through_its_client_mod(legacy):
    """The client-side wrapper does not clip at the server: each reply goes through Flower's
    own fixedclipping_mod first (either import path), then the wrapper's aggregate."""
    lf, _, _ = _flower()
    if legacy:
        from flwr.server.strategy import DifferentialPrivacyClientSideFixedClipping as Wrapper
        from flwr.server.strategy import FedAvg
    else:
        from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping as Wrapper
        from flwr.serverapp.strategy import FedAvg
    dp = Wrapper(FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=3)
    row = lf.audit_dp(dp, dim=300, trials=60, pairs=2, neighbouring="zero-out").rows()[0]
    assert row["contribution"] == pytest.approx(1.0, abs=1e-6)
    assert abs(row["noise_ratio"] - 1.0) < row["noise_tolerance"] and not row["flagged"]
    assert ("flwr.server.strategy" if legacy else "flwr.serverapp.strategy") in row["mode"]
