"""The f-DP one-run bound: Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in
One Run" (ICML 2025, arXiv 2410.22235), for the Gaussian trade-off curve (mu-GDP).

The game is Steinke, Nasr, Jagielski's (m canaries, each in with probability 1/2; the auditor
guesses on r of them, abstains on the rest; v guesses are right), but the bound on
P[v or more right] uses the whole trade-off curve f of the mechanism instead of one
(eps, delta) point, which is tighter for mechanisms that are not pure DP (Gaussian noise).

The paper's numerical test (its Theorem on k-ary guessing games with abstention and its
Algorithm for the bound, k = 2 here): for a probability tau, start from

    r_v = tau v / m,            h_v = tau (r - v) / m

(the mass of right and of wrong guesses that an event of probability tau with v right
guesses carries, per canary) and go down, i = v-1, ..., 0:

    h_i = max(h_{i+1}, (k - 1) fbar(r_{i+1})),      fbar(x) = f(1 - x)
    r_i = r_{i+1} + i / (r - i) * (h_i - h_{i+1})

where fbar(x) is the least probability an event can have under one neighbouring input when
it has probability x under the other (for mu-GDP, fbar(x) = Phi(Phi^-1(x) - mu)). If
r_0 + h_0 > r / m (more guessing mass than the r guesses of the game can carry), no f-DP
mechanism makes v or more right guesses with probability tau: f is rejected at level tau.
:func:`mu_one_run` is the largest mu-GDP rejected (bisection; rejection is monotone in mu:
a larger mu gives a smaller fbar, hence smaller r_0 + h_0).

Checked, not only ported: the tests draw the paper's idealised game (every canary score
N(mu, 1) in, N(0, 1) out) and check the bound is never above the true mu more often than the
confidence allows, gives a larger eps (eps_lower_gdp, its eps at delta) than the Steinke et
al. bound on the same guesses, and is monotone in v. The recursion is the one both public
implementations compute (the authors' own, PrivacyGuard's ``FDPAnalysisNode`` at Meta, and
jax_privacy's ``auditing``); the paper's figure values could not be read here, so the
idealised check compares with the bound at the expected counts (within sampling error), as
for the Steinke et al. bound.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from accounting import PrivacyLedger
from accounting.registry import GaussianPart, UnsupportedEventError, parts

__all__ = ["gdp_floor", "fdp_rejects", "mu_one_run", "ledger_mu", "MU_MAX"]

#: the largest mu searched; a bound there is reported as this value (no finite run gets it)
MU_MAX = 40.0
_N = NormalDist()


def gdp_floor(x: float, mu: float) -> float:
    """fbar(x) = f(1 - x) for the Gaussian trade-off f = G_mu: Phi(Phi^-1(x) - mu), the least
    probability under one input of an event with probability x under its neighbour (Dong,
    Roth, Su 2019, Def. 2.6)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    z = _N.inv_cdf(x) - mu
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def fdp_rejects(m: int, r: int, v: int, mu: float, tau: float, k: int = 2) -> bool:
    """Does no mu-GDP mechanism give >= ``v`` right of ``r`` guesses (``m`` canaries, ``k``
    options each) with probability ``tau``? Mahloujifar, Melis, Chaudhuri 2025, the
    recursion of the module docstring (their Theorem for abstaining k-ary guessers, with
    f = G_mu); True rejects mu at level tau."""
    if not 0 <= v <= r <= m or m < 1:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if not 0.0 < tau < 1.0:
        raise ValueError(f"tau must be in (0, 1), got {tau!r}")
    budget = r / m
    rr, hh = tau * v / m, tau * (r - v) / m
    for i in range(v - 1, -1, -1):
        h_new = max(hh, (k - 1) * gdp_floor(rr, mu))
        if h_new == hh:        # h unchanged: r unchanged, and so every later step
            break
        rr = rr + i / (r - i) * (h_new - hh)
        hh = h_new
        if rr + hh > budget:   # r and h only grow as i falls: already rejected
            return True
    return rr + hh > budget


def mu_one_run(m: int, r: int, v: int, p: float, k: int = 2, tol: float = 1e-4) -> float:
    """mu_lower: the largest mu such that a mu-GDP run gives >= ``v`` right of ``r`` guesses
    with probability below ``p`` (bisection to ``tol``; 0 where even mu -> 0 is not
    rejected, :data:`MU_MAX` where every mu searched is)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if v == 0 or not fdp_rejects(m, r, v, 1e-9, p, k):
        return 0.0
    if fdp_rejects(m, r, v, MU_MAX, p, k):
        return MU_MAX
    lo, hi = 0.0, 1.0
    while fdp_rejects(m, r, v, hi, p, k):
        lo, hi = hi, hi * 2.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if fdp_rejects(m, r, v, mid, p, k):
            lo = mid
        else:
            hi = mid
    return lo


def ledger_mu(ledger: PrivacyLedger) -> float | None:
    """mu of a ledger that is a composition of Gaussian mechanisms without amplification:
    sqrt(sum_steps (s / sigma)^2) (Dong, Roth, Su 2019, Cor. 3.3), s the step's L2
    sensitivity in units of C under the ledger's relation and sampling (2 for fixed-size or
    shuffled batches and for replace-one: ``accounting.relations.gaussian_upper``).

    Read through the event registry (each event's ``pld`` rule, upper side), not by event
    type: an event whose upper pair is a Gaussian with q in {0, 1} (any registered type,
    including a user's) counts; None if any step is amplified by Poisson sampling
    (0 < q < 1), is not Gaussian or has no rule, or if the ledger is empty."""
    events = ledger.events
    if not events:
        return None
    try:
        items = parts(events, "pld", "gdp-mu")
    except UnsupportedEventError:
        return None
    if not items or not all(isinstance(p, GaussianPart) for p in items):
        return None
    total = 0.0
    for p in items:
        q, sig, counts = (np.asarray(p.qs, float), np.asarray(p.sigmas, float),
                          np.asarray(p.counts, float))
        live = q > 0
        if np.any(live & (q < 1)):
            return None
        if np.any(live & (sig <= 0)):
            return math.inf
        total += float(np.sum(counts[live] / sig[live] ** 2))
    return math.sqrt(total)
