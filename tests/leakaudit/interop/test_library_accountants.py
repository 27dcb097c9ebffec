"""leakaudit.interop.library_accountants: Flower's and Opacus's own accountants read into
(claimed, sound) ledgers, with named findings."""

import math

import pytest
from _extras import require

require("flwr", "flower")
require("opacus", "opacus")

from flwr.serverapp import (  # noqa: E402
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant  # noqa: E402
from opacus.accountants import PRVAccountant, RDPAccountant  # noqa: E402

from leakaudit.interop import library_accountants as la  # noqa: E402

DELTA = 1e-5


def _flower(sampling, relation, z=1.0, n=1000, m=10, rounds=100, max_epsilon=None):
    acc = RdpAccountant(PrivacyConfig(target_delta=DELTA, population_size=n,
                                      neighboring_relation=relation, sampling_method=sampling,
                                      max_epsilon=max_epsilon))
    acc.compose(GaussianPrivacyEvent(noise_multiplier=z, sample_size=m, population_size=n),
                count=rounds)
    return acc


def test_flower_without_replacement_under_replace_one_is_a_named_finding():
    """n 1,000, m 10, T 100, z 1: Flower prints 1.48 (z read as std over 2C); 11.2 at
    z/2; the certified bracket of what ran is [0.89, 6.64]."""
    acc = _flower(SamplingMethod.WITHOUT_REPLACEMENT, NeighboringRelation.REPLACE_ONE,
                  max_epsilon=2.0)
    reading = la.read_flower_accountant(acc)
    claimed, sound = reading.ledgers
    assert reading.library_eps == pytest.approx(1.4825, abs=1e-3)
    assert claimed.epsilon(DELTA, "rdp") == pytest.approx(reading.library_eps, rel=1e-6)
    assert sound.epsilon(DELTA, "rdp") == pytest.approx(11.21, abs=0.01)
    lo, _, up = sound.epsilon_bounds(DELTA, "pld")
    assert lo == pytest.approx(0.895, abs=0.01) and up == pytest.approx(6.64, abs=0.01)
    assert reading.sound_eps == pytest.approx(up) and reading.sound_method == "pld"
    names = [f.name for f in reading.findings]
    assert names == [la.REPLACE_ONE_SENSITIVITY, la.BUDGET_PASSED]
    assert "2C" in reading.findings[0].message and "1.483" in reading.findings[0].message
    assert not acc.would_exceed(GaussianPrivacyEvent(1.0, 10, 1000), count=1)  # Flower: fine
    again = la.read_flower_accountant(acc.state_dict())  # the state dict reads the same
    assert again.library_eps == reading.library_eps and again.findings == reading.findings
    assert la.REPLACE_ONE_SENSITIVITY in reading.describe()


@pytest.mark.parametrize("sampling", [SamplingMethod.POISSON, SamplingMethod.NO_AMPLIFICATION])
def test_flower_add_remove_pairs_are_read_as_flower_accounts_them(sampling):
    acc = _flower(sampling, NeighboringRelation.ADD_OR_REMOVE_ONE)
    reading = la.read_flower_accountant(acc)
    claimed, sound = reading.ledgers
    assert reading.findings == ()
    assert claimed == sound and claimed.relation == "add-remove"
    assert claimed.epsilon(DELTA, "rdp") == pytest.approx(reading.library_eps, rel=1e-3)
    assert reading.sound_eps <= reading.library_eps * (1 + 1e-9)  # tightest: PLD <= RDP


def test_a_flower_reading_refuses_what_is_not_an_accountant_by_name():
    with pytest.raises(ValueError, match="accountant must be a Flower RdpAccountant"):
        la.read_flower_accountant({"config": {}})


@pytest.mark.parametrize("cls", [RDPAccountant, PRVAccountant])
def test_opacus_negative_eps_at_a_large_delta_is_a_named_finding(cls):
    acc = cls()
    acc.history = [(10.0, 0.01, 10)]
    reading = la.read_opacus_accountant(acc, 0.5)
    assert reading.library_eps < 0
    assert [f.name for f in reading.findings] == [la.NEGATIVE_EPSILON]
    assert reading.sound_eps >= 0.0
    small = la.read_opacus_accountant(acc, DELTA)
    assert small.findings == () and small.library_eps > 0


def test_opacus_non_finite_or_failing_eps_is_a_named_finding():
    class Broken(RDPAccountant):
        def get_epsilon(self, delta):
            return math.nan

    class Raising(RDPAccountant):
        def get_epsilon(self, delta):
            raise RuntimeError("root finding failed")

    for cls, name in ((Broken, la.NON_FINITE_EPSILON), (Raising, la.LIBRARY_ERROR)):
        acc = cls()
        acc.history = [(1.0, 0.01, 100)]
        reading = la.read_opacus_accountant(acc, DELTA)
        assert [f.name for f in reading.findings] == [name]
        assert math.isfinite(reading.sound_eps)


def test_a_search_over_library_runs_reports_the_procedure_beside_the_chosen_run():
    runs = []
    for sigma in (0.8, 1.0, 1.5):
        acc = RDPAccountant()
        acc.history = [(sigma, 0.01, 1000)]
        runs.append(acc)
    runs.append(_flower(SamplingMethod.POISSON, NeighboringRelation.ADD_OR_REMOVE_ONE).state_dict())
    rep = la.procedure_from_accountants(runs, "geometric", delta=DELTA, mean=10, chosen=1)
    assert rep.chosen_eps == pytest.approx(la.read_opacus_accountant(runs[1], DELTA).sound_eps)
    assert rep.tightest > max(rep.runs_eps) and len(rep.search.candidates) == 4
    with pytest.raises(ValueError, match="accountants"):
        la.procedure_from_accountants([], delta=DELTA)
