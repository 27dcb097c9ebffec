"""Random allocation ("balls in bins"): the certified bracket against independent values.

Independent checks: Monte Carlo of the dominating pair (Chua et al. AISTATS 2025), the exact
Gaussian mechanism where allocation degenerates to it (t = 1, k = t), Poisson sampling.
"""

import math

import numpy as np
import pytest

import accounting as A
from accounting.allocation import (
    RandomAllocation,
    allocation_gaussian_bounds,
    allocation_schedule_bounds,
)
from accounting.composition import analytic_gaussian_epsilons
from accounting.pld import pld_delta, pld_epsilon

DELTA = 1e-5


def exact_gaussian(sigma: float, delta: float = DELTA) -> float:
    return float(analytic_gaussian_epsilons(np.array([sigma]), delta)[0])


def monte_carlo_delta(sigma, t, eps, direction, n, rng):
    """delta(eps) = E[(1 - e^(eps - L))_+] of the pair by sampling: mean and standard error.

    remove: x ~ P = (1/t) sum_i N(e_i, sigma^2 I) (the example in step 1), loss L(x);
    add: x ~ Q = N(0, sigma^2 I), loss -L(x); L(x) = log mean_i exp((x_i - 1/2)/sigma^2).
    """
    vals = []
    for _ in range(8):
        x = rng.standard_normal((n // 8, t)) * sigma
        if direction == "remove":
            x[:, 0] += 1.0
        loss = np.log(np.mean(np.exp((x - 0.5) / sigma**2), axis=1))
        if direction == "add":
            loss = -loss
        vals.append(np.maximum(-np.expm1(eps - loss), 0.0))
    v = np.concatenate(vals)
    return float(v.mean()), float(v.std() / math.sqrt(v.size))


def importance_delta(sigma, t, eps, n, rng, shift):
    """remove delta(eps) at small delta by importance sampling: the proposal is 1/2 P + 1/2
    (P with one uniformly chosen coordinate shifted by ``shift``), a defensive mixture, so
    the weights are <= 2 and every coordinate's large values are sampled (S is large when
    any term is, not only the example's)."""
    x = rng.standard_normal((n, t)) * sigma
    x[:, 0] += 1.0
    moved = rng.random(n) < 0.5
    cols = rng.integers(0, t, n)
    x[np.flatnonzero(moved), cols[moved]] += shift
    mean = np.zeros(t)
    mean[0] = 1.0
    z = (shift * (x - mean) - shift**2 / 2.0) / sigma**2
    ratio = np.exp(np.logaddexp.reduce(z, axis=1) - math.log(t))  # proposal part / P
    weight = 1.0 / (0.5 + 0.5 * ratio)
    loss = np.log(np.mean(np.exp((x - 0.5) / sigma**2), axis=1))
    v = np.maximum(-np.expm1(eps - loss), 0.0) * weight
    return float(v.mean()), float(v.std() / math.sqrt(n))


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_eps_bracket_at_delta_1e5_against_importance_sampled_monte_carlo():
    # at eps = lower end the true delta is >= 1e-5, at the upper end <= 1e-5 (the remove
    # direction is the worse one here)
    sigma, t = 1.0, 120
    b = A.allocation_epsilon_bounds(sigma, t, DELTA)
    rng = np.random.default_rng(2024)
    at_lower, se_lo = importance_delta(sigma, t, b.lower, 60_000, rng, 4.0)
    at_upper, se_up = importance_delta(sigma, t, b.upper, 60_000, rng, 4.0)
    assert se_lo < 0.15 * DELTA and se_up < 0.15 * DELTA
    assert at_lower + 4 * se_lo >= DELTA
    assert at_upper - 4 * se_up <= DELTA
    # a wrong eps 15% off is caught: delta there is far from 1e-5
    assert importance_delta(sigma, t, 0.85 * b.lower, 60_000, rng, 4.0)[0] > 1.5 * DELTA


@pytest.mark.slow
@pytest.mark.parametrize("eps", [0.15, 0.25])
def test_bracket_holds_against_monte_carlo_of_the_dominating_pair(eps):
    sigma, t = 1.0, 120
    ev = RandomAllocation(sigma, t)
    lower, upper = pld_delta([ev], eps)
    assert 0 < lower <= upper <= lower * 1.1
    rng = np.random.default_rng(12345)
    est = []
    for direction in ("remove", "add"):
        mean, se = monte_carlo_delta(sigma, t, eps, direction, 160_000, rng)
        est.append((mean, se))
    mean, se = max(est)  # the bracket is on the worse direction
    assert est[0][0] > est[1][0]  # remove dominates here (as for Poisson subsampling)
    assert lower - 4 * se <= mean <= upper + 4 * se
    # the Monte Carlo interval is narrower than the distance to a wrong answer: 20% off fails
    assert not (1.2 * lower - 4 * se <= mean <= 1.2 * upper + 4 * se)


@pytest.mark.parametrize("sigma", [0.8, 2.0])
def test_degenerate_allocations_are_the_gaussian_mechanism(sigma):
    # 1 of 1 step: the Gaussian mechanism; k = t = 4: four Gaussian releases per epoch
    one = A.allocation_epsilon_bounds(sigma, 1, DELTA)
    assert one.lower <= exact_gaussian(sigma) <= one.upper
    assert one.upper - one.lower < 1e-3 * one.upper
    four = A.allocation_epsilon_bounds(sigma, 4, DELTA, selected=4, epochs=2)
    assert four.lower <= exact_gaussian(sigma / math.sqrt(8)) <= four.upper
    assert four.upper - four.lower < 1e-3 * four.upper


def test_below_poisson_and_above_a_realised_lower_bound():
    sigma, t = 1.0, 120
    ra = A.allocation_epsilon_bounds(sigma, t, DELTA)
    poisson = A.PrivacyLedger()
    poisson.step(q=1 / t, sigma=sigma, count=t)
    p_lo, _, _ = poisson.epsilon_bounds(DELTA, method="pld")
    assert ra.upper < p_lo
    # the sum of the t outputs is N(1, t sigma^2) vs N(0, t sigma^2): a realised post-processing
    assert ra.lower >= exact_gaussian(sigma * math.sqrt(t))
    # and amplification is real: far below one unamplified Gaussian release
    assert ra.upper < 0.2 * exact_gaussian(sigma)
    assert ra.upper - ra.lower <= 0.02 * ra.upper


def test_monotone_in_epochs_and_composes_with_other_events():
    sigma, t = 1.0, 120
    one = A.allocation_epsilon_bounds(sigma, t, DELTA)
    two = A.allocation_epsilon_bounds(sigma, t, DELTA, epochs=2)
    assert one.upper < two.lower
    mixed = pld_epsilon([RandomAllocation(sigma, t), A.SampledGaussian(0.01, 1.0, 50)], DELTA)
    assert mixed.lower > one.lower and mixed.upper > one.upper
    assert mixed.lower <= mixed.upper


@pytest.mark.slow
def test_general_k_reduction_is_between_the_bounds():
    sigma, t = 1.0, 120
    k2 = A.allocation_epsilon_bounds(sigma, t, DELTA, selected=2)
    # upper: two compositions of 1-of-60; it costs more than one of 1-of-120, less than
    # two Gaussian releases without amplification
    assert k2.upper > A.allocation_epsilon_bounds(sigma, t, DELTA).upper
    assert k2.upper < exact_gaussian(sigma / math.sqrt(2))
    assert k2.lower <= k2.upper
    assert k2.lower >= exact_gaussian(sigma * math.sqrt(t) / 2) * 0.999
    # the lower end is the binned realised k-of-t pair: far above the sum statistic
    assert RandomAllocation(sigma, t, 2).lower_kind == "binned"
    assert k2.lower > 1.3 * exact_gaussian(sigma * math.sqrt(t) / 2)  # 0.88 vs 0.66
    assert k2.upper - k2.lower < 0.3 * k2.upper
    # k does not divide t: 2 x 1-of-floor(7/2) on a uniform 6-step subset (amplified,
    # before: the no-amplification bound); k > t/2: no amplification, said so
    odd = RandomAllocation(sigma, 7, 2)
    assert odd.reduction == "groups" and "2 x 1-of-3 of a uniform 6-step subset" in odd.describe()
    b = pld_epsilon([odd], DELTA)
    six = pld_epsilon([RandomAllocation(sigma, 6, 2)], DELTA)
    assert b.upper == pytest.approx(six.upper, rel=1e-9)
    assert b.upper < 0.95 * exact_gaussian(sigma / math.sqrt(2))
    big = RandomAllocation(sigma, 7, 4)
    assert big.reduction == "none" and "no amplification" in big.describe()
    assert pld_epsilon([big], DELTA).upper == pytest.approx(exact_gaussian(sigma / 2), rel=2e-3)


def test_ledger_records_serialises_and_refuses_what_it_cannot_account():
    ledger = A.PrivacyLedger()
    ledger.allocate(sigma=1.0, steps=120, selected=1, epochs=2, note="balls in bins")
    assert ledger.steps == 240
    assert "random allocation 1 of 120 steps" in ledger.describe()
    back = A.PrivacyLedger.from_json(ledger.to_json())
    assert back == ledger and isinstance(back.events[0], RandomAllocation)
    lo, _, up = ledger.epsilon_bounds(DELTA, method="pld")
    assert lo <= up
    # RDP counts it without amplification: valid, never below the certified lower end
    assert ledger.epsilon(DELTA) >= up
    assert ledger.epsilon(DELTA) == pytest.approx(
        A.rdp_to_dp(2 * A.DEFAULT_ORDERS / 2.0, A.DEFAULT_ORDERS, DELTA).eps)
    for method in ("basic", "advanced", "prv"):
        with pytest.raises(ValueError, match="pld"):
            ledger.epsilon(DELTA, method)
    with pytest.raises(ValueError, match="pld"):
        ledger.epsilon_bounds(DELTA, method="prv")
    assert A.tightest_epsilon(ledger, DELTA) == pytest.approx(up)  # the sound eps: PLD
    report = ledger.epsilon_report(DELTA)
    assert report["pld"] == pytest.approx(up) and "basic" not in report


@pytest.mark.parametrize("kwargs, name", [
    (dict(sigma=0.0, steps=10), "sigma"),
    (dict(sigma=-1.0, steps=10), "sigma"),
    (dict(sigma=1.0, steps=0), "steps"),
    (dict(sigma=1.0, steps=10, selected=11), "selected"),
    (dict(sigma=1.0, steps=10, epochs=0), "epochs"),
    (dict(sigma=1.0, steps=10, selected=True), "selected"),
])
def test_bad_input_is_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RandomAllocation(**kwargs)
    with pytest.raises(ValueError, match=name):
        A.PrivacyLedger().allocate(**kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("sigma", [0.6, 0.8, 1.25, 1.5, 2.0])
def test_one_epoch_bracket_is_tight_and_below_poisson(sigma):
    t = 120
    ra = A.allocation_epsilon_bounds(sigma, t, DELTA)
    assert ra.upper - ra.lower <= 0.02 * ra.upper
    poisson = A.PrivacyLedger()
    poisson.step(q=1 / t, sigma=sigma, count=t)
    assert ra.upper < poisson.epsilon_bounds(DELTA, method="pld")[0]


def mc_eps_of_realised_pair(sigma, t, k, epochs, delta, n, rng, direction="remove"):
    """Monte Carlo eps of the REALISED k-of-t pair (P: the example's gradient 1 in a uniform
    k-subset of the t steps of each epoch, Q: absent) at ``delta``, with a 4-standard-error
    interval: delta(eps) = E_P[(1 - e^(eps - L))_+] estimated on n samples of the composed
    loss L = sum over epochs of log(e_k(Y) / C(t, k)) - k / (2 sigma^2), Y_i = exp(x_i /
    sigma^2) (e_k: elementary symmetric polynomial, by the recursion over i). The estimate
    of eps is where the estimated delta curve (and its +-4 se curves) cross ``delta``."""
    total = np.zeros(n)
    log_ck = math.lgamma(t + 1) - math.lgamma(k + 1) - math.lgamma(t - k + 1)
    chunk = max(1, 2_000_000 // t)  # bounded memory at t = 1,000
    for _ in range(epochs):
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            x = rng.standard_normal((m, t)) * sigma
            if direction == "remove":
                sel = np.argsort(rng.random((m, t)), axis=1)[:, :k]
                np.put_along_axis(x, sel, np.take_along_axis(x, sel, axis=1) + 1.0, axis=1)
            z = x / sigma**2
            zmax = z.max(axis=1, keepdims=True)
            y = np.exp(z - zmax)  # scaled: e_k(Y) = e^(k zmax) e_k(y)
            e = np.zeros((m, k + 1))
            e[:, 0] = 1.0
            for i in range(t):
                e[:, 1:] = e[:, 1:] + y[:, i : i + 1] * e[:, :-1]
            loss = np.log(e[:, k]) + k * zmax[:, 0] - log_ck - k / (2 * sigma**2)
            total[start : start + m] += loss if direction == "remove" else -loss
    grid = np.linspace(0.0, 3.0 * max(float(np.quantile(total, 1 - delta / 10)), 0.1), 400)
    vals = np.maximum(-np.expm1(grid[:, None] - total[None, :]), 0.0)
    mean = vals.mean(axis=1)
    se = vals.std(axis=1) / math.sqrt(n)

    def crossing(curve):
        above = np.flatnonzero(curve > delta)
        return float(grid[above[-1] + 1]) if above.size and above[-1] + 1 < grid.size else 0.0

    return crossing(mean - 4 * se), crossing(mean), crossing(mean + 4 * se)


@pytest.mark.slow
@pytest.mark.parametrize("sigma, t, k, epochs", [
    (0.8, 12, 1, 1), (0.8, 12, 2, 1), (0.8, 12, 4, 1), (1.0, 40, 2, 1), (0.8, 12, 2, 10),
    (1.0, 12, 1, 10), (0.5, 1000, 1, 1), (0.5, 1000, 2, 1), (0.8, 120, 1, 10),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_bracket_contains_monte_carlo_of_the_realised_k_of_t_pair(sigma, t, k, epochs):
    # the printed bracket is on the scheme that RAN: its lower end is below the realised
    # pair's eps (for k > 1 too), its upper end above it; at delta 1e-2 the Monte Carlo
    # is accurate with 40,000 samples
    delta = 1e-2
    b = A.allocation_epsilon_bounds(sigma, t, delta, selected=k, epochs=epochs)
    rng = np.random.default_rng(7 + t + 10 * k + epochs)
    lo_ci, mid, hi_ci = mc_eps_of_realised_pair(sigma, t, k, epochs, delta, 40_000, rng)
    assert b.lower <= hi_ci
    assert lo_ci <= b.upper
    if k == 1:  # the realised pair dominates: the bracket is tight
        assert b.upper - b.lower <= 0.01 * b.upper
        assert b.lower * 0.95 <= mid <= b.upper * 1.05
    # (sigma 0.5, t = 1,000 at delta 1e-2 was [0.271, 0.480], 44% wide, with one-sided
    # rounding on a grid set by the heavy tail of exp(x / sigma^2))


@pytest.mark.slow
@pytest.mark.parametrize("sigma, t, delta, epochs", [
    (1.0, 100, 1e-9, 10), (1.0, 1000, 1e-8, 1), (0.05, 100, 1e-5, 1), (0.05, 1000, 1e-9, 10),
])
def test_never_zero_nan_or_a_crash_where_privacy_was_spent(sigma, t, delta, epochs):
    # before: (0, 0, 0) at delta 1e-8 / 1e-9 (the PLD's RDP fallback did not know the
    # event) and a ValueError at sigma 0.05
    b = A.allocation_epsilon_bounds(sigma, t, delta, epochs=epochs)
    g_lo, g_up = allocation_gaussian_bounds(sigma, t, delta, epochs=epochs)
    assert all(math.isfinite(v) for v in b)
    assert 0 < g_lo <= b.lower <= b.upper <= g_up
    if sigma >= 1 and epochs == 1:  # amplified (caps retried below delta), not the fallback
        assert b.upper < 0.3 * g_up and b.upper - b.lower < 0.1 * b.upper


def mc_eps_of_schedule_pair(sigmas, epochs, delta, n, rng):
    """Monte Carlo eps (4-se interval) of the realised pair of random allocation with a
    per-step sigma schedule, remove direction: x_i ~ N(1{i = J}, sigma_i^2), J uniform,
    loss log mean_i exp((x_i - 1/2) / sigma_i^2)."""
    t = sigmas.size
    total = np.zeros(n)
    for _ in range(epochs):
        x = rng.standard_normal((n, t)) * sigmas
        x[np.arange(n), rng.integers(0, t, n)] += 1.0
        z = (x - 0.5) / sigmas**2
        total += np.logaddexp.reduce(z, axis=1) - math.log(t)
    grid = np.linspace(0.0, 3.0 * max(float(np.quantile(total, 1 - delta / 10)), 0.1), 600)
    vals = np.maximum(-np.expm1(grid[:, None] - total[None, :]), 0.0)
    mean, se = vals.mean(axis=1), vals.std(axis=1) / math.sqrt(n)

    def crossing(curve):
        above = np.flatnonzero(curve > delta)
        return float(grid[above[-1] + 1]) if above.size and above[-1] + 1 < grid.size else 0.0

    return crossing(mean - 4 * se), crossing(mean), crossing(mean + 4 * se)


def mc_delta_of_schedule_pair(sigmas, eps, n, rng):
    """delta(eps) of the realised schedule pair, both directions, by Monte Carlo: (mean, se)
    for remove (x ~ P, loss L) and add (x ~ Q, loss -L), L = log mean_i exp((x_i - 1/2) /
    sigma_i^2)."""
    t = sigmas.size
    out = []
    for direction in ("remove", "add"):
        x = rng.standard_normal((n, t)) * sigmas
        if direction == "remove":
            x[np.arange(n), rng.integers(0, t, n)] += 1.0
        loss = np.logaddexp.reduce((x - 0.5) / sigmas**2, axis=1) - math.log(t)
        if direction == "add":
            loss = -loss
        v = np.maximum(-np.expm1(eps - loss), 0.0)
        out.append((float(v.mean()), float(v.std() / math.sqrt(n))))
    return out


@pytest.mark.slow
def test_schedule_bracket_ends_against_monte_carlo_delta():
    # at eps = upper end the true delta (the worse direction) is <= delta, at the lower end
    # >= delta: checked by a Monte Carlo of the realised pair at both ends
    sigmas = np.linspace(2.0, 0.8, 100)
    delta = 1e-3
    b = allocation_schedule_bounds(sigmas, delta)
    assert b.upper - b.lower <= 0.01 * b.upper
    rng = np.random.default_rng(31)
    at_upper = mc_delta_of_schedule_pair(sigmas, b.upper, 200_000, rng)
    at_lower = mc_delta_of_schedule_pair(sigmas, b.lower, 200_000, rng)
    assert all(mean - 4 * se <= delta for mean, se in at_upper)
    assert max(mean + 4 * se for mean, se in at_lower) >= delta
    # a wrong eps 20% low is caught: delta there is clearly above
    wrong = mc_delta_of_schedule_pair(sigmas, 0.8 * b.lower, 200_000, rng)
    assert max(mean - 4 * se for mean, se in wrong) > delta


@pytest.mark.slow
@pytest.mark.parametrize("epochs", [1, 10])
def test_constant_schedule_agrees_with_the_allocation_bracket(epochs):
    sched = allocation_schedule_bounds(np.full(120, 1.0), DELTA, epochs=epochs)
    const = A.allocation_epsilon_bounds(1.0, 120, DELTA, epochs=epochs)
    assert sched.lower <= const.upper and const.lower <= sched.upper  # overlap
    assert sched.upper - sched.lower <= 0.01 * sched.upper  # both narrow
    assert const.upper - const.lower <= 0.01 * const.upper


@pytest.mark.slow
def test_100_step_schedule_bracket_contains_monte_carlo_and_is_between_constants():
    sigmas = np.linspace(2.0, 0.8, 100)
    delta = 1e-3
    b = allocation_schedule_bounds(sigmas, delta)
    assert 0 < b.lower <= b.upper <= 1.01 * b.lower  # one-sided rounding: 5.4%
    lo_ci, mid, hi_ci = mc_eps_of_schedule_pair(sigmas, 1, delta, 60_000,
                                                np.random.default_rng(100))
    assert b.lower <= hi_ci and lo_ci <= b.upper
    assert b.lower * 0.95 <= mid <= b.upper * 1.05
    # every step at the largest / smallest sigma brackets the schedule (post-processing)
    assert A.allocation_epsilon_bounds(2.0, 100, delta).lower <= b.upper
    assert b.lower <= A.allocation_epsilon_bounds(0.8, 100, delta).upper
    # delta 1e-5: before [0.737, 0.746] (1.2%), now about 0.1%
    b5 = allocation_schedule_bounds(sigmas, DELTA)
    assert b5.upper - b5.lower <= 0.01 * b5.upper
    assert A.allocation_epsilon_bounds(2.0, 100, DELTA).upper <= b5.lower
    assert b5.upper <= A.allocation_epsilon_bounds(0.8, 100, DELTA).lower


@pytest.mark.slow
def test_1000_step_schedule_is_narrow_and_between_constants():
    sigmas = np.linspace(1.5, 0.7, 1000)
    b = allocation_schedule_bounds(sigmas, DELTA)
    # before: [0.2318, 0.2558] (10.4%); now 0.28% (asked: <= 1%)
    assert 0 < b.lower <= b.upper <= 1.01 * b.lower
    assert A.allocation_epsilon_bounds(1.5, 1000, DELTA).upper <= b.lower
    assert b.upper <= A.allocation_epsilon_bounds(0.7, 1000, DELTA).lower


@pytest.mark.slow
@pytest.mark.parametrize("epochs", [1, 10])
def test_schedule_double_precision_tree_overlaps_the_extended_one(monkeypatch, epochs):
    """Above _SCHED_EXT_DELTA the tree's direct sums run in double: both brackets are
    certified, so they must overlap, and the double one stays nearly as narrow."""
    sigmas = np.linspace(2.0, 0.8, 100)
    monkeypatch.setattr("accounting.allocation._SCHED_EXT_DELTA", 0.0)  # double
    dbl = allocation_schedule_bounds(sigmas, DELTA, epochs=epochs)
    monkeypatch.setattr("accounting.allocation._SCHED_EXT_DELTA", 1.0)  # extended
    ext = allocation_schedule_bounds(sigmas, DELTA, epochs=epochs)
    assert dbl.lower <= ext.upper and ext.lower <= dbl.upper
    assert dbl.upper - dbl.lower <= 1.2 * (ext.upper - ext.lower)
    assert dbl.upper - dbl.lower <= 0.01 * dbl.upper


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_schedule_epochs_compose_and_contain_monte_carlo():
    sigmas = np.linspace(2.0, 0.8, 100)
    delta = 1e-2
    one = allocation_schedule_bounds(sigmas, delta)
    ten = allocation_schedule_bounds(sigmas, delta, epochs=10)
    assert one.upper < ten.lower and ten.upper - ten.lower <= 0.02 * ten.upper
    lo_ci, mid, hi_ci = mc_eps_of_schedule_pair(sigmas, 10, delta, 40_000,
                                                np.random.default_rng(10))
    assert ten.lower <= hi_ci and lo_ci <= ten.upper
    const = [A.allocation_epsilon_bounds(s, 100, delta, epochs=10) for s in (2.0, 0.8)]
    assert const[0].lower <= ten.upper and ten.lower <= const[1].upper


@pytest.mark.parametrize("sigmas, name", [([], "sigmas"), ([1.0, 0.0], "sigmas"),
                                          ([1.0, float("nan")], "sigmas")])
def test_schedule_bad_input_is_refused_by_name(sigmas, name):
    with pytest.raises(ValueError, match=name):
        allocation_schedule_bounds(sigmas, DELTA)
    with pytest.raises(ValueError, match="epochs"):
        allocation_schedule_bounds([1.0], DELTA, epochs=0)


@pytest.mark.slow
@pytest.mark.parametrize("sigma, t, epochs, width", [
    (1.0, 1000, 1, 0.01), (0.5, 1000, 1, 0.01), (0.8, 1000, 10, 0.02), (0.5, 1000, 10, 0.01),
    (0.8, 120, 10, 0.01), (1.0, 12, 1, 0.01), (2.0, 1000, 1, 0.01),
])
def test_k1_brackets_are_narrow_for_one_and_ten_epochs(sigma, t, epochs, width):
    # before the mean-preserving construction: 1.5%, 0.5%, 10%, 44%, 2.8%, 0.06%, 0.6%
    b = A.allocation_epsilon_bounds(sigma, t, DELTA, epochs=epochs)
    assert 0 < b.lower <= b.upper <= (1 + width) * b.lower
    g_lo, g_up = allocation_gaussian_bounds(sigma, t, DELTA, epochs=epochs)
    assert g_lo <= b.lower and b.upper < 0.5 * g_up  # amplified, not a fallback


def test_mean_preserving_rounding_keeps_mass_and_mean():
    # the leaf: Y 1{Y <= c} rounded at random onto {j h}; its mass and E[Y; Y <= c] are
    # closed forms, and the rounding keeps the mean: sum_j j h q_j = sum_j m_j
    from scipy.special import ndtr

    from accounting import allocation

    s, c = 1.0 / 0.7, 50.0
    leaf = allocation._leaf(s, c / 4095, 4096, 0.0, c)
    mass = ndtr(math.log(c) / s)
    mean = math.exp(s * s / 2) * ndtr((math.log(c) - s * s) / s)
    j = np.arange(leaf.q.size - 1)
    assert abs(leaf.q.sum() - mass) <= leaf.e1 + 1e-15
    assert abs(leaf.m.sum() - mean) <= leaf.f1 + 1e-14 * mean
    assert abs((j * leaf.q[:-1]).sum() * leaf.h - leaf.m[:-1].sum()) <= 1e-12 * mean
    assert 0 < leaf.e1 < 1e-12
    # one epoch, t = 50: every part keeps the mean up to the absorbed mass, and the Q-mass
    # left out (N >= 2 terms above c, absorbed) is tiny
    ep = allocation._epoch(0.7, 50)
    kept = 0.0
    for part in ep.parts:
        n = part.q.size - 1
        values = np.arange(n) * part.h
        assert abs((values * part.q[:n]).sum() - part.m[:n].sum()) <= 1e-9 * ep.scale
        kept += part.q[:n].sum()
    assert 1 - 1e-9 < kept <= 1 + 1e-12


# ---------------------------------------------------------------- small deltas
@pytest.mark.slow
@pytest.mark.parametrize("sigma, t, epochs, delta, width", [
    (1.0, 1000, 1, 1e-10, 0.01), (0.8, 1000, 1, 1e-10, 0.01), (2.0, 1000, 1, 1e-10, 0.01),
    (1.0, 120, 10, 1e-10, 0.02), (1.0, 1000, 10, 1e-8, 0.01), (1.0, 12, 1, 1e-12, 0.02),
])
def test_small_delta_brackets_are_narrow_and_inside_the_closed_forms(sigma, t, epochs, delta,
                                                                     width):
    # before for_delta (tails and error bounds scaled to delta): 92%, 80%, 97%, 89%, 97%, 9%
    # wide, the upper end the no-amplification bound
    b = A.allocation_epsilon_bounds(sigma, t, delta, epochs=epochs)
    g_lo, g_up = allocation_gaussian_bounds(sigma, t, delta, epochs=epochs)
    assert g_lo <= b.lower <= b.upper <= (1 + width) * b.lower
    assert b.upper < 0.75 * g_up  # amplified, not the fallback


@pytest.mark.slow
def test_small_delta_bracket_is_monotone_in_delta():
    prev = None
    for delta in (1e-6, 1e-8, 1e-10, 1e-12):
        b = A.allocation_epsilon_bounds(1.0, 120, delta)
        assert b.lower <= b.upper
        if prev is not None:  # a smaller delta: a larger eps, on both ends
            assert b.lower >= prev.lower and b.upper >= prev.upper
            assert b.lower > prev.upper  # these deltas are far enough apart to separate
        prev = b


def test_for_delta_is_the_same_event_with_smaller_allowances():
    ev = RandomAllocation(1.0, 1000)
    small = ev.for_delta(1e-10)
    assert isinstance(small, RandomAllocation) and small.to_dict() == ev.to_dict()
    assert small.count == ev.count and small._tail < ev._tail
    assert type(ev.for_delta(1e-10)) is type(small)  # one variant type per tail
    h = 1e-3
    _, allow = ev.pld_parts(h, "remove", True)
    _, allow_small = small.pld_parts(h, "remove", True)
    assert allow > 1e-10 > 10 * allow_small  # the default reaches 1e-10, the variant not


@pytest.mark.slow
def test_ledger_pld_bracket_retries_with_the_small_delta_variant():
    # before: [2.78, 24.4] (the RDP fallback's upper end: pld_epsilon did not know the
    # event could be made certified at 1e-9)
    ledger = A.PrivacyLedger()
    ledger.allocate(sigma=1.0, steps=100, selected=1, epochs=10)
    b = ledger.epsilon_bounds(1e-9, method="pld")
    ref = A.allocation_epsilon_bounds(1.0, 100, 1e-9, epochs=10)
    assert b.lower == pytest.approx(ref.lower, rel=1e-6)
    assert b.upper == pytest.approx(ref.upper, rel=1e-6)
    assert b.upper <= 1.01 * b.lower
    assert b.upper < 0.2 * allocation_gaussian_bounds(1.0, 100, 1e-9, epochs=10)[1]


def test_small_delta_bracket_against_importance_sampling():
    # at delta 1e-8 (one epoch, t = 12: the remove direction is the worse one) the true
    # delta at the lower end is >= 1e-8 and at the upper end <= 1e-8
    delta, sigma, t = 1e-8, 1.0, 12
    b = A.allocation_epsilon_bounds(sigma, t, delta)
    assert b.upper <= 1.01 * b.lower
    rng = np.random.default_rng(7)
    at_lower, se_lo = importance_delta(sigma, t, b.lower, 100_000, rng, 5.0)
    at_upper, se_up = importance_delta(sigma, t, b.upper, 100_000, rng, 5.0)
    assert se_lo < 0.06 * delta and se_up < 0.06 * delta
    assert at_lower + 4 * se_lo >= delta
    assert at_upper - 4 * se_up <= delta
    # an eps 5% below the lower end is caught: delta there is over twice 1e-8
    assert importance_delta(sigma, t, 0.95 * b.lower, 100_000, rng, 5.0)[0] > 2 * delta


def test_the_ledger_keeps_the_better_ends_of_the_for_delta_pass_when_wide():
    """Not only an infinite upper end: a bracket wider than 1 % also gets the for_delta pass
    in the ledger's PLD accountant, so the ledger prints what allocation_epsilon_bounds does
    (delta 1e-7, ten epochs of t = 100: 1.07 % -> 0.12 % wide)."""
    ledger = A.PrivacyLedger()
    ledger.allocate(sigma=1.0, steps=100, selected=1, epochs=10)
    lo, _, up = ledger.epsilon_bounds(1e-7, method="pld")
    ref = A.allocation_epsilon_bounds(1.0, 100, 1e-7, epochs=10)
    assert lo == pytest.approx(ref.lower, rel=1e-6) and up == pytest.approx(ref.upper, rel=1e-6)
    assert (up - lo) / up <= 0.005
