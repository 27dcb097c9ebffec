"""The certified bracket: :func:`pld_epsilon` and :func:`pld_delta` of a ledger's events.

Every event enters through the ``"pld"`` accountant's parts (:mod:`accounting.registry`):
Gaussian steps grouped by distinct (q, sigma) (:mod:`accounting._grid`; above
``max_distinct`` groups, sigmas rounded DOWN for the upper end, UP for the lower), other
releases as their own PLDs. The upper side uses the upper-bound pair of each step's
relation, the lower side a pair valid as a lower bound (fixed-size and shuffled steps are
left out of the lower end). A grid step h is chosen from the composed loss's spread and a
memory budget, both sides are composed and read at delta, and the grid (the sigma grid first)
is refined while the bracket is over 1% wide. Unsampled Gaussian steps compose in closed
form; a composition no grid can hold is refused with a ValueError before any large
allocation; where the allowance reaches delta (near 1e-12) the upper end falls back on RDP.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from scipy import special

from .._grid import Groups, rounded_groups, rounded_releases, sgm_groups, too_many_releases
from .._validate import (
    check_count,
    check_delta,
    check_eps,
    check_instances,
    check_positive,
)
from ..events import Event
from ..registry import (
    ACCOUNTANTS,
    DPPart,
    GaussianPart,
    LaplacePart,
    PLDPart,
    UnsupportedEventError,
    no_privacy_reason,
    pure_total,
)
from .discrete import MAX_COMPOSED, PMF, TAIL, GridTooLarge, compose, delta_of, discretise, eps_of
from .pairs import (
    Z_SDS,
    approx_dp_atoms,
    atom_intervals,
    gaussian_intervals,
    laplace_intervals,
    loss_limits,
    lower_shifts,
    row_blocks,
)

#: Default grid refinement: halve h (at most _REFINE - 1 times) while the bracket is wider
#: than _WIDTH relative to its upper end.
_REFINE = 3
_WIDTH = 0.01
#: Where sigmas are rounded onto a grid, the first refinement divides its spacing by this.
_SIGMA_REFINE = 5.0
#: At most about this many grid steps across the loss range of one step.
_MAX_BINS = 30_000
#: A refinement pass over rounded sigma groups is skipped when groups x bins would exceed
#: this (the discretisation costs about that many normal CDF evaluations per side).
_MAX_CELLS = 1e7


class PLDBounds(NamedTuple):
    """Certified bracket on the true eps: lower <= eps <= upper; estimate = midpoint."""

    lower: float
    estimate: float
    upper: float


class PLDOptions(NamedTuple):
    """Discretisation settings (checked by :func:`_options`)."""

    value_interval: float | None  # grid step h of the loss; None: see _grid_step
    sigma_resolution: float  # geometric sigma grid when there are many distinct sigmas
    max_distinct: int  # more distinct (q, sigma) pairs than this: round onto the grid
    #: grid step of a refinement pass (ours, not the user's: never refused, floored at the
    #: memory budget of one release, 4 x _MAX_BINS bins)
    refined: float | None = None


def _options(value_interval: float | None, sigma_resolution: float,
             max_distinct: int) -> PLDOptions:
    if value_interval is not None:
        value_interval = check_positive("value_interval", value_interval)
    return PLDOptions(value_interval, check_positive("sigma_resolution", sigma_resolution),
                      check_count("max_distinct", max_distinct, minimum=1))


# ---------------------------------------------------------------- driver
def _step_std(groups: Groups, others: list[Event]) -> tuple[float, float]:
    """(sd of the composed loss, largest sd of one step): sets the grid step h."""
    q, s, c = groups
    keep = q > 0
    q, s, c = q[keep], s[keep], c[keep]
    with np.errstate(over="ignore"):
        var = np.minimum(q * q * np.expm1(np.minimum(1.0 / (s * s), 700.0)), 1.0 / (s * s))
    total = float((var * c).sum())
    per = [float(var.max())] if var.size else []
    for e in others:
        if isinstance(e, (LaplacePart, DPPart)) and math.isfinite(e.eps):
            total += e.count * e.eps**2
            per.append(e.eps**2)
        elif isinstance(e, PLDPart):  # e.g. random allocation: its own loss variance
            try:
                var_e = e.event.pld_loss_variance()
            except (ValueError, OverflowError, FloatingPointError, MemoryError) as exc:
                raise UnsupportedEventError(e.event, "pld", f"its PLD could not be built "
                                            f"here ({type(exc).__name__}: {exc})") from exc
            total += e.count * var_e
            per.append(var_e)
    return math.sqrt(max(total, 1e-300)), math.sqrt(max(per, default=0.0))


def _loss_range(groups: Groups) -> float:
    """Widest loss range of one Gaussian step (x within Z_SDS noise sds of both means)."""
    keep = groups.qs > 0
    if not keep.any():
        return 0.0
    llo, lhi = loss_limits(groups.qs[keep], groups.sigmas[keep])
    return float(np.max(lhi - llo))


def _widest(groups: Groups, others: list) -> float:
    """Widest loss range of one release: Gaussian groups, Laplace / (eps, delta) atoms at
    +-eps, and parts that state their own range (``pld_loss_range``, e.g. replace-one)."""
    return max([_loss_range(groups)]
               + [2.0 * e.eps for e in others
                  if isinstance(e, (LaplacePart, DPPart)) and math.isfinite(e.eps)]
               + [e.event.pld_loss_range() for e in others
                  if isinstance(e, PLDPart) and hasattr(e.event, "pld_loss_range")])


def _grid_step(groups: Groups, others: list, opts: PLDOptions) -> float:
    if opts.value_interval is not None:
        widest = _widest(groups, others)
        if widest / opts.value_interval > 4 * _MAX_BINS:
            raise ValueError(f"value_interval={opts.value_interval!r} needs "
                             f"{widest / opts.value_interval:.3g} bins for one release's loss "
                             f"range (at most {4 * _MAX_BINS}): use value_interval >= "
                             f"{widest / (4 * _MAX_BINS):.3g} or the default")
        return opts.value_interval
    if opts.refined is not None:
        return float(max(opts.refined, _widest(groups, others) / (4 * _MAX_BINS)))
    total, _ = _step_std(groups, others)
    steps = int(groups.counts[groups.qs > 0].sum()) + sum(e.count for e in others)
    # the O(h^2) bias per step adds up over the steps: finer grids for longer compositions
    bins = min(max(1000.0 * math.sqrt(steps / 10_000.0), 400.0), 2000.0)
    widest = _widest(groups, others)
    h = max(total / bins, widest / _MAX_BINS)
    # atoms at +-eps0 (Laplace, (eps, delta)) fall between grid points: keep h << eps0
    for e in others:
        if isinstance(e, (LaplacePart, DPPart)) and e.eps > 0:
            h = min(h, e.eps / 1000.0)
    h = min(max(h, 1e-7), 1e-2)
    # ... but never more bins than memory allows: one release's range within _MAX_BINS,
    # the composed law's (~ 2 x 10 sd) within MAX_COMPOSED (a coarser grid is still valid)
    return float(max(h, widest / _MAX_BINS, 20.0 * total / MAX_COMPOSED))


def _z_and_tail(tol: float) -> tuple[float, float]:
    """Noise sds kept on each side of a step's loss range, and the tail mass a trim may move:
    both follow the target (tiny deltas need wider ranges and smaller trims)."""
    tiny = max(tol * 1e-3, 1e-300)
    return max(Z_SDS, float(-special.ndtri(tiny))), min(TAIL, tiny)


def gaussian_pmfs(groups: Groups, h: float, direction: str,
                  upper: bool, tol: float = 1e-11) -> list[tuple[PMF, int]]:
    """Discrete PLDs of the Gaussian groups (rows with q = 0 carry no loss: skipped)."""
    keep = groups.qs > 0
    qs, sig = groups.qs[keep], groups.sigmas[keep]
    if qs.size == 0:
        return []
    out: list[tuple[PMF, int]] = []
    z, tail = _z_and_tail(tol)
    # loss range of every row: x within z noise sds of both means, except where the P-mass
    # beyond x = 1 + z' sigma is already below the tail a trim moves (to +inf on the upper
    # side, dropped on the lower: both valid): q Phi(-z') + Phi(-z' - 1/sigma) for remove,
    # Phi(-z' - 1/sigma) for add (P = N(0, sigma^2)); at q << 1 that is well inside z
    llo, _ = loss_limits(qs, sig, z)
    with np.errstate(divide="ignore"):
        half = -special.ndtri(tail / 2.0)
        z_hi = (np.maximum(-special.ndtri(np.minimum(tail / (2.0 * qs), 0.5)), half - 1.0 / sig)
                if direction == "remove" else -special.ndtri(tail) - 1.0 / sig)
    _, lhi = loss_limits(qs, sig, np.clip(z_hi, 0.0, z))
    if direction == "add":
        llo, lhi = -lhi, -llo
    k_lo = np.floor(llo / h).astype(np.int64) - 1
    k_hi = np.ceil(lhi / h).astype(np.int64) + 1
    counts = groups.counts[keep]
    # rows with similar ranges share one (rows, intervals) block, within a memory budget
    shifts = np.zeros(qs.size) if upper else lower_shifts(qs, sig, h, direction)
    for block in row_blocks(k_lo, k_hi):
        c = shifts[block]
        k0, k1 = int(k_lo[block].min()), int(k_hi[block].max())
        edges = np.arange(k0, k1 + 1, dtype=float)[None, :] * h + c[:, None]
        pm, qm, below, above = gaussian_intervals(qs[block], sig[block], edges, direction)
        out.extend(zip(discretise(pm, qm, below, above, k0, h, upper, tail, c),
                       counts[block]))
    return out


def _other_pmfs(others: list[Event], h: float, upper: bool,
                tol: float = 1e-11) -> list[tuple[PMF, int]]:
    """Discrete PLDs of Laplace and (eps, delta) releases (symmetric: both directions)."""
    tail = _z_and_tail(tol)[1]
    return [(release_pmf(isinstance(e, LaplacePart), float(e.eps), float(e.delta), h, upper,
                         tail), e.count)
            for e in others if isinstance(e, (LaplacePart, DPPart))
            and not (e.eps == 0 and e.delta == 0)]  # (0, 0): nothing leaks


@functools.lru_cache(maxsize=512)  # each at most _MAX_BINS floats: 120 MB at worst
def release_pmf(laplace: bool, eps: float, delta: float, h: float, upper: bool,
                tail: float) -> PMF:
    """The discrete PLD of one Laplace (``laplace``) or (eps, delta) release on the grid
    {k h}, upper or lower side (a (0, delta) release keeps its delta atom).

    A pure function of its arguments, cached (its arrays read-only): a ledger re-evaluated
    after every round holds the same releases, on the same grid while the widest release is
    the same, and both directions use one PLD, so each is discretised once, not at every
    evaluation (the lower side's merge-down is a sequential recursion over up to
    _MAX_BINS intervals)."""
    k0 = int(math.floor(-eps / h)) - 1
    edges = np.arange(k0, int(math.ceil(eps / h)) + 2, dtype=float) * h
    if laplace:
        pm, qm, below, above = laplace_intervals(eps, edges, h)
    else:
        pm, qm, below, above = atom_intervals(approx_dp_atoms(eps, delta), edges, h)
    pmf = discretise(pm[None], qm[None], np.array([below]), np.array([above]), k0, h,
                     upper, tail)[0]
    # the delta atom is exact: at +inf on the upper side, kept alone in the lower bound
    inf = pmf.inf + delta if upper else delta
    pmf.p.setflags(write=False)
    return PMF(pmf.offset, pmf.p, inf)


def _composed(groups: Groups, others: list[Event], h: float, direction: str,
              upper: bool, tol: float) -> tuple[PMF, float]:
    """The composed discrete PLD of one direction and one side, and its allowance."""
    parts = (gaussian_pmfs(groups, h, direction, upper, tol)
             + _other_pmfs(others, h, upper, tol))
    extra = 0.0
    for e in others:
        if isinstance(e, PLDPart):
            try:
                more, allowance = e.event.pld_parts(h, direction, upper)
            except (ValueError, OverflowError, FloatingPointError, MemoryError) as exc:
                raise UnsupportedEventError(e.event, "pld", f"its PLD could not be built "
                                            f"here ({type(exc).__name__}: {exc})") from exc
            parts += more
            extra += allowance
    if not parts:
        return PMF(0, np.ones(1), 0.0), 0.0
    if len(parts) == 1 and parts[0][1] == 1:
        return parts[0][0], extra  # one release: nothing to convolve, no round-off
    pmf, allowance = compose(parts, tol)
    return pmf, allowance + extra


def _merge_full_gaussians(groups: Groups) -> Groups:
    """Every q = 1 Gaussian step composed exactly into ONE Gaussian step with multiplier
    (sum_i c_i / sigma_i^2)^(-1/2) (Gaussian pairs compose into a Gaussian pair: Dong, Roth,
    Su 2022, Cor. 3.3; Balle & Wang 2018): exact, and one PMF instead of thousands."""
    full = (groups.qs == 1.0) & (groups.sigmas > 0)
    if full.sum() <= 1 and not (full & (groups.counts > 1)).any():
        return groups
    inv = float((groups.counts[full] / groups.sigmas[full] ** 2).sum())
    rest = ~full
    return Groups(np.append(groups.qs[rest], 1.0), np.append(groups.sigmas[rest], inv ** -0.5),
                  np.append(groups.counts[rest], 1).astype(np.int64))


def _bound(events: tuple[Event, ...], others: list[Event], opts: PLDOptions, upper: bool,
           query, tol: float) -> float:
    """max over the two directions of ``query(pmf, allowance, h)`` on one side (elementwise
    when the query returns an array).

    Gaussian steps enter as the Poisson add/remove pairs that account them under their
    sampling and relation (:func:`accounting._grid.sgm_groups`): the upper-bound pairs on the
    upper side, the lower-bound pairs (valid for the relation) on the lower side.
    """
    h = _grid_step(sgm_groups(events), others, opts)
    groups = _merge_full_gaussians(sgm_groups(events, "upper" if upper else "lower"))
    if groups.qs.size > opts.max_distinct:
        groups = rounded_groups(groups, opts.sigma_resolution, "down" if upper else "up")
    others = rounded_releases(others, opts.sigma_resolution, opts.max_distinct, upper)
    for _ in range(8):
        try:
            values = []
            for direction in ("remove", "add"):
                pmf, allowance = _composed(groups, others, h, direction, upper, tol)
                values.append(query(pmf, allowance, h))
            break
        except GridTooLarge as exc:  # coarser grid: fewer bins, still a valid bound
            h *= 1.25 * exc.width / MAX_COMPOSED
    else:  # pragma: no cover - each retry shrinks the width ~ 1/h
        raise ValueError("this composition cannot be discretised within the memory budget "
                         f"({MAX_COMPOSED} bins); use method='rdp'")
    return np.maximum.reduce(values) if isinstance(values[0], np.ndarray) else max(values)


def _others(events: tuple[Event, ...]) -> list:
    """The non-Gaussian PLD parts of ``events`` (refused by name where there is no rule)."""
    return [p for p in ACCOUNTANTS["pld"].parts(events) if not isinstance(p, GaussianPart)]


def _trivial(events: tuple[Event, ...]) -> float | None:
    """inf when a release has no noise, 0 when nothing leaks, else None."""
    items = ACCOUNTANTS["pld"].parts(events)
    if no_privacy_reason(items) is not None:
        return math.inf
    groups = sgm_groups(events)
    if not ((groups.qs > 0).any() or any(
            isinstance(e, PLDPart) or (isinstance(e, (LaplacePart, DPPart))
                                       and (e.eps > 0 or e.delta > 0)) for e in items)):
        return 0.0
    return None


def pld_epsilon(
    events: Iterable[Event],
    delta: float,
    *,
    value_interval: float | None = None,
    sigma_resolution: float = 5e-3,
    max_distinct: int = 64,
) -> PLDBounds:
    """Certified (lower, estimate, upper) eps of a sequence of events at ``delta``.

    Args:
        events: the releases (e.g. ``ledger.events``): sampled Gaussian steps and
            schedules, Laplace and (eps, delta) releases.
        delta: target delta in (0, 1).
        value_interval: grid step h of the privacy loss (> 0); default: the standard
            deviation of the composed loss / (1000 sqrt(steps / 10,000)) (that divisor
            within [400, 2000]; h within [1e-7, 1e-2]).
        sigma_resolution: relative spacing of the geometric sigma grid used when there are
            more than ``max_distinct`` distinct (q, sigma) pairs (down: upper, up: lower).
        max_distinct: see ``sigma_resolution``.

    Returns:
        (lower, estimate, upper); when the default grid leaves the bracket wider than 1% of
        the upper end, it is refined (at most twice): where sigmas were rounded onto their
        grid, first that grid (5x finer, same h: the usual cause at small sigma), then the
        grid step h is halved.
    """
    delta = check_delta("delta", delta)
    opts = _options(value_interval, sigma_resolution, max_distinct)
    events = check_instances("events", events, Event)
    trivial = _trivial(events)
    if trivial is not None:
        return PLDBounds(trivial, trivial, trivial)
    others = _others(events)
    up_exact = _full_gaussian_eps(sgm_groups(events), others, delta)
    lo_exact = _full_gaussian_eps(sgm_groups(events, "lower"), others, delta)
    if up_exact is not None and lo_exact is not None:  # closed form on both sides
        lo_exact *= 1.0 - 1e-11  # the bisection's bracket is 1e-12 relative
        return PLDBounds(lo_exact, (lo_exact + up_exact) / 2.0, up_exact)
    tol = delta * 1e-6
    user_grid = opts.value_interval is not None
    upper, lower = (math.inf if up_exact is None else up_exact), 0.0
    sigma_refined = False
    rounded = too_many_releases(others, opts.max_distinct)
    for _ in range(_REFINE if not user_grid else 1):
        # every pass is a certified bracket: keep the best end of each side over the passes
        if up_exact is None:  # (a closed-form upper end needs no discretisation)
            upper = min(upper, _bound(events, others, opts, True,
                                      lambda pmf, allow, h: eps_of(pmf, delta - allow, h),
                                      tol))
        lower = max(lower, _bound(events, others, opts, False,
                                  lambda pmf, allow, h: eps_of(pmf, delta + allow, h), tol))
        if math.isinf(upper) or upper - lower <= _WIDTH * upper or rounded:
            break  # (a finer grid cannot undo the rounding of many distinct releases)
        step = _refined(events, others, opts, sigma_refined)
        if step is None:
            break
        opts, sigma_refined = step
    if up_exact is not None:
        upper = min(upper, up_exact)
    pure = pure_total(others) if not (sgm_groups(events).qs > 0).any() else None
    if pure is not None:  # only pure-DP releases: their summed eps is an (eps, 0) guarantee
        upper = min(upper, pure)
    if lo_exact is not None:
        lower = max(lower, lo_exact * (1.0 - 1e-11))
    return _finished(events, others, opts, delta, tol, lower, upper)


def _refined(events: tuple[Event, ...], others: list, opts: PLDOptions,
             sigma_refined: bool) -> tuple[PLDOptions, bool] | None:
    """The options of the next refinement pass of :func:`pld_epsilon` (and whether the sigma
    grid was refined already), or None where no further pass can help."""
    groups = sgm_groups(events)
    h = _grid_step(groups, others, opts)
    if groups.qs.size > opts.max_distinct and not sigma_refined:
        # sigmas rounded onto the grid (down for the upper end, up for the lower): at
        # small sigma eps moves ~3x as much as sigma, and this is the bias that remains
        # (the lower end's grid bias is small on its offset lattice, the upper end's
        # O(h^2)): a _SIGMA_REFINE times finer sigma grid on the same h, if affordable
        finer = opts.sigma_resolution / _SIGMA_REFINE
        rows = rounded_groups(groups, finer, "down").qs.size
        sigma_refined = True
        if rows * _loss_range(groups) / h <= _MAX_CELLS:
            opts = opts._replace(sigma_resolution=finer, max_distinct=rows, refined=h)
            return opts, sigma_refined
    # too coarse for this loss distribution: halve the grid step and redo; where sigmas
    # were rounded onto a grid, refine that grid too (its bias dominates at small sigma)
    h /= 2.0
    if (h < 20.0 * _step_std(groups, others)[0] / MAX_COMPOSED
            or h < _widest(groups, others) / (4 * _MAX_BINS)):
        return None  # below the memory floor the next pass would be coarsened back: no gain
    if groups.qs.size > opts.max_distinct:
        bins = _loss_range(groups) / h
        now = rounded_groups(groups, opts.sigma_resolution, "down").qs.size
        finer = opts.sigma_resolution / 2.0
        rows = rounded_groups(groups, finer, "down").qs.size
        if rows * bins <= _MAX_CELLS:
            opts = opts._replace(sigma_resolution=finer, max_distinct=rows)
        elif now * bins > _MAX_CELLS:
            return None  # a finer pass would cost more than the budget: keep this bracket
    return opts._replace(refined=h), sigma_refined


def _finished(events: tuple[Event, ...], others: list, opts: PLDOptions, delta: float,
              tol: float, lower: float, upper: float) -> PLDBounds:
    """The bracket after the passes: a for_delta pass where it is still wide, the RDP
    fallback where the upper end is still infinite, the ends checked against each other."""
    if math.isinf(upper) or upper - lower > _WIDTH * upper:
        # an event whose discrete PLD can be built for this delta (tails and round-off
        # scaled to it) gets a second pass: both passes are certified, keep the better ends
        up2, lo2 = _for_delta_bounds(events, others, opts, delta, tol)
        upper, lower = min(upper, up2), max(lower, lo2)
    if math.isinf(upper):
        # a finite eps may exist but the discretisation's allowance (or an atom at +inf of
        # the discretised loss) reached delta: the RDP accountant, which must itself support
        # every event (UnsupportedEventError otherwise: no silent fallback), is a valid upper
        upper = _rdp_fallback(events, delta)
    lower = _ordered(lower, upper)
    mid = upper if math.isinf(upper) else (lower + upper) / 2.0
    return PLDBounds(lower, mid, upper)


def _for_delta_bounds(events: tuple[Event, ...], others: list, opts: PLDOptions,
                      delta: float, tol: float) -> tuple[float, float]:
    """(upper, lower) again with every PLDPart event replaced by ``event.for_delta(delta)``
    where it defines it (the PLDPart protocol's optional method: the same pair, its discrete
    PLD built for this delta, tails and round-off scaled to it); (inf, 0) where none does."""
    small = [replace(p, event=p.event.for_delta(delta))
             if isinstance(p, PLDPart) and hasattr(p.event, "for_delta") else p for p in others]
    if all(a is b for a, b in zip(small, others)):
        return math.inf, 0.0
    upper = _bound(events, small, opts, True,
                   lambda pmf, allow, h: eps_of(pmf, delta - allow, h), tol)
    lower = _bound(events, small, opts, False,
                   lambda pmf, allow, h: eps_of(pmf, delta + allow, h), tol)
    return upper, lower


def _full_gaussian_eps(groups: Groups, others: list[Event], delta: float) -> float | None:
    """Exact eps when every accounted step is an unsampled Gaussian (q = 1; q = 0 steps leak
    nothing) and there is nothing else: the steps compose into one Gaussian with multiplier
    (sum c / sigma^2)^(-1/2), whose eps is Balle & Wang's (2018, Thm 8) closed form (found by
    bisection to 1e-12 relative, rounded up). None otherwise."""
    from ..composition import analytic_gaussian_epsilons

    if others or not np.all((groups.qs == 1.0) | (groups.qs == 0.0)):
        return None
    full = groups.qs == 1.0
    if not full.any():
        return 0.0
    inv = float((groups.counts[full] / groups.sigmas[full] ** 2).sum())
    return float(analytic_gaussian_epsilons(np.array([inv ** -0.5]), delta)[0])


def _rdp_fallback(events: tuple[Event, ...], delta: float) -> float:
    """The RDP accountant's upper end (:mod:`accounting.accountants`; refuses by name an
    event it cannot account)."""
    return float(ACCOUNTANTS["rdp"].epsilon(events, delta, warn=False).eps)


def _ordered(lower: float, upper: float) -> float:
    """``lower``, checked against ``upper``: equal up to round-off is clamped; a lower end
    clearly above a certified upper end is a bug, raised, never hidden."""
    if lower <= upper:
        return lower
    if lower <= upper * (1.0 + 1e-9) + 1e-12:
        return upper
    raise RuntimeError(f"PLD bracket inverted: certified lower end {lower!r} > upper end "
                       f"{upper!r}; please report this input")


def pld_delta(
    events: Iterable[Event],
    eps: float,
    *,
    value_interval: float | None = None,
    sigma_resolution: float = 5e-3,
    max_distinct: int = 64,
    with_lower: bool = True,
) -> tuple[float, float]:
    """Certified (lower, upper) bracket on the smallest delta with (eps, delta)-DP.

    Options as in :func:`pld_epsilon` (``with_lower=False``: both entries are the upper).
    """
    eps = check_eps("eps", eps)
    opts = _options(value_interval, sigma_resolution, max_distinct)
    events = check_instances("events", events, Event)
    trivial = _trivial(events)
    if trivial is not None:
        return (1.0, 1.0) if math.isinf(trivial) else (0.0, 0.0)
    others = _others(events)
    tol = 1e-12
    upper = _bound(events, others, opts, True,
                   lambda pmf, allow, h: min(1.0, delta_of(pmf, eps, h) + allow), tol)
    if not with_lower:
        return upper, upper
    lower = _bound(events, others, opts, False,
                   lambda pmf, allow, h: max(0.0, delta_of(pmf, eps, h) - allow), tol)
    return _ordered(lower, upper), upper
