"""Fixed-size local batches (the simulator's "shuffle": a fresh uniform B-subset of the
client's examples at every step) are accounted with the amplification theorem of sampling
without replacement where the ledger states replace-one, and without amplification under
add/remove (where that theorem does not apply)."""

from __future__ import annotations

from accounting import PrivacyLedger
from accounting.fixed_size import SampledWithoutReplacement
from leakaudit import fl
from leakaudit.defenses.fed_cdp import FedCDP


class ReplaceOneCDP(FedCDP):
    """fed-cdp whose sound ledger states replace-one (a user's choice of relation)."""

    relation = "replace-one"


def _run(defense):
    config = fl.FLConfig.make(clients=4, clients_per_round=4, rounds=1, local_steps=3,
                              batch_size=8, batch_sampling="shuffle", progress=False)
    return fl.simulate(None, dataset="digits", defense=defense, config=config, seed=0)


def test_replace_one_shuffle_batches_are_amplified_without_replacement():
    run = _run(ReplaceOneCDP(clip=1.0, sigma=1.0))
    ledger = run.sound[0]
    events = ledger.events
    assert events and all(isinstance(e, SampledWithoutReplacement) for e in events)
    assert sum(e.count for e in events) == 3
    e = events[0]
    assert e.batch_size == 8 and e.dataset_size > 8
    # the same three releases without amplification (sensitivity 2C, q = 1)
    plain = PrivacyLedger(relation="replace-one")
    plain.step(q=1.0, sigma=1.0, count=3, sampling="fixed-size")
    amplified, unamplified = ledger.epsilon(1e-5), plain.epsilon(1e-5)
    assert 0 < amplified < 0.5 * unamplified


def test_add_remove_shuffle_batches_stay_unamplified():
    run = _run(FedCDP(clip=1.0, sigma=1.0))
    events = run.sound[0].events
    assert events and not any(isinstance(e, SampledWithoutReplacement) for e in events)
    assert all(e.sampling == "fixed-size" for e in events)
