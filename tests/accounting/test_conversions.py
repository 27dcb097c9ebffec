"""RDP -> (eps, delta) conversions, their inverses and the moments accountant view."""

import math
import warnings

import numpy as np
import pytest

import accounting as A


def curve(q=0.01, sigma=4.0, steps=10_000, orders=A.DEFAULT_ORDERS):
    return A.rdp_sgm(q, sigma, orders) * steps, np.asarray(orders, dtype=float)


def test_abadi_2016_moments_accountant_value():
    # Abadi et al. 2016, Sec. 3.1: q=0.01, sigma=4, delta=1e-5, T=10,000 -> eps ~ 1.26
    rdp, orders = curve()
    lm, lam = A.log_moments(rdp, orders)
    eps, lam_opt = A.moments_epsilon(lm, lam, 1e-5)
    assert eps == pytest.approx(1.26, abs=0.005)
    assert lam_opt == pytest.approx(A.rdp_to_dp(rdp, orders, 1e-5, "classic").order - 1)


def test_opacus_docstring_example():
    # opacus/accountants/analysis/rdp.py docstring: [(1e-5, 1.0, 10), (1e-4, 3.0, 4)],
    # orders 2..32, delta 1e-5 -> (0.336, 23)
    orders = np.arange(2, 33)
    rdp = A.rdp_sgm(1e-5, 1.0, orders) * 10 + A.rdp_sgm(1e-4, 3.0, orders) * 4
    eps, order = A.rdp_to_dp(rdp, orders, 1e-5)
    assert eps == pytest.approx(0.336, abs=5e-4) and order == 23


def test_dp_accounting_pure_dp_example():
    # dp-accounting rdp_privacy_accountant_test.py: constant rdp 1.1 over orders 2..32
    orders = np.arange(2, 33)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", A.OrderGridWarning)
        eps, order = A.rdp_to_dp(np.full(orders.size, 1.1), orders, 1e-5)
        delta, order2 = A.dp_delta(np.full(orders.size, 1.1), orders, 1.32783806176)
    assert eps == pytest.approx(1.32783806176, rel=1e-10) and order == 32
    assert delta == pytest.approx(1e-5, rel=1e-8) and order2 == 32


def test_dp_accounting_gaussian_example():
    # dp-accounting: q=1, sigma=4.530877117 is exactly (1, 1e-6)-DP; dense orders near 1..100
    orders = np.array([0.001 * i for i in range(1001, 100000, 7)])
    rdp = A.rdp_sgm(1.0, 4.530877117, orders)
    eps, _ = A.rdp_to_dp(rdp, orders, 1e-6)
    delta, _ = A.dp_delta(rdp, orders, 1.0)
    assert eps == pytest.approx(1.0, abs=1e-3)
    assert delta == pytest.approx(1e-6, rel=1e-2)


def test_improved_never_above_classic_and_moments_equal_classic():
    for q, sigma, steps in [(0.01, 4, 10_000), (0.1, 1.0, 100), (1 / 120, 6, 5000)]:
        rdp, orders = curve(q, sigma, steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", A.OrderGridWarning)
            imp = A.rdp_to_dp(rdp, orders, 1e-5).eps
            cla = A.rdp_to_dp(rdp, orders, 1e-5, "classic").eps
            lm, lam = A.log_moments(rdp, orders)
            mom = A.moments_epsilon(lm, lam, 1e-5).eps
        assert imp <= cla
        assert mom == pytest.approx(cla, rel=1e-12)


@pytest.mark.parametrize("conversion", ["improved", "classic"])
def test_delta_is_the_inverse_of_eps(conversion):
    rdp, orders = curve(0.02, 1.2, 500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", A.OrderGridWarning)
        for delta in (1e-3, 1e-5, 1e-8):
            eps, order = A.rdp_to_dp(rdp, orders, delta, conversion)
            back, _ = A.dp_delta(rdp, orders, eps, conversion)
            assert back == pytest.approx(delta, rel=1e-6)


def test_edge_of_grid_warns():
    rdp, orders = curve(0.01, 50.0, 10)  # tiny eps: optimum at the largest order
    with pytest.warns(A.OrderGridWarning, match="largest"):
        A.rdp_to_dp(rdp[:30], orders[:30], 1e-5)
    rdp2, orders2 = curve(0.5, 0.6, 1000)  # huge eps: optimum at the smallest order
    with pytest.warns(A.OrderGridWarning, match="smallest"):
        A.rdp_to_dp(rdp2, orders2, 1e-5)


def test_infinite_curve_gives_inf_not_nan():
    orders = np.array([2.0, 3.0])
    res = A.rdp_to_dp([np.inf, np.inf], orders, 1e-5)
    assert math.isinf(res.eps) and res.order is None
    assert A.dp_delta([np.inf, np.inf], orders, 1.0) == (1.0, None)


def test_zero_curve_gives_zero():
    assert A.rdp_to_dp([0.0, 0.0], [2.0, 3.0], 1e-5).eps == 0.0
    assert A.dp_delta([0.0, 0.0], [2.0, 3.0], 0.0).delta == 0.0


def test_continuous_order_is_never_worse_and_close_to_dense_grid():
    q, sigma, steps, delta = 0.01, 4.0, 10_000, 1e-5
    ledger = A.PrivacyLedger()
    ledger.step(q=q, sigma=sigma, count=steps)
    grid = ledger.epsilon(delta)
    cont_eps = ledger.epsilon(delta, optimize_order=True)
    dense = np.linspace(10.0, 30.0, 2001)
    dense_eps = A.rdp_to_dp(A.rdp_sgm(q, sigma, dense) * steps, dense, delta,
                            warn_edge=False).eps
    assert cont_eps <= grid
    assert cont_eps <= dense_eps + 1e-9
    assert cont_eps == pytest.approx(dense_eps, abs=1e-5)


def test_optimize_order_bracket_validation():
    with pytest.raises(ValueError, match="bracket"):
        A.optimize_order(lambda a: a, 1e-5, bracket=(0.5, 2.0))
