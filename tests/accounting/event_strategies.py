"""The contract suite's event strategies: one per registered event type, drawing every
(sampling, relation) pair the type accepts.

The package's own types have hand-written strategies (richer: their extremes and
cross-field constraints); any other type's is derived from what it already declares, its
dataclass fields and the :class:`accounting._validate.Domain` of each field's checker
(``checks``), and so is its fixed sample. A type the suite cannot draw (a field with no
checker, or a checker with no domain, and no hand-written strategy) raises
:class:`MissingDomain` naming the field; the registration tests call the checks here.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import MISSING, fields

import numpy as np
from hypothesis import HealthCheck, Phase, assume, find, settings
from hypothesis import strategies as st

import accounting as A
from accounting._validate import Domain, check_probability, check_sigma, domain_of
from accounting.accountants import supporting
from accounting.events import Event, event_from_dict
from accounting.registry import event_types, rules_of
from accounting.relations import RELATIONS, SAMPLINGS


def values(domain: Domain) -> st.SearchStrategy:
    """Every value of ``domain``: its choices, or its range plus its extremes."""
    if domain.choices:
        return st.sampled_from(domain.choices)
    if domain.integer:
        bulk = st.integers(int(domain.low), int(domain.high))
    else:
        bulk = st.floats(float(domain.low), float(domain.high))
    return st.one_of(bulk, st.sampled_from(domain.extremes)) if domain.extremes else bulk


#: the checkers' own domains, extremes included: sigma from 0.01 (almost no noise) to 1e4,
#: q from 1e-9 to 1
SIGMA = values(domain_of(check_sigma))
Q = values(domain_of(check_probability))

#: the neighbouring relations, the batch samplings
PAIRS = [(s, r) for s in SAMPLINGS for r in RELATIONS]


def over_pairs(build, relations=RELATIONS):
    """A Gaussian event type's strategy over every (sampling, relation) pair it accepts
    ("all" means q = 1; the event refuses the pairs it cannot account)."""

    @st.composite
    def draw(draw_) -> Event:
        sampling, relation = draw_(st.sampled_from([p for p in PAIRS if p[1] in relations]))
        q = 1.0 if sampling == "all" else draw_(Q)
        try:
            return build(draw_, q, sampling, relation)
        except ValueError:
            assume(False)

    return draw()


def over_relations(build, relations=RELATIONS):
    """A non-Gaussian event type's strategy over every relation (its sampling is fixed)."""

    @st.composite
    def draw(draw_) -> Event:
        relation = draw_(st.sampled_from(relations))
        try:
            return build(draw_, relation)
        except ValueError:
            assume(False)

    return draw()


#: hand-written strategies (richer than the derived ones) of the types drawn per relation
_BUILDERS = {
    "sampled_gaussian": (over_pairs, lambda d, q, s, r: A.SampledGaussian(
        q, d(SIGMA), d(st.integers(1, 10**6)), sampling=s, relation=r)),
    "gaussian_schedule": (over_pairs, lambda d, q, s, r: A.GaussianSchedule(
        q, np.array(d(st.lists(SIGMA, min_size=1, max_size=20))), sampling=s, relation=r)),
    "laplace": (over_relations, lambda d, r: A.Laplace(
        d(st.one_of(st.floats(0.05, 1e6), st.sampled_from([1e-3, 1e9, 1e12]))),
        count=d(st.integers(1, 1000)), relation=r)),
    "approx_dp": (over_relations, lambda d, r: A.ApproxDP(
        d(st.one_of(st.floats(0.0, 5.0), st.just(30.0))),
        d(st.one_of(st.floats(0.0, 1e-9), st.just(1e-16))), count=d(st.integers(1, 100)),
        relation=r)),
    "random_allocation": (over_relations, lambda d, r: A.RandomAllocation(
        d(st.floats(0.7, 5.0)), d(st.integers(1, 200)), 1, d(st.integers(1, 3)), relation=r)),
    "sampled_without_replacement": (over_relations, lambda d, r: A.SampledWithoutReplacement(
        d(SIGMA), b := d(st.integers(1, 100)), b + d(st.integers(0, 10_000)),
        d(st.integers(1, 1000)), relation=r)),
}
#: a candidate run of a search: DP-SGD-like steps or pure releases
RUN = st.lists(st.one_of(
    st.builds(A.SampledGaussian, q=st.floats(1e-3, 1.0), sigma=st.floats(0.5, 20.0),
              count=st.integers(1, 1000)),
    st.builds(A.Laplace, b=st.floats(0.5, 100.0))), min_size=1, max_size=2)
#: hand-written strategies of the types drawn whole (their relation is their members')
_WHOLE = {
    "hyperparameter_search": st.builds(
        A.HyperparameterSearch, st.lists(RUN, min_size=1, max_size=3),
        rule=st.sampled_from(A.SELECTION_RULES), mean=st.floats(1.0, 100.0),
        shape=st.floats(-0.9, 3.0)),
    "same_batch": st.builds(
        lambda q, sigmas, c: A.SameBatch([A.SampledGaussian(q, s, c) for s in sigmas]),
        Q, st.lists(SIGMA, min_size=2, max_size=3), st.integers(1, 1000)),
}
#: hand-written fixed instances
SAMPLES = {
    "sampled_gaussian": A.SampledGaussian(0.01, 1.0, 100),
    "gaussian_schedule": A.GaussianSchedule(0.01, np.array([1.0, 2.0])),
    "laplace": A.Laplace(2.0),
    "approx_dp": A.ApproxDP(1.0, 1e-9),
    "random_allocation": A.RandomAllocation(1.0, 10),
    "sampled_without_replacement": A.SampledWithoutReplacement(2.0, 10, 1000, 100),
    "hyperparameter_search": A.HyperparameterSearch(
        [[A.SampledGaussian(0.01, 1.0, 100)], [A.SampledGaussian(0.01, 2.0, 100)]],
        rule="geometric", mean=10),
    "same_batch": A.SameBatch([A.SampledGaussian(0.01, 1.0, 100),
                               A.SampledGaussian(0.01, 2.0, 100)]),
}
#: fields the suite sets itself (the pair drawn, no note) rather than from a domain
OWN_FIELDS = ("note", "sampling", "relation")


class MissingDomain(AssertionError):
    """An event type the suite cannot draw; the message names the field to declare."""


def contract_types() -> list[type]:
    """Every registered event type defined in a module (a type defined by a script, e.g. the
    docs' example run as ``__main__`` in tests/project, is the user's)."""
    return [c for c in event_types() if c.__module__ != "__main__"]


def field_domains(cls: type) -> dict[str, Domain]:
    """The domain of each field of ``cls`` the suite draws (every init field but
    :data:`OWN_FIELDS`): the one its checker in ``cls.checks`` declares."""
    out = {}
    for f in fields(cls):
        if not f.init or f.name in OWN_FIELDS:
            continue
        check = getattr(cls, "checks", {}).get(f.name)
        domain = domain_of(check)
        if domain is None:
            why = ("has no checker in `checks`" if check is None else
                   f"has the checker {getattr(check, '__name__', check)!r}, which declares "
                   "no Domain")
            raise MissingDomain(
                f"{cls.__name__}.{f.name} ({cls.__module__}) {why}: declare one on the checker "
                "(accounting._validate.declare_domain) or hand-write a strategy in "
                "tests/accounting/event_strategies.py")
        out[f.name] = domain
    return out


def derived_sample(cls: type) -> Event:
    """``cls`` with each required field at its domain's example, the others at their
    defaults."""
    domains = field_domains(cls)
    required = {f.name: domains[f.name].example for f in fields(cls) if f.name in domains
                and f.default is MISSING and f.default_factory is MISSING}
    try:
        return cls(**required)
    except (TypeError, ValueError) as exc:
        raise MissingDomain(f"{cls.__name__} ({cls.__module__}) refuses the sample built from "
                            f"its domains' examples {required}: {exc}; fix the examples or "
                            "hand-write a sample in tests/accounting/event_strategies.py") from exc


def sample_of(cls: type) -> Event:
    """One fixed instance of ``cls``: hand-written, else :func:`derived_sample`."""
    return SAMPLES[cls.kind] if cls.kind in SAMPLES else derived_sample(cls)


def derived_strategy(cls: type, relations=RELATIONS) -> st.SearchStrategy:
    """``cls`` drawn over every (sampling, relation) pair it accepts under ``relations``
    (:func:`accepted_pairs` of its sample; "all" means q = 1), each field from its domain."""
    domains = field_domains(cls)
    names = {f.name for f in fields(cls) if f.init}
    pairs = sorted(p for p in accepted_pairs(sample_of(cls)) if p[1] in relations)
    if not pairs:
        return st.nothing()

    @st.composite
    def draw(draw_) -> Event:
        sampling, relation = draw_(st.sampled_from(pairs))
        kw = {name: draw_(values(domain)) for name, domain in domains.items()}
        kw.update({k: v for k, v in (("sampling", sampling), ("relation", relation))
                   if k in names})
        if sampling == "all" and "q" in kw:
            kw["q"] = 1.0
        try:
            return cls(**kw)
        except ValueError:
            assume(False)

    return draw()


def strategy_of(cls: type, relations=RELATIONS) -> st.SearchStrategy:
    """The contract strategy of ``cls`` under ``relations``: hand-written, else derived
    (:class:`MissingDomain` naming the field where it cannot be)."""
    if cls.kind in _BUILDERS:
        how, build = _BUILDERS[cls.kind]
        return how(build, relations)
    if cls.kind in _WHOLE:
        return _WHOLE[cls.kind]
    return derived_strategy(cls, relations)


def _drawable(types: list[type], whole: bool) -> list[type]:
    """``types`` the suite can draw (the others fail the registration test by name), the
    hand-written ones first in their order; ``whole``: include the types drawn whole."""
    hand = list(_BUILDERS) + (list(_WHOLE) if whole else [])
    known = sorted((c for c in types if c.kind in hand), key=lambda c: hand.index(c.kind))
    derived = []
    for c in types:
        if c.kind not in _BUILDERS and c.kind not in _WHOLE:
            try:
                field_domains(c)
            except MissingDomain:
                continue
            derived.append(c)
    return known + derived


def any_event(types: list[type] | None = None) -> st.SearchStrategy:
    """One event of any of ``types`` (default: every registered type the suite can draw)."""
    types = contract_types() if types is None else types
    return st.one_of(*(strategy_of(c) for c in _drawable(types, whole=True)))


def histories(min_size: int, max_size: int, types: list[type] | None = None
              ) -> st.SearchStrategy:
    """Lists of events under one relation (a ledger keeps one relation), every relation, of
    ``types`` (default: every registered type drawn per relation)."""
    chosen = _drawable(contract_types() if types is None else types, whole=False)
    return st.sampled_from(RELATIONS).flatmap(lambda r: st.lists(
        st.one_of(*(strategy_of(c, (r,)) for c in chosen)),
        min_size=min_size, max_size=max_size))


def check_every_type_is_drawn_and_accounted() -> None:
    """AssertionError naming a registered type the suite cannot draw or no certified
    accountant accounts."""
    for cls in contract_types():
        strategy_of(cls)
        assert supporting([sample_of(cls)], certified_only=True), f"{cls.__name__}: no accountant"


# ---------------------------------------------------------------- pairs and registration
def accepted_pairs(sample: Event) -> set[tuple[str, str]]:
    """Every (sampling, relation) pair an event type accepts, found by restating ``sample``
    under each ("all" means q = 1)."""
    data, out = sample.to_dict(), set()
    for sampling, relation in PAIRS:
        changed = {**data, "relation": relation}
        if "sampling" in data:
            changed["sampling"] = sampling
            if sampling == "all" and "q" in data:
                changed["q"] = 1.0
        try:
            event = event_from_dict(changed)
        except ValueError:
            continue
        out.add((event.sampling, event.relation))
    return out


def uncovered_pairs(strategy: st.SearchStrategy, sample: Event) -> list[tuple[str, str]]:
    """The accepted pairs of ``sample``'s type that ``strategy`` never draws in 2,000
    examples: one generating search that stops once every pair has been drawn (no shrinking:
    whether a pair is drawn is all that counts, not its smallest instance)."""
    from hypothesis.errors import NoSuchExample

    accepted, drawn = accepted_pairs(sample), set()

    def every_pair_drawn(event: Event) -> bool:
        drawn.add((event.sampling, event.relation))
        return drawn >= accepted

    try:
        find(strategy, every_pair_drawn,
             settings=settings(max_examples=2000, database=None, deadline=None,
                               phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        pass
    return sorted(accepted - drawn)


def check_strategy_covers(kind: str, strategy: st.SearchStrategy, sample: Event) -> None:
    """AssertionError naming the accepted (sampling, relation) pairs ``strategy`` never draws."""
    assert len(accepted_pairs(sample)) >= 1
    missing = uncovered_pairs(strategy, sample)
    assert not missing, f"{kind}: the contract strategy never draws {missing}"


def _registry() -> dict[str, tuple]:
    return {cls.kind: (cls, tuple(sorted(rules_of(cls)))) for cls in event_types()}


def newly_registered(package: str) -> dict[str, tuple]:
    """The event types and rules that importing every module of ``package`` adds to the
    registry (empty: ``import package`` alone registers everything it defines)."""
    root = importlib.import_module(package)
    before = _registry()
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not info.name.endswith(".__main__"):  # (runs the command line)
            importlib.import_module(info.name)
    return {k: v for k, v in _registry().items() if before.get(k) != v}


def check_registers_nothing_new(package: str) -> None:
    """AssertionError naming what importing every module of ``package`` adds."""
    added = newly_registered(package)
    assert not added, (f"registered only when their module is imported: {sorted(added)}; "
                       f"`import {package}` must import the module ({package.replace('.', '/')}"
                       "/__init__.py imports every module but those it skips)")
