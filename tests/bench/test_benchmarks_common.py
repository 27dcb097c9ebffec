"""benchmarks/_common.py: the shared timer, environment line, profile lookup and writers."""

import csv
import math

import pytest

from benchmarks import _common


def test_best_of_keeps_the_fastest_call_and_the_result():
    calls = []

    def fn():
        calls.append(1)
        return len(calls)

    t = _common.best_of(fn, repeats=3)
    assert len(calls) == 3 and t.result == 3 and len(t.times) == 3
    assert t.best == min(t.times) and t.cpu >= 0
    with pytest.raises(ValueError, match="repeats"):
        _common.best_of(fn, repeats=0)
    t = _common.best_of(fn, repeats=2, warmup=3)  # warm-up calls run, untimed
    assert len(calls) == 3 + 5 and t.result == 8 and len(t.times) == 2
    with pytest.raises(ValueError, match="warmup"):
        _common.best_of(fn, repeats=1, warmup=-1)
    clock = _common.Stopwatch()
    assert 0 <= clock.seconds < 60 and clock.cpu >= 0


def test_environment_line_and_profiles():
    line = _common.environment(("numpy", "no-such-package"))
    assert "cores" in line and "Python" in line and "numpy" in line
    assert "no-such-package" not in line
    assert _common.profile({"quick": 1}, "quick") == 1
    with pytest.raises(ValueError, match="--profile"):
        _common.profile({"quick": 1}, "full")
    assert _common.version("no-such-package") == "not installed"
    assert len(_common.today()) == 10


def test_parser_gives_every_script_the_same_profile_tiny_and_out_options(tmp_path, capsys):
    profiles = {"quick": 1, "full": 2, "tiny": 3}
    p = _common.parser("A benchmark.\n\nDetails.", profiles, out="results")
    assert p.description == "A benchmark."
    args = p.parse_args([])
    assert args.profile == "quick" and str(args.out) == "results"
    assert p.parse_args(["--tiny"]).profile == "tiny"
    assert p.parse_args(["--profile", "full", "--out", str(tmp_path)]).out == tmp_path
    with pytest.raises(SystemExit):
        p.parse_args(["--profile", "huge"])
    assert "--tiny" not in _common.parser(None, {"quick": 1}).format_help()
    assert _common.parser(None, {"quick": 1}).parse_args([]).out is None
    p.add_argument("--repeats", type=_common.at_least(1))
    assert p.parse_args(["--repeats", "2"]).repeats == 2
    for bad in ("0", "x"):
        with pytest.raises(SystemExit):
            p.parse_args(["--repeats", bad])
        assert "--repeats" in capsys.readouterr().err


def test_report_prints_and_keeps_a_markdown_table(capsys):
    rep = _common.Report()
    rep.line("# t")
    rep.table(["a", "b"], [[1, "x"], [math.inf, "y"]])
    assert rep.text() == "# t\n| a | b |\n|---|---|\n| 1 | x |\n| inf | y |\n\n"
    assert capsys.readouterr().out == rep.text()


def test_write_outputs(tmp_path):
    assert _common.write_outputs(None, "x", markdown="# t") == {}
    paths = _common.write_outputs(tmp_path / "out", "x", markdown="# t",
                                  rows=[{"a": 1, "b": 2}, {"a": 3, "b": 4}])
    assert paths["md"].read_text() == "# t\n"
    with paths["csv"].open() as fh:
        assert list(csv.DictReader(fh)) == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]
    # fixed columns (a header even without rows), extra tables, a figure drawn by a callable
    drawn = []
    paths = _common.write_outputs(tmp_path, "y", markdown="# u\n", rows=[], columns=("a", "b"),
                                  extra={"more": [{"c": 5}]},
                                  figure=lambda path: drawn.append(path) or path.write_bytes(b"p"))
    assert paths["csv"].read_text().strip() == "a,b"
    assert paths["more"] == tmp_path / "y_more.csv" and "c\n5" in paths["more"].read_text()
    assert drawn == [tmp_path / "y.png"] and paths["png"].read_bytes() == b"p"
