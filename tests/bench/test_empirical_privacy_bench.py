"""benchmarks/empirical_privacy.py at its tiny profile: the sweep's rows are the pairs asked
for, every eps is a number in range, the shipped defenses survive their audit while the
realised-batch normaliser is caught, and every section and output is written."""

import math

import pytest
from conftest import load_benchmark


@pytest.mark.slow  # trains and audits (torch)
def test_benchmark_runs_at_a_tiny_size(tmp_path, capsys):
    bench = load_benchmark("empirical_privacy")
    report = bench.main(["--tiny", "--defenses", "fed-cdp,fed-sdp-server",
                         "--points", "2,0", "--skip", "tight,speed,mutants",
                         "--out", str(tmp_path)])
    rows = report.rows()
    assert {(r["defense"], r["point"]) for r in rows} == {
        ("fed-cdp", 2), ("fed-cdp", 0), ("fed-sdp-server", 0)}
    for r in rows:  # finite sound ledgers that the measured lower bound does not cross
        assert 0 < r["eps_claimed"] <= r["eps_sound"] < math.inf
        assert 0 <= r["eps_lower"] <= r["eps_sound"] and not r["sound_violated"]
        assert r["trials"] == bench.PROFILES["tiny"]["trials"]
    text = (tmp_path / "empirical_privacy.md").read_text()
    assert text == capsys.readouterr().out.split("wrote ")[0]
    assert text.startswith("# Measured privacy (")
    for heading in ("## Claimed vs sound vs measured", "## Exposure", "## The simulator's"):
        assert heading in text
    for skipped in ("## Tightness", "## Speed", "## Mutation suite"):
        assert skipped not in text
    # the data-dependent normaliser is caught even at the tiny size; fed-cdp is not
    exposure = text.split("## Exposure")[1].split("## The simulator's")[0]
    assert "| realised-batch-cdp |" in exposure and exposure.count("**yes**") == 1
    # the aggregate game: each listed defense under the three client samplings
    game = text.split("## The simulator's")[1]
    for sampling in ("fixed K=3", "Poisson q=0.6", "every client"):
        assert f"| fed-cdp | {sampling} |" in game
    for ext in ("csv", "json", "png"):
        assert (tmp_path / f"empirical_privacy.{ext}").stat().st_size > 0
