"""Per-client (claimed, sound) ledgers for Flower's DP wrappers and ``LocalDpMod``.

Flower's optional accountant counts the population's releases, none counts a client's (its
issue #605). One neighbouring relation for every wrapper, ``neighbouring=`` (default
"replace-one"): a client's clipped update moves a sum by up to C when zeroed ("zero-out") and
2C when replaced ("replace-one"; also "add-remove" from the population, since Flower draws a
fixed number K of clients and another takes the place):

- central DP with fixed clipping (``DifferentialPrivacyServerSideFixedClipping``,
  ``...ClientSideFixedClipping``; McMahan et al. 2018): noise N(0, (z C / K)^2) on the mean of
  K clipped updates of equal weight (checked from the taps: a ValueError otherwise).
  Claimed, the DP-FedAvg convention: every client, every round, one Poisson-sampled
  Gaussian step with q = K/N and multiplier z (add-remove). Sound, per client with its
  participation: one Gaussian step (q = 1) per round its update was aggregated, multiplier
  z under zero-out and z/2 otherwise; Flower samples a fixed-size set with Python's
  ``random.sample`` and the server knows it, so no amplification by sampling is taken.
- ``LocalDpMod``: clip to C, add N(0, s^2) with s = Delta sqrt(2 ln(1.25/delta)) / eps
  (Dwork & Roth 2014, Thm A.1, a proof for eps < 1 only) where Delta is the user's
  ``sensitivity``. Claimed: (eps, delta) per round the client took part in, composed soundly
  by the ledger. Sound: the Gaussian actually added, multiplier s / (2 C) per round (s / C
  under zero-out), whatever Delta says.
- adaptive clipping wrappers, server- or client-side (Andrew et al. 2021): claimed as fixed
  clipping with the requested multiplier; sound: per round taken part, the update's Gaussian
  (multiplier z_Delta after Flower's split, :func:`requested_noise_multiplier`, halved as
  above) and the clipped-count Gaussian (0/1 bits, sensitivity 1 under every relation, std
  ``clipped_count_stddev``) as two releases. This holds for update noise drawn at the
  round's clip, as Andrew et al. draw it; Flower 1.41 draws it at the clip already moved by
  the round's noisy count (a multiplier z_Delta C_next / C that depends on the count, not
  bounded here; the reason says so and :func:`~leakaudit.interop.flower.audit_dp` flags it).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from accounting.relations import gaussian_sensitivity

from ..._validate import check_int
from .._ledgers import LedgerPair, check_relation, multiplier, new_ledger
from .taps import SAMPLING, Captured, RoundRecord
from .wrappers import ADAPTIVE, CENTRAL, LOCAL

__all__ = ["ledgers", "CLAIMED_RELATION", "central_noise_multiplier",
           "local_dp_noise_multiplier", "classical_gaussian_std",
           "requested_noise_multiplier"]

#: DP-FedAvg's claim (McMahan et al. 2018): Poisson client sampling, add/remove adjacency
CLAIMED_RELATION = "add-remove"


def ledgers(dp: Any, *, participation: Captured | Mapping[int, Sequence[int]],
            num_clients: int, rounds: int, neighbouring: str = "replace-one") -> LedgerPair:
    """``(claimed, sound)`` ledgers per client for a Flower DP wrapper or ``LocalDpMod``:
    ``ledgers(dp, participation=load(d), num_clients=N, rounds=T)`` (keyword-only after
    ``dp``).

    Both dicts map every client 0..N-1 to its ledger; the returned
    :class:`~leakaudit.interop.LedgerPair` also names the relation, the sampling and why
    sound differs from claimed. One convention for every wrapper: a client's update moves
    a sum of clipped updates by up to ``C`` when it is zeroed ("zero-out") and by up to
    ``2C`` when it is replaced ("replace-one"), or when a client is added to or removed
    from the population ("add-remove": the server draws a fixed number K of clients, so
    another client takes the place). The sound multiplier of the fixed-clipping wrappers is
    z under zero-out and z/2 otherwise; LocalDpMod's is std/C or std/(2C).

    The central wrappers' noise ``N(0, (z C / K)^2)`` on the mean is z C on the sum only when
    the mean has K terms of equal weight. From a :class:`.Captured` (what :func:`.load` read)
    every round with an aggregate is checked: FedAvg weights equal and exactly K updates
    aggregated, else a ValueError naming the round. A plain mapping cannot be checked (a
    warning says so).

    Args:
        dp: a ``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping`` strategy
            (for central DP) or a ``LocalDpMod``; None for no DP (every client that took
            part has an infinite eps).
        participation: the :class:`.Captured` that :func:`.load` returned, or client ->
            rounds its update was aggregated.
        num_clients: N, the clients Flower sampled from; rounds: rounds run.
        neighbouring: "replace-one" (default), "add-remove" or "zero-out".
    """
    neighbouring = check_relation("neighbouring", neighbouring)
    num_clients, rounds = check_int("num_clients", num_clients, 1), check_int("rounds", rounds, 0)
    records = participation.rounds if isinstance(participation, Captured) else None
    if isinstance(participation, Captured):
        participation = participation.participation
    if not isinstance(participation, Mapping):
        raise ValueError(f"participation must be a Captured or a mapping client -> rounds, "
                         f"got {type(participation).__name__}")
    for c, rs in participation.items():
        if any(not 1 <= int(r) <= rounds for r in rs):
            raise ValueError(f"participation of client {c} has rounds {list(rs)} outside "
                             f"1..{rounds}")
    if dp is not None and not isinstance(dp, CENTRAL + LOCAL):
        raise ValueError(f"dp must be a Flower DP strategy wrapper "
                         f"({', '.join(c.__name__ for c in CENTRAL)}), a LocalDpMod "
                         f"or None, got {type(dp).__module__}.{type(dp).__name__}")
    if isinstance(dp, CENTRAL):
        _check_rounds(dp, records)
    clients = range(num_clients)
    claimed_relation = CLAIMED_RELATION if isinstance(dp, CENTRAL) else neighbouring
    claimed = {c: new_ledger(claimed_relation) for c in clients}
    sound = {c: new_ledger(neighbouring) for c in clients}
    taken = {c: len(participation.get(c, ())) for c in clients}
    if dp is None:
        for c in clients:
            for lg in (claimed[c], sound[c]):
                lg.step(q=1.0, sigma=0.0, count=taken[c], note="no DP: update sent in clear")
        reason = "no DP: every aggregated update is released in the clear"
    elif isinstance(dp, LOCAL):
        reason = _local(dp, claimed, sound, taken, neighbouring)
    else:
        reason = _central(dp, claimed, sound, taken, num_clients, rounds, neighbouring)
    return LedgerPair(claimed, sound, relation=neighbouring, sampling=SAMPLING,
                      claimed_relation=claimed_relation,
                      claimed_sampling="poisson" if isinstance(dp, CENTRAL)
                      else SAMPLING, reason=reason)


def _check_rounds(dp: Any, records: Mapping[int, RoundRecord] | None) -> None:
    """Equal FedAvg weights and K updates in every aggregated round, or a ValueError."""
    name, k = type(dp).__name__, int(dp.num_sampled_clients)
    if records is None:
        warnings.warn(f"ledgers: participation is a plain mapping, so the equal FedAvg weights "
                      f"and the K = {k} updates per round that {name}'s ledger assumes are "
                      f"not checked; pass the Captured that load() returned", stacklevel=3)
        return
    if not records:
        warnings.warn(f"ledgers: the Captured holds no round records (a tap directory without "
                      f"StrategyRecorder's round-r*.pt or ClientRecorder's uploads), so the "
                      f"equal FedAvg weights and the K = {k} updates per round that {name}'s "
                      f"ledger assumes are not checked", stacklevel=3)
        return
    for r, rec in sorted(records.items()):
        if not rec.aggregated:
            continue  # nothing was released this round
        if any(w is None for w in rec.weights):
            missing = [n for n, w in zip(rec.nodes, rec.weights) if w is None]
            raise ValueError(f"round {r}: the replies of node(s) {missing} carry no "
                             f"{rec.weight_key!r} metric, so their FedAvg weights cannot be "
                             f"checked equal as {name}'s ledger assumes")
        if len(set(rec.weights)) > 1:
            raise ValueError(
                f"round {r}: unequal FedAvg weights {list(rec.weights)} ({rec.weight_key!r}) "
                f"under {name}, whose noise z C / K assumes equal ones: a client's share of "
                f"the mean is its weight over the round's total, which depends on the data "
                f"and on who took part; send equal {rec.weight_key!r} values")
        if len(rec.nodes) != k:
            raise ValueError(
                f"round {r}: {len(rec.nodes)} updates were aggregated ({rec.failures} failed) "
                f"but {name} has num_sampled_clients={k}: its noise z C / K on a mean of "
                f"m = {len(rec.nodes)} updates gives a client the multiplier z m / K, not z")


def central_noise_multiplier(noise_multiplier: float, num_sampled: int, share: float,
                             relation: str = "zero-out") -> float:
    """Multiplier of the Gaussian on one client's contribution to a noised mean.

    Noise N(0, (z C / K)^2) on sum_i w_i clip(u_i): zeroing client i's update moves the sum
    by up to w_i C, replacing it by up to 2 w_i C, so its multiplier is z / (K w_i) under
    zero-out and half that under replace-one or add-remove (fixed-size cohorts); for equal
    weights w_i = 1/K, z or z/2 (McMahan et al. 2018).
    """
    return multiplier(noise_multiplier / (num_sampled * share), check_relation(
        "relation", relation))


def local_dp_noise_multiplier(std: float, clipping_norm: float,
                              relation: str = "replace-one") -> float:
    """Multiplier of LocalDpMod's Gaussian: its std over the update's L2 sensitivity, 2C
    (two clipped updates in the C-ball differ by up to 2C) or C under zero-out."""
    return multiplier(std / clipping_norm, check_relation("relation", relation))


def classical_gaussian_std(sensitivity: float, eps: float, delta: float) -> float:
    """Dwork & Roth 2014, Thm A.1: s = Delta sqrt(2 ln(1.25/delta)) / eps (a proof for eps<1)."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / eps


def requested_noise_multiplier(update_multiplier: float, clipped_count_stddev: float) -> float:
    """The multiplier z an adaptive-clipping round pays for, from the update's z_Delta and the
    clipped count's std sigma_b (Andrew et al. 2021, Thm 1): one round releases the update
    with multiplier z_Delta and the count of 0/1 bits with std sigma_b, together the Gaussian
    of multiplier z = (z_Delta^-2 + (2 sigma_b)^-2)^(-1/2). Flower's adaptive wrappers take z
    and keep z_Delta as their ``noise_multiplier``; without count noise (sigma_b = 0) or
    without update noise z is z_Delta."""
    if not clipped_count_stddev or not update_multiplier:
        return float(update_multiplier)
    return float((update_multiplier ** -2 + (2 * clipped_count_stddev) ** -2) ** -0.5)


def _span(relation: str) -> str:
    return "C" if relation == "zero-out" else "2C"


def _central(dp: Any, claimed: dict, sound: dict, taken: dict, n: int, rounds: int,
             relation: str) -> str:
    k = int(dp.num_sampled_clients)
    q = min(1.0, k / n)
    z_update = float(dp.noise_multiplier)
    count_std = float(getattr(dp, "clipped_count_stddev", 0.0) or 0.0)
    adaptive = isinstance(dp, ADAPTIVE)
    z_claim = requested_noise_multiplier(z_update, count_std) if adaptive else z_update
    name = type(dp).__name__
    z = central_noise_multiplier(z_update, k, 1.0 / k, relation)
    for c in claimed:
        claimed[c].step(q=q, sigma=z_claim, count=rounds,
                        note=f"{name}: DP-FedAvg, q=K/N every round")
        # the ledger charges the relation's sensitivity (2C, or C zero-out) itself: z -> {z}
        sound[c].step(q=1.0, sigma=z_update, count=taken[c], sampling="fixed-size",
                      note=f"{name}: rounds aggregated, no amplification, {relation}")
        if adaptive:  # a 0/1 bit moves the count by 1 under every relation
            bit = count_std * gaussian_sensitivity("fixed-size", relation)
            sound[c].step(q=1.0, sigma=bit, count=taken[c], sampling="fixed-size",
                          note=f"{name}: clipped-count bit, sensitivity 1")
    why = (f"claimed: DP-FedAvg's convention, every client every round a Poisson-sampled "
           f"Gaussian step (q = K/N = {q:g}, multiplier {z_claim:g}, add-remove). Flower draws "
           f"a fixed-size cohort with random.sample and the server knows it: no amplification, "
           f"one Gaussian step per round a client's update was aggregated; under {relation} "
           f"it moves the sum of clipped updates by up to {_span(relation)}: multiplier "
           f"{z:g}")
    if not adaptive:
        return why
    return why + (f", and the clipped-count bit (std {count_std:g}, sensitivity 1). Both "
                  f"hold for update noise drawn at the round's clip; Flower 1.41 draws it at "
                  f"the clip already moved by the round's noisy count (clip_norm_lr "
                  f"{float(dp.clip_norm_lr):g}), a multiplier z_Delta C_next / C that "
                  f"depends on that count and that this ledger does not bound (audit_dp "
                  f"flags it)")


def _local(dp: Any, claimed: dict, sound: dict, taken: dict, relation: str) -> str:
    if not (dp.epsilon > 0 and 0 < dp.delta < 1):
        raise ValueError(f"LocalDpMod has epsilon={dp.epsilon}, delta={dp.delta}: its noise "
                         f"std needs epsilon > 0 and 0 < delta < 1")
    std = classical_gaussian_std(dp.sensitivity, dp.epsilon, dp.delta)
    z = local_dp_noise_multiplier(std, dp.clipping_norm, relation)
    span = f"C={dp.clipping_norm:g}" if relation == "zero-out" else \
        f"2C={2 * dp.clipping_norm:g}"
    for c in claimed:
        claimed[c].dp_step(dp.epsilon, dp.delta, count=taken[c],
                           note="LocalDpMod: (eps, delta) per round taken part")
        sound[c].step(q=1.0, sigma=std / dp.clipping_norm, count=taken[c],
                      sampling="fixed-size",
                      note=f"LocalDpMod: Gaussian std {std:.4g} on an update of L2 "
                           f"sensitivity {span} ({relation})")
    return (f"claimed: LocalDpMod's (eps, delta) = ({dp.epsilon:g}, {dp.delta:g}) per round, "
            f"its std {std:.4g} calibrated to sensitivity {dp.sensitivity:g} by Dwork & Roth "
            f"Thm A.1 (a proof for eps < 1 only); sound: that Gaussian on an upload that moves "
            f"by up to {span} under {relation}: multiplier {z:.4g} per round taken part")

