"""The report's figure: read at a glance (a title, a legend, a sensible size) and showing
every attacked example, so that the MSE written under a panel is the table's."""

import numpy as np
import pytest

from leakaudit.auditing.report import FIGURE_EXAMPLES, AuditReport, format_number

DEFENSES = ("none()", "fed-cdp(clip=4.0, sigma=6.0)", "prune(rate=0.1)")
ATTACKS = ("dlg", "idlg", "cpl")


def _report(examples: int) -> AuditReport:
    rng = np.random.default_rng(0)
    rep = AuditReport(config={"dataset": "digits"}, threshold=0.01)
    for d in DEFENSES:
        for p in (0, 1, 2):
            for a in ATTACKS:
                for e in range(examples):
                    truth = rng.random((1, 8, 8))
                    mse = float(rng.choice([1e-4, 0.2]))
                    rep.add_cell({"defense": d, "point": p, "attack": a, "example": e,
                                  "mse": mse, "psnr": 1.0, "ssim": 0.5, "tau": 3,
                                  "success": mse <= 0.01, "label_accuracy": 1.0,
                                  "truth": truth.tolist(), "reconstruction":
                                  (truth + np.sqrt(mse) * rng.standard_normal(truth.shape))
                                  .tolist()})
    return rep


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
@pytest.mark.parametrize("examples", [3, FIGURE_EXAMPLES + 4])
def test_the_figure_has_a_title_a_legend_every_example_and_the_tables_mse(examples, tmp_path,
                                                                          monkeypatch):
    from matplotlib.figure import Figure

    figures = []
    real_savefig = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    rep = _report(examples)
    path = rep.save_figure(tmp_path / "audit.png")
    fig, = figures
    shown = min(examples, FIGURE_EXAMPLES)
    title = fig.get_suptitle()
    assert "Reconstructions" in title and f"mean over all {examples}" in title
    assert ("all" if shown == examples else f"first {shown} of {examples}") in title
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "rebuilt (MSE <= 0.01)", "not rebuilt", "ground truth"]
    width, height = fig.get_size_inches() * fig.dpi
    assert width <= 1600 and height <= 1600  # 9 panel rows: a page, not a scroll
    table = {(r["defense"], r["point"], r["attack"]): r for r in rep.rows()}
    assert len(fig.axes) == len(DEFENSES) * 3 * (len(ATTACKS) + 1)
    for idx, ax in enumerate(fig.axes):  # row-major: (defense, point) x (truth, attacks)
        (i, j), img = divmod(idx, len(ATTACKS) + 1), ax.get_images()[0]
        # each panel draws `shown` framed 8x8 examples side by side, one pixel apart
        assert img.get_array().shape[:2] == (10, shown * 10 + shown - 1)
        if j == 0:
            assert ax.yaxis.label.get_text() == f"{DEFENSES[i // 3].split('(')[0]}\npoint {i % 3}"
            continue
        key = (DEFENSES[i // 3], i % 3, ATTACKS[j - 1])
        cells = [c for c in rep.cells if (c["defense"], c["point"], c["attack"]) == key]
        rebuilt = sum(c["success"] for c in cells[:shown])
        # the table's MSE (the mean over every example), not the first example's
        assert ax.xaxis.label.get_text() == (
            f"MSE {format_number(table[key]['mse'], 2)}, {rebuilt}/{shown} rebuilt")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
