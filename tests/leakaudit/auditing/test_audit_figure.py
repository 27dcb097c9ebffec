"""The report's figure: read at a glance (three panels on one page: eps on a log axis,
identification against its bound, reconstructions of the undefended and the best-protected
defense beside the truth)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakaudit.auditing.figure import best_protected, strip
from leakaudit.auditing.report import AuditReport

DEFENSES = {"none()": ("none", math.inf, []), "fed-cdp(sigma=0.9)": ("fed-cdp", 7.6, ["example"]),
            "fed-cdp(sigma=0.7)": ("fed-cdp", 54.0, ["example"]),
            "prune(rate=0.1)": ("prune", math.inf, ["client"])}


def _report() -> AuditReport:
    rng = np.random.default_rng(0)
    rep = AuditReport(config={"dataset": "digits"}, threshold=0.01)
    for d, (name, eps, sites) in DEFENSES.items():
        rep.add_defense(d, name, {"eps_sound": eps, "eps_claimed": eps, "sites": sites,
                                  "eps_measured": 1.0, "level": "instance"})
        for stage in ("initial", "trained"):
            rep.add_stage(d, stage, {"rounds": 0 if stage == "initial" else 30,
                                     "accuracy": 0.5})
            rep.add_identification(d, stage, {"k": 10, "trials": 100, "success": 0.3,
                                              "ci_low": 0.2, "ci_high": 0.4, "bound": 0.5,
                                              "clean": 1.0, "scorers": 9})
            for e in range(3):
                truth = rng.random((1, 8, 8))
                mse = 1e-4 if name == "none" else 0.2
                rep.add_cell({"defense": d, "stage": stage, "point": 2, "attack": "idlg",
                              "example": e, "mse": mse, "psnr": 10.0, "success": mse < 0.01,
                              "truth": truth.tolist(), "reconstruction":
                              (truth + np.sqrt(mse) * rng.standard_normal(truth.shape))
                              .tolist()})
    return rep


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_the_figure_fits_a_page_with_three_panels(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    figures = []
    real_savefig = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    rep = _report()
    path = rep.save_figure(tmp_path / "audit.png")
    fig, = figures
    width, height = fig.get_size_inches() * fig.dpi
    assert width <= 1600 and height <= 1000  # a page, not a 2,900-px scroll
    eps, ident, rec = fig.axes
    assert eps.get_xscale() == "log"
    assert len(ident.get_yticklabels()) == 2 * len(DEFENSES)  # a row per (defense, stage)
    labels = [t.get_text() for t in rec.get_yticklabels()]
    assert labels[0] == "truth" and labels[1].startswith("none()")
    assert labels[2].startswith("fed-cdp(sigma=0.9)")  # the least finite sound eps
    # three 8x8 examples framed, one pixel apart, per line; three lines, a blank row each
    assert rec.get_images()[0].get_array().shape[:2] == (3 * 11, 3 * 10 + 2)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_best_protected_is_the_least_finite_sound_eps():
    rows = [{"defense": d, "eps_sound": eps} for d, (_, eps, _) in DEFENSES.items()]
    assert best_protected(rows) == "fed-cdp(sigma=0.9)"
    assert best_protected([{"defense": "none()", "eps_sound": math.inf}]) is None


def test_strip_frames_each_example():
    out = strip([np.zeros((1, 4, 4)), np.ones((1, 4, 4))], [True, None])
    assert out.shape == (6, 13, 3) and tuple(out[0, 0]) == (0.15, 0.65, 0.25)


def test_an_empty_report_has_no_figure(tmp_path):
    with pytest.raises(ValueError, match="no profile rows"):
        AuditReport().save_figure(tmp_path / "x.png")
