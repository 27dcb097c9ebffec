"""Audit an Opacus DP-SGD run: what a type-2 attacker sees at each step, and its eps.

Trains LeNet on digits with Opacus at batch size 1 (no noise or clipping, then noise
multiplier 1 and clip 1), records every step with ``leakaudit.interop.opacus.Recorder``,
attacks the observations with iDLG (:func:`leakaudit.audit_observations`) and reads the
run's ledgers (``leakaudit.interop.opacus.ledgers``): *claimed* is Opacus's accountant
(Poisson steps at its recorded rate 1/len(loader)); *sound* accounts the loader that ran.
The loader here reads the examples in order (``poisson_sampling=False``): each example is in
one step of the pass, no amplification, so under replace-one adjacency the sound ledger is
one Gaussian step of multiplier sigma/2 (``--poisson`` runs Opacus's Poisson
``DPDataLoader`` instead: then sound == claimed).

    python examples/opacus_audit.py --steps 3 --out results/opacus
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

import leakaudit
from accounting import tightest_epsilon
from leakaudit import data, models
from leakaudit.interop.opacus import Recorder, ledgers


def train(ds: data.Dataset, steps: int, noise_multiplier: float, clip: float,
          label: str, poisson: bool = False) -> tuple[Recorder, PrivacyEngine, DataLoader]:
    """Opacus DP-SGD, batch size 1, one pass over ``steps`` examples; every step tapped."""
    net = models.default_for(ds, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(ds.x_train[:steps], ds.y_train[:steps]), batch_size=1)
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure RNG off
        model, optimizer, loader = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=loader, noise_multiplier=noise_multiplier, max_grad_norm=clip,
            poisson_sampling=poisson, noise_generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)  # Opacus's Poisson sampler draws from torch's default generator
    with Recorder(optimizer, model) as tap:
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    for obs in tap.observations:
        obs.defense = label
    return tap, engine, loader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="DP-SGD steps (examples attacked)")
    ap.add_argument("--out", default=None, help="write audit.{md,csv,tex,json,png} here")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--poisson", action="store_true",
                    help="Opacus's Poisson DPDataLoader instead of the examples in order")
    args = ap.parse_args()
    ds = data.load("digits")
    runs = {label: train(ds, args.steps, sigma, clip, label, args.poisson)
            for label, sigma, clip in (("opacus, no noise or clipping", 0.0, 1e6),
                                       ("opacus, sigma 1, clip 1", 1.0, 1.0))}
    defenses, pairs = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no noise: "eps is infinite" is the point
        for label, (_, engine, loader) in runs.items():
            pairs[label] = pair = ledgers(engine, data_loader=loader)
            defenses[label] = {"accuracy": float("nan"), "level": "example",
                               "eps_claimed": engine.accountant.get_epsilon(args.delta),
                               "eps_sound": tightest_epsilon(pair.sound, args.delta),
                               "reason": pair.reason}
    observations = [o for tap, _, _ in runs.values() for o in tap.observations]
    truths = [t for tap, _, _ in runs.values() for t in tap.truths]
    report = leakaudit.audit_observations(observations, attacks=("idlg",),
                                          model=models.default_for(ds), truths=truths,
                                          input_shape=ds.input_shape, num_classes=ds.num_classes,
                                          workers=2, delta=args.delta, defenses=defenses)
    print(report.to_markdown())
    if args.out:
        report.save(Path(args.out))
    for label, (tap, _, _) in runs.items():
        if tap.noise_only:  # empty Poisson batches: released (noise only), nothing to attack
            print(f"{label}: {len(tap.noise_only)} empty Poisson batch(es) at step(s) "
                  f"{[o.local_step for o in tap.noise_only]}: noise only, not attacked")
    label = "opacus, sigma 1, clip 1"
    pair, engine = pairs[label], runs[label][1]
    print(f"{label}: {pair.describe(args.delta)}")
    print("claimed:", pair.claimed.describe())
    print("sound:  ", pair.sound.describe())
    print(f"Opacus RDPAccountant eps = {engine.accountant.get_epsilon(args.delta):.6f} "
          f"(delta {args.delta:g}, {pair.claimed_relation}, {pair.claimed_sampling})")
    print(f"sound eps = {tightest_epsilon(pair.sound, args.delta):.6f} "
          f"(delta {args.delta:g}, {pair.relation}, {pair.sampling})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, ledger in (("claimed", pair.claimed), ("sound", pair.sound)):
            for method, eps in ledger.epsilon_report(args.delta).items():
                if method in ("rdp", "pld", "prv-lower", "prv-upper"):
                    print(f"  {name:<7} {method:<12} {eps:.6f}")


if __name__ == "__main__":
    main()
