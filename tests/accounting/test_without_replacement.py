"""Fixed-size batches (sampling without replacement, replace-one): RDP of Wang, Balle,
Kasiviswanathan 2019 Thm 9 against dp-accounting, the sensitivity convention (dp-accounting
issue #378), and the certified bracket."""

import math

import numpy as np
import pytest

from accounting.composition import analytic_gaussian_epsilons
from accounting.events import SampledGaussian
from accounting.pld import pld_epsilon
from accounting.rdp import DEFAULT_ORDERS, rdp_sgm
from accounting.without_replacement import (
    epsilon_bounds_without_replacement,
    epsilon_without_replacement,
    pld_lower_without_replacement,
    pld_upper_without_replacement,
    rdp_without_replacement,
)

dpa = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp  # noqa: E402

ORDERS = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0, 2.5, 10.5])


def dp_accounting_eps(sigma, batch, n, steps, delta, multiplier_for_sensitivity_2=True):
    """dp-accounting's RDP accountant on SampledWithoutReplacementDpEvent, REPLACE_ONE.
    Its noise multiplier is relative to the replace-one sensitivity (2C): sigma / 2."""
    acc = dpa_rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    s = sigma / 2 if multiplier_for_sensitivity_2 else sigma
    event = dpa.SampledWithoutReplacementDpEvent(n, batch, dpa.GaussianDpEvent(s))
    acc.compose(dpa.SelfComposedDpEvent(event, steps))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("sigma, batch, n", [(1.0, 256, 60_000), (2.0, 100, 1_000),
                                             (0.5, 10, 1_000), (4.0, 500, 1_000)])
def test_rdp_matches_dp_accounting_at_half_sigma_and_never_below_it(sigma, batch, n):
    ours = rdp_without_replacement(sigma, batch, n, ORDERS)
    theirs = dpa_rdp._compute_rdp_sample_wor_gaussian(batch / n, sigma / 2, ORDERS)
    # Thm 9 (ours) >= Thm 27 (theirs) wherever Thm 9 is below the unamplified Gaussian
    plain = 2 * ORDERS / sigma**2
    assert np.all((ours >= theirs * (1 - 1e-9)) | np.isclose(ours, plain))
    # equal at the small-gamma settings (the two theorems coincide for the Gaussian there)
    if batch / n < 0.2:
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def test_sensitivity_is_2c_not_the_issue_378_erratum():
    # passing sigma (std / clip) to dp-accounting as if the replace-one sensitivity were C
    # understates the RDP ~4x: we must match the sigma / 2 value, not that one
    sigma, batch, n = 1.0, 256, 60_000
    ours = rdp_without_replacement(sigma, batch, n, ORDERS)
    erratum = dpa_rdp._compute_rdp_sample_wor_gaussian(batch / n, sigma, ORDERS)
    assert np.all(ours > 3.0 * erratum)
    # gamma = 1: the plain Gaussian with sensitivity 2C, i.e. multiplier sigma / 2
    np.testing.assert_allclose(rdp_without_replacement(sigma, 7, 7, ORDERS),
                               rdp_sgm(1.0, sigma / 2, ORDERS), rtol=1e-12)


def test_epsilon_equals_a_dp_accounting_value():
    # MNIST-like: 60,000 records, batches of 256, sigma 1.1, 60 epochs, delta 1e-5
    sigma, batch, n, delta = 1.1, 256, 60_000, 1e-5
    steps = 60 * (n // batch)
    ours = epsilon_without_replacement(sigma, batch, n, steps, delta)
    theirs = dp_accounting_eps(sigma, batch, n, steps, delta)
    assert ours == pytest.approx(theirs, rel=0.02)
    assert ours > 1.5 * dp_accounting_eps(sigma, batch, n, steps, delta, False)
    # amplification is real: far below the unamplified Gaussian (sigma / 2 per step)
    plain = float(analytic_gaussian_epsilons(np.array([sigma / 2 / math.sqrt(steps)]),
                                             delta)[0])
    assert ours < plain / 20


@pytest.mark.parametrize("sigma, batch, n, steps", [(1.0, 64, 10_000, 1_000),
                                                    (2.0, 10, 100, 50),
                                                    (0.8, 1, 50, 20)])
def test_bracket_is_ordered_and_between_independent_bounds(sigma, batch, n, steps):
    delta = 1e-6
    lo, up = epsilon_bounds_without_replacement(sigma, batch, n, steps, delta)
    assert 0 < lo <= up < math.inf
    # lower end: the larger of the realised "same gradient" pair (the Poisson remove/add
    # pair at q = B/n and sigma / 2) and the realised +-1 pair
    same = pld_epsilon([SampledGaussian(batch / n, sigma / 2, steps)], delta).lower
    assert lo >= same >= pld_epsilon([SampledGaussian(batch / n, sigma, steps)], delta).lower
    assert lo == pytest.approx(max(pld_lower_without_replacement(sigma, batch, n, steps, delta),
                                   same))
    # upper end never above the unamplified Gaussian with sensitivity 2C
    plain = float(analytic_gaussian_epsilons(np.array([sigma / 2 / math.sqrt(steps)]),
                                             delta)[0])
    assert up <= plain * (1 + 1e-12)
    assert up <= epsilon_without_replacement(sigma, batch, n, steps, delta)


def test_monotone_in_batch_size_and_steps():
    curve = [rdp_without_replacement(1.0, b, 1_000, DEFAULT_ORDERS) for b in (1, 10, 100, 1_000)]
    for a, b in zip(curve, curve[1:]):
        assert np.all(a <= b + 1e-12)
    eps = [epsilon_without_replacement(1.0, 10, 1_000, t, 1e-5) for t in (1, 10, 100)]
    assert eps[0] < eps[1] < eps[2]


def test_edge_cases_are_answers_not_nan():
    assert np.all(np.isinf(rdp_without_replacement(0.0, 1, 10, ORDERS)))
    assert epsilon_bounds_without_replacement(0.0, 1, 10, 5, 1e-5) == (math.inf, math.inf)
    assert epsilon_bounds_without_replacement(1.0, 1, 10, 0, 1e-5) == (0.0, 0.0)
    tiny = rdp_without_replacement(1e-3, 1, 10**6, [2.0, 64.0, 256.0])
    assert np.all(np.isfinite(tiny)) and np.all(tiny > 0)
    huge = rdp_without_replacement(1e6, 1, 10, [2.0, 64.0])
    assert np.all(np.isfinite(huge)) and np.all(huge >= 0)
    for d in (1e-9, 1e-12):
        lo, up = epsilon_bounds_without_replacement(1.0, 10, 1_000, 100, d)
        assert 0 < lo <= up < math.inf


@pytest.mark.parametrize("kwargs, name", [
    (dict(sigma=-1.0, batch_size=1, dataset_size=10), "sigma"),
    (dict(sigma=1.0, batch_size=0, dataset_size=10), "batch_size"),
    (dict(sigma=1.0, batch_size=11, dataset_size=10), "batch_size"),
    (dict(sigma=1.0, batch_size=1, dataset_size=0), "dataset_size"),
])
def test_bad_input_is_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        rdp_without_replacement(orders=[2.0], **kwargs)
    with pytest.raises(ValueError, match=name):
        epsilon_bounds_without_replacement(steps=1, delta=1e-5, **kwargs)
    with pytest.raises(ValueError, match="orders"):
        rdp_without_replacement(1.0, 1, 10, [0.5])


def test_symmetrised_pld_is_below_the_rdp_of_dp_accounting():
    # the MNIST-like setting: the PLD of Dong-Roth-Su's C_gamma(G_{2/sigma}) (symmetrised)
    # is a certified upper end 23% below the RDP bound dp-accounting gives
    sigma, batch, n, delta = 1.1, 256, 60_000, 1e-5
    steps = 60 * (n // batch)
    pld_up = pld_upper_without_replacement(sigma, batch, n, steps, delta)
    rdp_up = dp_accounting_eps(sigma, batch, n, steps, delta)
    lo, up = epsilon_bounds_without_replacement(sigma, batch, n, steps, delta)
    assert up == pld_up < 0.85 * rdp_up
    # the realised "same gradient" pair: a lower end far above the +-1 pair's, near up
    assert lo > 2 * pld_lower_without_replacement(sigma, batch, n, steps, delta)
    assert 0.75 * up < lo < up


def test_full_batch_is_the_gaussian_with_sensitivity_2c_on_both_ends():
    # B = n: every step is the Gaussian mechanism moved by 2C: both ends are its exact eps
    sigma, steps, delta = 1.0, 10, 1e-5
    exact = float(analytic_gaussian_epsilons(np.array([sigma / 2 / math.sqrt(steps)]),
                                             delta)[0])
    lo = pld_lower_without_replacement(sigma, 7, 7, steps, delta)
    up = pld_upper_without_replacement(sigma, 7, 7, steps, delta)
    assert lo <= exact <= up
    assert up - lo < 1e-3 * exact


@pytest.mark.slow
def test_lower_end_is_below_a_monte_carlo_of_its_pair():
    # the +-1 pair at gamma = 0.1, sigma 1, 20 steps, delta 1e-2: Monte Carlo of its eps
    sigma, gamma, steps, delta = 1.0, 0.1, 20, 1e-2
    rng = np.random.default_rng(3)
    n = 100_000
    comp = rng.random((n, steps)) < gamma
    x = rng.standard_normal((n, steps)) * sigma + comp
    a, b = 1 - gamma, gamma
    lp = np.logaddexp(math.log(a) - x**2 / (2 * sigma**2),
                      math.log(b) - (x - 1) ** 2 / (2 * sigma**2))
    lq = np.logaddexp(math.log(a) - x**2 / (2 * sigma**2),
                      math.log(b) - (x + 1) ** 2 / (2 * sigma**2))
    loss = (lp - lq).sum(axis=1)
    grid = np.linspace(0, 3, 301)
    vals = np.maximum(-np.expm1(grid[:, None] - loss[None, :]), 0.0)
    mean, se = vals.mean(axis=1), vals.std(axis=1) / math.sqrt(n)
    hi = grid[np.flatnonzero(mean + 4 * se > delta)[-1] + 1]
    mid = grid[np.flatnonzero(mean > delta)[-1] + 1]
    lo = pld_lower_without_replacement(sigma, 1, 10, steps, delta)
    assert lo <= hi and lo >= 0.95 * mid


def test_pld_parts_are_symmetric_pairs_with_lower_below_upper():
    from accounting import pld
    from accounting.without_replacement import without_replacement_pld_parts

    h = 1e-3
    [(up, c_up)], a_up = without_replacement_pld_parts(1.0, 64, 1_000, 7, h, True)
    [(lo, c_lo)], a_lo = without_replacement_pld_parts(1.0, 64, 1_000, 7, h, False)
    assert c_up == c_lo == 7 and a_up == a_lo == 0.0
    # symmetric: the P-mass at loss -l is e^-l times the P-mass at l (Q is P mirrored)
    loss = up.offset + np.arange(up.p.size)
    for k in (5, 50, 200):
        i, j = np.flatnonzero(loss == k), np.flatnonzero(loss == -k)
        if i.size and j.size and up.p[i[0]] > 1e-12:
            assert up.p[j[0]] == pytest.approx(up.p[i[0]] * math.exp(-k * h), rel=1e-9)
    assert up.p.sum() + up.inf == pytest.approx(1.0, abs=1e-9)
    for eps in (0.0, 0.1, 0.5):
        assert pld._delta_of(lo, eps, h) <= pld._delta_of(up, eps, h)
    with pytest.raises(ValueError, match="sigma"):
        without_replacement_pld_parts(0.0, 1, 10, 1, h, True)


def test_the_ledger_accounts_fixed_size_batches_with_the_amplified_pld():
    """The issue's example (sigma 1, 1,000 steps, B = 256 of n = 60,000, delta 1e-5):
    2,268.8 without amplification. The ledger's PLD bracket is the amplified symmetrised
    pair's (not the unamplified Gaussian it used to print, nor a lower end of 0), it
    composes with a Poisson step, and tightest names it."""
    from accounting.fixed_size import SampledWithoutReplacement
    from accounting.ledger import PrivacyLedger

    sigma, steps, b, n, delta = 1.0, 1000, 256, 60_000, 1e-5
    plain = PrivacyLedger(relation="replace-one")
    plain.step(q=1.0, sigma=sigma, count=steps, sampling="fixed-size")
    assert plain.tightest_epsilon(delta) == pytest.approx(2268.77, rel=1e-4)
    ledger = PrivacyLedger(relation="replace-one")
    ledger.record(SampledWithoutReplacement(sigma, b, n, steps))
    lo, _, up = ledger.epsilon_bounds(delta, method="pld")
    alone = epsilon_bounds_without_replacement(sigma, b, n, steps, delta)
    assert up == pytest.approx(alone.upper, rel=2e-3) and up < 8.0   # amplified: 2,268.8 -> 7.6
    assert lo >= 0.999 * alone.lower > 7.1  # the realised "same gradient" pair
    rdp = ledger.epsilon(delta, "rdp")                                 # Thm 9: 12.11
    assert up < rdp and ledger.tightest_epsilon(delta, with_method=True)[1] == "pld"
    # composes with another event: more releases, more eps, still certified both ends
    ledger.step(q=0.01, sigma=1.0, count=100)
    lo2, _, up2 = ledger.epsilon_bounds(delta, method="pld")
    assert lo2 >= lo * 0.999 and up2 >= up and lo2 <= up2
