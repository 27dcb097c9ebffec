"""Record/replay of Flower's own DP code: :func:`audit_dp` runs a wrapper's real
``aggregate_train`` (``aggregate_fit``) or ``LocalDpMod``'s call on canary updates and hands
the releases to :mod:`leakaudit.interop.replay`."""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

from ..._validate import check_int, check_probability
from ...neighbours import canary_out
from .._ledgers import check_relation
from ..replay import ReplayReport, record, replay_row
from .dp_ledgers import (
    central_noise_multiplier,
    classical_gaussian_std,
    local_dp_noise_multiplier,
    requested_noise_multiplier,
)
from .wrappers import ADAPTIVE, CENTRAL, CLIENT_ADAPTIVE, CLIENT_FIXED, LEGACY, LEGACY_LOCAL, LOCAL

__all__ = ["audit_dp"]


# ---------------------------------------------------------------------------- record/replay
class _Identity:
    """Flower's messages need a task identity (a simulation sets one); set while replaying,
    restored afterwards."""

    def __enter__(self) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        self._saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
        for name in ("_task_id", "_run_id", "_node_id"):
            if getattr(TaskIdentity, name) is None:
                setattr(TaskIdentity, name, 1)

    def __exit__(self, *exc: object) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = self._saved


def _record(vector: np.ndarray) -> ArrayRecord:
    return ArrayRecord({"w": Array(np.asarray(vector, dtype=np.float64).copy())})


def _seeded(seed: int) -> Any:
    """numpy's global generator (Flower draws its DP noise from it) seeded, then restored."""
    class _Seeded:
        def __enter__(self) -> None:
            self.state = np.random.get_state()
            np.random.seed(seed % 2**32)

        def __exit__(self, *exc: object) -> None:
            np.random.set_state(self.state)

    return _Seeded()


def _central_release(dp: Any, updates: Sequence[np.ndarray], seed: int,
                     metrics: Sequence[dict[str, Any]] | None = None) -> np.ndarray:
    """The wrapper's real aggregate_train on K replies (each the global weights, 0, plus an
    update, with the clients' ``metrics``: their norm bits), its accountant detached: the
    published aggregate."""
    msg = Message(content=RecordDict({"config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=1, message_type=MessageType.TRAIN)
    metrics = metrics or [{"num-examples": 1} for _ in updates]
    replies = [Message(RecordDict({"arrays": _record(u), "metrics": MetricRecord(dict(m))}),
                       reply_to=msg) for u, m in zip(updates, metrics)]
    dp.current_arrays = _record(np.zeros_like(updates[0]))
    with _seeded(seed):
        arrays, _ = dp.aggregate_train(1, replies)
    if arrays is None:
        raise ValueError(f"{type(dp).__name__}.aggregate_train released nothing for "
                         f"{len(updates)} replies (num_sampled_clients="
                         f"{dp.num_sampled_clients})")
    return np.asarray(arrays["w"].numpy(), dtype=np.float64).reshape(-1)


def _local_release(mod: Any, update: np.ndarray, seed: int) -> np.ndarray:
    """LocalDpMod's real __call__ around a client that returns the global weights (0) plus
    ``update``, its noise seeded: the upload that leaves the client."""
    with _seeded(seed):
        return _through_mod(mod, update, {"server-round": 1}, isinstance(mod, LEGACY_LOCAL))[0]


def _local_setup(dp: Any, canary: np.ndarray, other: np.ndarray, rng: Any,
                 relation: str) -> dict[str, Any]:
    """LocalDpMod: its call around a client returning the canary's (or the other) update;
    declared: its ``sensitivity`` and the std its (eps, delta) calibrate."""
    if not (dp.epsilon > 0 and 0 < dp.delta < 1):
        raise ValueError(f"LocalDpMod has epsilon={dp.epsilon}, delta={dp.delta}: its "
                         f"noise std needs epsilon > 0 and 0 < delta < 1")
    clip = float(dp.clipping_norm)
    std = classical_gaussian_std(dp.sensitivity, dp.epsilon, dp.delta)
    sensitivity = float(dp.sensitivity) if dp.sensitivity > 0 else clip
    span = clip * (1.0 if relation == "zero-out" else 2.0)
    return {"release": lambda world_in, s: _local_release(dp, canary if world_in else other,
                                                          s),
            "mode": f"LocalDpMod ({type(dp).__module__})", "std": std,
            "sensitivity": sensitivity, "detached": None,
            "mu_claimed": sensitivity / std,  # the Gaussian its (eps, delta) calibrates
            "mu_sound": 1.0 / local_dp_noise_multiplier(std, clip, relation),
            "note": (f"its sensitivity {dp.sensitivity:g} calibrates the noise, but the "
                     f"clipped upload moves by up to {span:g} under {relation}: the sound "
                     f"eps of a release is above the claimed one"
                     if span > dp.sensitivity else "")}


def _central_setup(dp: Any, canary: np.ndarray, other: np.ndarray, rng: Any,
                   relation: str) -> dict[str, Any]:
    """A central wrapper: its aggregate over K replies, the canary's in one and updates of
    norm C/2 in the others; declared: C/K on the mean and the std z C / K (adaptive: z_Delta,
    :func:`_adaptive_declared`)."""
    clip, k, z = float(dp.clipping_norm), int(dp.num_sampled_clients), float(
        dp.noise_multiplier)
    rest = [0.5 * clip * v / np.linalg.norm(v) for v in rng.standard_normal((k - 1,
                                                                             canary.size))]
    legacy = isinstance(dp, LEGACY)
    client_side = isinstance(dp, CLIENT_FIXED + CLIENT_ADAPTIVE)
    mod = _clip_mod(legacy, isinstance(dp, CLIENT_ADAPTIVE))
    aggregate = _legacy_central_release if legacy else _central_release

    def release(world_in: bool, s: int) -> np.ndarray:
        updates, metrics = [canary if world_in else other, *rest], None
        try:         # an adaptive wrapper moves its clip every call: each replay is round 1
            if client_side:  # the clip the wrapper sends, then each client's own mod
                config = _sent_config(dp, canary.size, legacy)
                replies = [_through_mod(mod, u, config, legacy) for u in updates]
                updates, metrics = [u for u, _ in replies], [m for _, m in replies]
            return aggregate(dp, updates, s, metrics)
        finally:
            dp.clipping_norm = clip

    mu_sound = 1.0 / central_noise_multiplier(z, k, 1.0 / k, relation)
    mu_claimed, note = 1.0 / z, ("clipped by Flower's fixedclipping_mod at each client"
                                 if client_side else "")
    if isinstance(dp, ADAPTIVE):
        mu_claimed, mu_sound, note = _adaptive_declared(dp, mu_sound)
    return {"release": release, "std": z * clip / k, "sensitivity": clip / k,
            "mode": f"{type(dp).__name__} ({type(dp).__module__}), K={k}",
            "mu_claimed": mu_claimed, "mu_sound": mu_sound,
            "detached": getattr(dp, "accountant", None), "note": note}


def _adaptive_declared(dp: Any, mu_update: float) -> tuple[float, float, str]:
    """(mu_claimed, mu_sound, note) of one adaptive-clipping round: Flower splits the
    requested z into the update's z_Delta (``dp.noise_multiplier``) and the clipped count's
    2 sigma_b (Andrew et al. 2021, Thm 1); the round releases both, so the sound mu adds the
    count's 1 / sigma_b (a 0/1 bit, sensitivity 1) to the update's ``mu_update``."""
    z, clip = float(dp.noise_multiplier), float(dp.clipping_norm)
    count_std = float(dp.clipped_count_stddev or 0.0)
    z_round = requested_noise_multiplier(z, count_std)
    mu_sound = math.hypot(mu_update, 1.0 / count_std if count_std else math.inf)
    where = ("each client clips with Flower's adaptiveclipping_mod at the clip the wrapper "
             "sent and reports its norm bit; " if isinstance(dp, CLIENT_ADAPTIVE) else "")
    return 1.0 / z_round, mu_sound, (
        f"adaptive clipping: {where}the update's effective multiplier z_Delta = {z:.4g} "
        f"(requested {z_round:.4g}, the clipped count's std {count_std:.4g}), clip "
        f"{clip:g} at the start of the round")


class _Sent:
    """Stands in for the wrapped strategy while a client-side wrapper configures a round:
    keeps the config the wrapper sends its clients (its clip, ``KEY_CLIPPING_NORM``)."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Any) -> list[Message]:
        self.config = dict(config)
        return []

    def configure_fit(self, server_round: int, parameters: Any,
                      client_manager: Any) -> list[tuple[None, Any]]:
        from flwr.common import FitIns

        ins = FitIns(parameters, {})
        self.config = ins.config  # the wrapper adds its clip to it
        return [(None, ins)]


def _sent_config(dp: Any, dim: int, legacy: bool) -> dict[str, Any]:
    """The config a client-side wrapper's real ``configure_train`` (``configure_fit``) sends
    its clients for round 1, the wrapped strategy replaced by :class:`_Sent` meanwhile."""
    inner, sent = dp.strategy, _Sent()
    dp.strategy = sent
    try:
        if legacy:
            from flwr.common import ndarrays_to_parameters

            dp.configure_fit(1, ndarrays_to_parameters([np.zeros(dim)]), None)
        else:
            dp.configure_train(1, _record(np.zeros(dim)), ConfigRecord({"server-round": 1}),
                               None)
    finally:
        dp.strategy = inner
    if KEY_CLIPPING_NORM not in sent.config:
        raise ValueError(f"{type(dp).__name__}.configure_train sent its clients no "
                         f"{KEY_CLIPPING_NORM!r}: the client mods cannot clip")
    return dict(sent.config)


def _clip_mod(legacy: bool, adaptive: bool) -> Any:
    """Flower's own client-side clipping mod of the import path: ``adaptiveclipping_mod``
    (clips, adds the norm bit) or ``fixedclipping_mod``."""
    if legacy:
        from flwr.client import mod as mods
    else:
        from flwr.clientapp import mod as mods
    return mods.adaptiveclipping_mod if adaptive else mods.fixedclipping_mod


def _through_mod(mod: Any, update: np.ndarray, config: dict[str, Any],
                 legacy: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """A client mod's real call, given the round's ``config``, around a client that returns
    the global weights (0) plus ``update``: the upload that leaves the client and its reply's
    metrics (the norm bit, for ``adaptiveclipping_mod``). ``legacy``: the mod of
    ``flwr.client.mod``, which reads and writes the older FitIns / FitRes layout."""
    if legacy:
        from flwr.common import (
            Code,
            FitIns,
            FitRes,
            Status,
            ndarrays_to_parameters,
            parameters_to_ndarrays,
        )
        from flwr.compat.common import recorddict_compat as compat

        content = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters(
            [np.zeros_like(update)]), dict(config)), keep_input=True)

        def reply(m: Message, c: Context) -> Message:
            res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([update.copy()]), 1, {})
            return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=m)

        def read(out: Message) -> tuple[np.ndarray, dict[str, Any]]:
            res = compat.recorddict_to_fitres(out.content, keep_input=True)
            return parameters_to_ndarrays(res.parameters)[0], dict(res.metrics)
    else:
        content = RecordDict({"arrays": _record(np.zeros_like(update)),
                              "config": ConfigRecord(dict(config))})

        def reply(m: Message, c: Context) -> Message:
            return Message(RecordDict({"arrays": _record(update),
                                       "metrics": MetricRecord({"num-examples": 1})}),
                           reply_to=m)

        def read(out: Message) -> tuple[np.ndarray, dict[str, Any]]:
            return (next(iter(out.content.array_records.values()))["w"].numpy(),
                    dict(next(iter(out.content.metric_records.values()))))
    msg = Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    out = mod(msg, ctx, reply)
    if out.has_error():
        name = getattr(mod, "__name__", type(mod).__name__)
        raise ValueError(f"{name} answered with an error: {out.error}")
    upload, metrics = read(out)
    return np.asarray(upload, dtype=np.float64).reshape(-1), metrics


def _legacy_central_release(dp: Any, updates: Sequence[np.ndarray], seed: int,
                            metrics: Sequence[dict[str, Any]] | None = None) -> np.ndarray:
    """A flwr.server.strategy wrapper's real aggregate_fit on K FitRes results (with the
    clients' ``metrics``: their norm bits)."""
    from flwr.common import (
        Code,
        FitRes,
        Status,
        ndarrays_to_parameters,
        parameters_to_ndarrays,
    )

    dp.current_round_params = [np.zeros_like(updates[0])]
    metrics = metrics or [{} for _ in updates]
    results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([u.copy()]), 1,
                             dict(m))) for u, m in zip(updates, metrics)]
    with _seeded(seed):
        params, _ = dp.aggregate_fit(1, results, [])
    if params is None:
        raise ValueError(f"{type(dp).__name__}.aggregate_fit released nothing")
    return np.asarray(parameters_to_ndarrays(params)[0], dtype=np.float64).reshape(-1)


def audit_dp(dp: Any, *, dim: int = 2000, neighbouring: str = "replace-one",
             trials: int = 200, pairs: int = 8, delta: float = 1e-5,
             confidence: float = 0.95, seed: int = 0) -> ReplayReport:
    """Record/replay a Flower DP wrapper's (or ``LocalDpMod``'s) own code: one public call,
    one report row (:class:`leakaudit.interop.replay.ReplayReport`).

    Central fixed clipping (``DifferentialPrivacy{Server,Client}SideFixedClipping``) and
    adaptive clipping (``DifferentialPrivacy{Server,Client}SideAdaptiveClipping``; its clip
    reset to the round's start before each run; declared: its effective update multiplier
    z_Delta, claimed: the requested z that also pays for the clipped count), either import
    path: the wrapper's real ``aggregate_train`` (``aggregate_fit``) on K replies (weights
    ``dim`` zeros plus an update), the canary's update of norm 10 C in one of them and
    updates of norm C/2 in the others; the out world replaces it by its negative
    (replace-one and add-remove: Flower's cohort has a fixed size K) or by zeros
    (zero-out). The client-side wrappers first configure the round (their real
    ``configure_train``, which sends the clip in the config) and each reply leaves its client
    through Flower's own ``fixedclipping_mod`` or ``adaptiveclipping_mod`` (which clips and
    adds the norm bit to the reply's metrics). ``LocalDpMod``: its real ``__call__`` around a
    client returning the canary's (or the other) update.
    Each run draws Flower's noise from numpy's global generator seeded per run (restored
    afterwards); the wrapper's accountant, if any, is detached while replaying.

    Checked: the release moves by at most the declared sensitivity (central: C/K on the
    mean per client; LocalDpMod: its ``sensitivity`` argument) and the noise std is the one
    Flower computes (``z C / K``; LocalDpMod's Dwork & Roth std); the game against one
    release as claimed (DP-FedAvg's multiplier z; LocalDpMod's (eps, delta), read as the
    Gaussian it calibrates) and as the sound ledger has it (:func:`.ledgers`).
    """
    if not isinstance(dp, CENTRAL + LOCAL):
        raise ValueError(f"dp must be one of Flower's central DP wrappers or a "
                         f"LocalDpMod (either import path), got {type(dp).__module__}."
                         f"{type(dp).__name__}")
    neighbouring = check_relation("neighbouring", neighbouring)
    for name, value, low in (("dim", dim, 1), ("trials", trials, 8), ("pairs", pairs, 1)):
        check_int(name, value, low)
    for name, value in (("delta", delta), ("confidence", confidence)):
        check_probability(name, value)
    import flwr

    rng = np.random.default_rng(seed)
    clip = float(dp.clipping_norm)
    direction = rng.standard_normal(dim)
    canary = 10.0 * clip * direction / np.linalg.norm(direction)
    # zero-out: Flower's clipping divides by the update's norm (an all-zero update raises
    # ZeroDivisionError in compute_clip_model_update), so the zeroed update is 1e-10 x it
    # (add-remove: Flower's cohort has a fixed size, so an absent client is replaced)
    other = 1e-10 * canary if canary_out(neighbouring) == "zero" else -canary
    setup = (_local_setup if isinstance(dp, LOCAL) else _central_setup)(
        dp, canary, other, rng, neighbouring)
    release, detached = setup["release"], setup["detached"]
    logger = logging.getLogger("flwr")
    level = logger.level
    with _Identity(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logger.setLevel(logging.ERROR)  # Flower logs every clip and noise draw
        if detached is not None:
            dp.accountant = None
        try:
            out, into, p_out, p_in = record(release, trials=trials, pairs=pairs, seed=seed)
        finally:
            if detached is not None:
                dp.accountant = detached
            logger.setLevel(level)
    row = replay_row(library="flower", version=flwr.__version__, mode=setup["mode"],
                     relation=neighbouring, out=out, into=into, paired_in=p_in,
                     paired_out=p_out, sensitivity=setup["sensitivity"],
                     noise_std=setup["std"], mu_claimed=setup["mu_claimed"],
                     mu_sound=setup["mu_sound"], delta=delta, confidence=confidence,
                     seed=seed, note=setup["note"])
    row["clipping_norm"] = clip
    report = ReplayReport(config={"delta": delta, "confidence": confidence, "seed": seed,
                                  "trials": trials, "pairs": pairs, "dim": dim})
    report.add(row)
    return report
