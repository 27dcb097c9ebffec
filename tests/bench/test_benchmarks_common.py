"""benchmarks/_common.py: the shared timer, environment line, profile lookup and writers."""

import csv

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


def test_environment_line_and_profiles():
    line = _common.environment(("numpy", "no-such-package"))
    assert "cores" in line and "Python" in line and "numpy" in line
    assert "no-such-package" not in line
    assert _common.profile({"quick": 1}, "quick") == 1
    with pytest.raises(ValueError, match="--profile"):
        _common.profile({"quick": 1}, "full")


def test_write_outputs(tmp_path):
    assert _common.write_outputs(None, "x", markdown="# t") == {}
    paths = _common.write_outputs(tmp_path / "out", "x", markdown="# t",
                                  rows=[{"a": 1, "b": 2}, {"a": 3, "b": 4}])
    assert paths["md"].read_text() == "# t\n"
    with paths["csv"].open() as fh:
        assert list(csv.DictReader(fh)) == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]
