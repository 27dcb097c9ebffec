"""Contracts that cannot be dodged: every event type of ``accounting/`` is registered by
``import accounting`` alone, drawn by the contract suite (hand-written or derived strategy)
over every (sampling, relation) pair it accepts, and accounted by some certified accountant.
Each way of getting this wrong is shown with a dummy event type and fails a named check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from event_strategies import (
    SAMPLES,
    MissingDomain,
    accepted_pairs,
    check_every_type_is_drawn_and_accounted,
    check_registers_nothing_new,
    check_strategy_covers,
    contract_types,
    derived_sample,
    derived_strategy,
    over_relations,
    sample_of,
    strategy_of,
)
from hypothesis import strategies as st

import accounting as A
from accounting._validate import Domain, check_positive, check_real, declare_domain
from accounting.accountants import ACCOUNTANTS
from accounting.events import Event
from accounting.registry import UnsupportedEventError, register_event, unregister_event

DUMMY = Path(__file__).with_name("dummy_event.py")


def test_every_registered_event_type_has_a_strategy_and_an_accountant():
    check_every_type_is_drawn_and_accounted()


def test_importing_every_module_of_accounting_registers_nothing_new():
    check_registers_nothing_new("accounting")


@pytest.mark.parametrize("kind", sorted(c.kind for c in contract_types()))
def test_every_strategy_draws_every_sampling_and_relation_its_event_accepts(kind):
    cls = A.registry.event_class(kind)
    check_strategy_covers(kind, strategy_of(cls), sample_of(cls))


# ---------------------------------------------------------------- the import
def test_a_module_dropped_into_accounting_is_registered_by_import_accounting(tmp_path):
    """A copy of the package with the dummy module added and nothing else edited: a fresh
    interpreter's ``import accounting`` registers its type."""
    shutil.copytree(Path(A.__file__).parent, tmp_path / "accounting")
    shutil.copy(DUMMY, tmp_path / "accounting" / "twice_clipped.py")
    code = ("import accounting\nfrom accounting.registry import registered_types\n"
            "print(accounting.__file__, sorted(registered_types()))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.startswith(str(tmp_path)) and "'contract_test_twice_clipped'" in out


def _package(root: Path, init: str) -> None:
    """A package ``root`` whose ``events`` module registers an event type."""
    root.mkdir()
    (root / "__init__.py").write_text(init)
    (root / "events.py").write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\n"
        "from accounting.events import Event\nfrom accounting.registry import register_event\n"
        "@dataclass(frozen=True)\nclass Left(Event):\n    note: str = ''\n"
        "    sampling: str = 'all'\n    relation: str = 'add-remove'\n"
        "    kind: ClassVar[str] = 'contract_test_left_out'\n"
        "register_event(Left, rdp=lambda e, side: [])\n")


@pytest.mark.parametrize("init", [
    "",  # imports none of its modules
    # imports every module the way accounting/__init__.py does, but skips its event module
    "from accounting.registry import import_submodules\n"
    "import_submodules(__name__, __path__, skip=('__main__', 'events'))\n",
])
def test_a_dummy_event_module_left_out_of_the_package_import_fails_by_name(
        tmp_path, monkeypatch, scratch_registry, init):
    _package(tmp_path / "dummy_accounting", init)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dummy_accounting", raising=False)
    monkeypatch.delitem(sys.modules, "dummy_accounting.events", raising=False)
    with pytest.raises(AssertionError, match="contract_test_left_out.*`import dummy_accounting`"):
        check_registers_nothing_new("dummy_accounting")
    check_registers_nothing_new("dummy_accounting")  # imported now: nothing new the second time
    sys.modules.pop("dummy_accounting.events", None)
    sys.modules.pop("dummy_accounting", None)


def test_the_same_package_with_every_module_imported_passes(tmp_path, monkeypatch,
                                                            scratch_registry):
    _package(tmp_path / "dummy_whole", "from accounting.registry import import_submodules\n"
             "import_submodules(__name__, __path__, skip=('__main__',))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        check_registers_nothing_new("dummy_whole")
        assert "contract_test_left_out" in A.registry.registered_types()
    finally:
        sys.modules.pop("dummy_whole.events", None)
        sys.modules.pop("dummy_whole", None)


# ---------------------------------------------------------------- strategies
@dataclass(frozen=True)
class _Dummy(Event):
    """A minimal event, accepted under every relation; ``x`` has a checker with a domain."""

    x: float = 1.0
    note: str = ""
    sampling: str = "all"
    relation: str = "add-remove"
    kind: ClassVar[str] = "contract_test_dummy"
    checks: ClassVar[dict] = {"x": check_positive}

    @property
    def steps(self) -> int:
        return 1

    def describe(self) -> str:
        return f"dummy x={self.x}"


def _own_check(name: str, value: object) -> float:
    """A field checker of the dummy's own, declaring no domain."""
    out = check_real(name, value)
    if not 1.0 <= out <= 2.0:
        raise ValueError(f"{name} must be in [1, 2], got {out!r}")
    return out


@dataclass(frozen=True)
class _OwnChecker(_Dummy):
    kind: ClassVar[str] = "contract_test_own_checker"
    checks: ClassVar[dict] = {"x": _own_check}


@dataclass(frozen=True)
class _NoChecker(_Dummy):
    kind: ClassVar[str] = "contract_test_no_checker"
    checks: ClassVar[dict] = {}


@pytest.mark.parametrize("cls,message", [
    (_OwnChecker, r"^_OwnChecker\.x .* has the checker '_own_check', which declares no Domain"),
    (_NoChecker, r"^_NoChecker\.x .* has no checker in `checks`"),
])
def test_a_dummy_field_without_a_domain_fails_by_name(scratch_registry, cls, message):
    register_event(cls, rdp=lambda e, side: [A.registry.DPPart(1.0 / e.x, 0.0, 1)])
    with pytest.raises(MissingDomain, match=message):
        check_every_type_is_drawn_and_accounted()
    unregister_event(cls)
    declared = declare_domain(Domain(1.0, 2.0, 1.5))(
        lambda name, value: _own_check(name, value))

    @dataclass(frozen=True)
    class Declared(_Dummy):
        kind: ClassVar[str] = "contract_test_declared"
        checks: ClassVar[dict] = {"x": declared}

    register_event(Declared, rdp=lambda e, side: [A.registry.DPPart(1.0 / e.x, 0.0, 1)])
    check_every_type_is_drawn_and_accounted()  # the domain declared: drawn, accounted
    assert 1.0 <= sample_of(Declared).x <= 2.0


def test_a_dummy_strategy_that_forgets_a_relation_fails_by_name(scratch_registry):
    """(The forgetful strategy draws from a finite space, so the search that shows the missing
    pairs ends once it has drawn everything, not after 2,000 examples.)"""
    register_event(_Dummy, rdp=lambda e, side: [])
    only_add_remove = st.builds(_Dummy, x=st.sampled_from([0.1, 1.0, 2.0]))
    with pytest.raises(AssertionError, match=r"never draws .*'all', 'replace-one'.*'zero-out'"):
        check_strategy_covers("contract_test_dummy", only_add_remove, _Dummy())
    check_strategy_covers("contract_test_dummy", over_relations(
        lambda d, r: _Dummy(d(st.floats(0.1, 2.0)), relation=r)), _Dummy())


@dataclass(frozen=True)
class _Unwired(_Dummy):
    """An event type registered for JSON but wired into no accountant."""

    kind: ClassVar[str] = "contract_test_unwired"


def test_an_unwired_event_type_is_refused_by_name_and_fails_the_suite(scratch_registry):
    register_event(_Unwired)
    ledger = A.PrivacyLedger()
    ledger.record(_Unwired())
    for method in ACCOUNTANTS:
        with pytest.raises(UnsupportedEventError, match=method):
            ledger.epsilon(1e-5, method)
    with pytest.raises(UnsupportedEventError, match="no certified accountant"):
        ledger.tightest_epsilon(1e-5)
    with pytest.raises(AssertionError, match="_Unwired: no accountant"):
        check_every_type_is_drawn_and_accounted()


def test_a_package_type_is_derived_like_its_hand_written_strategy():
    """Standard checkers only: the derived sample of a package type (without its hand-written
    one) is the type at its domains' examples and accepts the same pairs as the hand-written
    sample; the derived strategy draws them all (a Gaussian type's: the dummy event's test)."""
    sample = derived_sample(A.SampledGaussian)
    assert sample == A.SampledGaussian(q=0.01, sigma=1.0)
    assert accepted_pairs(sample) == accepted_pairs(SAMPLES["sampled_gaussian"])
    laplace = derived_sample(A.Laplace)
    assert laplace == A.Laplace(b=2.0) and accepted_pairs(laplace) == accepted_pairs(
        SAMPLES["laplace"])
    check_strategy_covers("laplace", derived_strategy(A.Laplace), laplace)
    with pytest.raises(MissingDomain, match=r"^ApproxDP\.eps .* '_inf_eps'"):
        derived_sample(A.ApproxDP)  # its own checker declares none: hand-written
