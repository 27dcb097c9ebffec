"""Wrappers forward every hook: a defense wrapper (the one-run audit's canaries) is the wrapped
defense for every public attribute of ``Defense`` it does not change, and a ledger view (the
simulator's batch samplings) states for every recording method of the ledger whether it
rewrites it or passes it through. A hook added to ``Defense`` or to a defense class, a method
added to the ledger, a wrapper added to the package: each fails here by name when forgotten."""

import inspect
from types import SimpleNamespace

import pytest
import torch

import accounting as A
import leakaudit.empirical  # noqa: F401  (imports every wrapper of the package)
from accounting.recording import LedgerRecording
from leakaudit.defenses import Defense
from leakaudit.defenses.base import (
    RECORDING,
    AllocationLedger,
    DefenseWrapper,
    FixedSizeBatchLedger,
    LedgerView,
    own_names,
)
from leakaudit.empirical.onerun import Canaries

#: a client no canary wrapper touches: every hook passes through
OTHER = SimpleNamespace(client=99, batch_rate=0.5)


def _passing(inner: Defense) -> dict[type, DefenseWrapper]:
    """One pass-through instance of every wrapper class of the package, around ``inner``."""
    make = {
        DefenseWrapper: lambda: DefenseWrapper(inner),
        Canaries: lambda: Canaries(inner, 2, 1.0, torch.ones(2), 0, torch.Generator(),
                                   "gradient", first=-1),
    }
    return {cls: build() for cls, build in make.items()}


def _subclasses(cls: type) -> set[type]:
    out = set(cls.__subclasses__())
    for sub in list(out):
        out |= _subclasses(sub)
    return out


def _public(cls: type) -> list[str]:
    return [n for n in dir(cls) if not n.startswith("_")]


def _probe_class(base: type = Defense) -> type:
    """A defense overriding every public attribute of ``base``: each method returns, and each
    property and class attribute is, ``("probe", name)``."""
    body: dict[str, object] = {}
    for name in _public(base):
        static = inspect.getattr_static(base, name)
        if isinstance(static, property):
            body[name] = property(lambda self, n=name: ("probe", n))
        elif inspect.isfunction(static):
            body[name] = lambda self, *a, n=name, **k: ("probe", n)
        else:
            body[name] = ("probe", name)
    return type("Probe", (base,), body)


def _reaches(wrapper: object, name: str) -> bool:
    value = getattr(wrapper, name)
    if callable(value) and not isinstance(value, tuple):   # as Defense declares the hook
        arguments = len(inspect.signature(getattr(Defense, name)).parameters) - 1
        value = value(*[OTHER] * arguments)
    return value == ("probe", name)


def test_every_wrapper_of_the_package_is_checked_here():
    assert _subclasses(DefenseWrapper) <= set(_passing(Defense())), \
        "a new DefenseWrapper subclass: add its pass-through instance to _passing"


@pytest.mark.parametrize("cls", [DefenseWrapper, Canaries], ids=lambda c: c.__name__)
def test_a_wrapper_is_the_inner_defense_for_every_public_attribute(cls):
    inner = _probe_class()()
    wrapper = _passing(inner)[cls]
    missed = [n for n in _public(Defense) if not _reaches(wrapper, n)]
    assert not missed, f"{cls.__name__} does not forward: {missed}"
    assert isinstance(wrapper, Defense)


@pytest.mark.parametrize("cls", [DefenseWrapper, Canaries], ids=lambda c: c.__name__)
def test_a_hook_added_to_defense_or_to_a_defense_class_reaches_every_wrapper(cls,
                                                                             monkeypatch):
    class Richer(Defense):
        def extra_hook(self, ctx):   # a hook only this defense class has
            return "richer"

        def new_hook(self, ctx):
            return "inner's"

    # a hook Defense gains after the wrappers were written: its default never shadows inner
    monkeypatch.setattr(Defense, "new_hook", lambda self, ctx: "Defense's default",
                        raising=False)
    wrapper = _passing(Richer())[cls]
    assert wrapper.extra_hook(OTHER) == "richer"
    assert wrapper.new_hook(OTHER) == "inner's"
    assert _passing(Defense())[cls].new_hook(OTHER) == "Defense's default"


def test_the_canary_wrapper_changes_only_its_own_hooks():
    changed = own_names(Canaries) & set(_public(Defense))
    assert changed == {"local_step", "privatize_update"}


# ------------------------------------------------------------------ the ledger views
def _views(ledger: A.PrivacyLedger) -> list[LedgerView]:
    return [FixedSizeBatchLedger(ledger, 8, 100), AllocationLedger(ledger, 4)]


def test_recording_names_every_recording_method_of_the_ledger():
    methods = {n for n, v in vars(LedgerRecording).items()
               if inspect.isfunction(v) and not n.startswith("_")}
    assert set(RECORDING) == methods | {"record"}


def test_every_view_rewrites_or_passes_each_recording_method():
    assert _subclasses(LedgerView) == {FixedSizeBatchLedger, AllocationLedger}
    for cls in _subclasses(LedgerView):
        rewritten = own_names(cls) & set(RECORDING)
        passed = set(cls.passes)
        assert rewritten | passed == set(RECORDING), cls.__name__
        assert not rewritten & passed, cls.__name__


def test_a_view_forwards_what_it_does_not_rewrite():
    ledger = A.PrivacyLedger()
    ledger.step(q=0.1, sigma=1.0, count=10)
    for view in _views(ledger):
        assert view.relation == ledger.relation and view.events == ledger.events
        assert view.epsilon(1e-5) == ledger.epsilon(1e-5)
    view = _views(ledger)[0]
    view.laplace(b=2.0)
    assert type(ledger.events[-1]).__name__ == "Laplace"
    view.step(q=0.08, sigma=1.0)    # rewritten: fixed-size, q = 1 under add/remove
    assert ledger.events[-1].q == 1.0 and ledger.events[-1].sampling == "fixed-size"
    with pytest.raises(NotImplementedError, match="schedule"):
        view.step_schedule(0.08, [1.0, 2.0])


def test_a_method_added_to_the_ledger_reaches_a_view():
    class Richer(A.PrivacyLedger):
        def summary(self) -> str:
            return "richer"

    for view in _views(Richer()):
        assert view.summary() == "richer"


def test_wrappers_copy_and_pickle_as_what_they_wrap():
    import copy
    import pickle

    from leakaudit import defenses as D

    wrapper = DefenseWrapper(D.get("fed-cdp"))
    for twin in (copy.deepcopy(wrapper), pickle.loads(pickle.dumps(wrapper))):
        assert type(twin) is DefenseWrapper and twin.inner is not wrapper.inner
        assert repr(twin) == repr(wrapper) == repr(wrapper.inner)
    view = copy.deepcopy(FixedSizeBatchLedger(A.PrivacyLedger(), 8, 100))
    view.step(q=0.08, sigma=1.0)
    assert view.inner.events[-1].sampling == "fixed-size"
