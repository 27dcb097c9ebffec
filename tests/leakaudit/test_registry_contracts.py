"""Contract tests over the registries: every registered defense and every
registered attack goes through the same checks, so one added later cannot skip them.

Defenses: the sound ledger records exactly the releases the defense draws (each noise draw
through :mod:`leakaudit.defenses.ops` one ledger release: typed Gaussian/Laplace where the
scale is public, an infinite-eps release where it depends on the data; a defense that draws
nothing records each upload as a release without guarantee); the empirical audit's
declarations (:meth:`Defense.audit_bound` and friends) hold. Attacks: each rebuilds an
undefended example at a small budget, and imports only what the layers allow.
"""

import ast
import importlib
import math
from pathlib import Path

import pytest
import torch
from conftest import ReleaseCounter

import accounting as A
from leakaudit import attacks, fl, metrics, models
from leakaudit import defenses as D
from leakaudit.defenses import ops

TINY = dict(dataset="digits", clients=3, clients_per_round=3, rounds=2, local_steps=2,
            batch_size=8, progress=False, seed=0, eval_every=2)
#: torch calls that draw randomness (a defense declared batched draws noise only via ops)
RANDOM_CALLS = {"randn", "rand", "randint", "randperm", "normal", "normal_", "bernoulli",
                "multinomial", "exponential_", "uniform_", "randn_like", "rand_like"}
#: what an attack module may import from the project (attacks never import fl, defenses,
#: the audits, the CLI or interop: the layers of tests/project/test_layout.py)
ATTACK_FORBIDDEN = ("leakaudit.fl", "leakaudit.defenses", "leakaudit.auditing",
                    "leakaudit.empirical", "leakaudit.interop", "leakaudit.cli",
                    "leakaudit.api", "benchmarks")


@pytest.fixture(scope="module")
def tiny_runs():
    """Each registered defense's tiny run with its noise draws counted, simulated on first
    use only (``tiny_runs(name)``) and shared by the tests below: a ``-k`` that selects one
    defense simulates that defense only."""
    cache: dict = {}
    real = {"gaussian": ops.gaussian_like, "laplace": ops.laplace_like}

    def tiny_run(name: str):
        if name not in cache:
            counter = ReleaseCounter()

            def wrap(kind):
                def counted(*args, **kwargs):
                    counter.draws[kind] += 1
                    return real[kind](*args, **kwargs)
                return counted

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(ops, "gaussian_like", wrap("gaussian"))
                mp.setattr(ops, "laplace_like", wrap("laplace"))
                cache[name] = (fl.simulate(None, defense=D.get(name), **TINY), counter.draws)
        return cache[name]

    return tiny_run


@pytest.mark.parametrize("name", D.available())
def test_every_defense_ledger_records_exactly_the_releases_it_draws(name, tiny_runs):
    run, draws = tiny_runs(name)
    held = ReleaseCounter.in_ledgers(run.sound)
    uploads = sum(len(u) for u in run.uploads)
    assert uploads > 0 and sum(held.values()) > 0, (name, held)
    for kind in ("gaussian", "laplace"):
        # accounted at its public scale, or (data-dependent scale) not as that kind at all
        assert held[kind] in (draws[kind], 0), (name, kind, held, draws)
    if sum(draws.values()) == 0:
        assert held["other"] == uploads, (name, held)   # each upload: no guarantee
    else:
        untyped = sum(draws[k] - held[k] for k in draws)
        assert held["other"] == untyped, (name, held, draws)   # one inf release per draw
    if held["other"]:
        assert math.isinf(run.epsilon(1e-5, "sound")), name
    else:
        assert math.isfinite(run.epsilon(1e-5, "sound")), name


def _draws_outside_ops(module) -> list[str]:
    """torch random calls written in a defense's own module (not through ops)."""
    tree = ast.parse(Path(module.__file__).read_text())
    return [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr in RANDOM_CALLS]


@pytest.mark.parametrize("name", D.available())
def test_every_defense_audit_declarations_hold(name, tiny_runs):
    d = D.get(name)
    bound = d.audit_bound()
    assert isinstance(bound, float) and math.isfinite(bound) and bound > 0, name
    batched = [d.audit_batched(p) for p in (0, 1, 2)]
    assert all(b in (True, False, None) for b in batched), (name, batched)
    if all(batched):
        # batched trials need every draw through ops (a trial dimension in ops.trials)
        assert _draws_outside_ops(importlib.import_module(type(d).__module__)) == [], name
        _, draws = tiny_runs(name)
        assert d.level == "none" or sum(draws.values()) > 0, name
    model = models.lenet(1, 28, 10, generator=torch.Generator().manual_seed(0))
    d.audit_setup([p.detach().clone() for p in model.parameters()], bound)
    side = d.audit_side_ledgers(0)
    assert isinstance(side, dict), name
    assert all(isinstance(k, str) and isinstance(v, A.PrivacyLedger)
               for k, v in side.items()), (name, side)
    assert d.level in ("none", "instance", "client"), (name, d.level)
    assert d.relation in ("add-remove", "replace-one", "zero-out"), (name, d.relation)
    assert d.describe().startswith(d.name), name


@pytest.fixture(scope="module")
def undefended_leak(digits):
    """One digit, LeNet-Sigmoid with U(-0.5, 0.5) weights, its gradient (no defense)."""
    model = models.lenet(1, 28, 10, generator=torch.Generator().manual_seed(0))
    x, y = digits.x_train[:1], digits.y_train[:1]
    return model, fl.batch_gradient(model, x, y), x, y


#: attacks that answer in one pass from what they declare they need (no optimisation: the
#: comparison with a one-step start does not apply): the exact tier needs a biased linear
#: first layer (an MLP), the prior-aware attack a candidate set holding the target
ONE_PASS = ("exact", "prior-aware")


def _leak_for(name, digits, undefended_leak):
    """The undefended leak and options an attack declares it needs."""
    if name == "exact":
        model = models.mlp(784, 10, (8,), "relu", generator=torch.Generator().manual_seed(0))
        x, y = digits.x_train[:1], digits.y_train[:1]
        return model, fl.batch_gradient(model, x, y), x, y, {}
    model, grads, x, y = undefended_leak
    if name == "prior-aware":  # 12 candidates, the target among them (not first)
        cand, labels = digits.x_train[:12].flip(0), digits.y_train[:12].flip(0)
        return model, grads, x, y, {"candidates": cand, "candidate_labels": labels,
                                    "noise_std": 1e-4}
    return model, grads, x, y, {}


def _budget(name: str) -> int:
    """A small budget at which the attack should rebuild one undefended digit: L-BFGS
    attacks converge in tens of steps, the Adam-based cosine ones (IG family) need more."""
    opts = attacks.get(name).defaults
    return 300 if "tv_weight" in opts and opts.get("method", "cosine") == "cosine" else 30


@pytest.mark.slow
@pytest.mark.parametrize("name", attacks.available())
def test_every_attack_rebuilds_an_undefended_example(name, digits, undefended_leak):
    model, grads, x, y, options = _leak_for(name, digits, undefended_leak)
    rec = attacks.reconstruct(name, model, grads, input_shape=(1, 28, 28), num_classes=10,
                              max_iterations=_budget(name), seed=0, **options)
    assert rec.attack == name and rec.inputs.shape == x.shape
    # rebuilt: the L-BFGS attacks to MSE <= 0.01 (the audit's success), the IG family to
    # within 0.05 of it (its TV prior blurs a digit), far below the start
    mse = metrics.mse(rec.inputs, x)
    assert mse < (0.05 if _budget(name) > 30 else 0.01), (name, mse)
    assert rec.labels.tolist() == y.tolist(), name
    if name not in ONE_PASS:
        start = attacks.reconstruct(name, model, grads, input_shape=(1, 28, 28),
                                    num_classes=10, max_iterations=1, seed=0, **options)
        assert mse < 0.25 * metrics.mse(start.inputs, x), name


@pytest.mark.parametrize("name", attacks.available())
def test_every_attack_imports_only_what_the_layers_allow(name):
    module = importlib.import_module(type(attacks.get(name)).__module__)
    tree = ast.parse(Path(module.__file__).read_text())
    package = module.__name__.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [f"{target}.{a.name}" for a in node.names] + [target]
            else:
                names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for full in names:
            assert not full.startswith(ATTACK_FORBIDDEN), (name, module.__name__, full)
