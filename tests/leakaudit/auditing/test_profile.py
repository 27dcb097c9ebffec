"""The protection profile: its columns, the verdict rule on constructed rows, the cell limit."""

from __future__ import annotations

import math

import pytest

from leakaudit.auditing import profile as P
from leakaudit.auditing.report import AuditReport, format_number, markdown_table

ID_OK = {"k": 10, "trials": 100, "success": 0.3, "ci_low": 0.2, "ci_high": 0.42,
         "bound": 0.43, "clean": 1.0, "scorers": 9, "point": 2, "scorer": "all", "mu": 1.1}


def _cell(defense, stage, point, attack, example, success, psnr):
    return {"defense": defense, "stage": stage, "point": point, "attack": attack,
            "example": example, "success": success, "psnr": psnr, "mse": 0.1,
            "ssim": 0.5, "tau": 5, "label_accuracy": 1.0}


@pytest.fixture
def report():
    rep = AuditReport(config={"empirical_trials": 300}, threshold=0.01, delta=1e-5)
    rep.add_defense("none()", "none", {"accuracy": 0.96, "eps_claimed": math.inf,
                                       "eps_sound": math.inf, "level": "none", "sites": [],
                                       "eps_measured": 3.9})
    rep.add_defense("fed-cdp(s)", "fed-cdp", {
        "accuracy": 0.8, "eps_claimed": 7.6, "eps_sound": 7.6, "level": "instance",
        "sites": ["example"], "relation": "add-remove", "eps_measured": 1.4,
        "settings": {"client_sampling": "fixed-size"}})
    for key in rep.defenses:
        rep.add_stage(key, "initial", {"rounds": 0, "accuracy": 0.1})
        rep.add_stage(key, "trained", {"rounds": 30, "accuracy": 0.9})
        for stage in ("initial", "trained"):
            for point in (0, 1, 2):
                for e in range(2):
                    ok = key == "none()" and stage == "initial"
                    rep.add_cell(_cell(key, stage, point, "idlg", e, ok, 70.0 if ok else 5.0))
                    rep.add_cell(_cell(key, stage, point, "cpl", e, ok and e == 0,
                                       60.0 if ok else 6.0))
            rep.add_identification(key, stage, dict(
                ID_OK, success=1.0, ci_low=0.96, ci_high=1.0, bound=1.0)
                if key == "none()" else ID_OK)
    return rep


def test_one_row_per_defense_and_stage_with_the_columns(report):
    rows = P.profile_rows(report)
    assert [(r["defense"], r["stage"]) for r in rows] == [
        ("none()", "initial"), ("none()", "trained"), ("fed-cdp(s)", "initial"),
        ("fed-cdp(s)", "trained")]
    table = P.profile_table(rows, format_number)
    assert all(tuple(t) == P.COLUMNS for t in table)
    assert table[0]["rebuilt [95% CI] PSNR"] == "2/2 [0.16, 1.00] 70 dB idlg"
    assert table[2]["identified [95% CI]"] == "0.30 [0.20, 0.42] k=10"
    assert table[2]["bound"] == "0.43" and table[2]["measured eps >="] == "1.4"
    assert table[3]["stage"] == "trained (30 r.)" and table[3]["accuracy"] == "0.9"
    assert [r["verdict"] for r in rows] == ["leaks", "leaks", "bounded", "bounded"]


def test_markdown_puts_the_profile_first_with_caption_and_footnotes(report):
    md = report.to_markdown()
    assert md.index("Protection profile") < md.index("Per attack")
    assert "delta = 1e-05" in md and "fed-cdp: add-remove, instance level, fixed-size" in md
    assert "k = 10 candidates" in md and "(300 held-out runs per side)" in md
    assert "| fed-cdp(s) | initial (0 r.) | 0.1 | 7.6 | 7.6 | 1.4 |" in md
    back = AuditReport.from_json(report.to_json())
    assert back.to_markdown() == md


def test_cells_longer_than_the_limit_are_refused(report):
    rows = P.profile_rows(report)
    rows[0]["verdict"] = "x" * (P.CELL_LIMIT + 1)
    with pytest.raises(ValueError, match="verdict"):
        P.profile_table(rows, format_number)
    cells = P.profile_table(P.profile_rows(report), format_number)
    assert max(len(v) for t in cells for v in t.values()) <= P.CELL_LIMIT


def test_a_long_defense_label_is_written_in_full(report):
    """Defenses with several parameters have labels past the limit (quantile-clip's is 92
    characters); the profile names them in full instead of failing the finished audit."""
    rows = P.profile_rows(report)
    label = ("quantile-clip(clip=1.0, noise_multiplier=1.0, sigma_b=2.0, "
             "target_quantile=0.5, clip_lr=0.2)")
    assert len(label) > P.CELL_LIMIT
    rows[0]["defense"] = label
    assert P.profile_table(rows, format_number)[0]["defense"] == label


@pytest.mark.parametrize("facts, word", [
    (dict(sound_eps=1.0, measured_eps=2.0), "unsound"),
    (dict(sound_eps=1.0, identification=dict(ID_OK, ci_low=0.5, bound=0.43)), "unsound"),
    (dict(sound_eps=5.0, rebuilt=1), "leaks"),
    (dict(sound_eps=math.inf, identification=dict(ID_OK, ci_low=0.6, bound=1.0)), "leaks"),
    (dict(sound_eps=7.6, identification=ID_OK), "bounded"),
    (dict(sound_eps=10.0), "bounded"),
    (dict(sound_eps=54.0, identification=ID_OK), "no guarantee"),
    (dict(sound_eps=math.inf, could_rebuild=True), "no guarantee"),
    (dict(sound_eps=54.0, could_rebuild=False,
          identification=dict(ID_OK, clean=0.1)), "inconclusive"),
    (dict(sound_eps=math.inf), "inconclusive"),
])
def test_verdict_rule(facts, word):
    assert P.verdict_word(**facts) == word
    assert word in P.VERDICTS


def test_rebuilt_at_an_unprotected_point_shows_the_tier_could_succeed(report):
    """fed-sdp-server protects point 0 only: its row reads point 0, and a rebuild at point
    1 (the same weights, no noise) is the sign the attacks could succeed there."""
    rep = AuditReport(threshold=0.01)
    rep.add_defense("sdp", "fed-sdp-server", {"eps_sound": 6000.0, "eps_claimed": 1000.0,
                                              "sites": ["server"], "level": "client"})
    rep.add_stage("sdp", "trained", {"rounds": 30, "accuracy": 0.8})
    rep.add_cell(_cell("sdp", "trained", 0, "idlg", 0, False, 4.0))
    rep.add_cell(_cell("sdp", "trained", 1, "idlg", 0, True, 40.0))
    (row,) = P.profile_rows(rep)
    assert row["point"] == 0 and row["could_rebuild"] is True
    assert row["reconstruction"]["rebuilt"] == 0 and row["verdict"] == "no guarantee"
    assert "| sdp | trained (30 r.) |" in P.profile_markdown(rep, markdown_table, format_number)


@pytest.mark.slow  # trains 30 rounds of fed-cdp (about 20 s on a quiet core)
def test_the_quick_profile_has_a_dp_row_that_learns_at_a_meaningful_eps():
    """fed-cdp in the quick profile's setting spends sound eps <= 10 at delta 1e-5 and
    still reaches >= 70 % test accuracy on digits (a guarantee that means something)."""
    from leakaudit import fl
    from leakaudit.auditing import PROFILES
    from leakaudit.defenses import get

    prof = PROFILES["quick"]
    config = fl.FLConfig.make(clients=prof.clients, clients_per_round=prof.clients_per_round,
                              rounds=prof.rounds, local_steps=prof.local_steps,
                              batch_size=prof.batch_size, lr=prof.lr, optimizer=prof.optimizer,
                              seed=0, progress=False)
    run = fl.simulate(None, dataset="digits",
                      defense=get("fed-cdp", **prof.defense_params["fed-cdp"]), config=config)
    assert run.epsilon(1e-5, "sound") <= P.EPS_MEANINGFUL
    assert run.final_accuracy >= 0.7


@pytest.mark.slow  # two small audits end to end
def test_identification_records_resume_without_work(tmp_path, monkeypatch):
    """The identification cells are stored like the attack cells: a rerun with the same
    results file simulates nothing and prints the same bytes."""
    from leakaudit import fl
    from leakaudit.auditing import AuditPlan, audit
    from leakaudit.auditing.identification import IdentificationBudget

    options = dict(attacks=("idlg",), engine="serial", progress=False, seed=0,
                   plan=AuditPlan.make(points=(1, 2), examples=1, rounds=1, max_iterations=2,
                                       stages=("initial", "trained")),
                   identify=IdentificationBudget(k=2, trials=4, pool=4),
                   results=str(tmp_path / "r.jsonl"))
    first = audit(["none", "fed-cdp"], **options)
    rows = first.profile_rows()
    assert len(rows) == 4 and all(r["identification"]["trials"] == 4 for r in rows)
    assert rows[2]["point"] == 2 and rows[2]["identification"]["bound"] < 1.0

    def no_simulation(*args, **kwargs):
        raise AssertionError("a complete results file must resume without simulating")

    monkeypatch.setattr(fl, "simulate", no_simulation)
    again = audit(["none", "fed-cdp"], **options)
    assert again.to_markdown() == first.to_markdown() and again.to_json() == first.to_json()
