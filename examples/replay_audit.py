"""Record/replay the libraries' own DP code: Opacus's DPOptimizer and Flower's DP wrappers.

Each row is one public call: ``leakaudit.interop.opacus.audit_optimizer(optimizer, model,
loader, engine=...)`` on what ``PrivacyEngine.make_private`` returned, or
``leakaudit.interop.flower.audit_dp(dp)`` on a Flower wrapper or ``LocalDpMod``. The call
runs the library's real step on canary batches, checks that the canary moves the release
by at most the declared sensitivity and that the noise std is the accountant's, and plays
the canary game on the recorded releases. Two rows are bugs on purpose: an Opacus optimizer
that draws half the noise it reports, and the normaliser of Opacus #819 / #571 (the
expected batch size floors the data set's size over the number of batches, so adding one
example changes the noise std of the release).

    python examples/replay_audit.py --trials 200 --out results/replay
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from leakaudit.interop.replay import ReplayReport


def _data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def _private(dataset: TensorDataset, mode: str = "hooks", batch: int = 8,
             poisson: bool = True) -> tuple:
    """A small MLP made private by Opacus: (engine, model, optimizer, loader, criterion)."""
    import opacus

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    engine = opacus.PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure RNG off
        out = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
            data_loader=DataLoader(dataset, batch_size=batch), noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=poisson, grad_sample_mode=mode,
            criterion=torch.nn.CrossEntropyLoss(),
            noise_generator=torch.Generator().manual_seed(1))
    if mode == "ghost":
        model, opt, criterion, loader = out
    else:
        (model, opt, loader), criterion = out, None
    return engine, model, opt, loader, criterion


def opacus_rows(trials: int) -> list[dict]:
    import opacus

    from leakaudit.interop.opacus import audit_optimizer

    rows = []
    for mode in ("hooks", "functorch", "ghost"):
        engine, model, opt, loader, crit = _private(_data(64), mode)
        rows += audit_optimizer(opt, model, loader, engine=engine, criterion=crit,
                                trials=trials).rows()
    engine, model, opt, loader, _ = _private(_data(64), poisson=False)
    rows += audit_optimizer(opt, model, loader, engine=engine, trials=trials).rows()

    class HalfNoise(opacus.optimizers.DPOptimizer):
        """Draws its noise at half the multiplier it reports to the accountant."""

        def add_noise(self) -> None:
            self.noise_multiplier /= 2
            try:
                super().add_noise()
            finally:
                self.noise_multiplier *= 2

    engine, model, opt, loader, _ = _private(_data(64))
    opt.__class__ = HalfNoise
    rows += audit_optimizer(opt, model, loader, engine=engine, trials=trials).rows()
    rows[-1]["mode"] += " (deliberately broken: half the noise)"
    engine, model, opt, loader, _ = _private(_data(11), batch=4)  # Opacus #819 / #571
    rows += audit_optimizer(opt, model, loader, engine=engine, trials=trials,
                            rebuild=lambda d: _private(d, batch=4)[1:4]).rows()
    rows[-1]["mode"] += " (11 examples, batches of 4, rebuilt with the canary)"
    return rows


def flower_rows(trials: int) -> list[dict]:
    from flwr.client.mod import LocalDpMod as OldLocalDpMod
    from flwr.clientapp.mod import LocalDpMod
    from flwr.serverapp.strategy import (
        DifferentialPrivacyClientSideAdaptiveClipping,
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideAdaptiveClipping,
        DifferentialPrivacyServerSideFixedClipping,
        FedAvg,
    )

    from leakaudit.interop.flower import audit_dp

    rows = []
    for wrapper in (DifferentialPrivacyServerSideFixedClipping,
                    DifferentialPrivacyClientSideFixedClipping):
        for relation in ("zero-out", "replace-one"):
            dp = wrapper(FedAvg(), noise_multiplier=1.0, clipping_norm=1.0,
                         num_sampled_clients=3)
            rows += audit_dp(dp, trials=trials, neighbouring=relation).rows()
    for mod in (LocalDpMod, OldLocalDpMod):
        rows += audit_dp(mod(clipping_norm=1.0, sensitivity=1.0, epsilon=1.0, delta=1e-5),
                         trials=trials).rows()
    # adaptive clipping (Andrew et al. 2021): requested z 1, clipped-count std 2, K 4; a clip
    # that does not move within the round (lr 1e-12), then Flower's default lr 0.2
    for wrapper in (DifferentialPrivacyServerSideAdaptiveClipping,
                    DifferentialPrivacyClientSideAdaptiveClipping):
        for lr in (1e-12, 0.2):
            dp = wrapper(FedAvg(), noise_multiplier=1.0, num_sampled_clients=4,
                         initial_clipping_norm=1.0, clipped_count_stddev=2.0, clip_norm_lr=lr)
            rows += audit_dp(dp, trials=trials, neighbouring="zero-out").rows()
            rows[-1]["mode"] += f", clip_norm_lr {lr:g}"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="releases per world")
    ap.add_argument("--out", default=None, help="write replay.{md,csv,tex,json} here")
    args = ap.parse_args()
    report = ReplayReport(config={"trials": args.trials, "delta": 1e-5})
    for row in opacus_rows(args.trials) + flower_rows(args.trials):
        report.add(row)
    print(report.to_markdown())
    for row in report.flagged():
        print(f"FLAGGED {row['library']} {row['mode']}: {row['finding']}")
    if args.out:
        report.save(Path(args.out))


if __name__ == "__main__":
    main()
