"""Neighbouring relations and sampling schemes: what a privacy event's epsilon is about.

An epsilon is a statement about two neighbouring data sets and about how the batch (or the
cohort) that a step touched was drawn. In the spirit of dp-accounting's
``NeighboringRelation``, every event carries both, as strings:

Relations (:data:`RELATIONS`):

* ``"add-remove"``: D' = D plus or minus one record (the Poisson-subsampling default).
* ``"replace-one"``: D' = D with one record replaced by any other (the data-set size is
  public; the right relation for fixed-size batches and for a server that knows who took part).
* ``"zero-out"``: D' = D with one record replaced by a null record whose contribution is zero
  (Kairouz et al. 2021, "Practical and private (deep) learning without sampling or
  shuffling", Def. 1.1; dp-accounting's REPLACE_SPECIAL).

Samplings (:data:`SAMPLINGS`): ``"poisson"`` (every record independently with rate q),
``"fixed-size"`` (a batch of fixed size drawn without replacement), ``"random-allocation"``
(every record in exactly k of t steps per epoch; events of their own, not Gaussian steps
here), ``"shuffle"`` (fixed-size batches from a shuffled permutation), ``"all"`` (every record
takes part, q = 1).

Gaussian steps are described at the mechanism level: sigma is the noise standard deviation
divided by the bound C on one record's contribution (the clip norm). The L2 sensitivity of the
noisy sum then depends on the relation (C under add/remove and zero-out, 2 C under
replace-one), and :func:`gaussian_upper` maps a step to the (q, sigma) of the Poisson
add/remove pair that soundly bounds it (Zhu, Dong, Wang 2022, Thm 11, for the Poisson pair):

=============  =====================  ==================  ==============================
sampling       add-remove             zero-out            replace-one
=============  =====================  ==================  ==============================
poisson        (q, sigma) exact       (q, sigma) exact    +-1 pair (q, sigma) exact*
all            (1, sigma) exact       (1, sigma) exact    (1, sigma/2) exact
fixed-size     (1, sigma/2) bound**   (1, sigma) bound    (1, sigma/2) bound
shuffle        refused***             (1, sigma) bound    (1, sigma/2) bound
=============  =====================  ==================  ==============================

No amplification is claimed for fixed-size or shuffled batches: conditioned on the
(data-independent) batch, a step is a Gaussian mechanism whose sensitivity is at most the
one in the table, and hockey-stick and Rényi divergences are jointly (quasi-)convex over the
mixture of batches, so the bound holds for the mixture. ** Under add/remove a batch of fixed
size B from n + 1 records couples with one from n records that differs in one slot (the
added record takes the place of another): sensitivity 2 C. * Poisson sampling under
replace-one: the PLD accountant uses the pair (1-q) N(0, s^2) + q N(1, s^2) against
(1-q) N(0, s^2) + q N(-1, s^2), realised and dominating (Schuchardt et al. 2024, Thm 3.8;
:mod:`accounting.pld`), on both sides; :func:`gaussian_upper` (the other accountants: RDP,
PRV, zCDP, composition) maps it to (1, sigma/2) without amplification, and the RDP
accountant also applies group privacy of size 2 to the add/remove accounting (replace =
remove then add; (eps, delta) -> (2 eps, (1 + e^eps) delta), Dwork & Roth 2014, Thm 2.2
generalised) and keeps the smaller: both are valid upper bounds, looser than the pair.
*** Shuffled batches under add/remove are refused: adding an example to a permutation cut
into fixed-size batches shifts every later batch (:mod:`accounting.shuffle`).

Lower bounds (:func:`gaussian_lower`) must stay lower bounds of the true eps for the
relation: exact rows keep their pair; a Poisson step under replace-one keeps the add/remove
pair here (replacing a record by one whose clipped contribution is zero is a replace-one
pair, and its privacy loss is that of the Poisson remove pair; the PLD accountant uses the
larger, realised +-1 pair instead). A fixed-size step with batch fraction q = B / n < 1
keeps a realised pair: under replace-one every record's gradient +C and the replacement's
-C (a batch sums to B C, or B C - 2C when it holds the replacement, probability q: the
Poisson pair at (q, sigma / 2)); under zero-out the record's gradient +C and every other 0
(the Poisson pair at (q, sigma)). Shuffled steps with q < 1 keep one such pair per complete
epoch and are bounded above by one Gaussian release per epoch (:func:`shuffle_pairs`).
q = 1 under fixed-size or shuffle is how callers record "no amplification" for a batch
whose fraction they do not state: left out of the lower bound, as are fixed-size steps under
add/remove (a composition is never more private than a part of it, so leaving a release
out keeps a valid lower bound).

Conversions of recorded events between relations (:func:`convert_event`): Gaussian steps
convert freely (the accountant recomputes the sensitivity); a Laplace release or an
(eps, delta) guarantee stated under add/remove or zero-out implies replace-one by the triangle
inequality (sensitivity x 2) or group privacy of size 2; nothing else converts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = [
    "ADD_REMOVE", "REPLACE_ONE", "ZERO_OUT", "RELATIONS",
    "POISSON", "FIXED_SIZE", "RANDOM_ALLOCATION", "SHUFFLE", "ALL", "SAMPLINGS",
    "GAUSSIAN_SAMPLINGS", "check_relation", "check_sampling", "check_gaussian_pair",
    "gaussian_sensitivity", "gaussian_upper", "gaussian_lower", "shuffle_pairs", "is_exact",
    "uses_group_privacy",
    "can_convert", "convert_event", "group_privacy_2", "describe_accounting",
]

ADD_REMOVE = "add-remove"
REPLACE_ONE = "replace-one"
ZERO_OUT = "zero-out"
#: Neighbouring relations, as strings.
RELATIONS: tuple[str, ...] = (ADD_REMOVE, REPLACE_ONE, ZERO_OUT)

POISSON = "poisson"
FIXED_SIZE = "fixed-size"
RANDOM_ALLOCATION = "random-allocation"
SHUFFLE = "shuffle"
ALL = "all"
#: Sampling schemes, as strings.
SAMPLINGS: tuple[str, ...] = (POISSON, FIXED_SIZE, RANDOM_ALLOCATION, SHUFFLE, ALL)
#: Samplings a Gaussian step (``ledger.step``) can be recorded with.
GAUSSIAN_SAMPLINGS: tuple[str, ...] = (POISSON, FIXED_SIZE, SHUFFLE, ALL)


def check_relation(name: str, value: object) -> str:
    """A neighbouring relation: one of :data:`RELATIONS`."""
    if not isinstance(value, str) or value not in RELATIONS:
        raise ValueError(f"{name} must be a neighbouring relation {RELATIONS}, got {value!r}")
    return value


def check_sampling(name: str, value: object) -> str:
    """A sampling scheme: one of :data:`SAMPLINGS`."""
    if not isinstance(value, str) or value not in SAMPLINGS:
        raise ValueError(f"{name} must be a sampling scheme {SAMPLINGS}, got {value!r}")
    return value


def check_gaussian_pair(sampling: object, relation: object, q: float) -> tuple[str, str]:
    """Refuse, before any work, a Gaussian step whose sampling and relation we cannot
    account together (random allocation has its own event; "all" means q = 1)."""
    sampling = check_sampling("sampling", sampling)
    relation = check_relation("relation", relation)
    if sampling not in GAUSSIAN_SAMPLINGS:
        raise ValueError(f"sampling={sampling!r} cannot be accounted as a Gaussian step under "
                         f"relation={relation!r}: random allocation is its own event "
                         f"(ledger.allocate); Gaussian steps take one of {GAUSSIAN_SAMPLINGS}")
    if sampling == ALL and q != 1.0:
        raise ValueError(f"sampling='all' means every record takes part (q = 1), got q={q!r}")
    if sampling == SHUFFLE and relation == ADD_REMOVE:
        raise ValueError("sampling='shuffle' cannot be certified under relation='add-remove': "
                         "adding an example to a permutation cut into fixed-size batches "
                         "shifts every later batch, so no per-step sensitivity holds "
                         "(accounting.shuffle); record it under 'zero-out' or 'replace-one'")
    return sampling, relation


def gaussian_sensitivity(sampling: str, relation: str) -> float:
    """L2 sensitivity of one step's noisy sum, in units of the per-record bound C, as used
    by the no-amplification bound (see the module table)."""
    if relation == REPLACE_ONE:
        return 2.0
    if relation == ADD_REMOVE and sampling in (FIXED_SIZE, SHUFFLE):
        return 2.0  # the added record takes another's slot in a batch of fixed size
    return 1.0


def is_exact(sampling: str, relation: str) -> bool:
    """Is the accounted pair the exact (tight) one for this step, not only an upper bound?"""
    return sampling == ALL or (sampling == POISSON and relation != REPLACE_ONE)


def uses_group_privacy(sampling: str, relation: str, q: float) -> bool:
    """A Poisson step (0 < q < 1) under replace-one: its best bound is group privacy of the
    add/remove accounting (taken at the ledger level, see :func:`group_privacy_2`)."""
    return sampling == POISSON and relation == REPLACE_ONE and 0.0 < q < 1.0


def gaussian_upper(q: float | np.ndarray, sigma: float | np.ndarray, sampling: str,
                   relation: str) -> tuple[np.ndarray, np.ndarray]:
    """(q, sigma) of the Poisson add/remove pair whose eps is an upper bound for the step.

    Vectorised over sigma (one q per call). Poisson under add/remove or zero-out: itself;
    otherwise no amplification (q -> 1 where q > 0) at multiplier sigma / sensitivity.
    """
    sig = np.asarray(sigma, dtype=float)
    qa = np.broadcast_to(np.asarray(q, dtype=float), sig.shape).copy()
    if sampling == POISSON and relation != REPLACE_ONE:
        return qa, sig
    sens = gaussian_sensitivity(sampling, relation)
    return np.where(qa > 0, 1.0, 0.0), sig / sens


def gaussian_lower(q: float | np.ndarray, sigma: float | np.ndarray, sampling: str,
                   relation: str) -> tuple[np.ndarray, np.ndarray]:
    """(q, sigma) of a Poisson add/remove pair whose eps is a valid LOWER bound for the step
    under the relation (q = 0: the step is left out of the lower bound)."""
    sig = np.asarray(sigma, dtype=float)
    qa = np.broadcast_to(np.asarray(q, dtype=float), sig.shape).copy()
    if sampling == ALL:
        return gaussian_upper(qa, sig, sampling, relation)
    if sampling == POISSON:
        return qa, sig  # exact, or (replace-one) the zero-contribution replacement
    if sampling == FIXED_SIZE and relation != ADD_REMOVE:
        # a batch of B = q n of n: realised pairs (module doc), q = 1 left out (the callers'
        # no-amplification stand-in, not a statement that every record is in every batch)
        sens = gaussian_sensitivity(sampling, relation)
        return np.where(qa < 1.0, qa, 0.0), sig / sens
    return np.zeros_like(qa), sig  # shuffle (see shuffle_pairs), fixed-size add/remove


def shuffle_pairs(q: float, sigmas: np.ndarray, counts: np.ndarray, relation: str,
                  side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(qs, sigmas, counts) of the Poisson add/remove pairs that bound ``counts`` shuffled
    fixed-size steps with batch fraction 0 < q = B / n < 1 (an epoch is T >= floor(1/q)
    and T <= ceil(1/q) batches; the record is in exactly one of them, module doc).

    upper: revealing the permutation, the record is in one step per epoch: one Gaussian
    release (q = 1, sigma / sensitivity, the smallest sigma) per epoch the steps touch, at
    most ceil(count / floor(1/q)) + 1 (and at most count). lower: one step per complete
    epoch, the other steps' outputs ignored (post-processing): in that step the record is in
    the batch with probability q, every other gradient 0, so the pair is the Poisson one at
    (q, largest sigma / sensitivity); floor(count / ceil(1/q)) epochs, for shuffled steps
    recorded from an epoch boundary (a run starts one; events recorded in pieces claim at
    most the complete epochs of the whole run)."""
    sens = gaussian_sensitivity(SHUFFLE, relation)
    total = int(np.sum(counts))
    inv = 1.0 / q
    if side == "upper":
        per = max(1, math.floor(inv * (1.0 + 1e-12)))
        epochs = min(total, -(-total // per) + 1)
        sig, qq = float(np.min(sigmas)), 1.0
    else:
        per = max(1, math.ceil(inv * (1.0 - 1e-12)))
        epochs = total // per
        sig, qq = float(np.max(sigmas)), (q if epochs else 0.0)
    return np.array([qq]), np.array([sig / sens]), np.array([epochs], dtype=np.int64)


def describe_accounting(sampling: str, relation: str) -> str:
    """How a Gaussian step with this sampling and relation is accounted (for describe())."""
    if is_exact(sampling, relation):
        return ""
    if uses_group_privacy(sampling, relation, 0.5):
        return ("PLD: the +-1 pair (1-q)N(0)+qN(1) vs (1-q)N(0)+qN(-1); others: min(group "
                "privacy 2 of add/remove, sensitivity 2C without amplification)")
    sens = gaussian_sensitivity(sampling, relation)
    return f"sensitivity {sens:g}C, no amplification" + (" (sigma/2)" if sens == 2.0 else "")


# ---------------------------------------------------------------- conversions
def can_convert(kind: str, source: str, target: str) -> bool:
    """Does an event of ``kind`` stated under ``source`` imply a guarantee under ``target``?"""
    check_relation("source", source)
    check_relation("target", target)
    if source == target:
        return True
    if kind in ("sampled_gaussian", "gaussian_schedule"):
        return True  # mechanism-level parameters: the accountant recomputes the sensitivity
    if kind in ("laplace", "approx_dp"):
        return target == REPLACE_ONE  # from add-remove or zero-out, by group privacy 2
    return False


def group_privacy_2(eps: float, delta: float) -> tuple[float, float]:
    """(eps, delta)-DP for neighbours at distance 1 -> (2 eps, (1 + e^eps) delta) at distance 2
    (Dwork & Roth 2014, Thm 2.2 with delta; replace-one = remove then add)."""
    if math.isinf(eps):
        return math.inf, delta
    return 2.0 * eps, min(1.0, (1.0 + math.exp(min(eps, 700.0))) * delta)


def convert_event(event: object, relation: str):
    """``event`` restated under ``relation`` where that is valid, else ValueError.

    Each event type registers its converter (:func:`accounting.registry.register_event`):
    Gaussian steps keep their parameters (only the relation changes: the accountant uses
    the right sensitivity); Laplace: add-remove/zero-out -> replace-one doubles the L1
    sensitivity (triangle inequality through the data set without the record); (eps, delta):
    add-remove/zero-out -> replace-one by :func:`group_privacy_2`; random allocation ->
    replace-one: its Gaussian steps without amplification at sensitivity 2C.
    """
    from .registry import converter

    if not (hasattr(event, "kind") and hasattr(event, "steps")):
        raise ValueError(f"event must be an accounting.events.Event, got {type(event)!r}")
    relation = check_relation("relation", relation)
    source = getattr(event, "relation", ADD_REMOVE)
    if source == relation:
        return event
    conv = converter(type(event))
    out = None if conv is None else conv(event, source, relation)
    if out is None:
        raise ValueError(f"cannot convert a {event.kind} event from relation={source!r} to "
                         f"relation={relation!r}: no valid conversion (a guarantee under "
                         f"{source} does not imply one under {relation})")
    return out


def converted_note(event: object, source: str, target: str) -> str:
    """The event's note with "[converted source -> target]" appended."""
    return f"{getattr(event, 'note', '')} [converted {source} -> {target}]".strip()


def events_relation(events: Iterable[object]) -> set[str]:
    """The set of relations among ``events`` (for mixed-relation checks)."""
    return {getattr(e, "relation", ADD_REMOVE) for e in events}
