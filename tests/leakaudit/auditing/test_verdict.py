"""Verdicts that must be earned: "resilient" only when the attacks could have
succeeded (an undefended baseline rebuilt at this budget and threshold, the threshold inside
(0, 1)), "inconclusive" otherwise, with the tiers tried."""

import math

from leakaudit.auditing.report import AuditReport


def _cell(defense, attack, mse, threshold, point=1):
    return {"defense": defense, "point": point, "attack": attack, "example": 0, "mse": mse,
            "rmse": math.sqrt(mse), "psnr": -10 * math.log10(mse), "ssim": 0.5,
            "success": mse <= threshold, "tau": 5, "label_accuracy": 1.0,
            "truth": [[[0.0]]], "reconstruction": [[[0.1]]]}


def _report(threshold, none_mse, cdp_mse, attacks=("idlg",), baseline=True):
    r = AuditReport(threshold=threshold)
    if baseline:
        r.add_defense("none()", "none", {"level": "none"})
    r.add_defense("fed-cdp()", "fed-cdp", {"level": "instance"})
    for a in attacks:
        if baseline:
            r.add_cell(_cell("none()", a, none_mse, threshold))
        r.add_cell(_cell("fed-cdp()", a, cdp_mse, threshold))
    return {row["defense"]: row["type 1"] for row in r.summary_rows()}


def test_resilient_needs_a_rebuilt_baseline_and_lists_the_tiers():
    v = _report(0.01, 1e-7, 0.4, attacks=("exact", "idlg"))
    assert v["none()"].startswith("leaks")
    assert v["fed-cdp()"] == "resilient (MSE 0.4; tiers exact, optimiser (idlg))"
    v = _report(0.01, 1e-7, 0.4)
    assert v["fed-cdp()"] == "resilient (MSE 0.4; tiers optimiser (idlg), exact not run)"


def test_budget_too_small_is_inconclusive():
    # --max-iterations 1: the undefended baseline is not rebuilt either
    v = _report(0.01, 0.3, 0.4)
    assert v["none()"].startswith("inconclusive: no attack rebuilt an undefended example")
    assert v["fed-cdp()"].startswith("inconclusive: the attacks rebuilt no undefended")


def test_threshold_out_of_reach_or_out_of_range_is_inconclusive():
    # --threshold 1e-30: the exact copy of float arithmetic (MSE 1.2e-7) does not pass
    v = _report(1e-30, 1.2e-7, 0.4)
    assert all(s.startswith("inconclusive") for s in v.values())
    # --threshold 5: above the largest MSE of [0, 1] images, everything "succeeds"
    v = _report(5.0, 1e-7, 0.4)
    assert all(s.startswith("inconclusive: threshold 5 outside (0, 1)") for s in v.values())


def test_without_a_baseline_the_verdict_says_unchecked():
    v = _report(0.01, None, 0.4, baseline=False)
    assert v["fed-cdp()"].startswith("resilient (MSE 0.4; unchecked")


def test_a_defense_without_dp_is_judged_against_the_undefended_baseline():
    # random noise has no DP guarantee (level "none") but is a defense: where the undefended
    # model leaks at the same budget, its failing attacks make it resilient, not inconclusive
    r = AuditReport(threshold=0.01)
    r.add_defense("none()", "none", {"level": "none"})
    r.add_defense("random-noise()", "random-noise", {"level": "none"})
    r.add_cell(_cell("none()", "idlg", 1e-7, 0.01))
    r.add_cell(_cell("random-noise()", "idlg", 0.36, 0.01))
    v = {row["defense"]: row["type 1"] for row in r.summary_rows()}
    assert v["none()"].startswith("leaks")
    assert v["random-noise()"] == "resilient (MSE 0.36; tiers optimiser (idlg), exact not run)"
