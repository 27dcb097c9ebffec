"""The benchmark scripts run end to end at a tiny size, so they cannot rot."""

import csv
import json
import math

import pytest
from conftest import load_benchmark

import accounting as A


@pytest.mark.slow  # imports torch (and Opacus)
def test_accounting_speed_runs_and_reports_every_section(tmp_path, capsys):
    bench = load_benchmark("accounting_speed")
    assert bench.main(["--tiny", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "accounting_speed.md").read_text()
    assert text == capsys.readouterr().out
    for heading in ("## 1.", "## 2. Conservative", "## 3. Scaling", "## 4.", "## 5."):
        assert heading in text
    prof = bench.PROFILES["tiny"]
    assert f"extrapolated from {prof.peer_steps} steps" in text
    # the table's eps is the accountant's, on the same schedule and orders
    eps, order = bench.ours_eps(A.schedules.exponential(bench.SIGMA0, bench.SIGMA_END,
                                                        prof.steps), bench.ORDERS)
    assert f"| all {prof.steps:,} | {bench.fmt_eps(eps, order)} |" in text
    # the peers agree with ours on the prefix they ran (relative differences < 1e-9)
    prefix = next(line for line in text.splitlines()
                  if line.startswith(f"| first {prof.peer_steps} |"))
    diffs = [float(c) for c in prefix.strip("|").split("|")[-2:]]
    assert all(abs(d) < 1e-9 for d in diffs), prefix
    # section 4: ours within 1e-8 of the 40-digit integral at both fractional orders
    frac = text.split("## 4.")[1].split("## 5.")[0]
    rows = [line.split("|") for line in frac.splitlines() if line.startswith("| 1.")]
    assert len(rows) == 2 and all(abs(float(r[8])) < 1e-8 for r in rows)
    # section 5: the certified bracket is ordered and the peer's eps lies in or above it
    pld = text.split("## 5.")[1]
    for line in pld.splitlines():
        if line.startswith(("| exponential", "| constant", "| uniform")):
            lower, upper = (float(v) for v in line.split("|")[3].split("/"))
            assert 0 < lower <= upper
    # the q = 0.001 schedule of distinct sigmas (<= 2 % wide) and the 2,000-sigma
    # speed-up line are printed
    small = next(line for line in pld.splitlines() if line.startswith("| uniform sigma"))
    assert float(small.split("|")[4].strip().rstrip("%")) <= 2.0


@pytest.mark.slow  # imports torch (and Opacus)
def test_utility_runs_and_writes_its_table(tmp_path):
    bench = load_benchmark("utility")
    assert bench.main(["--tiny", "--defenses", "none,fed-cdp", "--jobs", "1",
                       "--out", str(tmp_path)]) == 0
    text = (tmp_path / "utility.md").read_text()
    assert "| none |" in text and "| fed-cdp |" in text
    with (tmp_path / "utility.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == tuple(bench.CSV_FIELDS)
        rows = {r["defense"]: r for r in reader}
    assert set(rows) == {"none", "fed-cdp"}
    for r in rows.values():
        assert 0.0 <= float(r["final_accuracy"]) <= float(r["best_accuracy"]) <= 1.0
        assert int(r["rounds"]) == bench.PROFILES["tiny"]["rounds"]
    assert math.isinf(float(rows["none"]["sound_eps"]))
    cdp = rows["fed-cdp"]
    assert 0 < float(cdp["claimed_eps"]) <= float(cdp["sound_eps"]) < math.inf
    # the equal-privacy table: fed-cdp's own budget keeps both of its rounds
    assert "## Accuracy at the same sound eps budget" in text
    assert "| fed-cdp | " in text.split("## Accuracy at the same")[1]
    assert (tmp_path / "utility.png").stat().st_size > 10_000


def test_accuracy_within_a_budget_reads_the_last_round_inside_it():
    bench = load_benchmark("utility")
    row = {"eps_history": [(0, 1.0, 2.0), (1, 1.5, 3.0), (2, 2.0, 4.0)],
           "accuracy": [0.2, 0.5, 0.4]}
    assert bench.accuracy_within(row, 3.5) == (1, 0.5)
    assert bench.accuracy_within(row, 1.0) is None
    assert bench.accuracy_within(row, 4.0) == (2, 0.4)


def table_cells(text: str) -> list[list[str]]:
    """The body cells of the first Markdown table in ``text``."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]


@pytest.mark.slow  # imports torch (and Opacus)
def test_dp_step_speed_runs(tmp_path):
    bench = load_benchmark("dp_step_speed")
    assert bench.main(["--tiny", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "dp_step_speed.md").read_text()
    best = text.split("Best of the repetitions:")[1].split("Where our DP step")[0]
    rows = table_cells(best)
    assert len(rows) == len(bench.MODELS) * len(bench.PROFILES["tiny"].batches)
    for r in rows:  # positive times; the ratios are the times' ratios
        plain, ours = float(r[2]), float(r[3])
        assert plain > 0 and ours > 0
        assert float(r[5]) == pytest.approx(ours / plain, rel=0.02, abs=0.01)
    if "opacus not installed" not in text:  # ours agrees with Opacus's per-example gradients
        agree = text.split("Opacus support and agreement")[1].split("Best of")[0]
        diffs = table_cells(agree)
        assert len(diffs) == len(bench.MODELS)
        assert all(d[2] == "yes" and float(d[3]) < 1e-5 and float(d[4]) < 1e-5 for d in diffs)


@pytest.mark.slow
def test_resilience_tiny_writes_every_output_and_resumes(tmp_path):
    bench = load_benchmark("resilience")
    argv = ["--tiny", "--defenses", "none,fed-cdp", "--attacks", "dlg", "--points", "0,2",
            "--engine", "serial", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    text = (tmp_path / "resilience.md").read_text()
    assert "## Resilient against every attack, per leak point" in text
    assert "| defense | type 0 | type 2 |" in text
    for ext in ("csv", "tex", "json", "png"):
        assert (tmp_path / f"resilience.{ext}").stat().st_size > 0
    with (tmp_path / "resilience.csv").open() as fh:
        cells = list(csv.DictReader(fh))
    assert {(c["point"], c["attack"]) for c in cells} == {("0", "dlg"), ("2", "dlg")}
    assert len(cells) == 4 and {c["defense"].split("(")[0] for c in cells} == {"none", "fed-cdp"}
    for c in cells:  # scores in range; resilient exactly when the attack failed
        assert float(c["mse"]) >= 0 and 0 <= float(c["asr"]) <= 1
        assert 0 <= float(c["accuracy"]) <= 1
        assert (c["resilient"] == "True") == (float(c["asr"]) == 0)
        assert 1 <= float(c["tau"]) <= bench.PROFILES["tiny"]["max_iterations"]
    results = tmp_path / "resilience.jsonl"
    lines = results.read_text().splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    # per defense a training and a stage record (one stage), and 2 points x 1 attack cells
    assert sorted(kinds) == sorted(["training"] * 2 + ["stage"] * 2 + ["cell"] * 4)
    assert bench.main(argv) == 0  # everything is in the results file: nothing reruns
    assert results.read_text().splitlines() == lines


def test_collect_embeds_each_section_with_its_command_and_figure(tmp_path):
    bench = load_benchmark("collect")
    res = tmp_path / "res"
    res.mkdir()
    (res / "privacy.md").write_text("# Privacy (2026-01-01)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    (res / "privacy.png").write_bytes(b"png")
    out = tmp_path / "docs" / "results.md"
    assert bench.main(["--dir", str(res), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Privacy (2026-01-01)" in text  # the output's own title, with its date
    assert "## Privacy: one setting" not in text  # no second title for the same section
    assert "python -m benchmarks.privacy" in text and "](../res/privacy.png)" in text
    assert ("No output yet for: resilience, accounting_speed, utility, speed, "
            "empirical_privacy, leakage_curves.") in text
