"""leakaudit.interop.flower: taps in a (tiny) real Flower simulation; the DP ledgers."""

import math
import os
import sys
import warnings

import pytest
import torch
from _extras import effective_steps, require

require("flwr", "flower")

import numpy as np  # noqa: E402
from flwr.clientapp.mod import LocalDpMod  # noqa: E402
from flwr.serverapp.strategy import (  # noqa: E402
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
)
from flwr.supercore.privacy_accounting import (  # noqa: E402
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant  # noqa: E402

import accounting  # noqa: E402
import leakaudit  # noqa: E402
from accounting import PrivacyLedger  # noqa: E402
from leakaudit import data, models  # noqa: E402
from leakaudit.interop import flower as lf  # noqa: E402

Z, C, N = 1.0, 1.0, 10


# ------------------------------------------------------------------------------ ledgers
def _gaussian_eps(mu, delta):
    """Exact eps of a Gaussian mechanism with sensitivity / std = mu (Balle & Wang 2018,
    Thm 8), solved by bisection with scipy, apart from the library's code."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps):
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta

    return brentq(excess, 0.0, 200.0, xtol=1e-12, rtol=1e-12)


def _unchecked(*args, **kwargs):
    """lf.ledgers on a plain participation mapping: it warns that nothing was checked."""
    with pytest.warns(UserWarning, match="not checked; pass the Captured"):
        return lf.ledgers(*args, **kwargs)


def test_fixed_clipping_ledgers_claimed_every_round_sound_with_participation():
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(), Z, C, num_sampled_clients=2)
    claimed, sound = _unchecked(dp, participation={0: [1, 2, 3], 4: [2]}, num_clients=N,
                                rounds=3)
    assert set(claimed) == set(range(N))
    for c in range(N):
        (ev,) = claimed[c].events
        assert (ev.q, ev.sigma, ev.count) == (2 / N, Z, 3)
    # replace-one (the default): a client's clipped update moves the sum by 2C: z/2
    assert [(e.q, e.sigma, e.count) for e in sound[0].events] == [(1.0, Z, 3)]
    assert [(e.q, e.sigma, e.count) for e in sound[4].events] == [(1.0, Z, 1)]
    assert sound[1].steps == 0 and sound[1].epsilon(1e-5) == 0.0
    assert sound[0].epsilon(1e-5) > sound[4].epsilon(1e-5) > 0
    zero = _unchecked(dp, participation={0: [1, 2, 3]}, num_clients=N, rounds=3,
                      neighbouring="zero-out")
    assert [(e.q, e.sigma, e.count) for e in zero.sound[0].events] == [(1.0, Z, 3)]
    add = _unchecked(dp, participation={0: [1, 2, 3]}, num_clients=N, rounds=3,
                     neighbouring="add-remove")
    assert [e.sigma for e in add.sound[0].events] == [Z]  # fixed K: a swap, as replace


def test_relation_is_stated_and_the_readme_figure_is_10_not_4_38():
    """README example: z = 1, one round aggregated, delta 1e-5."""
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(), 1.0, 1.0, num_sampled_clients=1)
    pair = _unchecked(dp, participation={1: [1]}, num_clients=N, rounds=3)
    assert (pair.relation, pair.sampling) == ("replace-one", "fixed-size")
    assert (pair.claimed_relation, pair.claimed_sampling) == ("add-remove", "poisson")
    text = pair.describe(1e-5)
    assert "replace-one" in text and "add-remove" in text and "delta 1e-05" in text
    assert "no amplification" in pair.reason and "2C" in pair.reason
    eps = accounting.tightest_epsilon(pair.sound[1], 1e-5)
    assert eps == pytest.approx(_gaussian_eps(2.0, 1e-5), rel=1e-6)
    assert round(eps, 1) == 10.0
    zero = _unchecked(dp, participation={1: [1]}, num_clients=N, rounds=3,
                      neighbouring="zero-out")
    assert round(accounting.tightest_epsilon(zero.sound[1], 1e-5), 2) == 4.38


def test_sound_ledger_of_a_client_in_every_round_is_flowers_own_accountant():
    """Flower's add-or-remove-one without amplification removes a client's term from a sum
    with a fixed denominator: our zero-out. Its replace-one accountant takes the multiplier
    as given: fed z (what its wrappers add), it under-reports; fed z/2 it is our sound."""
    rounds, delta = 20, 1e-5
    dp = DifferentialPrivacyClientSideFixedClipping(FedAvg(), Z, C, num_sampled_clients=N)
    every = {0: list(range(1, rounds + 1))}

    def flower(relation, sampling, z):
        acc = RdpAccountant(PrivacyConfig(target_delta=delta, population_size=N,
                                          neighboring_relation=relation,
                                          sampling_method=sampling))
        acc.compose(GaussianPrivacyEvent(noise_multiplier=z, sample_size=N,
                                         population_size=N), count=rounds)
        return acc

    acc = flower(NeighboringRelation.ADD_OR_REMOVE_ONE, SamplingMethod.NO_AMPLIFICATION, Z)
    _, sound = _unchecked(dp, participation=every, num_clients=N, rounds=rounds,
                          neighbouring="zero-out")
    on_flowers_orders = PrivacyLedger(sound[0].relation, orders=acc._orders).merge(sound[0])
    assert on_flowers_orders.epsilon(delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-6)
    _, sound = _unchecked(dp, participation=every, num_clients=N, rounds=rounds)
    ours = PrivacyLedger(sound[0].relation, orders=acc._orders).merge(sound[0]).epsilon(delta)
    replace = NeighboringRelation.REPLACE_ONE, SamplingMethod.WITHOUT_REPLACEMENT
    assert ours == pytest.approx(flower(*replace, Z / 2).get_epsilon(delta), rel=1e-6)
    assert flower(*replace, Z).get_epsilon(delta) < ours / 2


def _captured(weights, nodes=None, aggregated=True):
    nodes = tuple(range(len(weights))) if nodes is None else nodes
    rec = lf.RoundRecord(round=1, nodes=nodes, weights=tuple(weights), aggregated=aggregated)
    return lf.Captured([], [], {n: [1] for n in nodes}, {1: rec})


def test_central_ledgers_check_equal_weights_and_the_reply_count():
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(), Z, C, num_sampled_clients=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Captured is checked: no warning
        claimed, sound = lf.ledgers(dp, participation=_captured([3.0, 3.0]), num_clients=N,
                                    rounds=1)
    assert [e.sigma for e in sound[0].events] == [Z] and sound[5].steps == 0
    with pytest.raises(ValueError, match=r"round 1: unequal FedAvg weights \[1.0, 4.0\] "
                                         r"\('num-examples'\).*assumes equal"):
        lf.ledgers(dp, participation=_captured([1.0, 4.0]), num_clients=N, rounds=1)
    with pytest.raises(ValueError, match="round 1: 1 updates were aggregated.*"
                                         "num_sampled_clients=2.*z m / K"):
        lf.ledgers(dp, participation=_captured([1.0]), num_clients=N, rounds=1)
    with pytest.raises(ValueError, match=r"node\(s\) \[1\] carry no 'num-examples'"):
        lf.ledgers(dp, participation=_captured([1.0, None]), num_clients=N, rounds=1)
    lf.ledgers(dp, participation=_captured([1.0], aggregated=False), num_clients=N,
               rounds=1)  # no release
    with pytest.warns(UserWarning, match="holds no round records"):
        lf.ledgers(dp, participation=lf.Captured([], [], {0: [1]}), num_clients=N, rounds=1)
    # local DP noises each upload: FedAvg's weights are post-processing, nothing to check
    mod = LocalDpMod(clipping_norm=C, sensitivity=C, epsilon=1.0, delta=1e-6)
    assert lf.ledgers(mod, participation=_captured([1.0, 4.0]), num_clients=N,
                      rounds=1).sound[1].steps == 1


def test_local_dp_ledgers_claimed_per_round_sound_from_the_noise_it_adds():
    mod = LocalDpMod(clipping_norm=C, sensitivity=C, epsilon=1.0, delta=1e-6)
    pair = lf.ledgers(mod, participation={3: [1, 2]}, num_clients=N, rounds=2)
    claimed, sound = pair
    assert pair.relation == pair.claimed_relation == "replace-one"
    (ev,) = claimed[3].events
    assert (ev.eps, ev.delta, ev.count) == (1.0, 1e-6, 2)
    std = 1.0 * math.sqrt(2 * math.log(1.25 / 1e-6)) / 1.0
    ((q, s, count),) = effective_steps(sound[3])
    assert s == pytest.approx(std / (2 * C)) and count == 2 and q == 1.0
    # sensitivity C is half the clipped update's true sensitivity 2C: one round's real
    # (exact, analytic) eps is above the claimed 1.0
    assert accounting.gaussian_step_epsilon(std / (2 * C), 1e-6, "analytic") > 1.0
    # with sensitivity 2C and eps < 1 the classical calibration holds: real eps <= claim
    ok = lf.classical_gaussian_std(2 * C, 0.5, 1e-6) / (2 * C)
    assert accounting.gaussian_step_epsilon(ok, 1e-6, "analytic") <= 0.5
    assert claimed[0].steps == 0 and sound[0].steps == 0
    # the same convention as the central wrappers: zero-out halves the sensitivity
    zero = lf.ledgers(mod, participation={3: [1, 2]}, num_clients=N, rounds=2,
                      neighbouring="zero-out")
    assert zero.sound[3].events[0].sigma == pytest.approx(std / C)


def test_adaptive_clipping_claims_the_requested_multiplier():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = DifferentialPrivacyServerSideAdaptiveClipping(
            FedAvg(), noise_multiplier=1.2, num_sampled_clients=N, clipped_count_stddev=2.0)
        claimed, sound = lf.ledgers(dp, participation={0: [1]}, num_clients=N, rounds=1)
    assert claimed[0].events[0].sigma == pytest.approx(1.2)
    # the update's Gaussian at the clip moved by the count's upper tail, halved
    # (replace-one); a 0/1 bit moves the count by 1; the tail's delta
    worst = lf.dp_ledgers.adaptive_update_multiplier(
        dp.noise_multiplier, dp.clip_norm_lr, dp.target_clipped_quantile, 2.0, N,
        lf.dp_ledgers.DELTA_CUT)
    gaussians = PrivacyLedger(relation=sound[0].relation)
    for e in sound[0].events[:2]:
        gaussians.record(e)
    assert [s for _, s, _ in effective_steps(gaussians)] == pytest.approx([worst / 2, 2.0])
    assert sound[0].events[2].delta == lf.dp_ledgers.DELTA_CUT
    assert dp.noise_multiplier > 1.2  # Flower moved part of the noise to the count


def test_no_dp_is_infinite_for_participants_only():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        claimed, sound = lf.ledgers(None, participation={1: [1]}, num_clients=3, rounds=1)
        assert math.isinf(sound[1].epsilon(1e-5)) and sound[0].epsilon(1e-5) == 0.0


def test_ledgers_bad_input_is_named():
    with pytest.raises(ValueError, match="dp must be a Flower DP strategy wrapper.*FedAvg"):
        lf.ledgers(FedAvg(), participation={}, num_clients=N, rounds=1)
    with pytest.raises(ValueError, match="participation of client 2"):
        lf.ledgers(None, participation={2: [0]}, num_clients=N, rounds=1)
    with pytest.raises(ValueError, match="LocalDpMod has epsilon=0"):
        lf.ledgers(LocalDpMod(C, C, 0.0, 1e-6), participation={}, num_clients=N, rounds=1)
    with pytest.raises(ValueError, match="num_clients"):
        lf.ledgers(None, participation={}, num_clients=0, rounds=1)
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        lf.ledgers(None, participation={}, num_clients=N, rounds=1, neighbouring="add/remove")
    with pytest.raises(ValueError, match="participation must be a Captured"):
        lf.ledgers(None, participation=[(0, [1])], num_clients=N, rounds=1)
    with pytest.raises(ValueError, match="strategy must be"):
        lf.StrategyRecorder(object(), "/tmp")
    with pytest.raises(ValueError, match="does not exist"):
        lf.load("/nonexistent/leakaudit-taps")
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        lf.ClientRecorder("/tmp", lr=0.0)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        lf.StrategyRecorder(FedAvg(), "/tmp", batch_size=0)


def test_ledgers_take_keywords_after_the_dp():
    new = lf.ledgers(None, participation={1: [1]}, num_clients=3, rounds=1)
    assert new.sound[1].epsilon(1e-5) == math.inf
    with pytest.raises(TypeError, match="positional argument"):
        lf.ledgers(None, {1: [1]}, num_clients=3, rounds=1)
    with pytest.raises(TypeError, match="participation"):
        lf.ledgers(None, num_clients=3, rounds=1)


# ------------------------------------------------------------------------------ the mod alone
@pytest.fixture
def task_identity():
    """Messages need a task identity (the simulation sets one); restored afterwards."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def _wrap(mod, inner):
    return lambda m, c: mod(m, c, inner)


def _train_through(mods, tap_dir, update=1e-3, size=4000, node=7, examples=1):
    """One train message through ``mods`` (outermost first) around a client that moves every
    weight by ``update``; returns what the taps wrote."""
    from flwr.app import (
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )

    msg = Message(content=RecordDict({"arrays": ArrayRecord({"w": torch.zeros(size)}),
                                      "config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=node, message_type=MessageType.TRAIN)
    ctx = Context(run_id=1, node_id=node, node_config={"partition-id": node - 4},
                  state=RecordDict(), run_config={})

    def app(m, c):
        lf.keep_truth(c, torch.ones(1, 1, 2, 2), torch.tensor([1]))
        return Message(RecordDict({"arrays": ArrayRecord({"w": torch.full((size,), update)}),
                                   "metrics": MetricRecord({"num-examples": examples})}),
                       reply_to=m)

    call = app
    for mod in reversed(mods):  # as ClientApp(mods=...) chains them
        call = _wrap(mod, call)
    call(msg, ctx)
    return lf.load(tap_dir)


@pytest.mark.slow
def test_local_dp_noise_is_on_the_upload_the_first_tap_sees(task_identity, tmp_path):
    np.random.seed(0)  # LocalDpMod draws from numpy's global generator
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=1.0, delta=1e-5)
    first = lf.ClientRecorder(tmp_path / "first", lr=0.1, local_steps=1, batch_size=1)
    inner = lf.ClientRecorder(tmp_path / "inner", lr=0.1, local_steps=1, batch_size=1)
    (obs,), (truth,) = _train_through([first, mod, inner], tmp_path / "first").at(1)
    # the std Flower logs for these settings, "local DP noise with 4.8448 stddev"
    assert lf.classical_gaussian_std(1.0, 1.0, 1e-5) == pytest.approx(4.8448, abs=1e-4)
    assert float(obs.tensors[0].std()) == pytest.approx(4.8448, rel=0.05)
    assert obs.client == 3 and torch.equal(truth.labels, torch.tensor([1]))
    # a tap placed inside the mod sees the clear update
    (clear,), _ = lf.load(tmp_path / "inner").at(1)
    assert torch.allclose(clear.tensors[0], torch.full((4000,), 1e-3))


def test_client_taps_record_the_weights_the_ledgers_check(task_identity, tmp_path):
    """Two uploads of round 1 with FedAvg weights 1 and 3 ("num-examples"): the central
    wrapper's ledger refuses them; equal weights pass."""
    dp = DifferentialPrivacyClientSideFixedClipping(FedAvg(), Z, C, num_sampled_clients=2)
    for weights, d in (((1, 3), tmp_path / "unequal"), ((2, 2), tmp_path / "equal")):
        for node, w in zip((7, 8), weights):
            captured = _train_through([lf.ClientRecorder(d, lr=0.1, local_steps=1, batch_size=1)],
                                      d, size=4, node=node, examples=w)
        assert captured.rounds[1].nodes == (7, 8) and captured.rounds[1].sampled is None
        assert captured.rounds[1].weights == tuple(map(float, weights))
        assert captured.participation == {3: [1], 4: [1]}
    with pytest.raises(ValueError, match=r"round 1: unequal FedAvg weights \[1.0, 3.0\]"):
        lf.ledgers(dp, participation=lf.load(tmp_path / "unequal"), num_clients=N, rounds=1)
    pair = lf.ledgers(dp, participation=lf.load(tmp_path / "equal"), num_clients=N, rounds=1)
    assert [e.sigma for e in pair.sound[3].events] == [Z]


# ------------------------------------------------------------------------------ simulation
NODES, LR = 2, 0.1


def _net():
    return models.default_for(data.load("digits"), generator=torch.Generator().manual_seed(0))


def _apps(tap_dir, clip, z):
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import fixedclipping_mod
    from flwr.serverapp import ServerApp

    client = ClientApp(mods=[lf.ClientRecorder(tap_dir, label="client-side", lr=LR,
                                          local_steps=1, batch_size=1), fixedclipping_mod])

    @client.train()
    def train(msg, context):
        pid = int(context.node_config["partition-id"])
        ds = data.load("digits")
        x, y = ds.x_train[pid:pid + 1], ds.y_train[pid:pid + 1]
        lf.keep_truth(context, x, y)
        net = _net()
        net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        loss = torch.nn.functional.cross_entropy(net(x), y)
        with torch.no_grad():
            for p, g in zip(net.parameters(), torch.autograd.grad(loss, net.parameters())):
                p -= LR * g
        return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()),
                                   "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid, context):
        np.random.seed(0)
        base = FedAvg(fraction_train=1.0, min_train_nodes=NODES, min_available_nodes=NODES,
                      fraction_evaluate=0.0)
        dp = DifferentialPrivacyClientSideFixedClipping(base, z, clip, NODES)
        lf.StrategyRecorder(dp, tap_dir, label="client-side", lr=LR, local_steps=1,
                       batch_size=1).start(grid=grid, initial_arrays=ArrayRecord(
                           _net().state_dict()), num_rounds=1, train_config=ConfigRecord())

    return server, client


@pytest.fixture(scope="module")
def flower_run(tmp_path_factory):
    """One round of a real Flower simulation: 2 clients, client-side fixed clipping."""
    import ray
    from flwr.simulation import run_simulation

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors get our apps
    tap_dir = tmp_path_factory.mktemp("taps")
    server, client = _apps(tap_dir, clip=5.0, z=1.0)
    run_simulation(server_app=server, client_app=client, num_supernodes=NODES,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 1, "include_dashboard": False}})
    return lf.load(tap_dir)


@pytest.mark.slow
def test_taps_record_uploads_and_the_aggregate_with_the_truth_apart(flower_run):
    obs1, truth1 = flower_run.at(1)
    obs0, truth0 = flower_run.at(0)
    assert len(obs1) == NODES and len(obs0) == 1
    assert sorted(o.client for o in obs1) == list(range(NODES))
    assert obs0[0].client == lf.AGGREGATE and obs0[0].batch_size == NODES
    assert flower_run.participation == {c: [1] for c in range(NODES)}
    (rec,) = flower_run.rounds.values()  # StrategyRecorder's record of the round
    assert rec.nodes == rec.sampled and len(rec.nodes) == NODES and rec.failures == 0
    assert rec.weights == (1.0,) * NODES and rec.weight_key == "num-examples"
    dp = DifferentialPrivacyClientSideFixedClipping(FedAvg(), 1.0, 5.0, NODES)
    pair = lf.ledgers(dp, participation=flower_run, num_clients=NODES,
                      rounds=1)  # checked: equal, K
    assert [s for _, s, _ in effective_steps(pair.sound[0])] == [0.5]
    ds = data.load("digits")
    for o, t in zip(obs1, truth1):
        assert torch.equal(t.inputs, ds.x_train[o.client:o.client + 1])
        assert not hasattr(o, "inputs")
    assert torch.equal(truth0[0].inputs, torch.cat([t.inputs for t in truth1]))
    # the upload is the client's one SGD step (clip 5 does not bind here)
    net = _net()
    for o in obs1:
        x, y = ds.x_train[o.client:o.client + 1], ds.y_train[o.client:o.client + 1]
        g = torch.autograd.grad(torch.nn.functional.cross_entropy(net(x), y),
                                net.parameters())
        for u, gi in zip(o.tensors, g):
            assert torch.allclose(u, -LR * gi, atol=1e-6)
    # the aggregate is their mean plus the server's noise N(0, (z C / K)^2)
    mean = [sum(o.tensors[i] for o in obs1) / NODES for i in range(len(obs1[0].tensors))]
    noise = torch.cat([(a - m).ravel() for a, m in zip(obs0[0].tensors, mean)])
    assert float(noise.std()) == pytest.approx(1.0 * 5.0 / NODES, rel=0.1)


@pytest.mark.slow
def test_upload_leaks_and_the_aggregate_resists(flower_run):
    """Client-side fixed clipping: the upload (point 1) is only clipped, the noise comes at
    the server, so iDLG rebuilds the client's example from it; the aggregate resists."""
    obs, truths = flower_run.observations, flower_run.truths
    report = leakaudit.audit_observations(obs, attacks=("idlg",), model=_net(), truths=truths,
                                          input_shape=(1, 28, 28), num_classes=10, engine="serial",
                                          progress=False, max_iterations=20)
    assert report.resilience() == {"client-side": {1: False, 0: True}}
    assert all(c["success"] for c in report.cells if c["point"] == 1)


def test_both_flower_import_paths_are_accepted():
    """Flower 1.41 exports LocalDpMod and the DP wrappers twice (flwr.clientapp /
    flwr.serverapp and flwr.client / flwr.server) as different classes with the same fields:
    each gives the same ledgers (the older path was refused with a ValueError)."""
    from flwr.client.mod import LocalDpMod as OldLocalDpMod
    from flwr.server.strategy import DifferentialPrivacyClientSideAdaptiveClipping as OldCA
    from flwr.server.strategy import DifferentialPrivacyClientSideFixedClipping as OldCF
    from flwr.server.strategy import DifferentialPrivacyServerSideFixedClipping as OldSF
    from flwr.server.strategy import FedAvg as OldFedAvg

    assert OldLocalDpMod is not LocalDpMod
    assert OldSF is not DifferentialPrivacyServerSideFixedClipping
    part = {0: [1, 2], 3: [2]}
    for new, old in (
            (LocalDpMod(C, C, 1.0, 1e-6), OldLocalDpMod(C, C, 1.0, 1e-6)),
            (DifferentialPrivacyServerSideFixedClipping(FedAvg(), Z, C, 2),
             OldSF(OldFedAvg(), Z, C, 2)),
            (DifferentialPrivacyClientSideFixedClipping(FedAvg(), Z, C, 2),
             OldCF(OldFedAvg(), Z, C, 2))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = lf.ledgers(new, participation=part, num_clients=N, rounds=2)
            b = lf.ledgers(old, participation=part, num_clients=N, rounds=2)
        assert a.reason == b.reason
        for c in range(N):
            assert a.sound[c].epsilon(1e-5) == b.sound[c].epsilon(1e-5)
            assert a.claimed[c].epsilon(1e-5) == b.claimed[c].epsilon(1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adaptive = OldCA(OldFedAvg(), noise_multiplier=1.2, num_sampled_clients=N,
                         clipped_count_stddev=2.0)
        pair = lf.ledgers(adaptive, participation={0: [1]}, num_clients=N, rounds=1)
    # the update's and the count's Gaussians, the count's tail as a pure delta
    assert len(pair.sound[0].events) == 3
