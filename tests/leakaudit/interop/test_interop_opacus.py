"""leakaudit.interop.opacus: the Recorder on a real Opacus run, the accountant's ledger."""

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from _extras import effective_steps as _effective
from _extras import require

opacus = require("opacus", "opacus")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import accounting  # noqa: E402
import leakaudit  # noqa: E402
from leakaudit import models  # noqa: E402
from leakaudit.interop.opacus import Recorder, ledger_from_accountant, ledgers  # noqa: E402


def _opacus_run(ds, noise_multiplier, max_grad_norm, n=2, lr=0.1, accountant="rdp"):
    """Opacus DP-SGD on the first n digits at batch size 1, tapped; returns tap, engine."""
    net = models.default_for(ds, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(ds.x_train[:n], ds.y_train[:n]), batch_size=1)
    engine = opacus.PrivacyEngine(accountant=accountant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure_mode off, noise 0
        model, opt, loader = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=lr),
            data_loader=loader, noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm, poisson_sampling=False,
            noise_generator=torch.Generator().manual_seed(1))
    with Recorder(opt, model) as tap:
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return tap, engine


def _audit(ds, tap, label, max_iterations):
    for o in tap.observations:
        o.defense = label
    return leakaudit.audit_observations(tap.observations, attacks=("idlg",),
                                        model=models.default_for(ds), truths=tap.truths,
                                        input_shape=ds.input_shape, num_classes=ds.num_classes,
                                        engine="serial", progress=False,
                                        max_iterations=max_iterations)


@pytest.mark.slow
def test_idlg_rebuilds_examples_without_noise_or_clipping(digits):
    tap, _ = _opacus_run(digits, noise_multiplier=0.0, max_grad_norm=1e6)
    report = _audit(digits, tap, "opacus sigma=0", max_iterations=20)
    assert len(report.cells) == 2
    for cell in report.cells:
        assert cell["success"] and cell["mse"] < 1e-3, cell["mse"]
        assert cell["tau"] <= 10  # L-BFGS steps to success: well within the budget
        assert cell["label_accuracy"] == 1.0


@pytest.mark.slow
def test_idlg_fails_with_noise_multiplier_1_and_clip_1(digits):
    tap, _ = _opacus_run(digits, noise_multiplier=1.0, max_grad_norm=1.0)
    report = _audit(digits, tap, "opacus sigma=1", max_iterations=20)  # 2x what it took
    assert report.resilience() == {"opacus sigma=1": {2: True}}
    assert all(c["mse"] > 0.1 for c in report.cells)


def test_tap_records_the_applied_step_and_keeps_the_truth_apart(digits):
    lr = 0.1
    tap, engine = _opacus_run(digits, noise_multiplier=1.0, max_grad_norm=1.0, n=3, lr=lr)
    obs, truths = tap.observations, tap.truths
    assert [o.local_step for o in obs] == [0, 1, 2] and len(truths) == 3
    assert all(o.batch_size == 1 and o.point == 2 and o.lr == lr for o in obs)
    assert not hasattr(obs[0], "inputs") and not hasattr(obs[0], "labels")
    # plain SGD: the weights after step i are those before it minus lr x the observed tensor
    for before, after in zip(obs, obs[1:]):
        for name, t in zip(before.weights, before.tensors):
            assert torch.allclose(after.weights[name], before.weights[name] - lr * t,
                                  atol=1e-6)
    # the first step starts from the model's initial weights, named as in the model
    init = models.default_for(digits, generator=torch.Generator().manual_seed(0))
    assert list(obs[0].weights) == [n for n, _ in init.named_parameters()]
    for n, p in init.named_parameters():
        assert torch.equal(obs[0].weights[n], p.detach())
    for i, tr in enumerate(truths):
        assert torch.equal(tr.inputs, digits.x_train[i:i + 1])
        assert torch.equal(tr.labels, digits.y_train[i:i + 1])
    # the accountant's own hook still ran after ours: one step each
    assert engine.accountant.history == [(1.0, 1 / 3, 3)]


def test_tap_without_model_records_observations_only(digits):
    net = models.default_for(digits)
    loader = DataLoader(TensorDataset(digits.x_train[:2], digits.y_train[:2]), batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = opacus.PrivacyEngine().make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0,
            poisson_sampling=False)
    with Recorder(opt, steps=[1]) as tap:
        for _ in range(2):
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
    assert [o.local_step for o in tap.observations] == [1] and tap.truths == []
    assert list(tap.observations[0].weights) == ["param0", "param1", "param2", "param3",
                                                 "param4", "param5", "param6", "param7"]
    assert tap.observations[0].batch_size == 2
    assert opt.step_hook is not None and opt.step_hook != tap._on_step  # restored


def _accountant(kind, schedule):
    cls = {"rdp": opacus.accountants.RDPAccountant, "prv": opacus.accountants.PRVAccountant,
           "gdp": opacus.accountants.GaussianAccountant}[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GDP: "experimental"
        acc = cls()
    for sigma, q, steps in schedule:
        for _ in range(steps):
            acc.step(noise_multiplier=sigma, sample_rate=q)
    return acc


SCHEDULE = [(1.1, 0.01, 600), (0.9, 0.02, 300)]


@pytest.mark.slow
def test_rdp_ledger_gives_opacus_eps():
    acc = _accountant("rdp", SCHEDULE)
    ledger = ledger_from_accountant(acc)
    assert [(e.sigma, e.q, e.count) for e in ledger.events] == SCHEDULE
    for delta in (1e-5, 1e-7):
        ours = ledger.epsilon(delta, "rdp")
        assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-6)
    # our default orders and the PRV bracket give tighter sound values next to it
    fine = ledger_from_accountant(acc, orders="default").epsilon(1e-5, "rdp")
    assert fine <= acc.get_epsilon(1e-5) * (1 + 1e-9)
    if "pld" in accounting.METHODS:  # our PLD bound next to it: tighter, above PRV's floor
        lower, _, _ = ledger.epsilon_bounds(1e-5, eps_error=0.01)
        assert lower <= ledger.epsilon(1e-5, "pld") <= acc.get_epsilon(1e-5)


def test_prv_ledger_gives_opacus_eps():
    acc = _accountant("prv", SCHEDULE)
    ledger = ledger_from_accountant(acc)
    delta = 1e-5
    lower, _, upper = ledger.epsilon_bounds(delta, eps_error=0.01, delta_error=delta / 1000)
    assert upper == pytest.approx(acc.get_epsilon(delta), rel=1e-6)
    assert lower < upper < ledger.epsilon(delta, "rdp")


def test_gdp_ledger_is_sound_where_opacus_clt_under_reports():
    acc = _accountant("gdp", [(1.1, 0.01, 1000)])
    ledger = ledger_from_accountant(acc)
    assert [(e.sigma, e.q, e.count) for e in ledger.events] == [(1.1, 0.01, 1000)]
    lower, _, upper = ledger.epsilon_bounds(1e-5, eps_error=0.01)
    # the CLT answer is below even PRV's lower bound here: GDP is not a bound
    assert acc.get_epsilon(1e-5) < lower <= upper <= ledger.epsilon(1e-5, "rdp")


def test_the_ledger_calls_take_keywords_after_the_first_argument():
    acc = _accountant("rdp", [(1.1, 0.01, 10)])
    with pytest.raises(TypeError, match="positional argument"):
        ledger_from_accountant(acc, "default")
    with pytest.raises(TypeError, match="data_loader"):
        ledgers(acc)


def test_bad_input_is_named():
    net = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="DPOptimizer.*torch.optim.sgd.SGD"):
        Recorder(torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="RDPAccountant, PRVAccountant or GaussianAccountant"
                                         ".*builtins.dict"):
        ledger_from_accountant({"history": []})
    acc = opacus.accountants.RDPAccountant()
    acc.history = [(1.0, 0.01)]
    with pytest.raises(ValueError, match=r"history\[0\]"):
        ledger_from_accountant(acc)


def test_observations_of_mixed_shapes_are_refused(digits):
    tap, _ = _opacus_run(digits, noise_multiplier=1.0, max_grad_norm=1.0, n=1)
    obs = tap.observations[0]
    other = type(obs)(**{**obs.__dict__, "tensors": [t[..., :1] for t in obs.tensors]})
    with pytest.raises(ValueError, match=r"observations\[1\] has tensors of shapes"):
        leakaudit.audit_observations(
            [obs, other], model=models.default_for(digits), truths=tap.truths * 2,
            input_shape=digits.input_shape, num_classes=10, engine="serial", progress=False)
    with pytest.raises(ValueError, match="truths must hold one GroundTruth per observation"):
        leakaudit.audit_observations(
            [obs], model=models.default_for(digits), truths=[],
            input_shape=digits.input_shape, num_classes=10, engine="serial", progress=False)


def test_audit_observations_resumes_from_its_results_file(digits, tmp_path):
    tap, _ = _opacus_run(digits, noise_multiplier=1.0, max_grad_norm=1.0, n=1)
    path = tmp_path / "cells.jsonl"
    kwargs = dict(model=models.default_for(digits), truths=tap.truths,
                  input_shape=digits.input_shape, num_classes=10, engine="serial",
                  progress=False, max_iterations=2, results=str(path))
    first = leakaudit.audit_observations(tap.observations, attacks=("idlg", "dlg"), **kwargs)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    again = leakaudit.audit_observations(tap.observations, attacks=("idlg", "dlg"), **kwargs)
    assert path.read_text().splitlines() == lines  # nothing ran again
    assert again.cells == first.cells
    other = [type(o)(**{**o.__dict__, "lr": 0.2}) for o in tap.observations]
    leakaudit.audit_observations(other, attacks=("idlg",), **kwargs)  # other observations: new run
    assert len(path.read_text().splitlines()) == 3


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_import_leakaudit_does_not_import_opacus_or_flower():
    code = ("import sys, leakaudit, leakaudit.interop; leakaudit.audit_observations; "
            "print(sorted(m for m in ('opacus', 'flwr') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_epsilon_is_finite_and_consistent_for_a_tapped_run(digits):
    _, engine = _opacus_run(digits, noise_multiplier=1.0, max_grad_norm=1.0, n=2)
    ledger = ledger_from_accountant(engine.accountant)
    eps = ledger.epsilon(1e-5)
    assert math.isfinite(eps) and eps == pytest.approx(engine.accountant.get_epsilon(1e-5),
                                                       rel=1e-6)


def test_tap_with_poisson_sampling_keeps_each_batch_with_its_step(digits):
    net = models.default_for(digits)
    data_ = TensorDataset(digits.x_train[:8], digits.y_train[:8])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = opacus.PrivacyEngine().make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=DataLoader(data_, batch_size=2), noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=True,
            noise_generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)  # Opacus's Poisson sampler draws from torch's default generator
    with Recorder(opt, model) as tap:
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert len(tap.observations) == 4  # 1 / sample rate steps
    for obs, truth in zip(tap.observations, tap.truths):
        assert truth.inputs.shape[0] == obs.batch_size == truth.labels.shape[0]
        for x in truth.inputs:  # each kept example is one of the data set's
            assert any(torch.equal(x, d) for d in digits.x_train[:8])


def test_an_empty_poisson_batch_is_noise_only_and_the_rest_audits(digits):
    """Opacus's DPDataLoader can draw an empty batch (a legal release: noise only);
    examples/opacus_audit.py --poisson crashed on it in audit_observations ("truths[1] holds
    0 examples"). The Recorder keeps it apart; every observation has an example behind it."""
    net = models.default_for(digits, generator=torch.Generator().manual_seed(0))
    data_ = TensorDataset(digits.x_train[:3], digits.y_train[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = opacus.PrivacyEngine().make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=DataLoader(data_, batch_size=1), noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=True,
            noise_generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)  # the sampler's draws: this seed gives empty batches at steps 1, 2
    with Recorder(opt, model) as rec:
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert [o.local_step for o in rec.noise_only] == [1, 2]
    assert all(o.batch_size == 0 for o in rec.noise_only)
    noise = torch.cat([t.flatten() for t in rec.noise_only[0].tensors])
    assert noise.abs().max() > 0  # the step was released: noise only
    assert [o.local_step for o in rec.observations] == [0]
    assert len(rec.truths) == 1 and all(o.batch_size >= 1 for o in rec.observations)
    report = _audit(digits, rec, "opacus poisson", max_iterations=1)
    assert len(report.cells) == 1


# ------------------------------------------------------------------------------ ledgers
def _tiny_run(loader_kwargs, *, n, poisson, sigma=1.0, epochs=1, accountant="rdp"):
    """Opacus DP-SGD on a linear model over n random points; returns engine, loader."""
    g = torch.Generator().manual_seed(0)
    net = torch.nn.Linear(4, 2)
    data_ = TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g))
    engine = opacus.PrivacyEngine(accountant=accountant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=DataLoader(data_, **loader_kwargs), noise_multiplier=sigma,
            max_grad_norm=1.0, poisson_sampling=poisson,
            noise_generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)  # Opacus's Poisson sampler and RandomSampler draw from it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: backward hooks on inputs without grad
        for _ in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
    return engine, loader


def _gaussian_eps(mu, delta):
    """Exact eps of a Gaussian mechanism with sensitivity / std = mu (Balle & Wang 2018,
    Thm 8), solved here by bisection with scipy, apart from the library's code."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps):
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta

    return brentq(excess, 0.0, 200.0, xtol=1e-12, rtol=1e-12)


def test_poisson_run_sound_ledger_is_opacus_history():
    engine, loader = _tiny_run(dict(batch_size=2), n=8, poisson=True, epochs=2)
    pair = ledgers(engine, data_loader=loader)
    claimed, sound = pair  # unpacks as a pair
    assert pair.claimed is claimed and pair.sound is sound
    history = engine.accountant.history
    assert sum(c for _, _, c in history) == 8 and history[0][1] == 0.25
    assert [(e.sigma, e.q, e.count) for e in sound.events] == [tuple(h) for h in history]
    assert [(e.sigma, e.q, e.count) for e in claimed.events] == [tuple(h) for h in history]
    for delta in (1e-5, 1e-7):
        assert sound.epsilon(delta, "rdp") == pytest.approx(
            engine.accountant.get_epsilon(delta), rel=1e-9)
    assert (pair.relation, pair.sampling, pair.reason) == ("add-remove", "poisson", "")
    assert "add-remove" in pair.describe(1e-5) and "delta 1e-05" in pair.describe(1e-5)
    # Poisson is accounted under add/remove (or zero-out): replace-one is refused
    with pytest.raises(ValueError, match="relation='replace-one' with Poisson"):
        ledgers(engine, data_loader=loader, relation="replace-one")
    assert ledger_from_accountant(engine.accountant, data_loader=loader).events == claimed.events


@pytest.mark.parametrize("shuffle, n, batch, epochs", [(False, 3, 1, 1), (True, 8, 2, 2)])
def test_shuffled_or_ordered_run_sound_is_one_gaussian_per_pass(shuffle, n, batch, epochs):
    """Fixed-size batches (in order, or from a shuffled permutation): each example in one
    step per pass, no amplification; replace-one: multiplier sigma/2 per pass."""
    sigma, delta = 1.0, 1e-5
    engine, loader = _tiny_run(dict(batch_size=batch, shuffle=shuffle), n=n, poisson=False,
                               sigma=sigma, epochs=epochs)
    pair = ledgers(engine, data_loader=loader)
    steps = epochs * n // batch
    assert engine.accountant.history == [(sigma, batch / n, steps)]  # Opacus's claim
    assert [(e.q, e.sigma, e.count) for e in pair.claimed.events] == [(batch / n, sigma, steps)]
    assert _effective(pair.sound) == [(1.0, sigma / 2, epochs)]
    assert pair.relation == "replace-one"
    assert pair.sampling == ("shuffle" if shuffle else "sequential")
    assert "not Poisson" in pair.reason and "sigma/2" in pair.reason
    claimed_eps = accounting.tightest_epsilon(pair.claimed, delta)
    sound_eps = accounting.tightest_epsilon(pair.sound, delta)
    # the hand computation: E Gaussians of sensitivity 2C, std sigma C: mu = 2 sqrt(E)/sigma
    assert sound_eps == pytest.approx(_gaussian_eps(2 * math.sqrt(epochs) / sigma, delta),
                                      rel=1e-6)
    assert sound_eps > claimed_eps
    # zeroing an example instead of replacing it moves the sum by C: multiplier sigma
    zero = ledgers(engine, data_loader=loader, relation="zero-out")
    assert [(e.q, e.sigma, e.count) for e in zero.sound.events] == [(1.0, sigma, epochs)]
    assert accounting.tightest_epsilon(zero.sound, delta) < sound_eps
    # ledger_from_accountant refuses to copy the Poisson rate for this loader
    with pytest.raises(ValueError, match="data_loader draws fixed-size batches.*not Poisson"):
        ledger_from_accountant(engine.accountant, data_loader=loader)
    if n == 3:  # the example's loader: 3 steps at sigma 1, batch 1, in order
        assert sound_eps == pytest.approx(9.997, abs=1e-3)


def test_weighted_sampler_accounts_every_step_at_batch_multiplicity():
    sampler = torch.utils.data.WeightedRandomSampler([1.0, 2.0, 3.0, 4.0], num_samples=4,
                                                     generator=torch.Generator().manual_seed(0))
    engine, loader = _tiny_run(dict(batch_size=2, sampler=sampler), n=4, poisson=False)
    pair = ledgers(engine, data_loader=loader)
    # every one of the 2 steps: a batch of 2 can hold one example twice: sensitivity 4C
    assert _effective(pair.sound) == [(1.0, 0.25, 2)]
    assert pair.sampling == "arbitrary" and "WeightedRandomSampler" in pair.reason
    engine, loader = _tiny_run(dict(batch_size=2, shuffle=True), n=4, poisson=False)
    shuffled = ledgers(engine, data_loader=loader)
    assert accounting.tightest_epsilon(pair.sound, 1e-5) > accounting.tightest_epsilon(
        shuffled.sound, 1e-5)


def test_passes_take_the_smallest_noise_of_each_pass():
    from leakaudit.interop.opacus import pass_sigmas

    rng = np.random.default_rng(0)
    for _ in range(50):
        history = [(float(s), 0.1, int(c)) for s, c in zip(rng.uniform(0.5, 2, 4),
                                                             rng.integers(0, 9, 4))]
        per_pass = int(rng.integers(1, 6))
        flat = [s for s, _, c in history for _ in range(c)]
        brute = [min(flat[i:i + per_pass]) for i in range(0, len(flat), per_pass)]
        runs = pass_sigmas(history, per_pass, None)
        assert [s for s, k in runs for _ in range(k)] == brute


def test_epochs_and_bad_input_are_named():
    engine, loader = _tiny_run(dict(batch_size=1), n=3, poisson=False, epochs=2)
    # gradient accumulation makes more passes than steps / len(loader): epochs= says so
    assert ledgers(engine, data_loader=loader, epochs=3).sound.events[0].count == 3
    with pytest.raises(ValueError, match="epochs=1 passes of 3 batches cannot hold the 6"):
        ledgers(engine, data_loader=loader, epochs=1)
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        ledgers(engine, data_loader=loader, epochs=0)
    with pytest.raises(ValueError, match="relation must be one of"):
        ledgers(engine, data_loader=loader, relation="add/remove")
    with pytest.raises(ValueError, match="data_loader must be a torch DataLoader"):
        ledgers(engine, data_loader=list(loader))
    with pytest.raises(ValueError, match="engine must be an Opacus PrivacyEngine"):
        ledgers(object(), data_loader=loader)
    # add/remove shifts every later batch: every step at multiplicity B
    assert [(s, c) for _, s, c in _effective(
        ledgers(engine, data_loader=loader, relation="add-remove").sound)] == [(0.5, 6)]


def test_ledgers_work_with_prv_accountant_and_pickle():
    import pickle

    engine, loader = _tiny_run(dict(batch_size=2), n=4, poisson=False, accountant="prv")
    pair = ledgers(engine.accountant, data_loader=loader)  # the accountant alone also works
    again = pickle.loads(pickle.dumps(pair))
    assert again.relation == pair.relation and again.reason == pair.reason
    assert [s for _, s, _ in _effective(again.sound)] == [0.5]
