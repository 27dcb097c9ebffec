"""The auditor without blind spots: statistics that see correlated noise, worst-case
backgrounds, any user code, and names in mapping arguments checked."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch

from leakaudit import defenses as D
from leakaudit.defenses import Defense, ops
from leakaudit.defenses.base import untrusted_hook
from leakaudit.empirical import audit_release, game, privacy_audit
from leakaudit.empirical.mutants import CORRECT, MUTANTS, SHAPES

SMALL = ((4, 1, 3, 3), (4,), (10, 16), (10,))


def _audit(defense, trials: int, seed: int = 0, **kw) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # users' code does not declare batching
        return audit_release(defense, point=2, trials=trials, seed=seed, shapes=SHAPES,
                             background=8, **kw).rows()[0]


# ------------------------------------------------------------------ names in mappings
def test_a_misspelled_defense_in_defense_params_is_refused_naming_it():
    # it used to audit fed-cdp's defaults silently
    with pytest.raises(ValueError, match="'fed-cpd'"):
        privacy_audit(["fed-cdp"], trials=200, defense_params={"fed-cpd": {"sigma": 1.0}})
    with pytest.raises(ValueError, match="'fed-sdp-server' names no defense being audited"):
        privacy_audit(["fed-cdp"], trials=200, defense_params={"fed-sdp-server": {}})
    with pytest.raises(ValueError, match="defense_params\\['fed-cdp'\\]"):
        privacy_audit(["fed-cdp"], trials=200, defense_params={"fed-cdp": 1.0})
    with pytest.raises(ValueError, match="'canary'"):
        privacy_audit(["fed-cdp"], trials=200, canary=["dirac"])


# ------------------------------------------------------------------------ any user code
def _with_overridden_hooks(d: Defense) -> Defense:
    """The defense as a user's subclass whose every release hook calls the shipped one and
    checks its shapes the way users do (``reshape`` to the parameter's shape): right in
    training, wrong under the audit's batching (a leading trial dimension), which is why an
    inherited ``batched_trials = True`` must not be trusted."""
    cls = type(d)

    def privatize_batch(self, grads, ctx):
        out = cls.privatize_batch(self, grads, ctx)
        return [o.reshape(g.shape[1:]) for o, g in zip(out, grads)]

    def privatize_update(self, update, ctx):
        out = cls.privatize_update(self, update, ctx)
        return [o.reshape(u.shape) for o, u in zip(out, update)]

    def sanitize_update(self, update, ctx):
        out = cls.sanitize_update(self, update, ctx)
        return [o.reshape(u.shape) for o, u in zip(out, update)]

    sub = type(f"User{cls.__name__}", (cls,), {
        "privatize_batch": privatize_batch, "privatize_update": privatize_update,
        "sanitize_update": sanitize_update})
    out = copy.copy(d)
    out.__class__ = sub
    return out


def test_an_inherited_batching_declaration_is_never_trusted_past_an_overridden_hook():
    fed_cdp = D.get("fed-cdp")
    assert untrusted_hook(type(fed_cdp)) is None
    assert untrusted_hook(type(D.get("fed-alpha-cdp"))) is None   # declares its own
    user = _with_overridden_hooks(fed_cdp)
    assert user.audit_untrusted_hook() == f"{type(user).__name__}.privatize_batch"
    assert user.audit_batched(2) is True                  # inherited ...
    with pytest.warns(UserWarning, match="overrides a hook"):
        assert game.vectorisable(user, 2) is False        # ... and not trusted

    class Declared(type(fed_cdp)):
        batched_trials = True

        def privatize_batch(self, grads, ctx):
            return super().privatize_batch(grads, ctx)
    assert untrusted_hook(Declared) is None               # its own declaration


@pytest.mark.slow
@pytest.mark.parametrize("name", D.available())
def test_a_user_subclass_of_every_shipped_defense_is_audited_not_refused(name):
    # a user debugging a variant of a shipped defense overrides its hook: the audit runs it
    # (one trial per call where the declaration was inherited) instead of raising
    # RuntimeError "declares audit_batched"
    d = D.get(name)
    user = _with_overridden_hooks(d)
    point = next(p for p in (2, 1, 0) if game.releases_at(d, p))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = audit_release(user, point=point, trials=100, shapes=SMALL, background=4,
                          canaries=["dirac"], statistic="projection").rows()[0]
    assert r["eps_lower"] >= 0.0 and r["point"] == point
    if any(d.audit_batched(p) for p in (point,)):
        assert any("overrides a hook" in str(w.message) for w in caught), name


# ---------------------------------------------------------- statistics: correlated noise
@pytest.mark.slow
def test_the_subspace_sees_noise_whose_tensor_sums_carry_none():
    # each coordinate of the centred noise is N(0, ~sigma^2 C^2); the per-tensor sum has no
    # noise at all: the subspace statistic (Fisher's direction in the noise's covariance)
    # separates the worlds without error, the projection on the canary does not
    r = _audit(MUTANTS["centred-noise"].factory(), 300, canaries=["dirac"])
    assert r["sound_violated"] and r["statistic"] == "subspace", r
    assert r["noise_floor"] < 1e-3 and r["eps_lower"] > 3.0
    proj = _audit(MUTANTS["centred-noise"].factory(), 300, canaries=["dirac"],
                  statistic=["projection", "tensor", "coordinate", "energy", "llr"])
    assert not proj["sound_violated"], proj


@pytest.mark.slow
def test_the_noise_floor_of_isotropic_noise_is_the_marchenko_pastur_edge():
    r = _audit(CORRECT["user-dp-sgd"](), 2000, canaries=["dirac"], statistic="subspace")
    setup = game.make_setup(CORRECT["user-dp-sgd"](), 2, SHAPES, 8, 0.05, 1,
                            torch.Generator())
    space, runs = game.make_subspace(setup, 200), 200
    dims = int(torch.linalg.matrix_rank(space.gram()))
    edge = (1.0 - math.sqrt(dims / runs)) ** 2
    assert 0.3 * edge <= r["noise_floor"] <= 3.0 * edge, (r["noise_floor"], edge)
    assert not r["sound_violated"]


def test_the_subspace_is_a_fixed_function_of_the_shapes():
    setup = game.make_setup(CORRECT["user-dp-sgd"](), 2, SHAPES, 8, 0.05, 1,
                            torch.Generator())
    a, b = game.make_subspace(setup, 1000), game.make_subspace(setup, 1000)
    assert torch.equal(a.pt, b.pt)
    assert a.dims <= 500 and a.groups == sum(min(32, math.prod(s)) for s in SHAPES)
    rows = torch.randn(3, sum(math.prod(s) for s in SHAPES))
    y = a.project(rows)
    sums = [rows[:, sl].sum(dim=1) for sl in setup.slices]
    parts = [rows[:, sl] @ setup.direction[sl] for sl in setup.slices]
    assert torch.allclose(y[:, a.groups:a.groups + len(SHAPES)], torch.stack(sums, 1),
                          atol=1e-4)
    assert torch.allclose(y[:, a.groups + len(SHAPES):], torch.stack(parts, 1), atol=1e-4)
    # every coordinate in exactly one group, with sign +-1
    assert torch.equal(a.pt[:, :a.groups].abs().sum(dim=1), torch.ones(rows.shape[1]))
    assert game.make_subspace(setup, 50).dims <= 25   # never more than half the runs


# ---------------------------------------------------------------- worst-case datasets
def test_worst_case_backgrounds():
    gen = torch.Generator().manual_seed(0)
    setup = game.make_setup(CORRECT["user-dp-sgd"](), 2, SHAPES, 8, 0.05, 1, gen)
    canary = game.canaries(SHAPES, 1.0)["large"]
    opposed = game.worst_background("opposed", setup, canary, 1.0, gen)
    first = torch.cat([g[0].reshape(-1) for g in opposed])
    flat = torch.cat([c.reshape(-1) for c in canary])
    assert first.norm() == pytest.approx(1.0, abs=1e-5)
    assert float(first @ flat / flat.norm()) == pytest.approx(-1.0, abs=1e-5)
    assert game.worst_background("empty", setup, canary, 1.0, gen)[0].shape[0] == 0
    assert game.worst_background("single", setup, canary, 1.0, gen)[0].shape[0] == 1
    for kind, norm in (("at-clip", 1.0), ("above-clip", game.LARGE)):
        bg = game.worst_background(kind, setup, canary, 1.0, gen)
        assert torch.allclose(ops.flat_norms(bg), torch.full((8,), norm), rtol=1e-4)
    with pytest.raises(ValueError, match="background"):
        game.worst_background("adversarial", setup, canary, 1.0, gen)


@pytest.mark.slow
def test_clipping_the_sum_shows_only_against_an_opposing_background():
    # the batch's sum clipped to C: a random small background moves the release by about C,
    # as the ledger assumes; a background at -C along a large canary moves it by 2C
    mutant = MUTANTS["clip-the-sum"].factory
    assert not _audit(mutant(), 500, canaries=["large"])["sound_violated"]
    r = _audit(mutant(), 500, canaries=["large+opposed"])
    assert r["sound_violated"] and r["mu_lower"] > 0.5, r
    ok = _audit(CORRECT["user-dp-sgd"](), 500, canaries=["large+opposed"])
    assert not ok["sound_violated"], ok


@pytest.mark.slow
def test_the_game_chooses_the_background_among_the_scenarios():
    r = _audit(MUTANTS["clip-the-batch"].factory(), 1000, statistic="projection",
               canaries=["large", "large+opposed", "dirac+at-clip"])
    assert r["sound_violated"] and "+opposed" in r["canary"] + r["mu_canary"], r
    full = _audit(CORRECT["user-dp-sgd"](), 100, statistic="projection")
    assert set(full["selection"]) >= {game.scenario_name(c, b) for c, b in game.SCENARIOS
                                      if b != "empty"}   # user code cannot take an empty batch
    assert "dirac+empty" in full["skipped"]
