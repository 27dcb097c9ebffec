"""Poisson-sampled Gaussian steps under replace-one: the realisable +-1 pair.

The pair P = (1-q) N(0, s^2) + q N(1, s^2), Q = (1-q) N(0, s^2) + q N(-1, s^2) (units of the
clip norm C, s = sigma) is what one step outputs when the replaced record's clipped gradient
is +C, its replacement's -C and every other one 0; it is also the worst case over all
gradients in the unit ball (Schuchardt et al. 2024, Thm 3.8 with one insertion and one
deletion), so it is the PLD accountant's pair on both sides. Checked here against
dp-accounting (whose REPLACE_ONE PLD uses this pair at the same sigma), an independent
discretisation of the same pair (accounting.without_replacement), a Monte Carlo of its
hockey-stick divergence and a 2-D quadrature of non-collinear gradients.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import accounting as A
from accounting.pld import pld_delta
from accounting.without_replacement import pld_lower_without_replacement

dpa_pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
from dp_accounting import dp_event  # noqa: E402
from dp_accounting.privacy_accountant import NeighboringRelation  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant  # noqa: E402

DELTA = 1e-5


def _ledger(q: float, sigma: float, steps: int) -> A.PrivacyLedger:
    ledger = A.PrivacyLedger(relation="replace-one")
    ledger.step(q=q, sigma=sigma, count=steps)
    return ledger


def _bounds(q: float, sigma: float, steps: int, delta: float = DELTA) -> A.PLDBounds:
    return _ledger(q, sigma, steps).epsilon_bounds(delta, "pld")


def _dp_accounting(q: float, sigma: float, steps: int, pessimistic: bool) -> float:
    """dp-accounting's REPLACE_ONE PLD of PoissonSampledDpEvent(q, GaussianDpEvent(sigma)):
    mu_upper = q N(-1, sigma^2) + (1-q) N(0, sigma^2) against q N(1, .) + (1-q) N(0, .)
    (privacy_loss_mechanism.GaussianPrivacyLoss, REPLACE): the same pair, same sigma."""
    pld = dpa_pld.from_gaussian_mechanism(
        sigma, sampling_prob=q, pessimistic_estimate=pessimistic,
        value_discretization_interval=1e-4,
        neighboring_relation=NeighboringRelation.REPLACE_ONE)
    return pld.self_compose(steps).get_epsilon_for_delta(DELTA)


@pytest.mark.slow
@pytest.mark.parametrize("q,sigma,steps", [(0.01, 0.8, 100), (0.1, 2.0, 100), (0.5, 5.0, 10),
                                           (0.1, 0.8, 1)])
def test_bracket_meets_dp_accountings_replace_one_pair(q: float, sigma: float,
                                                       steps: int) -> None:
    b = _bounds(q, sigma, steps)
    optimistic = _dp_accounting(q, sigma, steps, False)
    pessimistic = _dp_accounting(q, sigma, steps, True)
    # both are brackets on the same eps: they overlap, and ours is the narrower one
    assert b.lower <= pessimistic and optimistic <= b.upper
    assert b.upper - b.lower <= pessimistic - optimistic + 1e-9 * pessimistic
    assert b.upper == pytest.approx(pessimistic, rel=0.01)
    # same convention as the accountant (sigma, not sigma/2): the upper end is NOT the pair
    # at half the noise, which would be the sensitivity counted twice
    assert b.upper < 0.9 * _dp_accounting(q, sigma / 2.0, steps, False)


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.0, 100), (0.5, 2.0, 100), (0.2, 0.8, 10),
                                           (0.01, 5.0, 1000)])
def test_lower_end_is_the_realisable_pair(q: float, sigma: float, steps: int) -> None:
    """The lower end is at least the independently discretised +-1 pair (a dataset realises
    it), far above the add/remove pair it used to be (0.29 vs 1.42 in the issue)."""
    b = _bounds(q, sigma, steps)
    n = 10_000
    pair = pld_lower_without_replacement(sigma, round(q * n), n, steps, DELTA)
    assert pair > 0
    assert b.lower >= pair * (1 - 5e-3) and b.upper >= pair
    add_remove = A.PrivacyLedger()
    add_remove.step(q=q, sigma=sigma, count=steps)
    assert b.lower > add_remove.epsilon_bounds(DELTA, "pld").upper


def _mc_delta(q: float, sigma: float, steps: int, eps: float, n: int,
              seed: int) -> tuple[float, float]:
    """Monte Carlo of delta(eps) = E_P[(1 - e^(eps - L))_+] of the T-fold +-1 pair, L the
    summed loss log P(x)/Q(x) of x ~ P per step; returns (estimate, standard error)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sigma, (n, steps)) + (rng.random((n, steps)) < q)
    a, lb = math.log1p(-q), math.log(q) - 0.5 / sigma**2
    loss = (np.logaddexp(a, lb + x / sigma**2) - np.logaddexp(a, lb - x / sigma**2)).sum(1)
    val = -np.expm1(np.minimum(eps - loss, 0.0))
    return float(val.mean()), float(val.std() / math.sqrt(n))


def test_monte_carlo_hockey_stick_sits_inside_the_delta_bracket() -> None:
    q, sigma, steps, eps = 0.2, 1.0, 10, 1.0
    est, se = _mc_delta(q, sigma, steps, eps, 400_000, 7)
    lower, upper = pld_delta([A.SampledGaussian(q, sigma, steps, relation="replace-one")], eps)
    assert se < 0.02 * est
    assert lower - 5 * se <= est <= upper + 5 * se
    assert upper >= est - 5 * se  # the certified upper end is not below the pair


def _delta_2d(q: float, s: float, g: tuple, gp: tuple, eps: float, n: int = 700) -> float:
    """H_{e^eps}((1-q) N(0, s^2 I) + q N(g, s^2 I) || same with g') by 2-D quadrature."""
    lim = 1.0 + 8.0 * s
    x = np.linspace(-lim, lim, n)
    dx = x[1] - x[0]
    xx, yy = np.meshgrid(x, x, indexing="ij")

    def phi(m: tuple) -> np.ndarray:
        return np.exp(-((xx - m[0]) ** 2 + (yy - m[1]) ** 2) / (2 * s * s)) / (2 * np.pi * s * s)

    p = (1 - q) * phi((0.0, 0.0)) + q * phi(g)
    r = (1 - q) * phi((0.0, 0.0)) + q * phi(gp)
    return float(np.maximum(p - math.exp(eps) * r, 0.0).sum() * dx * dx)


def test_no_gradient_pair_in_the_unit_disc_leaks_more_than_the_upper_end() -> None:
    """Any two clipped gradients (||g||, ||g'|| <= 1, here in 2-D) give a hockey-stick
    divergence below the certified upper end; the collinear +-1 pair attains it."""
    q, s, eps = 0.3, 1.0, 0.5
    _, upper = pld_delta([A.SampledGaussian(q, s, 1, relation="replace-one")], eps)
    rng = np.random.default_rng(3)
    worst = _delta_2d(q, s, (1.0, 0.0), (-1.0, 0.0), eps)
    assert worst == pytest.approx(upper, rel=2e-3)
    for _ in range(6):
        r, th = np.sqrt(rng.random(2)), rng.uniform(0, 2 * np.pi, 2)
        g = (r[0] * math.cos(th[0]), r[0] * math.sin(th[0]))
        gp = (r[1] * math.cos(th[1]), r[1] * math.sin(th[1]))
        assert _delta_2d(q, s, g, gp, eps) <= upper
    assert _delta_2d(q, s, (1.0, 0.0), (math.cos(2.8), math.sin(2.8)), eps) < worst


def test_monotone_in_q_sigma_and_steps() -> None:
    ups = [_bounds(q, 1.5, 50) for q in (0.01, 0.05, 0.2, 0.5, 0.9)]
    assert all(a.upper < b.lower for a, b in zip(ups, ups[1:]))
    by_sigma = [_bounds(0.1, s, 50) for s in (0.7, 1.0, 2.0, 5.0)]
    assert all(a.lower > b.upper for a, b in zip(by_sigma, by_sigma[1:]))
    by_steps = [_bounds(0.1, 1.0, t) for t in (1, 10, 100, 1000)]
    assert all(a.upper < b.lower for a, b in zip(by_steps, by_steps[1:]))
    # q -> 1 meets the unamplified Gaussian at sensitivity 2 (sigma/2) from below
    full = A.PrivacyLedger()
    full.step(q=1.0, sigma=0.75, count=50)
    assert ups[-1].upper < full.epsilon(DELTA, "pld")


def test_sensitivity_is_not_off_by_two_as_in_dp_accounting_378() -> None:
    """dp-accounting's RDP accountant reads GaussianDpEvent(sigma) under REPLACE_ONE at
    sensitivity 1 (its issue #378): 4x too little RDP, an eps below the pair's certified lower
    end. Ours is the RDP of sigma/2 (distance 2C), above every lower end."""
    sigma, steps = 2.0, 100
    ledger = A.PrivacyLedger(relation="replace-one")
    ledger.step(q=1.0, sigma=sigma, count=steps, sampling="all")
    lower = ledger.epsilon_bounds(DELTA, "pld").lower

    def rdp_eps(noise: float) -> float:
        acc = rdp_privacy_accountant.RdpAccountant(
            neighboring_relation=NeighboringRelation.REPLACE_ONE)
        acc.compose(dp_event.GaussianDpEvent(noise), steps)
        return acc.get_epsilon(DELTA)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ledger.epsilon(DELTA, "rdp")
    assert rdp_eps(sigma) < lower  # the erratum: not a valid upper bound
    assert lower <= ours == pytest.approx(rdp_eps(sigma / 2.0), rel=0.02)
    # and the Poisson replace-one RDP (group privacy 2 / sigma/2) is above the pair too
    poisson = _ledger(0.1, sigma, steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert poisson.epsilon(DELTA, "rdp") >= poisson.epsilon_bounds(DELTA, "pld").upper


def test_schedules_and_tiny_deltas_stay_bracketed() -> None:
    sig = np.linspace(0.9, 1.6, 200)
    sched = A.PrivacyLedger(relation="replace-one")
    sched.record(A.GaussianSchedule(0.05, sig, relation="replace-one"))
    b = sched.epsilon_bounds(DELTA, "pld")
    lo = _bounds(0.05, 1.6, 200)  # every step at the largest sigma: less leakage
    hi = _bounds(0.05, 0.9, 200)
    assert lo.lower <= b.upper and b.lower <= hi.upper and b.upper - b.lower < 0.02 * b.upper
    for delta in (1e-9, 1e-12):
        tiny = _bounds(0.1, 1.0, 100, delta)
        assert 0 < tiny.lower <= tiny.upper < math.inf


def _exact_one_step_eps(q: float, s: float, delta: float) -> float:
    """eps of ONE step of the +-1 pair, by bisection on the closed form (loss increasing in
    x, so {L > eps} = {x > x_eps}): delta(eps) = P(x > x_eps) - e^eps Q(x > x_eps), every
    term in log space (losses of thousands at small s); x_eps itself by bisection."""
    from scipy.special import log_ndtr, logsumexp

    a, lb = math.log1p(-q), math.log(q) - 0.5 / s**2

    def loss(x: float) -> float:
        return float(np.logaddexp(a, lb + x / s**2) - np.logaddexp(a, lb - x / s**2))

    def bisect(f, lo: float, hi: float) -> float:
        for _ in range(200):
            mid = (lo + hi) / 2.0
            lo, hi = (mid, hi) if f(mid) else (lo, mid)
        return (lo + hi) / 2.0

    def log_tail(x: float, shift: float) -> float:  # log of (1-q) sf(x/s) + q sf((x-shift)/s)
        return float(logsumexp([a + log_ndtr(-x / s), math.log(q) + log_ndtr(-(x - shift) / s)]))

    def delta_at(eps: float) -> float:
        x = bisect(lambda v: loss(v) <= eps, -50.0, 50.0)
        lp, lq = log_tail(x, 1.0), eps + log_tail(x, -1.0)
        return math.exp(lp) * -math.expm1(min(lq - lp, 0.0))

    return bisect(lambda e: delta_at(e) > delta, 0.0, 1e5)


@pytest.mark.parametrize("q,sigma", [(0.01, 0.01), (0.5, 0.05), (0.2, 0.3), (0.01, 1.0),
                                     (0.5, 3.0)])
def test_one_step_bracket_contains_the_exact_eps_down_to_tiny_sigma(q: float,
                                                                    sigma: float) -> None:
    """Losses of thousands (sigma = 0.01: about 1/(2 sigma^2) = 5,000) stay on the grid: the
    +-1 pair's loss inverse once overflowed past 709 and put that mass at 709."""
    exact = _exact_one_step_eps(q, sigma, DELTA)
    b = _bounds(q, sigma, 1)
    assert b.lower * (1 - 1e-9) <= exact <= b.upper * (1 + 1e-9)
    assert b.upper - b.lower <= 0.01 * b.upper
