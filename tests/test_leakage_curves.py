"""benchmarks/leakage_curves.py runs end to end at a tiny size: the CSV has exactly the
issue's columns and one row per cell, every noisy row carries its sound eps, the figure and
the Markdown are written, and a rerun resumes without redoing any job."""

import csv
import math

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    bench = load_benchmark("leakage_curves")
    out = tmp_path_factory.mktemp("curves")
    assert bench.main(["--tiny", "--workers", "1", "--out", str(out)]) == 0
    return bench, out


@pytest.mark.slow
def test_tiny_profile_writes_every_output(tiny):
    bench, out = tiny
    with (out / "leakage_curves.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == bench.COLUMNS
        rows = list(reader)
    grid = [r for r in rows if r["defense"] == "none"]
    sweep = [r for r in rows if r["defense"] != "none"]
    prof = bench.PROFILES["quick"]
    sizes = bench.TINY
    assert len(grid) == (len(sizes["batch_sizes"]) * len(sizes["local_steps"])
                         * len(prof.grid_attacks))
    assert len(sweep) == len(sizes["sigmas"])  # one defense, point, batch size and attack
    for r in rows:
        assert 0.0 <= float(r["asr"]) <= 1.0 and 0.0 <= float(r["label_accuracy"]) <= 1.0
        assert float(r["psnr"]) > 0.0
    for r in sweep:
        eps = float(r["eps_sound"])
        assert (math.isinf(eps) if float(r["sigma"]) == 0 else 0 < eps < math.inf)
    text = (out / "leakage_curves.md").read_text()
    for heading in ("## (a)", "## (b)", "## (c)"):
        assert heading in text
    assert (out / "leakage_curves.png").stat().st_size > 10_000


@pytest.mark.slow
def test_rerun_resumes_without_work(tiny, monkeypatch):
    bench, out = tiny

    def no_work(job):
        raise AssertionError(f"job redone: {job['kind']}")

    monkeypatch.setattr(bench, "run_job", no_work)
    before = (out / "leakage_curves.csv").read_text()
    assert bench.main(["--tiny", "--workers", "1", "--out", str(out)]) == 0
    assert (out / "leakage_curves.csv").read_text() == before


def test_asr_counts_images_not_batches():
    bench = load_benchmark("leakage_curves")

    class Store:
        def __init__(self, recs):
            self.recs = recs

        def get(self, kind, key):
            return self.recs[key]

    job = {"kind": "grid", "defense": "none", "model": "lenet", "stage": "initial",
           "batch_size": 4, "local_steps": 1, "sigma": 0.0}
    rows = [{"point": 1, "attack": "ig", "asr": a, "psnr": p, "label_accuracy": 1.0,
             "images": n} for a, p, n in ((1.0, 30.0, 1), (0.0, 10.0, 3))]
    store = Store({"a": {"rows": rows[:1]}, "b": {"rows": rows[1:]}})
    (row,) = bench.collect([("a", job), ("b", job)], store)
    assert row["asr"] == pytest.approx(0.25) and row["psnr"] == pytest.approx(20.0)
    assert math.isinf(row["eps_sound"])


@pytest.mark.slow
def test_trained_stages_are_weights_after_undefended_rounds():
    bench = load_benchmark("leakage_curves")
    import dataclasses

    from leakaudit import data

    prof = dataclasses.replace(bench.PROFILES["quick"], stages=("initial", "round1"),
                               models=("lenet", "relu_cnn"), **bench.TINY)
    ds = data.load("digits")
    weights = bench.stage_weights(prof, ds, seed=0)
    for m in prof.models:
        assert weights[(m, "initial")] is None
        trained = weights[(m, "round1")]
        initial = bench.build_model(m, ds, 0).state_dict()
        assert set(trained) == set(initial)
        assert any(not (trained[k] == initial[k]).all() for k in initial)
