"""Results file (resume) and the audit report's renderings, on synthetic cells."""

import csv
import io
import json
import math

import pytest

from leakaudit.auditing.report import AuditReport
from leakaudit.auditing.results import ResultsFile, fingerprint


def test_results_file_resumes_and_ignores_a_cut_line(tmp_path):
    path = tmp_path / "r.jsonl"
    cfg = {"dataset": "digits", "seed": 0}
    a = ResultsFile(path, cfg)
    a.put("cell", "x|0|dlg|0", {"mse": 0.5})
    a.put("cell", "x|1|dlg|0", {"mse": 0.25})
    with path.open("a") as fh:
        fh.write('{"format": "leakaudit.results/1", "run": "')  # killed mid-write
    b = ResultsFile(path, cfg)
    assert b.get("cell", "x|0|dlg|0") == {"mse": 0.5} and b.has("cell", "x|1|dlg|0")
    assert not b.has("cell", "x|2|dlg|0")
    other = ResultsFile(path, {"dataset": "digits", "seed": 1})  # another configuration
    assert not other.has("cell", "x|0|dlg|0")
    assert fingerprint(cfg) == fingerprint({"seed": 0, "dataset": "digits"})


def test_results_file_errors(tmp_path):
    with pytest.raises(ValueError, match="directory"):
        ResultsFile(tmp_path, {})
    with pytest.raises(ValueError, match="does not exist"):
        ResultsFile(tmp_path / "missing" / "r.jsonl", {})
    mem = ResultsFile(None, {})
    mem.put("cell", "k", {"a": 1})
    assert mem.get("cell", "k") == {"a": 1}


def cell(defense, point, attack, example, mse, success, tau=5):
    return {"defense": defense, "point": point, "attack": attack, "example": example,
            "mse": mse, "rmse": math.sqrt(mse), "psnr": -10 * math.log10(mse), "ssim": 0.5,
            "success": success, "tau": tau, "label_accuracy": 1.0,
            "truth": [[[0.0, 1.0], [1.0, 0.0]]], "reconstruction": [[[0.1, 0.9], [0.9, 0.1]]]}


@pytest.fixture
def report():
    r = AuditReport(config={"dataset": "digits"}, threshold=0.01)
    r.add_defense("none()", "none", {"accuracy": 0.9, "eps_claimed": "inf", "eps_sound": "inf",
                                     "reason": "no DP guarantee", "level": "none"})
    r.add_defense("fed-cdp(clip=4.0, sigma=6.0)", "fed-cdp",
                  {"accuracy": 0.5, "eps_claimed": 1.5, "eps_sound": 3.0, "reason": "why",
                   "level": "instance"})
    for e, (m, s) in enumerate([(1e-4, True), (0.5, False)]):
        r.add_cell(cell("none()", 2, "dlg", e, m, s, tau=10 * (e + 1)))
    for e in range(2):
        r.add_cell(cell("fed-cdp(clip=4.0, sigma=6.0)", 2, "dlg", e, 0.3, False, tau=40))
    return r


def test_rows_aggregate_asr_and_resilience(report):
    rows = report.rows()
    none, cdp = rows
    assert none["asr"] == 0.5 and not none["resilient"]
    assert none["mse"] == pytest.approx((1e-4 + 0.5) / 2) and none["tau"] == 15
    assert cdp["asr"] == 0.0 and cdp["resilient"]
    assert report.resilience() == {"none()": {2: False}, "fed-cdp(clip=4.0, sigma=6.0)": {2: True}}


def test_renderings(report, tmp_path):
    md = report.to_markdown()
    assert "| defense | point | attack | resilient |" in md and "| none() | 2 | dlg | no |" in md
    assert "| fed-cdp(clip=4.0, sigma=6.0) | 0.5 | 1.5 | 3 | why |" in md
    assert "| none() | 0.9 | inf | inf | no DP guarantee |" in md
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(rows) == 2 and rows[1]["eps_sound"] == "3.0"
    assert report.to_latex().startswith(r"\begin{tabular}")
    data = json.loads(report.to_json())
    assert data["rows"][0]["defense"] == "none()" and data["defenses"][0]["eps_sound"] == "inf"
    paths = report.save(tmp_path)
    assert set(paths) == {"md", "csv", "tex", "json", "png"}
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
