"""benchmarks/ledger_queries.py runs end to end at its tiny size."""

import pytest
from conftest import load_benchmark


@pytest.mark.slow  # PLD computations and a subprocess
def test_ledger_queries_runs_and_the_shared_queries_cost_one(tmp_path, capsys, monkeypatch):
    bench = load_benchmark("ledger_queries")
    # the tiny profile's code path on a 100-sigma schedule: one computation per history
    # holds at any size (the page's --tiny figures are of 1,000 sigmas)
    monkeypatch.setitem(bench.PROFILES, "tiny", bench.Profile(100, ("small-mix",)))
    assert bench.main(["--tiny", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "ledger_queries.md").read_text()
    assert text == capsys.readouterr().out
    assert "## 1. One computation" in text and "## 2. Mixed ledgers" in text
    # every query of section 1 gives the same certified eps (one PLD bracket)
    eps = {line.split("|")[2].strip() for line in text.splitlines()
           if line.startswith(("| epsilon(pld)", "| epsilon_bounds(pld)", "| tightest"))}
    assert len(eps) == 1
    assert "| small-mix | 1e-06 |" in text
