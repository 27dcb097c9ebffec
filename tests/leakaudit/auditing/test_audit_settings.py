"""audit(batch_size=, local_steps=, stage=, device=): bad input is refused before
any work, the report records the setting, the multi-step attacks are told L and lr, and an
attack cell's reconstruction does not depend on the truth it is scored against."""

import dataclasses

import pytest
import torch

from leakaudit import data, fl
from leakaudit.auditing import audit, cells

SMALL = dict(defenses=["none"], points=(1,), examples=1, rounds=1, max_iterations=3,
             engine="serial", progress=False)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"batch_size": 0}, "batch_size"), ({"local_steps": 0}, "local_steps"),
    ({"batch_size": 1.5}, "batch_size"), ({"stage": "round3"}, "stage"),
    ({"stage": 3}, "stage"), ({"stages": []}, "stage"), ({"device": "tpu"}, "device"),
    ({"device": 7}, "device"),
] + ([] if torch.cuda.is_available() else [({"device": "cuda"}, "device")]))
def test_bad_settings_are_refused_before_work(kwargs, name, monkeypatch):
    def no_training(*args, **kw):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(fl, "simulate", no_training)
    with pytest.raises(ValueError, match=name):
        audit(**SMALL, **kwargs)


@pytest.mark.slow
def test_report_records_the_setting_and_fedavg_runs(tmp_path):
    report = audit(**SMALL, attacks=("fedavg", "idlg"), batch_size=2, local_steps=2,
                   stage="round1", device="cpu", results=str(tmp_path / "r.jsonl"))
    cfg = report.config
    assert (cfg["batch_size"], cfg["local_steps"], cfg["stage"], cfg["device"]) == (
        2, 2, "round1", "cpu")
    assert "batch size 2, 2 local step(s), stage round1" in report.to_markdown()
    rows = {r["attack"]: r for r in report.rows()}
    assert set(rows) == {"fedavg", "idlg"}
    for r in rows.values():
        assert 0.0 <= r["label_accuracy"] <= 1.0


@pytest.mark.slow
def test_a_cell_reconstruction_ignores_the_truth():
    """The attacker's view (AttackSpec) holds no truth; scoring the same spec against real,
    shuffled or zero truth changes the scores, never the reconstruction."""
    ds = data.load("digits")
    from leakaudit.models import lenet

    model = lenet(generator=torch.Generator().manual_seed(0))
    x, y = ds.x_train[:1], ds.y_train[:1]
    spec = cells.AttackSpec.make("idlg", model, fl.batch_gradient(model, x, y),
                                 input_shape=(1, 28, 28), num_classes=10, batch_size=1,
                                 max_iterations=4, restarts=1, seed=0)
    assert not any("truth" in f.name or "inputs" in f.name
                   for f in dataclasses.fields(cells.AttackSpec))
    records = []
    for truth in (x, ds.x_train[5:6], torch.zeros_like(x)):
        job = cells.CellJob(defense="none", point=2, example=0, spec=spec,
                            truth=fl.GroundTruth(truth, y), threshold=0.01, image=True)
        records.append(cells.run_cell(job))
    for rec in records[1:]:
        assert rec["reconstruction"] == records[0]["reconstruction"]
        assert rec["gradient_loss"] == records[0]["gradient_loss"]
    assert records[0]["mse"] != records[2]["mse"]
