"""Audit an Opacus DP-SGD run: what a type-2 attacker sees at each step, and its eps.

Trains LeNet on digits with Opacus at batch size 1 (no noise or clipping, then noise
multiplier 1 and clip 1), taps every step with ``leakaudit.interop.opacus.Tap``, attacks the
observations with iDLG (:func:`leakaudit.audit_observations`) and reads Opacus's accountant
into a ledger (``ledger_from_accountant``): its eps is Opacus's, next to our other methods.

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
from leakaudit import data, models
from leakaudit.interop.opacus import Tap, ledger_from_accountant


def train(ds: data.Dataset, steps: int, noise_multiplier: float, clip: float,
          label: str) -> tuple[Tap, PrivacyEngine]:
    """Opacus DP-SGD, batch size 1, ``steps`` steps; every step tapped."""
    net = models.default_for(ds, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(ds.x_train[:steps], ds.y_train[:steps]), batch_size=1)
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure RNG off
        model, optimizer, loader = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=loader, noise_multiplier=noise_multiplier, max_grad_norm=clip,
            poisson_sampling=False, noise_generator=torch.Generator().manual_seed(1))
    with Tap(optimizer, model) as tap:
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    for obs in tap.observations:
        obs.defense = label
    return tap, engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="DP-SGD steps (examples attacked)")
    ap.add_argument("--out", default=None, help="write audit.{md,csv,tex,json,png} here")
    ap.add_argument("--delta", type=float, default=1e-5)
    args = ap.parse_args()
    ds = data.load("digits")
    plain, plain_engine = train(ds, args.steps, 0.0, 1e6, "opacus, no noise or clipping")
    private, engine = train(ds, args.steps, 1.0, 1.0, "opacus, sigma 1, clip 1")
    defenses = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no noise: "eps is infinite" is the point
        for label, eng in (("opacus, no noise or clipping", plain_engine),
                           ("opacus, sigma 1, clip 1", engine)):
            eps = ledger_from_accountant(eng.accountant).epsilon(args.delta)
            defenses[label] = {"accuracy": float("nan"), "eps_claimed": eps,
                               "eps_sound": eps, "level": "example"}
    report = leakaudit.audit_observations(
        plain.observations + private.observations, ("idlg",), model=models.default_for(ds),
        truths=plain.truths + private.truths, input_shape=ds.input_shape,
        num_classes=ds.num_classes, workers=2, delta=args.delta, defenses=defenses)
    print(report.to_markdown())
    if args.out:
        report.save(Path(args.out))
    ledger = ledger_from_accountant(engine.accountant)
    print(ledger.describe())
    print(f"Opacus RDPAccountant eps = {engine.accountant.get_epsilon(args.delta):.6f}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method, eps in ledger.epsilon_report(args.delta).items():
            print(f"  ledger {method:<12} {eps:.6f}")


if __name__ == "__main__":
    main()
