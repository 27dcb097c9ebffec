"""An Opacus run's ``(claimed, sound)`` ledgers: *claimed* is its accountant's history read
as Poisson-sampled Gaussian steps; *sound* accounts the batches the loader really drew (the
sampler is inferred from the loader: Poisson, shuffled / in order, weighted or with
replacement)."""

from __future__ import annotations

import math
from typing import Any

from accounting import PrivacyLedger

from .._ledgers import LedgerPair, check_relation, new_ledger
from .loading import import_opacus

# ---------------------------------------------------------------------------- accountants
_KNOWN = {"RDPAccountant": "rdp", "PRVAccountant": "prv", "GaussianAccountant": "gdp"}


#: Opacus's accountants analyse Poisson-sampled Gaussian steps under add/remove adjacency
#: (Abadi et al. 2016; Mironov et al. 2019)
CLAIMED_RELATION = "add-remove"


def ledger_from_accountant(accountant: Any, *, orders: object = None,
                           data_loader: Any = None) -> PrivacyLedger:
    """The privacy ledger of an Opacus accountant's history: Opacus's claim. Keyword-only
    after ``accountant``.

    Opacus's RDP, PRV and GDP accountants all keep ``history``: a list of
    ``(noise_multiplier, sample_rate, num_steps)``, each ``num_steps`` Poisson-sampled Gaussian
    steps (Abadi et al. 2016; Mironov et al. 2019). Each entry becomes one
    :class:`accounting.SampledGaussian` event, so every method of the ledger applies.

    Opacus records a sample rate (1 / len(loader)) whatever loader ran; the steps are Poisson
    only with its ``DPDataLoader`` (``make_private(poisson_sampling=True)``). Give
    ``data_loader`` and a loader of any other kind is refused; :func:`ledgers` accounts it.

    Args:
        accountant: an ``opacus.accountants`` ``RDPAccountant``, ``PRVAccountant`` or
            ``GaussianAccountant`` (e.g. ``PrivacyEngine(...).accountant``).
        orders: Rényi orders of the ledger; default for an RDP accountant its own
            ``DEFAULT_ALPHAS`` (so that ``ledger.epsilon(delta, "rdp")`` is Opacus's
            ``get_epsilon(delta)``), otherwise the ledger's default grid.
        data_loader: the loader training read (the one ``make_private`` returned); a
            ValueError unless it samples Poisson batches.

    The methods coincide for RDP (same orders, same conversion: Balle et al. 2020, Thm 21)
    and for PRV (``ledger.epsilon_bounds(delta, eps_error=0.01, delta_error=delta/1000)``'s
    upper bound is what Opacus's PRVAccountant reports). Opacus's GDP accountant uses the
    central limit theorem (Bu et al. 2020), an approximation that may under-report; the
    ledger gives sound bounds for the same steps instead.
    """
    opacus = import_opacus()
    kind = _accountant_kind(accountant, opacus)
    if data_loader is not None:
        sampler = sampler_of(data_loader)
        if sampler.kind != "poisson":
            raise ValueError(
                f"data_loader draws {sampler.what}, not Poisson batches: "
                f"ledger_from_accountant would copy Opacus's sample_rate as Poisson steps "
                f"that did not run; use leakaudit.interop.opacus.ledgers(engine, "
                f"data_loader=...), whose .sound accounts this loader")
    return _claimed(accountant, kind, orders)


def ledgers(engine: Any, *, data_loader: Any, relation: str | None = None,
            epochs: int | None = None, orders: object = None) -> LedgerPair:
    """``(claimed, sound)`` ledgers of an Opacus run: Opacus's history, and the loader's:
    ``ledgers(engine, data_loader=loader)`` (keyword-only after ``engine``).

    *claimed* is :func:`ledger_from_accountant`: Opacus's history as Poisson-sampled
    Gaussian steps (add/remove). *sound* accounts the sampling ``data_loader`` really did:

    - Opacus's ``DPDataLoader`` (Poisson, ``poisson_sampling=True``): the same steps at the
      loader's rate, under add/remove (or zero-out, the same analysis; sound == claimed) or
      under replace-one (the accountant's replace-one analysis of Poisson steps).
    - batches read in order (``SequentialSampler``) or from a shuffled permutation
      (``RandomSampler`` without replacement, ``SubsetRandomSampler``): every example is in
      exactly one batch per pass over the loader, so at most one of each pass's steps
      holds it, and since who is in which batch is fixed or known to a worst-case attacker,
      there is no amplification by sampling (Chua et al. ICML 2024 show how far the
      Poisson number can be from the truth). Default relation replace-one: one example
      moves the noised sum by up to 2C, one Gaussian step of multiplier sigma/2 per pass
      (zero-out: C, sigma). Add/remove is refused by the batching (removing an example
      shifts every later batch) and is accounted as below.
    - any other sampler (``WeightedRandomSampler``, sampling with replacement, a custom
      sampler): an example can be drawn into every step and up to B times into one batch of
      B, and data-dependent weights (class balancing) change who else is drawn: every step
      is a Gaussian of multiplier sigma/(2B) (zero-out: sigma/B). A custom batch sampler
      with no batch size bounds nothing: eps is infinite.

    Args:
        engine: the ``opacus.PrivacyEngine`` (or its accountant) that trained.
        data_loader: the loader training read: the one ``make_private`` returned.
        relation: neighbouring relation of the sound ledger; default "add-remove" for a
            Poisson loader, "replace-one" otherwise; a pair the accountant cannot account
            is refused by the ledger (ValueError naming it).
        epochs: passes made over the loader; default ceil(steps / len(loader)), one loader
            batch per optimizer step. Give it with gradient accumulation (several loader
            batches per step), which makes more passes than that.
        orders: Rényi orders of both ledgers (default as :func:`ledger_from_accountant`).

    Returns:
        a :class:`~leakaudit.interop.LedgerPair`: ``claimed``, ``sound``, ``relation``,
        ``sampling`` and ``reason`` (why sound differs from claimed; "" when it does not).

    ``sampling`` names what the loader did: "poisson", "shuffle", "sequential" (in order:
    a fixed permutation, accounted as a shuffle without amplification) or "arbitrary".

    TODO(accounting): record the shuffled passes as ``ledger.step(..., sampling="shuffle")``
    once the accountant has it (today: q = 1 Gaussian steps, one per pass, which is what
    the accountant's no-amplification rule gives); an in-order loader must stay without
    amplification even if "shuffle" ever takes some from the random permutation.
    """
    opacus = import_opacus()
    accountant = engine.accountant if isinstance(engine, opacus.PrivacyEngine) else engine
    try:
        kind = _accountant_kind(accountant, opacus)
    except ValueError as exc:
        raise ValueError(f"engine must be an Opacus PrivacyEngine or its accountant: "
                         f"{exc}") from None
    sampler = sampler_of(data_loader)
    if relation is None:
        relation = "add-remove" if sampler.kind == "poisson" else "replace-one"
    relation = check_relation("relation", relation)
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                               or epochs < 1):
        raise ValueError(f"epochs must be an integer >= 1 or None, got {epochs!r}")
    history = accountant_history(accountant)
    claimed = _claimed(accountant, kind, orders)
    sound = new_ledger(relation, claimed.orders)
    steps = sum(count for _, _, count in history)
    if sampler.kind == "poisson":
        reason = _poisson(sound, history, sampler)
        if relation == "replace-one":
            reason = "; ".join(r for r in (reason, "accounted under replace-one (Opacus: "
                                                   "add/remove)") if r)
    elif sampler.kind == "shuffle" and relation != "add-remove":
        reason = _passes(sound, history, sampler, relation, epochs, steps)
    else:
        reason = _every_step(sound, history, sampler, relation)
    return LedgerPair(claimed, sound, relation=relation, sampling=sampler.sampling,
                      claimed_relation=CLAIMED_RELATION, claimed_sampling="poisson",
                      reason=reason)


class Sampler:
    """What a DataLoader draws: kind ("poisson", "shuffle", "any"), a description, the
    Poisson rate, the largest batch (None: unbounded) and the batches per pass."""

    def __init__(self, kind: str, what: str, *, rate: float = math.nan,
                 batch: int | None = None, per_pass: int = 0) -> None:
        self.kind, self.what, self.rate, self.batch, self.per_pass = (
            kind, what, rate, batch, per_pass)

    @property
    def sampling(self) -> str:
        """The sampling scheme's name as the accountant spells it."""
        if self.kind == "shuffle":
            return "sequential" if self.what.endswith("(no shuffle)") else "shuffle"
        return "poisson" if self.kind == "poisson" else "arbitrary"


def sampler_of(data_loader: Any) -> Sampler:
    """How ``data_loader`` draws its batches (Opacus's Poisson samplers, torch's)."""
    from opacus.utils.uniform_sampler import (
        DistributedUniformWithReplacementSampler,
        UniformWithReplacementSampler,
    )
    from torch.utils.data import (
        BatchSampler,
        DataLoader,
        RandomSampler,
        SequentialSampler,
        SubsetRandomSampler,
    )

    if not isinstance(data_loader, DataLoader):
        raise ValueError(f"data_loader must be a torch DataLoader (the one make_private "
                         f"returned), got {type(data_loader).__module__}."
                         f"{type(data_loader).__name__}")
    batches = data_loader.batch_sampler
    try:
        per_pass, n = len(data_loader), len(data_loader.dataset)
    except TypeError:  # an IterableDataset without a length: nothing known per pass
        per_pass, n = 0, -1
    if isinstance(batches, (UniformWithReplacementSampler,
                            DistributedUniformWithReplacementSampler)):
        return Sampler("poisson", "Poisson batches (Opacus's DPDataLoader)",
                        rate=float(batches.sample_rate), per_pass=per_pass)
    if not isinstance(batches, BatchSampler):
        size = getattr(batches, "batch_size", None)
        return Sampler("any", f"batches from a custom {type(batches).__name__}",
                        batch=size if isinstance(size, int) and size >= 1 else None,
                        per_pass=per_pass)
    inner, size = batches.sampler, int(batches.batch_size)
    if isinstance(inner, SequentialSampler):
        return Sampler("shuffle", f"fixed-size batches of {size} in order (no shuffle)",
                        batch=size, per_pass=per_pass)
    if type(inner) is RandomSampler and not inner.replacement and inner.num_samples == n:
        return Sampler("shuffle", f"fixed-size batches of {size} from a shuffled "
                                   f"permutation (RandomSampler)", batch=size,
                        per_pass=per_pass)
    if type(inner) is SubsetRandomSampler and len(set(map(int, inner.indices))) == len(
            inner.indices):
        return Sampler("shuffle", f"fixed-size batches of {size} from a shuffled subset "
                                   f"(SubsetRandomSampler)", batch=size, per_pass=per_pass)
    return Sampler("any", f"batches of {size} from a {type(inner).__name__}"
                           f"{' with replacement' if getattr(inner, 'replacement', False) else ''}",
                    batch=size, per_pass=per_pass)


def accountant_history(accountant: Any) -> list[tuple[float, float, int]]:
    """The accountant's history, checked: (noise_multiplier, sample_rate, num_steps)."""
    history = getattr(accountant, "history", None)
    if not isinstance(history, list):
        raise ValueError(f"accountant.history must be a list of (noise_multiplier, "
                         f"sample_rate, num_steps), got {type(history).__name__}")
    out = []
    for i, entry in enumerate(history):
        try:
            sigma, q, count = entry
        except (TypeError, ValueError) as exc:
            raise ValueError(f"accountant.history[{i}] must be (noise_multiplier, "
                             f"sample_rate, num_steps), got {entry!r}") from exc
        if not (isinstance(count, int) and count >= 0):
            raise ValueError(f"accountant.history[{i}] has num_steps={count!r}: "
                             "an integer >= 0 is needed")
        if not math.isfinite(float(sigma)) or not math.isfinite(float(q)):
            raise ValueError(f"accountant.history[{i}] has a non-finite value: {entry!r}")
        out.append((float(sigma), float(q), count))
    return out


def _claimed(accountant: Any, kind: str, orders: object) -> PrivacyLedger:
    if orders is None and kind == "rdp":
        orders = list(type(accountant).DEFAULT_ALPHAS)
    ledger = new_ledger(CLAIMED_RELATION, orders)
    for sigma, q, count in accountant_history(accountant):
        ledger.step(q=q, sigma=sigma, count=count, note=f"opacus {kind} accountant")
    return ledger


def _poisson(sound: PrivacyLedger, history: list, sampler: Sampler) -> str:
    """Poisson batches: the history's steps at the loader's rate (sound == claimed)."""
    for sigma, _, count in history:
        sound.step(q=sampler.rate, sigma=sigma, count=count, note="opacus DPDataLoader")
    rates = sorted({q for _, q, count in history if count})
    if all(math.isclose(q, sampler.rate, rel_tol=1e-12) for q in rates):
        return ""
    return (f"the DPDataLoader samples at rate {sampler.rate:g} while Opacus's history "
            f"records {', '.join(f'{q:g}' for q in rates)}: the loader's rate is accounted")


def pass_sigmas(history: list, per_pass: int, epochs: int | None) -> list[tuple[float, int]]:
    """(sigma, passes): the smallest noise multiplier among each pass's steps, in runs."""
    if epochs is not None:
        return [(min(s for s, _, c in history if c), epochs)]
    passes: list[tuple[float, int]] = []

    def add(sigma: float, k: int = 1) -> None:
        if passes and passes[-1][0] == sigma:
            passes[-1] = (sigma, passes[-1][1] + k)
        else:
            passes.append((sigma, k))

    low, filled = math.inf, 0
    for sigma, _, count in history:
        while count:
            take = min(count, per_pass - filled)
            low, filled, count = min(low, sigma), filled + take, count - take
            if filled == per_pass:
                add(low)
                whole, count = divmod(count, per_pass)
                if whole:
                    add(sigma, whole)
                low, filled = math.inf, 0
    if filled:
        add(low)
    return passes


def _passes(sound: PrivacyLedger, history: list, sampler: Sampler, relation: str,
            epochs: int | None, steps: int) -> str:
    """Each example in one batch per pass: one Gaussian step per pass, no amplification."""
    if not steps:
        return ""
    per_pass = max(sampler.per_pass, 1)
    if epochs is not None and steps > epochs * per_pass:
        raise ValueError(f"epochs={epochs} passes of {per_pass} batches cannot hold the "
                         f"{steps} optimizer steps Opacus recorded")
    runs = pass_sigmas(history, per_pass, epochs)
    for sigma, k in runs:  # the ledger charges the relation's sensitivity (2C, or C zero-out)
        sound.step(q=1.0, sigma=sigma, count=k, sampling="shuffle",
                   note=f"{relation}: one step per pass over the loader, no amplification")
    passes = sum(k for _, k in runs)
    q = ", ".join(sorted({f"{q:g}" for _, q, c in history if c}))
    half = "" if relation == "zero-out" else "/2"
    return (f"the loader draws {sampler.what}, not Poisson batches: Opacus's sample rate "
            f"q = {q} (1/len(loader)) amplifies nothing here. Each example is in one batch "
            f"per pass ({passes} pass(es), {steps} steps): under {relation} it moves the "
            f"noised sum by up to {'C' if relation == 'zero-out' else '2C'}, so the sound "
            f"ledger is {passes} Gaussian step(s) of multiplier sigma{half}")


def _every_step(sound: PrivacyLedger, history: list, sampler: Sampler,
                relation: str) -> str:
    """Any sampler: every step can hold an example up to B times (2BC, or BC zero-out)."""
    steps = sum(count for _, _, count in history)
    if not steps:
        return ""
    if sampler.batch is None:
        sound.step(q=1.0, sigma=0.0, count=steps, note="unbounded examples per batch")
        return (f"the loader draws {sampler.what} of no stated size: nothing bounds how many "
                f"times one example enters a step, so eps is infinite")
    b = sampler.batch
    for sigma, _, count in history:
        sound.step(q=1.0, sigma=sigma / b, count=count, sampling="fixed-size",
                   note=f"{relation}: up to {b} copies in every step")
    why = ("removing an example shifts which examples fill every later batch"
           if sampler.kind == "shuffle" else
           "an example can be drawn into every step and up to B times into one batch, and "
           "weights that depend on the data change who else is drawn")
    k = b if relation == "zero-out" else 2 * b
    return (f"the loader draws {sampler.what}, not Poisson batches: {why}; under {relation} "
            f"a step's noised sum moves by up to {k}C (B = {b}), so the sound ledger is "
            f"{steps} Gaussian step(s) of multiplier sigma/{k}")


def _accountant_kind(accountant: Any, opacus: Any) -> str:
    from opacus.accountants import GaussianAccountant, PRVAccountant, RDPAccountant

    for cls in (RDPAccountant, PRVAccountant, GaussianAccountant):
        if isinstance(accountant, cls):
            return _KNOWN[cls.__name__]
    raise ValueError(
        f"accountant must be an Opacus RDPAccountant, PRVAccountant or GaussianAccountant "
        f"(opacus {opacus.__version__}), got {type(accountant).__module__}."
        f"{type(accountant).__name__}: its history cannot be read as sampled Gaussian steps")
