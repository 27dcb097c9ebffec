"""The one-call audit: end to end on digits at a tiny size, resume, trained models, CLI."""

import json
import math

import pytest
import torch

import leakaudit
from leakaudit import models
from leakaudit.auditing import audit
from leakaudit.cli import main as cli_main

TINY = dict(examples=1, rounds=1, max_iterations=25, progress=False, workers=1)


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit") / "results.jsonl"
    rep = audit(defenses=["none", "fed-cdp"], attacks=("idlg",), points=(0, 1, 2),
                results=str(path), **TINY)
    return rep, path


@pytest.mark.slow
def test_none_leaks_and_fed_cdp_resists(tiny_report):
    rep, _ = tiny_report
    res = rep.resilience()
    none = next(k for k in res if k.startswith("none"))
    cdp = next(k for k in res if k.startswith("fed-cdp"))
    assert res[none] == {0: False, 1: False, 2: False}
    assert res[cdp] == {0: True, 1: True, 2: True}
    rows = {(r["defense"], r["point"]): r for r in rep.rows()}
    assert rows[(none, 2)]["label_accuracy"] == 1.0 and rows[(none, 2)]["mse"] < 1e-3
    d = {r["defense"]: r for r in rep.defense_rows()}
    assert d[none]["eps_sound"] == float("inf")
    # every client takes part in every round here, so claimed and sound agree; where they do
    # not, the row says why
    assert 0 < d[cdp]["eps_claimed"] < float("inf")
    assert d[cdp]["reason"] or d[cdp]["eps_claimed"] == d[cdp]["eps_sound"]


@pytest.mark.slow
def test_resume_skips_finished_cells(tiny_report, monkeypatch):
    rep, path = tiny_report
    lines = path.read_text().splitlines()
    assert len(lines) == 2 + 2 + 2 * 3  # two training records, two stage records, six cells

    def boom(*a, **k):
        raise AssertionError("a finished cell was recomputed")

    monkeypatch.setattr("leakaudit.attacks.reconstruct", boom)
    again = audit(defenses=["none", "fed-cdp"], attacks=("idlg",), points=(0, 1, 2),
                  results=str(path), **TINY)
    assert again.rows() == rep.rows()
    assert path.read_text().splitlines() == lines  # nothing appended


@pytest.mark.slow
def test_partial_file_resumes_the_rest(tiny_report, tmp_path):
    _, path = tiny_report
    lines = path.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:4]) + "\n")  # as if killed after a few cells
    rep = audit(defenses=["none", "fed-cdp"], attacks=("idlg",), points=(0, 1, 2),
                results=str(partial), **TINY)
    assert len(partial.read_text().splitlines()) == len(lines)
    assert len(rep.rows()) == 6


@pytest.mark.slow
def test_audit_an_already_trained_model():
    model = models.lenet(generator=torch.Generator().manual_seed(3))
    rep = audit(defenses=["none"], model=model, trained=True, attacks=("idlg",), points=(2,),
                **TINY)
    assert len(rep.rows()) == 1
    # the flag takes effect: no profile training run (L = 5 Adam steps of B = 32), only the
    # one audited round (one SGD step of batch size 1) on the given weights
    (record,) = rep.defenses.values()
    assert rep.config["trained"] is True
    s = record["settings"]
    assert (s["rounds"], s["local_steps"], s["batch_size"], s["optimizer"]) == (1, 1, 1, "sgd")
    untrained = audit(defenses=["none"], model=model, attacks=("idlg",), points=(2,), **TINY)
    (plain,) = untrained.defenses.values()
    assert plain["settings"]["local_steps"] > 1 and plain["settings"]["batch_size"] > 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="attacks"):
        audit(defenses=["none"], attacks=("magic",), **TINY)
    with pytest.raises(ValueError, match="points"):
        audit(defenses=["none"], points=(3,), **TINY)
    with pytest.raises(ValueError, match="profile"):
        audit(defenses=["none"], profile="slow", **TINY)
    with pytest.raises(ValueError, match="unknown defense"):
        audit(defenses=["nope"], **TINY)


@pytest.mark.slow
def test_cli_audit_writes_every_format(tmp_path, capsys):
    code = cli_main(["audit", "--defenses", "none", "--attacks", "idlg", "--points", "2",
                     "--examples", "1", "--rounds", "1", "--max-iterations", "20", "--out",
                     str(tmp_path), "--no-progress", "--engine", "serial"])
    assert code == 0
    out = capsys.readouterr().out
    assert "| defense | stage | accuracy | claimed eps | sound eps |" in out  # the profile
    assert "| none() | trained (1 r.) |" in out and "| none() | initial (0 r.) |" in out
    for ext in ("md", "csv", "tex", "json", "png"):
        assert (tmp_path / f"audit.{ext}").exists()
    assert json.loads((tmp_path / "audit.json").read_text())["rows"][0]["point"] == 2
    assert (tmp_path / "results.jsonl").exists()


def test_top_level_audit_is_the_audit_with_the_empirical_column():
    import inspect

    from leakaudit import api

    assert leakaudit.audit is api.audit
    top, inner = (set(inspect.signature(f).parameters) for f in (leakaudit.audit, audit))
    assert top == inner - {"measure"} | {"empirical"}
    assert len(top) <= 12 and len(inspect.signature(leakaudit.audit_observations).parameters) <= 13


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_the_report_is_a_report_and_rebuilds_from_its_json(tiny_report):
    from leakaudit.auditing import AuditReport
    from leakaudit.reporting import Report

    rep, _ = tiny_report
    assert isinstance(rep, Report)
    again = AuditReport.from_json(rep.to_json())
    assert again.to_json() == rep.to_json()
    assert again.to_markdown() == rep.to_markdown() and again.to_csv() == rep.to_csv()
    with pytest.raises(ValueError, match="no defense records"):
        AuditReport.from_json(json.dumps({"config": {}, "rows": []}))


def test_bare_defense_names_mean_the_papers_parameters_everywhere():
    from leakaudit import defenses
    from leakaudit.fl import resolve_defenses

    for name, params in defenses.PAPER_PARAMS.items():
        built = defenses.get(name)
        assert all(getattr(built, k) == v for k, v in params.items()), name
        assert resolve_defenses([name])[0].describe() == built.describe()
    assert defenses.get("random-noise").variance == 0.001
    assert defenses.get("random-noise", variance=0.5).variance == 0.5  # overridable


def test_only_the_defenses_are_positional():
    with pytest.raises(TypeError):
        audit(["none"], "digits")
    with pytest.raises(TypeError):
        leakaudit.audit_observations([], ("idlg",), ("dlg",))


@pytest.mark.parametrize("bad", [dict(threshold=-1), dict(threshold=0.0), dict(delta=1.5),
                                 dict(seed=-1)])
def test_bad_numbers_are_refused_before_any_work(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        audit(["none"], **{**TINY, **bad})


def test_the_progress_bar_names_the_defense_and_the_phase(monkeypatch):
    from leakaudit import workload

    phases = []

    class Bar:
        def __init__(self, **kwargs):
            pass

        def set_description(self, text):
            phases.append(text)

        def update(self, n=1):
            pass

        def close(self):
            pass

    monkeypatch.setattr(workload, "tqdm", lambda **kw: Bar(**kw))
    audit(["none", "prune"], attacks=("idlg",), points=(2,), examples=1, trained=True,
          max_iterations=2, workers=1, progress=True)
    # the trainings first (units of the engine, all at once), then each defense's attacks
    assert phases == ["train (2 runs)", "none", "none: attack initial", "prune",
                      "prune: attack initial"]


@pytest.mark.slow
def test_a_client_that_never_took_part_does_not_make_the_sound_eps_infinite(digits):
    # one round of the quick profile (5 of 10 clients): five empty sound ledgers released
    # nothing (eps 0); the audit's eps_sound is the worst client's, finite for fed-cdp and equal
    # to the run's (it read inf before: an empty ledger counted as no guarantee)
    from leakaudit import fl
    run = fl.simulate(None, dataset=digits, defense="fed-cdp", clients=10, clients_per_round=5,
                      rounds=1, progress=False)
    assert any(not lg.events for lg in run.sound) and math.isfinite(run.epsilon(1e-5))
    report = leakaudit.audit(["fed-cdp"], dataset=digits, points=[2], attacks=["idlg"],
                             examples=1, rounds=1, max_iterations=2, engine="serial",
                             progress=False)
    (row,) = report.defense_rows()
    assert 0.0 < row["eps_sound"] < math.inf
