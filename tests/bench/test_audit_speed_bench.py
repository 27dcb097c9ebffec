"""benchmarks/audit_speed.py runs end to end at a tiny size and prints its one line."""

import re

import pytest
from conftest import load_benchmark


@pytest.mark.slow  # a whole LeNet-shaped audit at 200 runs per side
def test_audit_speed_prints_one_line_with_the_cpu_time(capsys):
    bench = load_benchmark("audit_speed")
    assert bench.main(["--tiny"]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    cpu = float(re.search(r"cpu ([0-9.]+) s", line).group(1))
    assert cpu > 0 and "trials=200" in line and "games 21" in line, line
