"""One Report protocol for every result: each class a public call returns offers rows,
Markdown, CSV, JSON, LaTeX, save and from_json, and rebuilds itself from the JSON it saved."""

import json
import math
import typing

import pytest

import leakaudit
from leakaudit import empirical
from leakaudit.auditing import AuditReport
from leakaudit.empirical import PrivacyReport
from leakaudit.reporting import FORMATS, Report

PUBLIC_CALLS = (leakaudit.audit, leakaudit.audit_observations, leakaudit.privacy_audit,
                leakaudit.privacy_audit_training, empirical.audit_release)


def _audit_report() -> AuditReport:
    rep = AuditReport(config={"dataset": "digits"}, threshold=0.01, delta=1e-5)
    rep.add_defense("none()", "none", {"accuracy": 0.9, "eps_claimed": math.inf,
                                       "eps_sound": math.inf, "reason": "no DP guarantee",
                                       "level": "none"})
    for e, mse in enumerate([1e-4, 0.5]):
        rep.add_cell({"defense": "none()", "point": 2, "attack": "dlg", "example": e,
                      "mse": mse, "rmse": math.sqrt(mse), "psnr": -10 * math.log10(mse),
                      "ssim": 0.5, "success": mse <= 0.01, "tau": 5, "label_accuracy": 1.0,
                      "truth": [[[0.0, 1.0], [1.0, 0.0]]],
                      "reconstruction": [[[0.1, 0.9], [0.9, 0.1]]]})
    return rep


def _privacy_report() -> PrivacyReport:
    # a real call (a one-step Gaussian release on a tiny model), then a row with inf and nan
    rep = empirical.audit_release(leakaudit.defenses.get("fed-cdp", clip=1.0, sigma=1.0),
                                  point=2, trials=100, shapes=((3, 4),), background=4,
                                  statistic="projection", canaries=["dirac"], seed=0)
    rep.add(dict(rep.rows()[0], defense="made-up", eps_claimed=math.inf, eps_sound=math.inf,
                 mu_sound=math.nan, sound_violated=False, reason="a & b_c"))
    return rep


BUILDERS = {AuditReport: _audit_report, PrivacyReport: _privacy_report}


def test_every_public_call_returns_a_report_class_tested_here():
    for call in PUBLIC_CALLS:
        returned = typing.get_type_hints(call)["return"]
        assert returned in BUILDERS, f"{call.__qualname__} returns {returned}"
        assert issubclass(returned, Report)


@pytest.mark.parametrize("cls", list(BUILDERS), ids=lambda c: c.__name__)
def test_every_report_renders_every_format_and_rebuilds_from_its_json(cls, tmp_path):
    rep = BUILDERS[cls]()
    assert isinstance(rep, Report)
    rows = rep.rows()
    assert rows and all(isinstance(r, dict) for r in rows)
    texts = {"md": rep.to_markdown(), "csv": rep.to_csv(), "tex": rep.to_latex(),
             "json": rep.to_json()}
    assert texts["tex"].startswith(r"\begin{tabular}") and r"\end{tabular}" in texts["tex"]
    assert texts["md"].count("\n|") >= len(rows)
    assert len(texts["csv"].splitlines()) > len(rows)
    json.loads(texts["json"])  # valid JSON: no bare inf or NaN
    assert "Infinity" not in texts["json"] and "NaN" not in texts["json"]
    paths = rep.save(tmp_path, stem="r")
    assert set(FORMATS) <= set(paths)
    for ext in FORMATS:
        assert paths[ext] == tmp_path / f"r.{ext}"
        assert paths[ext].read_bytes().decode() == texts[ext]
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    again = cls.from_json(paths["json"].read_text())
    assert type(again) is cls
    assert again.to_json() == texts["json"] and again.to_markdown() == texts["md"]
    assert again.to_csv() == texts["csv"] and again.to_latex() == texts["tex"]
    assert (json.dumps(again.rows(), default=str, sort_keys=True)
            == json.dumps(rows, default=str, sort_keys=True))


def test_a_privacy_report_keeps_inf_and_nan_through_json_and_escapes_latex(tmp_path):
    rep = _privacy_report()
    again = PrivacyReport.from_json(rep.to_json())
    made_up = again.rows()[1]
    assert made_up["eps_sound"] == math.inf and math.isnan(made_up["mu_sound"])
    assert r"a \& b\_c" in rep.to_latex()
    with pytest.raises(ValueError, match="no list of rows"):
        PrivacyReport.from_json(json.dumps({"config": {}}))
    empty = PrivacyReport().save(tmp_path)  # no rows: the tables, no figure
    assert set(empty) == set(FORMATS)


def test_audit_release_returns_its_row_in_a_report_and_warns_on_the_old_form():
    """The positional form warns (the one deprecation mechanism); a report is no row."""
    d = leakaudit.defenses.get("fed-cdp", clip=1.0, sigma=1.0)
    kw = dict(shapes=((3, 4),), background=4, statistic="projection", canaries=["dirac"],
              seed=0)
    rep = empirical.audit_release(d, point=2, trials=100, **kw)
    assert isinstance(rep, PrivacyReport) and len(rep.rows()) == 1
    row = rep.rows()[0]
    assert row["point"] == 2 and row["trials"] == 100 and row["defense"] == "fed-cdp"
    with pytest.warns(DeprecationWarning, match="point=..., trials=..."):
        old = empirical.audit_release(d, 2, 100, **kw)
    assert old.rows() == rep.rows()
    with pytest.raises(TypeError):
        old["eps_lower"]  # noqa: B018
    with pytest.raises(TypeError, match="1 positional argument"):
        empirical.audit_release(d, 2, 100, 5, **kw)
