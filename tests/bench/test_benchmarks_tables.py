"""The privacy and speed table scripts run at a tiny size and produce real content."""

import csv
import math
import warnings

import pytest
from conftest import load_benchmark

import accounting as A


@pytest.mark.slow
def test_privacy_table_has_every_setting_and_method(tmp_path, capsys):
    bench = load_benchmark("privacy")
    steps = bench.PROFILES["tiny"].steps
    assert bench.main(["--tiny", "--out", str(tmp_path)]) == 0
    for name in ("privacy.md", "privacy.csv", "privacy.png", "privacy_sampling.csv"):
        assert (tmp_path / name).stat().st_size > 0
    text = (tmp_path / "privacy.md").read_text()
    assert text == capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("| setting |"))
    for _, column in bench.COLUMNS:
        assert f"| {column} |" in header
    for setting in ("constant", "linear", "staircase", "exponential", "cyclic"):
        assert f"| {setting} |" in text
    assert "## What the conventions change" in text
    sampling = list(csv.DictReader((tmp_path / "privacy_sampling.csv").open()))
    assert [float(r["sigma"]) for r in sampling] == [1.0]
    assert tuple(sampling[0]) == bench.SAMPLING_FIELDS
    r = sampling[0]  # random allocation below Poisson; shuffling's lower end above it
    assert float(r["alloc_lower"]) <= float(r["alloc_upper"]) < float(r["poisson_lower"])
    assert float(r["poisson_upper"]) < float(r["shuffle_lower"]) <= float(r["shuffle_upper"])

    rows = {r["setting"]: r for r in csv.DictReader((tmp_path / "privacy.csv").open())}
    assert set(rows) == {"constant", "linear", "staircase", "exponential", "cyclic"}
    const = rows["constant"]
    rdp, basic = float(const["rdp"]), float(const["basic"])
    assert 0 < rdp < basic
    ledger = A.PrivacyLedger()
    ledger.step(q=bench.Q, sigma=bench.SIGMA, count=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = {m: ledger.epsilon(bench.DELTA, m) for m in ("rdp", "basic", "moments")}
    assert math.isclose(rdp, direct["rdp"], rel_tol=1e-12)
    assert math.isclose(basic, direct["basic"], rel_tol=1e-12)
    assert math.isclose(float(const["moments"]), direct["moments"], rel_tol=1e-12)
    for r in rows.values():  # every accountant bounds the same eps: RDP is never above moments
        assert float(r["rdp"]) <= float(r["moments"]) <= float(r["basic"])
        assert r["prv_note"] or float(r["prv_lower"]) <= float(r["rdp"])
        assert float(r["pld_lower"]) <= float(r["pld"]) <= float(r["rdp"])
    # the tiny profile runs prv-accountant where the schedule has one sigma: a real bracket
    assert not const["prv_note"]
    lower, estimate, upper = (float(const[k]) for k in ("prv_lower", "prv", "prv_upper"))
    assert 0 <= lower <= estimate <= upper and lower <= float(const["rdp"])
    assert lower <= float(const["pld"]) and float(const["pld_lower"]) <= upper


@pytest.mark.slow
def test_speed_table_has_its_three_comparisons(tmp_path, capsys):
    bench = load_benchmark("speed")
    assert bench.main(["--tiny", "--out", str(tmp_path)]) == 0
    for name in ("speed.md", "speed.csv", "speed.png"):
        assert (tmp_path / name).stat().st_size > 0
    text = (tmp_path / "speed.md").read_text()
    assert text == capsys.readouterr().out
    assert "| what | ours (s) | peer | peer (s) | peer / ours |" in text
    rows = list(csv.DictReader((tmp_path / "speed.csv").open()))
    assert {r["group"] for r in rows} == {"a", "b", "c"}
    for group in ("(a) accountant", "(b) one DP local step", "(c) one DLG"):
        assert any(r["what"].startswith(group) for r in rows)
        assert f"| {group}" in text
    for r in rows:
        for key in ("ours_s", "peer_s", "ratio_peer_over_ours"):
            value = float(r[key])
            assert math.isfinite(value) and value > 0, (r["what"], key, value)
        assert math.isclose(float(r["ratio_peer_over_ours"]),
                            float(r["peer_s"]) / float(r["ours_s"]), rel_tol=1e-9)
