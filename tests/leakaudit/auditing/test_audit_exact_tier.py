"""The audit's default attacks gain the exact tier where the model has a biased linear first
layer: the undefended example is rebuilt exactly and the verdict lists the tier."""

from __future__ import annotations

import pytest
import torch

from leakaudit import models
from leakaudit.auditing import AuditPlan, audit

pytestmark = pytest.mark.slow  # an end-to-end audit (seconds)

PLAN = AuditPlan.make(points=(2,), examples=1, rounds=1, max_iterations=2)


def _mlp():
    return models.mlp(784, 10, (16,), "relu", generator=torch.Generator().manual_seed(0))


def test_default_attacks_add_the_exact_tier_where_it_applies():
    report = audit(["none"], dataset="digits", model=_mlp(), plan=PLAN, engine="serial",
                   progress=False)
    exact = [c for c in report.cells if c["attack"] == "exact"]
    assert exact and all(c["mse"] <= 1e-10 for c in exact)
    (row,) = report.summary_rows()
    assert row["type 2"].startswith("leaks")


def test_chosen_attacks_and_lenet_are_left_alone():
    report = audit(["none"], dataset="digits", attacks=("idlg",), model=_mlp(), plan=PLAN,
                   engine="serial", progress=False)
    assert {c["attack"] for c in report.cells} == {"idlg"}
    report = audit(["none"], dataset="digits", plan=PLAN, engine="serial", progress=False)
    assert "exact" not in {c["attack"] for c in report.cells}
