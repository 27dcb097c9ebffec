"""Speed and accuracy of the ``accounting`` package against Opacus, dp-accounting and PRV.

Five sections, printed as Markdown:

1. eps of a 10,000-step exponential noise schedule (sigma 15 -> 4.85, a different sigma every
   step, q = 1/120, delta = 1e-5): our exact RDP accountant against Opacus's RDPAccountant,
   dp-accounting's RdpAccountant (all three on the same Rényi orders) and prv-accountant,
   with wall-clock times and speed-ups (peer time / our time). ``--profile quick`` times the
   peers on the first ``--peer-steps`` steps and extrapolates linearly to 10,000 steps
   (their cost is linear in the number of distinct steps); ``--profile full`` runs them on
   all 10,000 steps.
2. The conservative mode (sigmas rounded down onto a geometric grid): eps, its reported
   max_excess, the actual excess over the exact eps, and its time, per grid resolution.
3. Scaling with the number of steps and with the number of distinct sigmas.
4. One-step RDP at fractional orders from ours, Opacus and dp-accounting against a
   40-digit mpmath evaluation of the defining integral.
5. The certified PLD bracket (``method="pld"``) against dp-accounting's PLD composing every
   event: the 2,000- and 10,000-step exponential schedules, constant sigma 6, q = 0.01, and
   q = 0.001 with 10,000 distinct sigmas uniform in [0.55, 0.65] (dp-accounting on its first
   steps only, extrapolated), with times (wall and CPU), bracket widths and speed-ups from the
   same run, and the speed-up at 2,000 distinct sigmas on its own line.

Usage::

    python -m benchmarks.accounting_speed                  # quick profile (about a minute)
    python -m benchmarks.accounting_speed --profile full   # peers on all 10,000 steps
    python -m benchmarks.accounting_speed --out results    # also write results/accounting_speed.md
    python -m benchmarks.accounting_speed --tiny           # seconds: 1,000 steps, no prv (tests)
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import accounting as A
from benchmarks._common import (
    Report,
    Stopwatch,
    at_least,
    best_of,
    environment,
    parser,
    profile,
    version,
    write_outputs,
)

Q = 1.0 / 120.0
DELTA = 1e-5
#: steps of the schedule of sections 1, 2 and 5 in the quick and full profiles
STEPS = 10_000
SIGMA0 = 15.0
SIGMA_END = 4.85
#: Section 5's small-q schedule: a new sigma every step, uniform in this
#: range (seed 0), at this sampling rate: eps is ~3x as sensitive to sigma as at sigma 5.
SMALL_Q = 0.001
SMALL_Q_SIGMAS = (0.55, 0.65)
#: The Rényi orders every RDP accountant uses in section 1 (ours, passed to the peers too).
ORDERS: np.ndarray = A.DEFAULT_ORDERS.copy()
#: Opacus's RDPAccountant.DEFAULT_ALPHAS: ours without 64, 128 and 256.
OPACUS_DEFAULT_ORDERS: list[float] = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
#: Resolutions of the conservative mode (relative spacing of the geometric sigma grid).
RESOLUTIONS = (1e-2, 1e-3, 1e-4)
#: (alpha, q, sigma) cases of the fractional-order check (section 4).
FRACTIONAL_CASES = ((1.1, 1.0 / 120.0, 6.0), (1.5, 0.01, 2.5))
#: dp-accounting's rdp_privacy_accountant_test.py, test_compute_rdp_poisson_sampled_gaussian:
#: its expected RDP at order 1.5 for 50 composed steps of (q=0.01, sigma=2.5).
DP_ACCOUNTING_TEST_VALUE = 6.70579741e-04
DP_ACCOUNTING_TEST_COUNT = 50


@dataclass(frozen=True)
class Profile:
    """Sizes of one run."""

    steps: int  # the exponential schedule of sections 1, 2 and 5
    peer_steps: int | None  # steps Opacus and dp-accounting run in section 1 (None: all)
    repeats: int  # timed repetitions of our accountant, best kept
    prv: bool  # prv-accountant in section 1 (a few seconds whatever the steps)
    big: int  # the large schedule of section 3
    step_grid: tuple[int, ...]  # section 3: cost against steps
    distinct_grid: tuple[int, ...]  # section 3: cost against distinct sigmas ...
    distinct_steps: int  # ... at this many steps
    distinct: int  # distinct sigmas of the large schedule and of the steps grid
    pld_short: int  # section 5: the short schedule dp-accounting's PLD always runs
    pld_peer_all: bool  # section 5: dp-accounting's PLD on the whole schedule too
    pld_small_peer: int = 0  # section 5: steps of the q = 0.001 schedule dp-accounting runs


PROFILES: dict[str, Profile] = {
    "quick": Profile(steps=STEPS, peer_steps=200, repeats=5, prv=True, big=1_000_000,
                     step_grid=(10_000, 100_000, 1_000_000),
                     distinct_grid=(10, 100, 1_000, 10_000), distinct_steps=100_000,
                     distinct=1_000, pld_short=2_000, pld_peer_all=False,
                     pld_small_peer=5),
    "full": Profile(steps=STEPS, peer_steps=None, repeats=5, prv=True, big=1_000_000,
                    step_grid=(10_000, 100_000, 1_000_000),
                    distinct_grid=(10, 100, 1_000, 10_000), distinct_steps=100_000,
                    distinct=1_000, pld_short=2_000, pld_peer_all=True,
                    pld_small_peer=50),
    "tiny": Profile(steps=1_000, peer_steps=3, repeats=1, prv=False, big=20_000,
                    step_grid=(1_000, 10_000), distinct_grid=(10, 100), distinct_steps=10_000,
                    distinct=100, pld_short=20, pld_peer_all=False),
}


# ---------------------------------------------------------------------------------- output
def fmt_s(seconds: float) -> str:
    """Seconds with three significant digits."""
    return f"{seconds:.3g}"


def fmt_ms(seconds: float) -> str:
    """Seconds shown as milliseconds."""
    return f"{seconds * 1e3:.3g}"


def fmt_eps(eps: float, order: float | None = None) -> str:
    """eps with 8 significant digits and, when known, the optimal order."""
    if order is None or not math.isfinite(eps):
        return f"{eps:.8g}"
    return f"{eps:.8g} (α={order:g})"


def rel(a: float, b: float) -> str:
    """Relative difference (a - b) / b."""
    if b == 0 or not (math.isfinite(a) and math.isfinite(b)):
        return "n/a"
    return f"{(a - b) / b:+.2e}"


# ---------------------------------------------------------------------------------- peers
def load_opacus() -> tuple[Any, str]:
    """Opacus's RDPAccountant class (or None) and a status line."""
    try:
        from opacus.accountants import RDPAccountant
    except ImportError:
        return None, "not installed"
    except Exception as exc:  # noqa: BLE001 - a broken optional peer must not stop the run
        return None, f"unavailable ({type(exc).__name__}: {exc})"
    return RDPAccountant, version("opacus")


def load_dp_accounting() -> tuple[Any, str]:
    """The dp_accounting module (or None) and a status line."""
    try:
        import dp_accounting
        import dp_accounting.rdp  # noqa: F401 - makes dp_accounting.rdp available
    except ImportError:
        return None, "not installed"
    except Exception as exc:  # noqa: BLE001
        return None, f"unavailable ({type(exc).__name__}: {exc})"
    return dp_accounting, version("dp-accounting")


def ours_eps(sigmas: np.ndarray, orders: Sequence[float] | None = None,
             method: str = "rdp") -> tuple[float, float | None]:
    """(eps, optimal order) from a fresh ledger (no memoised RDP values)."""
    ledger = A.PrivacyLedger(orders=orders)
    ledger.step_schedule(Q, sigmas)
    res = ledger.epsilon_and_order(DELTA, method, warn=False)
    return res.eps, res.order


def opacus_eps(cls: Any, sigmas: np.ndarray, orders: Sequence[float]) -> tuple[float, float]:
    """(eps, optimal order) from Opacus's RDPAccountant, one ``step`` call per sigma."""
    acc = cls()
    for s in sigmas:
        acc.step(noise_multiplier=float(s), sample_rate=Q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps, order = acc.get_privacy_spent(delta=DELTA, alphas=list(orders))
    return float(eps), float(order)


def dp_accounting_eps(mod: Any, sigmas: np.ndarray,
                      orders: Sequence[float]) -> tuple[float, float]:
    """(eps, optimal order) from dp-accounting's RdpAccountant, one event per sigma."""
    acc = mod.rdp.RdpAccountant(list(orders))
    for s in sigmas:
        acc.compose(mod.PoissonSampledDpEvent(Q, mod.GaussianDpEvent(float(s))))
    eps, order = acc.get_epsilon_and_optimal_order(DELTA)
    return float(eps), float(order)


def prv_bounds(sigmas: np.ndarray) -> A.PRVBounds | str:
    """prv-accountant's (lower, estimate, upper) through the adapter, or why there is none."""
    ledger = A.PrivacyLedger()
    ledger.step_schedule(Q, sigmas)
    try:
        return A.prv_epsilon(ledger.events, DELTA)
    except ImportError:
        return "not installed"
    except A.PRVUnavailable as exc:  # the peer's own failure on this ledger
        return f"unavailable ({exc})"


def fmt_prv(b: A.PRVBounds | str) -> str:
    """lower / estimate / upper, or the reason there are none."""
    if isinstance(b, str):
        return b
    return f"{b.lower:.4g} / {b.estimate:.4g} / {b.upper:.4g}"


# ---------------------------------------------------------------------------------- sections
def time_peers(prefix: np.ndarray
               ) -> tuple[dict[str, tuple[float, float, float] | None], str, str]:
    """Each peer's (time, eps, order) on the schedule ``prefix`` (None where not installed),
    and the two peers' install statuses."""
    op_cls, op_status = load_opacus()
    dp_mod, dp_status = load_dp_accounting()
    peers: dict[str, tuple[float, float, float] | None] = {}  # name -> (time, eps, order)
    for name, available, fn in (
        ("opacus", op_cls is not None, lambda: opacus_eps(op_cls, prefix, ORDERS)),
        ("dp-accounting", dp_mod is not None, lambda: dp_accounting_eps(dp_mod, prefix, ORDERS)),
    ):
        if not available:
            peers[name] = None
            continue
        timed = best_of(fn, 1)
        peers[name] = (timed.best, *timed.result)
    return peers, op_status, dp_status


def time_table(rep: Report, steps: int, n_peer: int, t_ours: float,
               peers: dict[str, tuple[float, float, float] | None], statuses: tuple[str, str],
               prv: tuple[float, Any]) -> dict[str, float]:
    """Section 1's time table (the peers' times on ``n_peer`` steps scaled to ``steps``);
    returns the peers' per-step costs."""
    t_prv, prv_full = prv
    scale = steps / n_peer
    how = f"extrapolated from {n_peer:,} steps" if n_peer < steps else "measured"
    rows = [["ours (exact RDP)", f"{steps:,}", fmt_s(t_ours), fmt_s(t_ours), "measured", "1"]]
    per_step: dict[str, float] = {}
    for name, label, status in (("opacus", "Opacus RDPAccountant", statuses[0]),
                                ("dp-accounting", "dp-accounting RdpAccountant", statuses[1])):
        r = peers[name]
        if r is None:
            rows.append([label, "-", status, "-", "-", "-"])
            continue
        t_full = r[0] * scale
        per_step[name] = r[0] / n_peer
        rows.append([f"{label} {version(name)}", f"{n_peer:,}", fmt_s(r[0]), fmt_s(t_full), how,
                     f"{t_full / t_ours:.0f}x"])
    if isinstance(prv_full, str):
        rows.append(["prv-accountant", "-", prv_full, "-", "-", "-"])
    else:
        rows.append([f"prv-accountant {version('prv-accountant')} (A.prv_epsilon, "
                     "sigmas bucketed to <= 16)", f"{steps:,}", fmt_s(t_prv), fmt_s(t_prv),
                     "measured (one run)", f"{t_prv / t_ours:.0f}x"])
    rep.line("Time:")
    rep.line()
    rep.table(["accountant", "steps run", "time (s)", f"time for {steps:,} steps (s)", "how",
               "speed-up (peer / ours)"], rows)
    return per_step


def section_peers(rep: Report, prof: Profile) -> dict[str, float]:
    """Section 1: the 10,000-step schedule, ours against the peers. Returns per-step costs."""
    steps, repeats = prof.steps, prof.repeats
    sigmas = A.schedules.exponential(SIGMA0, SIGMA_END, steps)
    n_peer = steps if prof.peer_steps is None else min(prof.peer_steps, steps)
    prefix = sigmas[:n_peer]
    extrapolated = n_peer < steps
    scale = steps / n_peer

    rep.line(f"## 1. {steps:,}-step schedule, a different sigma every step")
    rep.line()
    rep.line(f"Exponential decay sigma {SIGMA0:g} -> {SIGMA_END:g} over {steps:,} steps "
             f"({np.unique(sigmas).size:,} distinct sigmas), q = 1/120, delta = {DELTA:g}. "
             f"Ours: best of {repeats}, a fresh ledger each time. Peers: one run each on "
             f"{n_peer:,} steps" + (f", time x{scale:g} = **extrapolated** to {steps:,} steps "
                                    "(their cost is linear in distinct steps)."
                                    if extrapolated else " (all of them, measured)."))
    rep.line()

    timed = best_of(lambda: ours_eps(sigmas, ORDERS), repeats)
    t_ours, (e_ours, o_ours) = timed.best, timed.result
    e_ours_p, o_ours_p = ours_eps(prefix, ORDERS)
    e_classic, _ = ours_eps(sigmas, ORDERS, "rdp-classic")
    e_opacus_orders, o_opacus_orders = ours_eps(sigmas, OPACUS_DEFAULT_ORDERS)

    peers, op_status, dp_status = time_peers(prefix)

    if prof.prv:
        timed = best_of(lambda: prv_bounds(sigmas), 1)
        t_prv, prv_full = timed.best, timed.result
        prv_prefix = prv_bounds(prefix) if extrapolated else prv_full
    else:
        t_prv, prv_full = math.nan, "not run (this profile)"
        prv_prefix = prv_full

    per_step = time_table(rep, steps, n_peer, t_ours, peers, (op_status, dp_status),
                          (t_prv, prv_full))

    def cell(name: str) -> str:
        r = peers[name]
        if r is None:
            return op_status if name == "opacus" else dp_status
        return fmt_eps(r[1], r[2])

    def rdiff(name: str, ref: float) -> str:
        r = peers[name]
        return "-" if r is None else rel(r[1], ref)

    rep.line("eps (optimal order in brackets; all three RDP accountants on the same "
             f"{ORDERS.size} orders: ours, i.e. Opacus's default 1.1..10.9, 12..63 plus 64, 128, "
             "256):")
    rep.line()
    headers = ["steps", "ours (exact RDP)", "Opacus", "dp-accounting",
               "prv lower / estimate / upper", "Opacus - ours (rel.)",
               "dp-accounting - ours (rel.)"]
    eps_rows = []
    if extrapolated:
        eps_rows.append([f"first {n_peer:,}", fmt_eps(e_ours_p, o_ours_p), cell("opacus"),
                         cell("dp-accounting"), fmt_prv(prv_prefix),
                         rdiff("opacus", e_ours_p), rdiff("dp-accounting", e_ours_p)])
        eps_rows.append([f"all {steps:,}", fmt_eps(e_ours, o_ours), "not run (this profile)",
                         "not run (this profile)", fmt_prv(prv_full), "-", "-"])
    else:
        eps_rows.append([f"all {steps:,}", fmt_eps(e_ours, o_ours), cell("opacus"),
                         cell("dp-accounting"), fmt_prv(prv_full),
                         rdiff("opacus", e_ours), rdiff("dp-accounting", e_ours)])
    rep.table(headers, eps_rows)
    rep.line(f"Ours on {steps:,} steps with other settings: classic conversion (Mironov 2017) "
             f"eps = {e_classic:.8g}; Opacus's default orders (no 64/128/256) "
             f"eps = {fmt_eps(e_opacus_orders, o_opacus_orders)}.")
    rep.line()
    return per_step


def section_conservative(rep: Report, prof: Profile) -> None:
    """Section 2: the conservative (grid-rounded) eps against the exact one."""
    repeats = prof.repeats
    sigmas = A.schedules.exponential(SIGMA0, SIGMA_END, prof.steps)
    rep.line("## 2. Conservative mode (sigmas rounded down onto a geometric grid)")
    rep.line()
    rep.line(f"Same {prof.steps:,}-step schedule. `epsilon_conservative(delta, resolution)`: grid "
             "(1 + resolution)^k; max_excess is its own bound on (conservative - exact); "
             f"actual excess is measured against the exact eps. Best of {repeats}, fresh "
             "ledger each time.")
    rep.line()

    def exact() -> float:
        ledger = A.PrivacyLedger()
        ledger.step_schedule(Q, sigmas)
        return ledger.epsilon(DELTA, warn=False)

    timed = best_of(exact, repeats)
    t_exact, e_exact = timed.best, timed.result
    rows = [["exact", f"{np.unique(sigmas).size:,}", f"{e_exact:.8g}", "-", "0",
             fmt_ms(t_exact), "1"]]
    for res in RESOLUTIONS:
        def conservative(res: float = res) -> A.ConservativeEpsilon:
            ledger = A.PrivacyLedger()
            ledger.step_schedule(Q, sigmas)
            return ledger.epsilon_conservative(DELTA, resolution=res)

        timed = best_of(conservative, repeats)
        t, c = timed.best, timed.result
        grid = np.unique(A.round_sigmas(sigmas, res, "down")).size
        rows.append([f"{res:g}", f"{grid:,}", f"{c.eps:.8g}", f"{c.max_excess:.3e}",
                     f"{c.eps - e_exact:.3e}", fmt_ms(t), f"{t_exact / t:.2g}"])
    rep.table(["resolution", "distinct sigmas used", "eps", "reported max_excess",
               "actual excess", "time (ms)", "speed-up vs exact"], rows)


def random_schedule(steps: int, distinct: int, seed: int = 0) -> np.ndarray:
    """``steps`` sigmas drawn (seeded, no global state) from ``distinct`` values in [4.85, 15]."""
    rng = np.random.default_rng(seed)
    values = np.linspace(SIGMA_END, SIGMA0, distinct)
    return rng.choice(values, size=steps)


def scaling_row(steps: int, distinct: int, repeats: int) -> tuple[list[str], np.ndarray]:
    sigmas = random_schedule(steps, distinct)

    def exact() -> float:
        ledger = A.PrivacyLedger()
        ledger.step_schedule(Q, sigmas)
        return ledger.epsilon(DELTA, warn=False)

    def conservative() -> A.ConservativeEpsilon:
        ledger = A.PrivacyLedger()
        ledger.step_schedule(Q, sigmas)
        return ledger.epsilon_conservative(DELTA, resolution=1e-3)

    exact_t, cons_t = best_of(exact, repeats), best_of(conservative, repeats)
    t_e, e, t_c, c = exact_t.best, exact_t.result, cons_t.best, cons_t.result
    row = [f"{steps:,}", f"{np.unique(sigmas).size:,}", fmt_ms(t_e), fmt_ms(t_c),
           f"{e:.6g}", f"{c.eps:.6g}", f"{c.eps - e:.2e}"]
    return row, sigmas


def section_scaling(rep: Report, prof: Profile, per_step: dict[str, float]) -> None:
    """Section 3: cost against number of steps and number of distinct sigmas."""
    repeats = prof.repeats
    headers = ["steps", "distinct sigmas", "exact (ms)", "conservative 1e-3 (ms)", "eps exact",
               "eps conservative", "excess"]
    rep.line("## 3. Scaling")
    rep.line()
    rep.line("Sigmas drawn with `np.random.default_rng(0)` from `distinct` values evenly spaced "
             f"in [{SIGMA_END:g}, {SIGMA0:g}], q = 1/120, delta = {DELTA:g}; best of "
             f"{repeats}, fresh ledger each time (recording included).")
    rep.line()
    row, big = scaling_row(prof.big, prof.distinct, repeats)
    rep.line(f"### {prof.big:,} steps, {prof.distinct:,} distinct sigmas")
    rep.line()
    rep.table(headers, [row])
    runs = 1 + int(np.count_nonzero(big[1:] != big[:-1]))
    if "opacus" in per_step:
        rep.line(f"Opacus merges only consecutive equal steps: this shuffled schedule has {runs:,} "
                 f"runs, so at its measured {per_step['opacus'] * 1e3:.3g} ms per run it would "
                 f"need about {runs * per_step['opacus'] / 3600:.2g} h (extrapolated, not run).")
        rep.line()
    rep.line(f"### Cost against steps ({prof.distinct:,} distinct sigmas)")
    rep.line()
    rep.table(headers, [scaling_row(n, prof.distinct, repeats)[0] for n in prof.step_grid])
    rep.line(f"### Cost against distinct sigmas ({prof.distinct_steps:,} steps)")
    rep.line()
    rep.table(headers, [scaling_row(prof.distinct_steps, d, repeats)[0]
                        for d in prof.distinct_grid])


def mpmath_rdp(alpha: float, q: float, sigma: float) -> tuple[float, float]:
    """(rdp, quadrature error estimate) of one sampled Gaussian step, 40-digit mpmath.

    A_alpha = E_{z ~ N(0, sigma^2)}[((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha];
    integrates the integrand minus 1 and takes log1p, so tiny RDP values keep their digits.
    """
    import mpmath as mp

    mp.mp.dps = 40
    a, qq, s = mp.mpf(alpha), mp.mpf(q), mp.mpf(sigma)
    z0 = s**2 * mp.log(1 / qq - 1) + mp.mpf(1) / 2

    def integrand(z: Any) -> Any:
        ratio = (1 - qq) + qq * mp.exp((2 * z - 1) / (2 * s**2))
        return mp.npdf(z, 0, s) * (ratio**a - 1)

    val, err = mp.quad(integrand, [-mp.inf, -10 * s, 0, z0, z0 + 10 * s, mp.inf], error=True)
    return float(mp.log1p(val) / (a - 1)), float(err)


def section_fractional(rep: Report) -> None:
    """Section 4: one-step RDP at fractional orders against a high-precision integral."""
    rep.line("## 4. One-step RDP at fractional orders against mpmath")
    rep.line()
    rep.line("Reference: 40-digit `mpmath.quad` of A_alpha - 1 = E_{z~N(0,sigma^2)}"
             "[((1-q) + q exp((2z-1)/(2 sigma^2)))^alpha - 1], rdp = log1p(.)/(alpha - 1). "
             "Relative errors against it.")
    rep.line()
    try:
        import mpmath  # noqa: F401
    except ImportError:
        rep.line("mpmath not installed: section skipped.")
        rep.line()
        return
    try:
        from opacus.accountants.analysis.rdp import compute_rdp
    except Exception:  # noqa: BLE001 - optional peer
        compute_rdp = None
    dp_mod, dp_status = load_dp_accounting()

    rows = []
    dp_case: tuple[float, float] | None = None
    for alpha, q, sigma in FRACTIONAL_CASES:
        ref, err = mpmath_rdp(alpha, q, sigma)
        ours = float(A.rdp_sgm(q, sigma, np.array([alpha]))[0])
        op = (float(compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=[alpha])[0])
              if compute_rdp is not None else math.nan)
        if dp_mod is not None:
            fn = dp_mod.rdp.rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian
            dp = float(fn(q, sigma, [alpha])[0])
        else:
            dp = math.nan
        if (alpha, q, sigma) == (1.5, 0.01, 2.5):
            dp_case = (ref, dp)
        rows.append([f"{alpha:g}", f"{q:.6g}", f"{sigma:g}", f"{ref:.10e} (±{err:.0e})",
                     f"{ours:.10e}", f"{op:.10e}" if compute_rdp else "not installed",
                     f"{dp:.10e}" if dp_mod is not None else dp_status,
                     rel(ours, ref), rel(op, ref), rel(dp, ref)])
    rep.table(["alpha", "q", "sigma", "mpmath (quad error)", "ours", "Opacus", "dp-accounting",
               "ours rel. err", "Opacus rel. err", "dp-accounting rel. err"], rows)
    if dp_case is not None:
        ref, dp = dp_case
        n = DP_ACCOUNTING_TEST_COUNT
        rep.line(f"dp-accounting's own test (`test_compute_rdp_poisson_sampled_gaussian`, "
                 f"{n} composed steps of q=0.01, sigma=2.5) expects {DP_ACCOUNTING_TEST_VALUE:.8e} "
                 f"at order 1.5; the true value is {n} x {ref:.8e} = {n * ref:.8e} "
                 f"(its code gives {n * dp:.8e}, {rel(n * dp, n * ref)} relative). Its "
                 "fractional-order series adds |C(alpha, i)| terms, but the binomial "
                 "coefficient changes sign for i > alpha + 1.")
        rep.line()


# ---------------------------------------------------------------------------------- main
def dp_accounting_pld_eps(sigmas: np.ndarray, q: float) -> float:
    """dp-accounting's PLD (pessimistic connect-the-dots, its default grid 1e-4) composing one
    event per step, grouped only where consecutive sigmas are equal (as a user would)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    total = None
    values, counts = np.unique(sigmas, return_counts=True)
    if values.size > 1:
        values, counts = sigmas, np.ones(sigmas.size, dtype=int)
    for s, c in zip(values, counts):
        p = pld_lib.from_gaussian_mechanism(float(s), sampling_prob=q).self_compose(int(c))
        total = p if total is None else total.compose(p)
    return float(total.get_epsilon_for_delta(DELTA))


def ours_pld(sigmas: np.ndarray, q: float) -> A.PLDBounds:
    """Our certified PLD bracket from a fresh ledger."""
    ledger = A.PrivacyLedger()
    if np.all(sigmas == sigmas[0]):
        ledger.step(q=q, sigma=float(sigmas[0]), count=int(sigmas.size))
    else:
        ledger.step_schedule(q, sigmas)
    return A.PLDBounds(*ledger.epsilon_bounds(DELTA, method="pld"))


def section_pld(rep: Report, prof: Profile) -> None:
    """Section 5: the certified PLD bracket against dp-accounting's PLD, same run."""
    repeats = min(prof.repeats, 3)
    rep.line("## 5. Privacy loss distributions: certified (lower, upper) against dp-accounting")
    rep.line()
    rep.line(f"`ledger.epsilon_bounds(delta, method=\"pld\")` (`accounting.pld`), delta = "
             f"{DELTA:g}; ours: best of {repeats}, wall and process CPU time (this machine is "
             "shared: CPU time is the load-independent figure). dp-accounting "
             f"{version('dp-accounting')}: its PLD (connect-the-dots, grid 1e-4) composing "
             "every event (a constant sigma self-composed once), one run, timed in this run"
             + ("." if prof.pld_peer_all else f"; the {prof.steps:,}-step schedule is run "
                "by `--profile full` only (about a minute)."))
    rep.line()
    exp = A.schedules.exponential(SIGMA0, SIGMA_END, prof.steps)
    small_q = np.random.default_rng(0).uniform(SMALL_Q_SIGMAS[0], SMALL_Q_SIGMAS[1], prof.steps)
    cases = [("exponential 15 -> 4.85, q = 1/120",
              A.schedules.exponential(SIGMA0, SIGMA_END, prof.pld_short), Q, True),
             ("exponential 15 -> 4.85, q = 1/120", exp, Q, prof.pld_peer_all),
             ("constant sigma 6, q = 0.01", np.full(prof.steps, 6.0), 0.01, True),
             (f"uniform sigma in [{SMALL_Q_SIGMAS[0]:g}, {SMALL_Q_SIGMAS[1]:g}] (seed 0), "
              f"q = {SMALL_Q:g}", small_q, SMALL_Q, False)]
    rows = []
    ratio_2000 = ""
    for what, sig, q, run_peer in cases:
        timed = best_of(lambda sig=sig, q=q: ours_pld(sig, q), repeats)
        wall, cpu, b = timed.best, timed.cpu, timed.result
        width = (b.upper - b.lower) / b.upper
        if run_peer:
            peer_t = best_of(lambda sig=sig, q=q: dp_accounting_pld_eps(sig, q), 1)
            ref, t_ref, c_ref = peer_t.result, peer_t.best, peer_t.cpu
            peer = f"{ref:.4f} in {fmt_s(t_ref)} (CPU {fmt_s(c_ref)})"
            diff = rel(b.upper, ref)
            speed = f"{t_ref / wall:.0f}x (CPU {c_ref / cpu:.0f}x)"
            if sig.size == prof.pld_short and np.unique(sig).size == sig.size:
                ratio_2000 = (f"PLD speed-up at {sig.size:,} distinct sigmas (dp-accounting / "
                              f"ours, this run): {speed}.")
        elif q == SMALL_Q and prof.pld_small_peer:
            # dp-accounting on a prefix only (each distinct sigma is a ~10^5-bin PLD at this
            # q and sigma): its time extrapolated linearly (its composed PLD widens as it
            # composes, so the full run costs more than that)
            n = prof.pld_small_peer
            peer_t = best_of(lambda head=sig[:n], q=q: dp_accounting_pld_eps(head, q), 1)
            per = peer_t.cpu / n
            peer = (f"first {n} steps: CPU {fmt_s(peer_t.cpu)} (x {sig.size / n:,.0f}: "
                    f">= {fmt_s(per * sig.size)})")
            diff, speed = "-", f">= {per * sig.size / cpu:.0f}x (CPU, extrapolated)"
        else:
            peer, diff, speed = "not run (this profile)", "-", "-"
        rows.append([what, f"{sig.size:,}", f"{b.lower:.4f} / {b.upper:.4f}", f"{width:.2%}",
                     f"{fmt_s(wall)} (CPU {fmt_s(cpu)})", peer, diff, speed])
    rep.table(["schedule", "steps", "ours: lower / upper", "bracket width", "ours: time (s)",
               "dp-accounting PLD: eps, time", "ours upper - dp-accounting (rel.)",
               "speed-up (dp-accounting / ours)"], rows)
    if ratio_2000:
        rep.line(ratio_2000)
        rep.line()
    rep.line("Both of our ends are certified (upper: connect-the-dots, lower: mass merged "
             "across grid points, on a grid offset per sigma group where most of a step's "
             "loss lies within a grid step of log(1 - q), so that it is not rounded down; "
             "sigmas rounded down / up onto a geometric grid, 0.5 %, 0.1 % where the first "
             "pass is wider than 1 %); "
             "dp-accounting's number is an upper bound on its own grid. Its optimistic "
             "estimate (privacy buckets) is not a usable lower bound over many steps: "
             "rounding every loss down drifts by half a grid step per step.")
    rep.line()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; ``args.prof`` is the chosen profile with the overrides."""
    p = parser(__doc__, PROFILES, out_help="also write the Markdown to DIR/accounting_speed.md")
    p.add_argument("--peer-steps", type=at_least(1), default=None,
                   help="steps the peers run (default: the profile's, quick 200; full: all)")
    p.add_argument("--repeats", type=at_least(1), default=None,
                   help="timed repetitions of our accountant, best kept (default: the "
                        "profile's, 5)")
    args = p.parse_args(argv)
    prof = profile(PROFILES, args.profile)
    if args.peer_steps is not None:
        prof = replace(prof, peer_steps=args.peer_steps)
    if args.repeats is not None:
        prof = replace(prof, repeats=args.repeats)
    args.prof = prof
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run every section; print Markdown (and write it under --out)."""
    args = parse_args(argv)
    prof: Profile = args.prof
    rep = Report()
    clock = Stopwatch()
    rep.line("# Accounting speed benchmark")
    rep.line()
    rep.line(environment(("numpy", "leakaudit", "opacus", "dp-accounting", "prv-accountant",
                          "mpmath")) + f"; profile `{args.profile}`.")
    rep.line()
    per_step = section_peers(rep, prof)
    section_conservative(rep, prof)
    section_scaling(rep, prof, per_step)
    section_fractional(rep)
    section_pld(rep, prof)
    rep.line(f"Total benchmark time: {clock.seconds:.0f} s.")
    write_outputs(args.out, "accounting_speed", markdown=rep.text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
