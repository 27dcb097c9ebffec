"""One table of speed ratios, every peer measured in the same run as ours.

Rows (ratio = peer seconds / our seconds: above 1 means ours is faster):

* (a) accountant: eps of a 10,000-step exponential noise schedule (sigma 15 -> 4.85, a
  different sigma every step, q = 1/120, delta = 1e-5) from a fresh
  :class:`accounting.PrivacyLedger`, against Opacus's ``RDPAccountant`` and dp-accounting's
  ``RdpAccountant`` on the same Rényi orders (the functions of ``accounting_speed.py``). In
  the quick profile the peers run the first ``--peer-steps`` steps and their time is
  extrapolated linearly to 10,000 steps (their cost is linear in the number of distinct
  steps); ``--profile full`` runs them on all 10,000 steps.
* (b) one per-example DP local step (clip, noise, update) of LeNet-Sigmoid on 1x28x28
  inputs, batch ``--batch``: ours (``per_example_gradients`` + fed-cdp + functional SGD)
  against ``opacus.GradSampleModule`` + ``DPOptimizer`` and against a plain, non-private
  step (the closures of ``dp_step_speed.py``, interleaved, best of the repetitions), on one
  torch thread unless ``--threads`` says otherwise.
* (c) the DLG attack on LeNet-Sigmoid, 1x28x28, batch 1 (the case of ``attack_speed.py``):
  one gradient-matching evaluation (forward, backward with create_graph, backward) of
  ``GradientProblem.l2`` against the original DLG code's closure (Zhu et al. 2019: the
  module called directly, ``torch.autograd.grad`` over its parameters, a Python sum of
  squared differences), and one L-BFGS step of ``leakaudit.attacks.reconstruct("dlg")``
  against ``torch.optim.LBFGS`` driving that original closure from the same start. No
  gradient-inversion library is installed as a peer, so both peers are these naive forms.
  One torch thread, as the attacks use.

Writes ``speed.md``, ``speed.csv`` and ``speed.png`` (bar chart of the ratios) under ``--out``
(default ``results/benchmarks``) and prints the Markdown.

Usage::

    python -m benchmarks.speed                    # quick profile (1-2 minutes)
    python -m benchmarks.speed --profile full     # peers on all 10,000 steps, more repeats
    python -m benchmarks.speed --tiny --out /tmp/speed   # seconds: for tests
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

import accounting as A
from benchmarks import accounting_speed as acc_bench
from benchmarks import attack_speed as att_bench
from benchmarks import dp_step_speed as dp_bench
from benchmarks._common import (
    Report,
    Stopwatch,
    at_least,
    best_of,
    environment,
    load,
    parser,
    profile,
    version,
    write_outputs,
)


@dataclass(frozen=True)
class Profile:
    """Sizes of one run."""

    peer_steps: int | None  # accountant steps the peers run (None: all of ``steps``)
    acc_repeats: int  # repetitions of our accountant, best kept
    batch: int  # DP-step batch size
    step_warmup: int  # DP-step warm-up calls per method
    step_repeats: int  # DP-step interleaved repetitions, best kept
    eval_repeats: int  # repetitions of one attack evaluation, best kept
    attack_steps: int  # L-BFGS steps per timed DLG run
    attack_repeats: int  # DLG runs per implementation, best kept
    steps: int = acc_bench.STEPS  # steps of the accountant's schedule (a)


PROFILES: dict[str, Profile] = {
    "quick": Profile(peer_steps=1000, acc_repeats=5, batch=64, step_warmup=3, step_repeats=20,
                     eval_repeats=30, attack_steps=10, attack_repeats=3),
    "full": Profile(peer_steps=None, acc_repeats=5, batch=64, step_warmup=5, step_repeats=60,
                    eval_repeats=100, attack_steps=30, attack_repeats=5),
    #: a few seconds, for the tests (the numbers are then mostly noise)
    "tiny": Profile(peer_steps=20, acc_repeats=1, batch=8, step_warmup=1, step_repeats=2,
                    eval_repeats=3, attack_steps=2, attack_repeats=1, steps=1_000),
}


class Row(NamedTuple):
    """One comparison: our time, the peer's, and how the peer's was obtained."""

    group: str
    what: str
    ours_s: float
    peer: str
    peer_s: float
    how: str

    @property
    def ratio(self) -> float:
        """peer / ours (above 1: ours faster)."""
        return self.peer_s / self.ours_s if self.ours_s > 0 else math.nan


# ---------------------------------------------------------------------------- (a) accountant
def accountant_rows(prof: Profile) -> tuple[list[Row], list[str]]:
    """Ours vs Opacus and dp-accounting on the exponential schedule (10,000 steps; tiny
    1,000)."""
    sigmas = A.schedules.exponential(acc_bench.SIGMA0, acc_bench.SIGMA_END, prof.steps)
    n_peer = prof.steps if prof.peer_steps is None else min(prof.peer_steps, prof.steps)
    prefix = sigmas[:n_peer]
    scale = prof.steps / n_peer
    orders = acc_bench.ORDERS
    timed = best_of(lambda: acc_bench.ours_eps(sigmas, orders), prof.acc_repeats)
    t_ours, (e_ours, _) = timed.best, timed.result
    e_prefix, _ = acc_bench.ours_eps(prefix, orders)
    what = (f"(a) accountant: eps of a {prof.steps:,}-step exponential schedule "
            f"({np.unique(sigmas).size:,} distinct sigmas)")
    how = ("measured" if n_peer == prof.steps
           else f"{n_peer:,} steps measured, x{scale:g} extrapolated")
    rows: list[Row] = []
    notes = [f"(a) ours: eps = {e_ours:.8g} on {prof.steps:,} steps (best of "
             f"{prof.acc_repeats}, fresh ledger each time)."]
    op_cls, op_status = acc_bench.load_opacus()
    dp_mod, dp_status = acc_bench.load_dp_accounting()
    for label, available, status, fn in (
        ("Opacus RDPAccountant", op_cls is not None, op_status,
         lambda: acc_bench.opacus_eps(op_cls, prefix, orders)),
        ("dp-accounting RdpAccountant", dp_mod is not None, dp_status,
         lambda: acc_bench.dp_accounting_eps(dp_mod, prefix, orders)),
    ):
        if not available:
            notes.append(f"(a) {label}: {status}, row left out.")
            continue
        timed = best_of(fn, 1)
        t, (e, _) = timed.best, timed.result
        rows.append(Row("a", what, t_ours, f"{label} {status}", t * scale, how))
        notes.append(f"(a) {label} on the first {n_peer:,} steps: eps = {e:.8g}, ours on the "
                     f"same steps {e_prefix:.8g} (relative difference "
                     f"{acc_bench.rel(e, e_prefix)}).")
    return rows, notes


# ---------------------------------------------------------------------------- (b) DP step
def dp_step_rows(prof: Profile, threads: int = 1) -> tuple[list[Row], list[str]]:
    """Ours vs Opacus and vs a plain step, LeNet-Sigmoid, interleaved, best of the repeats,
    on ``threads`` torch threads (0: torch's default)."""
    from leakaudit.grads import torch_threads

    with torch_threads(threads or None):
        return _dp_step_rows(prof)


def _dp_step_rows(prof: Profile) -> tuple[list[Row], list[str]]:
    name = "LeNet (sigmoid)"
    make = dp_bench.MODELS[name]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(prof.batch, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (prof.batch,), generator=gen)
    steps = dp_bench.build_steps(make, x, y)
    methods: dict[str, Callable[[], None]] = {"plain": steps.plain, "ours": steps.ours}
    if steps.opacus is not None:
        methods["opacus"] = steps.opacus
    times: dict[str, list[float]] = {k: [] for k in methods}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's secure-RNG and hook warnings
        for _ in range(prof.step_warmup):
            for fn in methods.values():
                fn()
        for _ in range(prof.step_repeats):
            for key, fn in methods.items():
                times[key].append(best_of(fn, 1).best)
    best = {k: min(v) for k, v in times.items()}
    what = (f"(b) one DP local step, {name}, batch {prof.batch} (clip {dp_bench.CLIP:g}, "
            f"sigma {dp_bench.SIGMA:g})")
    how = f"interleaved, best of {prof.step_repeats}"
    rows = []
    notes = []
    if "opacus" in best:
        rows.append(Row("b", what, best["ours"],
                        f"Opacus {version('opacus')} GradSampleModule + DPOptimizer",
                        best["opacus"], how))
    else:
        notes.append("(b) Opacus not installed: its row is left out.")
    rows.append(Row("b", what, best["ours"], "plain non-private step (autograd + SGD)",
                    best["plain"], how))
    notes.append(f"(b) torch threads {torch.get_num_threads()}; subnormals flushed for all; "
                 f"a ratio below 1 against the plain step is the cost of privacy "
                 f"(ours = {best['ours'] / best['plain']:.2f}x plain).")
    return rows, notes


# ---------------------------------------------------------------------------- (c) attack
def _original_dlg(case: att_bench.Case
                  ) -> tuple[list[torch.Tensor], Callable[[], torch.Tensor]]:
    """The original DLG code's closure (Zhu et al. 2019), on its own copy of the weights, from
    the first start ``reconstruct("dlg", seed=0)`` uses: forward through the module,
    ``autograd.grad`` with create_graph over the parameters, a Python sum of squared
    differences, backward. Returns the dummy variables and the closure."""
    import copy

    net = copy.deepcopy(case.model)
    observed = [g.detach().clone() for g in case.grads]
    start = att_bench.start_of("dlg", case)
    dummy_data = start.inputs.clone().requires_grad_(True)
    dummy_label = start.label_logits.clone().requires_grad_(True)

    def closure() -> torch.Tensor:
        dummy_data.grad = None
        dummy_label.grad = None
        net.zero_grad()
        pred = net(dummy_data)
        loss = F.cross_entropy(pred, F.softmax(dummy_label, dim=-1))
        dy_dx = torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
        grad_diff = 0
        for gx, gy in zip(dy_dx, observed):
            grad_diff = grad_diff + ((gx - gy) ** 2).sum()
        grad_diff.backward()
        return grad_diff

    return [dummy_data, dummy_label], closure


def naive_dlg_evaluation(case: att_bench.Case) -> Callable[[], torch.Tensor]:
    """One evaluation of the original DLG closure (see :func:`_original_dlg`)."""
    return _original_dlg(case)[1]


def naive_dlg_steps(variables: list[torch.Tensor], closure: Callable[[], torch.Tensor],
                    steps: int) -> float:
    """``steps`` L-BFGS steps (strong Wolfe) of the original DLG closure (its variables and
    closure made by :func:`_original_dlg`, outside the timing); returns the final gradient
    loss."""
    opt = torch.optim.LBFGS(variables, line_search_fn="strong_wolfe")
    loss = math.nan
    for _ in range(steps):
        loss = float(opt.step(closure).detach())
    return loss


def attack_rows(prof: Profile) -> tuple[list[Row], list[str]]:
    """One DLG evaluation and one DLG L-BFGS step, ours against the naive forms."""
    from leakaudit import attacks, grads

    case = att_bench.make_case(1, 28, 1)
    rows, notes = [], []
    with grads.torch_threads(1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", attacks.ReLUWarning)
            ours_eval, _ = att_bench.eval_costs("dlg", case, prof.eval_repeats)
            with grads.flush_denormals():
                naive_eval = att_bench.seconds_of(naive_dlg_evaluation(case), prof.eval_repeats)
            rows.append(Row("c", f"(c) one DLG gradient-matching evaluation, LeNet, "
                            f"{case.name}, batch 1", ours_eval,
                            "original DLG closure (module + autograd.grad)", naive_eval,
                            f"best of {prof.eval_repeats}"))
            ours_s, naive_s, rec, naive_loss = math.inf, math.inf, None, math.nan
            for _ in range(prof.attack_repeats):
                timed = best_of(lambda: attacks.reconstruct(
                    "dlg", case.model, case.grads, input_shape=case.shape,
                    num_classes=att_bench.CLASSES, batch_size=case.batch,
                    max_iterations=prof.attack_steps, early_stop=0.0, seed=0), 1)
                rec, ours_s = timed.result, min(ours_s, timed.best)
                variables, closure = _original_dlg(case)  # setup, not timed
                with grads.flush_denormals():
                    timed = best_of(lambda v=variables, c=closure, r=rec: naive_dlg_steps(
                        v, c, max(r.iterations, 1)), 1)
                    naive_loss, naive_s = timed.result, min(naive_s, timed.best)
            steps = max(rec.iterations, 1)
            rows.append(Row("c", f"(c) one DLG L-BFGS step (strong Wolfe), LeNet, {case.name}, "
                            "batch 1", ours_s / steps,
                            "original DLG closure in the same L-BFGS", naive_s / steps,
                            f"{steps} steps, best of {prof.attack_repeats}"))
            notes.append(f"(c) one torch thread; from the same start, final gradient loss "
                         f"ours {rec.gradient_loss:.3e}, original closure {naive_loss:.3e} "
                         "(ours: the built-in objective's evaluations are memoised, validation "
                         "and book-keeping included in its time).")
    return rows, notes


# ---------------------------------------------------------------------------- output
def _s(seconds: float) -> str:
    return f"{seconds:.3g}"


CSV_FIELDS = ("group", "what", "ours_s", "peer", "peer_s", "ratio_peer_over_ours", "how")


def csv_rows(rows: list[Row]) -> list[dict[str, str]]:
    """One row per comparison, full precision."""
    return [dict(zip(CSV_FIELDS, (r.group, r.what, repr(r.ours_s), r.peer, repr(r.peer_s),
                                  repr(r.ratio), r.how))) for r in rows]


def write_png(path: Path, rows: list[Row]) -> None:
    """Horizontal bars of peer / ours on a log axis, 1 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.what.split(':')[0].split(',')[0]}\nvs {r.peer}" for r in rows]
    ratios = [r.ratio for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.75 * len(rows)))
    colors = ["tab:green" if v >= 1 else "tab:red" for v in ratios]
    ax.barh(range(len(rows)), ratios, color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=1)
    for i, v in enumerate(ratios):
        ax.text(v, i, f" {v:.3g}x", va="center", fontsize=8)
    ax.set_xlabel("peer time / our time (log scale; > 1: ours faster)")
    ax.set_title("Speed against the peers, measured in the same run")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; ``args.prof`` is the chosen profile with the overrides."""
    p = parser(__doc__, PROFILES, out="results/benchmarks",
               out_help="directory for speed.md, speed.csv, speed.png (default "
               "results/benchmarks)")
    p.add_argument("--peer-steps", type=at_least(1), default=None,
                   help="accountant steps the peers run before extrapolation")
    p.add_argument("--batch", type=at_least(1), default=None, help="DP-step batch size")
    p.add_argument("--repeats", type=at_least(1), default=None,
                   help="repetitions of every timing (DP step, evaluation, DLG runs)")
    p.add_argument("--attack-steps", type=at_least(1), default=None,
                   help="L-BFGS steps per timed DLG run")
    p.add_argument("--threads", type=at_least(0), default=1,
                   help="torch threads for the DP step (default 1: stable on a shared "
                        "machine; 0 keeps torch's default); the attack always uses 1")
    args = p.parse_args(argv)
    prof = profile(PROFILES, args.profile)
    if args.peer_steps is not None:
        prof = replace(prof, peer_steps=args.peer_steps)
    if args.batch is not None:
        prof = replace(prof, batch=args.batch)
    if args.repeats is not None:
        prof = replace(prof, acc_repeats=args.repeats, step_repeats=args.repeats,
                       eval_repeats=args.repeats, attack_repeats=args.repeats)
    if args.attack_steps is not None:
        prof = replace(prof, attack_steps=args.attack_steps)
    args.prof = prof
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three comparisons; print the Markdown and write the three files."""
    args = parse_args(argv)
    prof: Profile = args.prof
    torch.manual_seed(0)
    flush_before = dp_bench.flushing_denormals()
    clock = Stopwatch()
    rep = Report()
    rep.line("# Speed against the peers")
    rep.line()
    rep.line(environment(("numpy", "torch", "opacus", "dp-accounting"))
             + f"; profile `{args.profile}`. Every peer is timed in this run; ratio = peer "
             "time / our time (above 1: ours is faster).")
    rep.line()
    rows: list[Row] = []
    notes: list[str] = []
    timings: dict[str, float] = {}
    try:
        sections: tuple[tuple[str, Callable[[Profile], tuple[list[Row], list[str]]]], ...] = (
            ("a", accountant_rows), ("b", lambda p: dp_step_rows(p, args.threads)),
            ("c", attack_rows))
        for key, fn in sections:
            if key == "b":
                torch.set_flush_denormal(True)  # as leakaudit.fl.simulate does while training
            try:
                timed = best_of(lambda fn=fn: fn(prof), 1)
            finally:
                torch.set_flush_denormal(flush_before)
            timings[key] = timed.best
            rows += timed.result[0]
            notes += timed.result[1]
    finally:
        torch.set_flush_denormal(flush_before)
    rep.table(["what", "ours (s)", "peer", "peer (s)", "peer / ours", "how"],
              [[r.what, _s(r.ours_s), r.peer, _s(r.peer_s), f"{r.ratio:.3g}", r.how]
               for r in rows])
    for n in notes:
        rep.line(f"- {n}")
    rep.line()
    rep.line("Seconds per section: " + ", ".join(f"({k}) {v:.0f}" for k, v in timings.items())
             + f"; total {clock.seconds:.0f} s; at the end: {load() or 'load unknown'}.")
    if args.out is not None:
        rep.line()
        rep.line(f"Files: {args.out / 'speed.md'}, {args.out / 'speed.csv'}, "
                 f"{args.out / 'speed.png'}.")
    write_outputs(args.out, "speed", markdown=rep.text(), rows=csv_rows(rows),
                  columns=CSV_FIELDS, figure=lambda path: write_png(path, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
