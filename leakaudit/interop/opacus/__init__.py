"""Audit an Opacus (DP-SGD) training run: tap its steps, read its accountant.

:class:`Recorder` records, at each step of an Opacus ``DPOptimizer``, what a type-2 attacker
(Wei et al., "Securing distributed SGD against gradient leakage threats": the gradient a
participant applies at one local step) sees: the weights before the step, the privatised
gradient the optimizer is about to apply (clipped per example, summed, noised and scaled by
Opacus's ``pre_step``), the learning rate and the batch size. With ``model`` given it also
keeps the batch behind each step (inputs from a forward pre-hook, labels from the target of
the cross-entropy / NLL loss) as :class:`GroundTruth`, apart from the observation.

:func:`ledgers` gives the run's ``(claimed, sound)`` pair: *claimed* is Opacus's accountant
history (``(noise_multiplier, sample_rate, steps)`` triples) read as Poisson-sampled Gaussian
steps (:func:`ledger_from_accountant`); *sound* accounts the batches the loader really drew.
Opacus records a sample rate 1 / len(loader) whatever the loader; only its ``DPDataLoader``
samples Poisson batches. A shuffled or in-order loader puts each example in one step per
pass and amplifies nothing; a weighted sampler or one with replacement can put an example
into every step, up to B times. The pair says which relation and sampling the sound ledger
assumes and why it differs.

Names: like :class:`leakaudit.records.Recorder` (the simulator's), :class:`Recorder` records
observations and ground truths; a :class:`leakaudit.fl.Tap` is only the spec of what to
record.

Opacus is imported only when these are used (from a clone: ``pip install -e '.[opacus]'``).
"""

from __future__ import annotations

from .dp_ledgers import (
           CLAIMED_RELATION,
           Sampler,
           ledger_from_accountant,
           ledgers,
           pass_sigmas,
           sampler_of,
)
from .dp_replay import audit_optimizer, setup_findings
from .taps import UNKNOWN_LABEL, Recorder

__all__ = ["Recorder", "ledgers", "ledger_from_accountant", "audit_optimizer", "UNKNOWN_LABEL",
           "CLAIMED_RELATION", "Sampler", "pass_sigmas", "sampler_of", "setup_findings"]
