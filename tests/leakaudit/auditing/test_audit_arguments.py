"""The audit's settings as objects (AuditPlan, AttackBudget, EngineConfig), the one
deprecation mechanism of the keywords they replaced, and refusals before any work: unknown
names in a mapping, empty or repeated selections, values outside their meaningful range."""

from __future__ import annotations

import inspect
import warnings

import pytest

import leakaudit
from leakaudit import workload
from leakaudit.auditing import AttackBudget, AuditPlan, EngineConfig, audit, auditor


@pytest.fixture
def no_work(monkeypatch):
    """Any training or simulation fails the test: refusals come before the work."""
    def boom(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(auditor.fl, "simulate", boom)


def test_the_calls_take_short_keyword_forms():
    for func, most in ((audit, 12), (leakaudit.audit, 12), (leakaudit.fl.simulate, 10),
                       (leakaudit.audit_observations, 13)):
        assert len(inspect.signature(func).parameters) <= most, func


def test_a_misspelled_defense_in_defense_params_is_refused(no_work):
    # it used to audit fed-cdp with the papers' parameters without a word
    with pytest.raises(ValueError, match=r"defense_params has an unknown defense.*'fed-cpd'"):
        audit(["none", "fed-cdp"], defense_params={"fed-cpd": {"sigma": 1.0}},
              engine="serial", progress=False)
    with pytest.raises(ValueError, match=r"defense_params: fed-cdp: .*sigmaa"):
        audit(["fed-cdp"], defense_params={"fed-cdp": {"sigmaa": 1.0}}, progress=False)


@pytest.mark.parametrize("call, match", [
    (lambda: audit([], progress=False), "defenses must be a non-empty"),
    (lambda: audit(["none", "none"], progress=False), "defenses must be distinct"),
    (lambda: AuditPlan.make(points=[]), "points must be a non-empty"),
    (lambda: AuditPlan.make(points=True), "points must be a non-empty"),
    (lambda: AuditPlan.make(points=(True,)), "points must be among"),
    (lambda: AuditPlan.make(points=(2, 2)), "points must be distinct"),
    (lambda: AuditPlan.make(points=(3,)), "points must be among"),
    (lambda: AuditPlan.make(attacks=()), "attacks must be a non-empty"),
    (lambda: AuditPlan.make(attacks=("idlg", "idlg")), "attacks must be distinct"),
    (lambda: AuditPlan.make(attacks=("nope",)), "attacks must be among"),
    (lambda: AuditPlan.make(stage="trainedd"), "stage must be one of"),
    (lambda: AuditPlan.make(profile="fast"), "profile must be one of"),
    (lambda: AuditPlan.make(delta=1.0), "delta must be"),
    (lambda: AuditPlan.make(trained=1), "trained must be True or False"),
    (lambda: AttackBudget.make(threshold=0), "threshold must be a finite number > 0"),
    (lambda: AttackBudget.make(restarts=0), "restarts must be >= 1"),
    (lambda: EngineConfig.make("serial", workers=4), "workers is only used with"),
    (lambda: EngineConfig.make("process", ray_address="auto"), "ray_address is only used"),
    (lambda: EngineConfig.make("threads"), "engine must be one of"),
])
def test_bad_selections_and_values_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_old_keywords_still_work_warn_and_build_the_same_plan(no_work):
    with pytest.warns(DeprecationWarning, match=r"audit\(points=\.\.\., examples=\.\.\.\) is "
                      r"deprecated: pass plan=AuditPlan\.make"):
        with pytest.raises(AssertionError, match="work started"):
            audit(["none"], points=(2,), examples=1, engine="serial", progress=False)
    old = auditor.fold_plan(None, {"points": (2,), "examples": 1})
    assert old == AuditPlan.make(points=(2,), examples=1)
    # the old empty selection is refused through the old keyword too, before any work
    with pytest.raises(ValueError, match="points must be a non-empty"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audit(["none"], points=[], progress=False)


def test_a_plan_is_rebuilt_checked_and_a_new_profile_brings_its_sizes():
    plan = AuditPlan.make(examples=2)
    assert plan.replace(points=(0,)).points == (0,) and plan.replace(points=(0,)).examples == 2
    paper = plan.replace(profile="paper")
    assert paper.examples == auditor.PROFILES["paper"].examples
    assert paper.max_iterations == auditor.PROFILES["paper"].max_iterations
    with pytest.raises(ValueError, match="stage must be one of"):
        plan.replace(stage="nope")
    with pytest.raises(ValueError, match="not a setting of AuditPlan"):
        plan.replace(workers=2)


def test_batch_size_beyond_the_attacked_clients_data_is_refused_before_training(no_work):
    # it was accepted: the attacked clients hold ~606 examples, so B silently became 606
    with pytest.raises(ValueError, match=r"batch_size must be at most the attacked clients' "
                                         r"data \(about 606 examples"):
        audit(["none"], plan=AuditPlan.make(batch_size=100_000), engine="serial",
              progress=False)
    with pytest.raises(ValueError, match=r"batch_size 1000 x examples 2 exceeds"):
        audit(["none"], plan=AuditPlan.make(batch_size=1000, local_steps=2),
              engine="serial", progress=False)


@pytest.mark.slow  # two tiny audits
def test_a_resumed_audit_starts_its_progress_bar_at_the_work_done(tmp_path, monkeypatch):
    """The bar of a resumed audit starts at what is done (tqdm's ``initial``), so that its
    rate and ETA are this run's: it used to jump over the stored work at once, which made
    the ETA about 20 times too short."""
    import json

    bars = []

    class Bar:
        def __init__(self, total, initial=0, **kwargs):
            self.total, self.initial, self.n = total, initial, initial
            bars.append(self)

        def update(self, k=1):
            self.n += k

        def set_description(self, *args):
            pass

        def close(self):
            pass

    monkeypatch.setattr(workload, "tqdm", Bar)
    path = tmp_path / "results.jsonl"
    kw = dict(plan=AuditPlan.make(attacks=("idlg",), points=(2,), examples=2,
                                  max_iterations=1, trained=True),
              engine="serial", results=str(path), progress=False)
    audit(["none"], **kw)
    lines = path.read_text().splitlines()
    last_cell = max(i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "cell")
    path.write_text("\n".join(ln for i, ln in enumerate(lines) if i != last_cell) + "\n")
    audit(["none"], **kw)  # resumes: one cell of three units of work left
    first, second = bars
    assert (first.initial, first.n, first.total) == (0, 3, 3)
    assert (second.initial, second.n, second.total) == (2, 3, 3)


@pytest.mark.slow  # one simulated round to observe
def test_audit_observations_refuses_a_record_for_a_label_no_observation_has(digits_run):
    run, model, ds = digits_run
    obs = run.observations_at(2)
    kw = dict(attacks=("idlg",), model=model, truths=[run.truth(o) for o in obs],
              input_shape=ds.input_shape, num_classes=ds.num_classes, engine="serial",
              progress=False)
    # a misspelled label used to give a report without that defense's accuracy and eps
    with pytest.raises(ValueError, match=r"defenses has an unknown label 'fed-cpd'"):
        leakaudit.audit_observations(obs, defenses={"fed-cpd": {"accuracy": 0.9}}, **kw)
    with pytest.raises(ValueError, match="attacks must be distinct"):
        leakaudit.audit_observations(obs, **{**kw, "attacks": ("idlg", "idlg")})
    with pytest.raises(ValueError, match="budget must be an AttackBudget"):
        leakaudit.audit_observations(obs, budget={"restarts": 2}, **kw)
    with pytest.raises(ValueError, match="workers is only used"), \
            pytest.warns(DeprecationWarning, match="pass engine=EngineConfig.make"):
        leakaudit.audit_observations(obs, workers=3, **kw)


@pytest.fixture(scope="module")
def digits_run():
    from leakaudit import data, fl, models

    ds = data.load("digits")
    model = models.resolve(None, ds, seed=0)
    run = fl.simulate(model, dataset=ds, rounds=1, taps=[fl.Tap(2, clients=1)],
                      config=fl.FLConfig.make(clients_per_round=1, batch_size=1),
                      progress=False)
    return run, model, ds


def test_top_level_empirical_trials_is_the_number_given_to_empirical(monkeypatch):
    from leakaudit import api

    seen = {}
    monkeypatch.setattr(auditor, "audit", lambda defenses, measure=None, **kw:
                        seen.setdefault("trials", measure and measure.trials))
    leakaudit.audit(["none"], empirical=500)
    assert seen.pop("trials") == 500
    with pytest.warns(DeprecationWarning, match=r"audit\(empirical_trials=\.\.\.\)"):
        api.audit(["none"], empirical=True, empirical_trials=300)
    assert seen.pop("trials") == 300
    with pytest.raises(ValueError, match="empirical_trials must be >= 100"):
        leakaudit.audit(["none"], empirical=5)
