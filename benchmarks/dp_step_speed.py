"""Speed of one DP local iteration (per-example clip + noise) against a plain step and Opacus.

For LeNet (``leakaudit.models.lenet()``, sigmoid, 1x28x28) and the Adap DP-FL CNN
(``leakaudit.models.adap_cnn()``, ReLU + max-pooling, 1x28x28), at several batch sizes, one
local iteration is timed three ways on the same model weights and batch:

* plain: forward + backward of the mean cross-entropy (torch autograd) + SGD update
  (``torch.optim.SGD``);
* ours: per-example gradients with ``leakaudit.fl.per_example_gradients`` (torch.func
  functional_call + vmap(grad)), the fed-cdp processing
  (``leakaudit.defenses.get("fed-cdp", clip=1.0, sigma=1.0).privatize_batch``: flat
  per-example clip, sum, Gaussian noise, divide by B, one ledger entry) and the functional
  SGD update the simulator applies;
* opacus: ``opacus.GradSampleModule`` forward + backward (per-sample gradients by hooks), then
  ``opacus.optimizers.DPOptimizer`` around a plain SGD (noise_multiplier=1.0,
  max_grad_norm=1.0, expected_batch_size=B): flat per-sample clip, noise, step.

The three are interleaved inside every repetition (so slow phases of a busy machine hit all of
them), after warm-up calls; the best of the repetitions is reported (the median too). Before
timing, the script checks that Opacus supports each model (``ModuleValidator`` and a
``grad_sample`` on every parameter) and that our per-example gradients and clipped sums equal
Opacus's. Target of the issue: ours <= 2x plain and ours <= opacus.

Usage::

    python -m benchmarks.dp_step_speed                    # quick profile (< 2 min)
    python -m benchmarks.dp_step_speed --profile full     # more repetitions
    python -m benchmarks.dp_step_speed --threads 1 --out results   # results/dp_step_speed.md
"""

from __future__ import annotations

import copy
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

import accounting as A
import leakaudit.defenses as D
from benchmarks._common import (
    Report,
    Stopwatch,
    at_least,
    best_of,
    environment,
    parser,
    profile,
    today,
    write_outputs,
)
from leakaudit import models
from leakaudit.fl import per_example_gradients

BATCHES = (8, 64, 256)
LR = 0.05
CLIP = 1.0
SIGMA = 1.0


@dataclass(frozen=True)
class Profile:
    """Sizes of one run: per (model, batch, method) ``warmup`` untimed calls, then ``repeats``
    interleaved timed ones, at each of ``batches``."""

    warmup: int
    repeats: int
    batches: tuple[int, ...] = BATCHES


PROFILES: dict[str, Profile] = {"quick": Profile(3, 20), "full": Profile(5, 60),
                                "tiny": Profile(1, 1, (8,))}
MODELS: dict[str, Callable[[], nn.Module]] = {
    "LeNet (sigmoid)": lambda: models.lenet(generator=torch.Generator().manual_seed(0)),
    "Adap DP-FL CNN": lambda: models.adap_cnn(generator=torch.Generator().manual_seed(0)),
}


def _context(batch: int, seed: int = 0) -> D.ClientContext:
    """A ClientContext for one client holding 10 * batch examples (no data needed)."""
    n = 10 * batch
    rc = D.RoundContext(round=0, rounds=1, clients=1, clients_per_round=1, local_steps=1,
                        batch_size=batch, client_sizes=(n,), participants=(0,),
                        claimed=[A.PrivacyLedger()], sound=[A.PrivacyLedger()])
    return D.ClientContext(round=0, client=0, local_step=0, n_examples=n, batch_size=batch,
                           lr=LR, generator=torch.Generator().manual_seed(seed), round_ctx=rc,
                           claimed=rc.claimed[0], sound=rc.sound[0])


class Steps(NamedTuple):
    """The three ways to take one local iteration on the same model and batch (a NamedTuple,
    not a dataclass, so the file also loads through importlib without sys.modules)."""

    plain: Callable[[], None]
    ours: Callable[[], None]
    opacus: Callable[[], None] | None
    ours_grads: Callable[[], None]


def _opacus_available() -> bool:
    try:
        import opacus  # noqa: F401
    except ImportError:
        return False
    return True


def build_steps(make: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor) -> Steps:
    """Closures for one plain, one fed-cdp (ours) and one Opacus DP step on (x, y).

    Each keeps its own copy of the model and moves its own weights, so repeated calls keep
    working from (nearly) the same point, as consecutive local iterations would.
    """
    batch = x.shape[0]
    plain_model = make()
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=LR)

    def plain() -> None:
        plain_opt.zero_grad(set_to_none=True)
        F.cross_entropy(plain_model(x), y).backward()
        plain_opt.step()

    our_model = make()
    state = {"params": {k: v.detach().clone() for k, v in our_model.named_parameters()}}
    buffers = {k: v.detach() for k, v in our_model.named_buffers()}
    defense = D.get("fed-cdp", clip=CLIP, sigma=SIGMA)
    ctx = _context(batch)
    names = list(state["params"])

    def ours() -> None:
        local = state["params"]
        pex = per_example_gradients(our_model, local, buffers, x, y)
        g = defense.privatize_batch(pex, ctx)
        state["params"] = {n: local[n] - LR * gi for n, gi in zip(names, g)}

    def ours_grads() -> None:
        per_example_gradients(our_model, state["params"], buffers, x, y)

    opacus_step: Callable[[], None] | None = None
    if _opacus_available():
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        gsm = GradSampleModule(make())
        dp_opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=LR), noise_multiplier=SIGMA,
                             max_grad_norm=CLIP, expected_batch_size=batch,
                             generator=torch.Generator().manual_seed(0))

        def opacus_step() -> None:
            dp_opt.zero_grad(set_to_none=True)
            F.cross_entropy(gsm(x), y).backward()
            dp_opt.step()

    return Steps(plain=plain, ours=ours, opacus=opacus_step, ours_grads=ours_grads)


def check_against_opacus(make: Callable[[], nn.Module], x: torch.Tensor,
                         y: torch.Tensor) -> tuple[str, float, float]:
    """Does Opacus support the model, and do our per-example gradients / clipped sums match?

    Returns (support verdict, max |ours - opacus| over per-example gradients, the same for the
    clipped sums with sigma = 0).
    """
    from opacus import GradSampleModule
    from opacus.validators import ModuleValidator

    model = make()
    errors = ModuleValidator.validate(model, strict=False)
    gsm = GradSampleModule(copy.deepcopy(model))
    F.cross_entropy(gsm(x), y).backward()  # GSM rescales "mean" to per-sample
    missing = [n for n, p in gsm.named_parameters() if getattr(p, "grad_sample", None) is None]
    verdict = "yes" if not errors and not missing else f"no ({errors or missing})"
    params = {k: v.detach() for k, v in model.named_parameters()}
    ours = per_example_gradients(model, params, {}, x, y)
    theirs = [p.grad_sample for p in gsm.parameters()]
    diff = max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
    # clipped sums: our fed-cdp without noise against Opacus's flat clipping of grad_sample
    ctx = _context(x.shape[0])
    our_sum = [g * x.shape[0] for g in D.get("fed-cdp", clip=CLIP, sigma=0.0)
               .privatize_batch(ours, ctx)]
    norms = torch.stack([g.reshape(g.shape[0], -1).norm(dim=1) for g in theirs], 1).norm(dim=1)
    factor = (CLIP / (norms + 1e-6)).clamp(max=1.0)
    their_sum = [torch.einsum("i,i...", factor, g) for g in theirs]
    sum_diff = max(float((a - b).abs().max()) for a, b in zip(our_sum, their_sum))
    return verdict, diff, sum_diff


def flushing_denormals() -> bool:
    """Whether subnormal floats are flushed to zero now (torch has no getter)."""
    return torch.tensor([1e-40], dtype=torch.float32).item() == 0.0


def _fmt(ms: float) -> str:
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def time_methods(methods: dict[str, Callable[[], None]], warmup: int, repeats: int
                 ) -> tuple[dict[str, float], dict[str, float]]:
    """(best, median) ms of each method, ``repeats`` interleaved repetitions after
    ``warmup`` calls of each."""
    times: dict[str, list[float]] = {k: [] for k in methods}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's secure-RNG and hook warnings
        for _ in range(warmup):
            for fn in methods.values():
                fn()
        for _ in range(repeats):
            for key, fn in methods.items():
                times[key].append(best_of(fn, 1).best)
    return ({k: 1e3 * min(v) for k, v in times.items()},
            {k: 1e3 * statistics.median(v) for k, v in times.items()})


def target_cells(best: dict[str, float]) -> list[str]:
    """plain, ours, opacus (ms), the ratios and whether the target is met (<= 2x plain,
    <= Opacus)."""
    opacus_ms = best.get("opacus")
    op = "n/a" if opacus_ms is None else _fmt(opacus_ms)
    ratio_plain = best["ours"] / best["plain"]
    ratio_opacus = None if opacus_ms is None else best["ours"] / opacus_ms
    met_plain = ratio_plain <= 2.0
    met_opacus = ratio_opacus is None or ratio_opacus <= 1.0
    verdict = "yes" if met_plain and met_opacus else "no (" + ", ".join(
        w for w, bad in (("> 2x plain", not met_plain), ("slower than Opacus",
                                                          not met_opacus)) if bad) + ")"
    return [_fmt(best["plain"]), _fmt(best["ours"]), op, f"{ratio_plain:.2f}",
            "n/a" if ratio_opacus is None else f"{ratio_opacus:.2f}", verdict]


def run(name: str, prof: Profile, threads: int | None, flush_denormal: bool,
        report: Report) -> list[dict[str, object]]:
    """Time every (model, batch) and print the tables; return the rows as dicts."""
    warmup, repeats, batches = prof.warmup, prof.repeats, prof.batches
    if threads is not None:
        torch.set_num_threads(threads)
    flushing = torch.set_flush_denormal(flush_denormal) and flush_denormal
    have_opacus = _opacus_available()
    report.line(f"# DP step speed ({today()}, profile {name})")
    report.line()
    report.line(environment(("torch", "opacus")) + ("" if have_opacus else
                                                    ", opacus not installed")
                + f"; torch threads: {torch.get_num_threads()}; "
                f"{warmup} warm-up calls, best of {repeats} interleaved repetitions; "
                f"fed-cdp clip={CLIP}, sigma={SIGMA}; SGD lr={LR}; inputs 1x28x28, 10 classes; "
                f"subnormals flushed to zero: {'yes' if flushing else 'no'} (for all three, "
                f"as leakaudit.fl.simulate does while training).")
    report.line()
    gen = torch.Generator().manual_seed(0)
    rows: list[dict[str, object]] = []
    checks: list[list[str]] = []
    for model_name, make in MODELS.items():
        n_params = sum(p.numel() for p in make().parameters())
        for batch in batches:
            x = torch.randn(batch, 1, 28, 28, generator=gen)
            y = torch.randint(0, 10, (batch,), generator=gen)
            if have_opacus and batch == batches[0]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # Opacus's full-backward-hook warning
                    verdict, diff, sum_diff = check_against_opacus(make, x, y)
                checks.append([model_name, f"{n_params:,}", verdict, f"{diff:.1e}",
                               f"{sum_diff:.1e}"])
            steps = build_steps(make, x, y)
            methods: dict[str, Callable[[], None]] = {"plain": steps.plain, "ours": steps.ours,
                                                      "ours_grads": steps.ours_grads}
            if steps.opacus is not None:
                methods["opacus"] = steps.opacus
            best, median = time_methods(methods, warmup, repeats)
            rows.append(dict(model=model_name, batch=batch, best=best, median=median))
    if checks:
        report.line("Opacus support and agreement (first batch, max absolute differences):")
        report.line()
        report.table(["model", "parameters", "GradSampleModule supports it",
                      "per-example grads ours - opacus", "clipped sums ours - opacus"], checks)
    headers = ["model", "batch", "plain (ms)", "ours (ms)", "opacus (ms)", "ours/plain",
               "ours/opacus", "target met (<= 2x plain, <= opacus)"]
    table = []
    for r in rows:
        best = r["best"]
        assert isinstance(best, dict)
        table.append([str(r["model"]), str(r["batch"]), *target_cells(best)])
    report.line("Best of the repetitions:")
    report.line()
    report.table(headers, table)
    report.line("Where our DP step spends its time (best, ms): per-example gradients "
                "(vmap(grad)) alone, the rest (clip, noise, ledger, update); medians of the "
                "three steps for the noise level:")
    report.line()
    detail = []
    for r in rows:
        best, median = r["best"], r["median"]
        assert isinstance(best, dict) and isinstance(median, dict)
        grads_ms = best["ours_grads"]
        detail.append([str(r["model"]), str(r["batch"]), _fmt(grads_ms),
                       _fmt(max(0.0, best["ours"] - grads_ms)), _fmt(median["plain"]),
                       _fmt(median["ours"]),
                       "n/a" if "opacus" not in median else _fmt(median["opacus"])])
    report.table(["model", "batch", "vmap(grad) (ms)", "clip+noise+update (ms)",
                  "plain median", "ours median", "opacus median"], detail)
    met = sum(1 for t in table if t[-1] == "yes")
    report.line(f"Target met in {met} of {len(table)} rows.")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    ap = parser(__doc__, PROFILES, out_help="also write the Markdown to DIR/dp_step_speed.md")
    ap.add_argument("--threads", type=at_least(1), default=None,
                    help="torch.set_num_threads (default: leave torch's default)")
    ap.add_argument("--repeats", type=at_least(1), default=None,
                    help="timed repetitions (default: the profile's, 20 quick, 60 full)")
    ap.add_argument("--batches", default=None,
                    help="comma-separated batch sizes (default: the profile's, 8,64,256)")
    ap.add_argument("--no-flush-denormal", action="store_true",
                    help="keep subnormal floats (torch's default); by default they are "
                    "flushed to zero, as in leakaudit.fl.simulate")
    args = ap.parse_args(argv)
    prof = profile(PROFILES, args.profile)
    if args.repeats is not None:
        prof = replace(prof, repeats=args.repeats)
    if args.batches is not None:
        try:
            batches = tuple(int(b) for b in args.batches.split(","))
        except ValueError:
            ap.error(f"--batches must be comma-separated integers, got {args.batches!r}")
        if not batches or min(batches) < 1:
            ap.error("--batches must be integers >= 1")
        prof = replace(prof, batches=batches)
    report = Report()
    before = torch.get_num_threads()
    flush_before = flushing_denormals()
    clock = Stopwatch()
    try:
        run(args.profile, prof, args.threads, not args.no_flush_denormal, report)
    finally:
        torch.set_num_threads(before)
        torch.set_flush_denormal(flush_before)
    report.line(f"Total time: {clock.seconds:.0f} s.")
    write_outputs(args.out, "dp_step_speed", markdown=report.text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
