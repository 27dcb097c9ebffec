"""Seconds per attack iteration of DLG and CPL on LeNet, speed-up experiments, and the wall
time of the quick audit.

Cases: ``leakaudit.models.lenet`` (sigmoid, U(-0.5, 0.5) weights, seed 0) at 1x28x28 and
3x32x32 with 10 classes, batch 1 and 4; the observed gradient is
``leakaudit.fl.batch_gradient`` of random inputs in [0, 1] with distinct random labels (seed 1).
Every timing uses one torch thread (``torch.set_num_threads(1)``, as the attacks do by
default) with subnormals flushed (as the attacks do), ``benchmarks._common.best_of``
(``time.perf_counter``), best of the
repetitions; the variants being compared are interleaved inside each repetition so that a busy
machine slows all of them alike.

Sections:

1. Seconds per L-BFGS step of ``leakaudit.attacks.reconstruct("dlg"|"cpl", ...)`` for a fixed
   number of steps with ``early_stop=0`` (every run does the same work; strong-Wolfe line
   search, the default), the isolated cost of one gradient-matching evaluation (forward,
   backward with ``create_graph``, backward again) and whether two runs give bit-for-bit the
   same reconstruction. (The "before/after" comparison with the attempt loop as first written
   was measured once, 2026-11-22, and is kept in docs/results.md; its code is gone.)
2. (a) Other ways to compute one evaluation (CPL objective: hard labels, input only), each
   timed alone and inside the same L-BFGS loop: the current autograd closure, the same with
   PyTorch's native convolutions instead of oneDNN (``torch.backends.mkldnn.flags(enabled=
   False)``), ``torch.func`` (``grad`` of a function that takes ``grad`` of the cross-entropy
   through ``functional_call``), ``torch.func`` forward-over-reverse (``jvp`` of the input
   gradient in the direction 2 (g - g_obs)), and ``torch.compile`` of the ``torch.func``
   version (compile time reported separately). (b) Restarts: ``R`` restarts run one after
   the other (``reconstruct(restarts=R)``) against the same ``R`` starts optimised together,
   one L-BFGS over all of them with a block-diagonal loss (sum over restarts of each
   restart's gradient distance, per-restart parameter gradients through ``vmap``).
3. Wall time of ``leakaudit.audit()`` with its defaults (profile "quick", every default
   defense, attacks dlg/idlg/cpl, points 0/1/2) with ``workers=1`` and ``workers=2``,
   alternated (``--audit-repeats`` pairs), with the load average; one torch thread in this
   process unless ``--audit-threads`` says otherwise.

Only the public API is used; nothing in the library is patched.

Usage::

    python -m benchmarks.attack_speed                      # quick profile (~15 min with the audits)
    python -m benchmarks.attack_speed --no-audit           # sections 1-2 only (~6 min)
    python -m benchmarks.attack_speed --audit-repeats 2 --out results
    python -m benchmarks.attack_speed --profile full       # 30 steps, more repetitions
    python -m benchmarks.attack_speed --tiny               # seconds: one step, no audit (tests)
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, grad_and_value, jvp, vmap

import leakaudit
from benchmarks._common import (
    Report,
    Stopwatch,
    at_least,
    best_of,
    environment,
    load,
    parser,
    profile,
    write_outputs,
)
from leakaudit import attacks, fl, grads, models
from leakaudit import auditing as auditing_mod
from leakaudit.attacks import base
from leakaudit.metrics import matched_mse

SHAPES = ((1, 28), (3, 32))
BATCHES = (1, 4)
CLASSES = 10


@dataclass(frozen=True)
class Profile:
    """Sizes of one benchmark run."""

    steps: int  # L-BFGS steps per timed attack (section 1 and 2a)
    repeats: int  # timed repetitions, best kept
    eval_repeats: int  # repetitions of one isolated evaluation
    restarts: int  # R in section 2b
    restart_steps: int  # L-BFGS steps per restart in section 2b
    restart_batches: tuple[int, ...]  # batch sizes of section 2b
    audit_repeats: int  # (workers=1, workers=2) pairs in section 3
    sections: tuple[str, ...] = ("1", "2a", "2b", "3")  # the sections run by default
    compile: bool = True  # torch.compile in section 2a


PROFILES: dict[str, Profile] = {
    "quick": Profile(steps=10, repeats=3, eval_repeats=30, restarts=4, restart_steps=20,
                     restart_batches=(1,), audit_repeats=1),
    "full": Profile(steps=30, repeats=5, eval_repeats=100, restarts=4, restart_steps=40,
                    restart_batches=(1, 4), audit_repeats=2),
    "tiny": Profile(steps=1, repeats=1, eval_repeats=1, restarts=2, restart_steps=1,
                    restart_batches=(1,), audit_repeats=1, sections=("1", "2a", "2b"),
                    compile=False),
}


def _g(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}"


def _ratio(before: float, after: float) -> str:
    return f"{before / after:.2f}x" if after > 0 else "-"


def seconds_of(fn: Callable[[], Any], repeats: int) -> float:
    """Best wall-clock seconds of ``fn`` over ``repeats`` calls after two warm-up calls."""
    return best_of(fn, repeats, warmup=2).best


# ------------------------------------------------------------------------------- the cases
class Case(NamedTuple):
    name: str
    shape: tuple[int, int, int]
    batch: int
    model: torch.nn.Module
    truth: torch.Tensor
    labels: torch.Tensor
    grads: list[torch.Tensor]


def make_case(channels: int, side: int, batch: int) -> Case:
    model = models.lenet(channels, side, CLASSES, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    truth = torch.rand((batch, channels, side, side), generator=gen)
    labels = torch.randperm(CLASSES, generator=gen)[:batch]
    grads = fl.batch_gradient(model, truth, labels)
    return Case(f"{channels}x{side}x{side}", (channels, side, side), batch, model, truth,
                labels, grads)


def _cases() -> list[Case]:
    return [make_case(c, s, b) for c, s in SHAPES for b in BATCHES]


# ---------------------------------------------------------------- helpers
def start_of(name: str, case: Case, seed: int = 0, index: int = 0) -> base.Start:
    """The ``index``-th start ``reconstruct(name, ..., seed=seed)`` draws (no retries)."""
    attack = attacks.get(name)
    cfg = _config(name, case, 1, seed)
    master = torch.Generator().manual_seed(seed)
    for _ in range(index + 1):
        sub = int(torch.randint(0, 2**62, (1,), generator=master))
    return attack.start(torch.Generator().manual_seed(sub), cfg)


def _config(name: str, case: Case, steps: int, seed: int, restarts: int = 1) -> base.Config:
    return base.Config(input_shape=case.shape, num_classes=CLASSES, batch_size=case.batch,
                       max_iterations=steps, restarts=restarts, seed=seed, track_every=10,
                       options=attacks.get(name).options({"early_stop": 0.0}))


def _problem(name: str, case: Case) -> base.GradientProblem:
    problem = base.GradientProblem(case.model, case.grads, None)
    if not attacks.get(name).learns_labels:
        problem.labels, _ = attacks.infer_labels(case.model, case.grads, case.batch, CLASSES)
    return problem


def eval_costs(name: str, case: Case, repeats: int) -> tuple[float, float]:
    """Seconds of one evaluation with create_graph + backward (what the closure does) and of
    one without (the tracked value), at the attack's first start."""
    problem = _problem(name, case)
    start = start_of(name, case)
    x = start.inputs.clone().requires_grad_(True)
    logits = None if problem.labels is not None else start.label_logits.clone().requires_grad_(
        True)

    def full() -> None:
        x.grad = None
        if logits is not None:
            logits.grad = None
        problem.l2(x, logits).backward()

    def cheap() -> None:
        problem.l2(x.detach(), None if logits is None else logits.detach(), create_graph=False)

    with grads.flush_denormals():
        return seconds_of(full, repeats), seconds_of(cheap, repeats)


# ------------------------------------------------------------------------- section 1
def _timed_reconstruct(name: str, case: Case, repeats: int, **kwargs: Any
                       ) -> tuple[float, list[Any]]:
    """Best wall time of ``reconstruct(name, case, **kwargs)`` and the results of every run."""
    recs: list[Any] = []
    timed = best_of(lambda: recs.append(attacks.reconstruct(
        name, case.model, case.grads, input_shape=case.shape, num_classes=CLASSES,
        batch_size=case.batch, seed=0, **kwargs)), repeats)
    return timed.best, recs


def _same(recs: list[Any]) -> bool:
    first = recs[0]
    return all(torch.equal(first.inputs, r.inputs) and first.gradient_loss == r.gradient_loss
               and first.history == r.history for r in recs[1:])


def section_steps(rep: Report, prof: Profile, cases: list[Case]) -> list[dict[str, Any]]:
    rep.line(f"## 1. Seconds per L-BFGS step ({prof.steps} steps, early_stop=0, best of "
             f"{prof.repeats})")
    rep.line()
    rep.line("`reconstruct(attack, lenet, batch_gradient(x, y), max_iterations=STEPS, "
             "early_stop=0, seed=0)`, strong-Wolfe line search (default), one thread. "
             "ms/eval: one evaluation alone (forward + backward with create_graph + backward), "
             f"best of {prof.eval_repeats}; evals/step: the time of a step in evaluations; "
             "identical: every repetition gives bit-for-bit the same reconstruction.")
    rep.line()
    rows, out = [], []
    for case in cases:
        for name in ("dlg", "cpl"):
            seconds, recs = _timed_reconstruct(name, case, prof.repeats,
                                               max_iterations=prof.steps, early_stop=0.0)
            steps = max(recs[0].iterations, 1)
            full_s, _ = eval_costs(name, case, prof.eval_repeats)
            row = {"attack": name, "input": case.name, "batch": case.batch, "steps": steps,
                   "step_s": seconds / steps, "eval_ms": 1e3 * full_s, "same": _same(recs)}
            out.append(row)
            rows.append([name.upper(), case.name, str(case.batch), str(steps),
                         _g(row["step_s"]), _g(row["eval_ms"]),
                         _g(row["step_s"] / full_s if full_s > 0 else math.nan),
                         "yes" if row["same"] else "NO", f"{recs[0].gradient_loss:.2e}"])
    rep.table(["attack", "input", "B", "steps", "s/step", "ms/eval", "evals/step",
               "identical", "gradient loss"], rows)
    return out


def section_audit_cells(rep: Report, prof: Profile, cases: list[Case]) -> list[dict[str, Any]]:
    rep.line("## 1b. As the audit runs them (track every step, default early stop)")
    rep.line()
    rep.line("`reconstruct(attack, ..., max_iterations=40, track=x, track_every=1)` with every "
             "other option at its default (early_stop=1e-6), as `leakaudit.audit` calls it for "
             f"each cell; 1x28x28, B = 1; best of {prof.repeats}.")
    rep.line()
    case = next(c for c in cases if c.shape == (1, 28, 28) and c.batch == 1)
    rows, out = [], []
    for name in ("dlg", "idlg", "cpl"):
        seconds, recs = _timed_reconstruct(name, case, prof.repeats, max_iterations=40,
                                           track=case.truth, track_every=1)
        rec = recs[0]
        out.append({"attack": name, "seconds": seconds, "iterations": rec.iterations,
                    "same": _same(recs)})
        rows.append([name.upper(), str(rec.iterations), _g(seconds),
                     "yes" if _same(recs) else "NO",
                     f"{rec.history[-1].get('mse', math.nan):.1e}"])
    rep.table(["attack", "steps", "s", "identical", "final MSE"], rows)
    return out


# ------------------------------------------------------------------------- section 2a
class Variant(NamedTuple):
    name: str
    #: x (detached) -> (loss, d loss / dx)
    value_and_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None
    note: str


def _variants(case: Case, use_compile: bool) -> list[Variant]:
    problem = _problem("cpl", case)
    labels = problem.labels
    names = problem.names
    params = {n: p.detach() for n, p in zip(names, problem.params)}
    consts = dict(problem.constants)
    observed = problem.observed

    def current(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.requires_grad_(True)
        loss = problem.l2(x, None)
        (gx,) = torch.autograd.grad(loss, [x])
        return loss.detach(), gx

    def native(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.backends.mkldnn.flags(enabled=False):
            return current(x)

    def ce(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(case.model, {**p, **consts}, (x,)), labels)

    def l2(x: torch.Tensor) -> torch.Tensor:
        g = grad(ce)(params, x)
        return torch.stack([(g[n] - o).pow(2).sum() for n, o in zip(names, observed)]).sum()

    func_vg = grad_and_value(l2)

    def func(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gx, loss = func_vg(x)
        return loss, gx

    input_grad = grad(ce, argnums=1)

    def fwd_rev(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = grad(ce)(params, x)
        diff = {n: g[n] - o for n, o in zip(names, observed)}
        loss = torch.stack([d.pow(2).sum() for d in diff.values()]).sum()
        tangent = {n: 2.0 * d for n, d in diff.items()}
        _, gx = jvp(lambda p: input_grad(p, x), (params,), (tangent,))
        return loss, gx

    out = [
        Variant("autograd, create_graph (current)", current, "oneDNN convolutions"),
        Variant("same, native convolutions", native, "torch.backends.mkldnn off"),
        Variant("torch.func grad(grad)", func, "functional_call, nested grad"),
        Variant("torch.func jvp(grad) (forward-over-reverse)", fwd_rev, "no double backward"),
    ]
    if use_compile:
        out.append(Variant("torch.compile(torch.func grad(grad))", func, "compile"))
    else:
        out.append(Variant("torch.compile(torch.func grad(grad))", None, "not run (--no-compile)"))
    return out


def _compile(variant: Variant, x: torch.Tensor) -> tuple[Variant, float, str]:
    """Compile a variant; returns it (value_and_grad None on failure), seconds, a note."""
    import torch._dynamo

    torch._dynamo.reset()
    clock = Stopwatch()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(variant.value_and_grad, dynamic=False)
            compiled(x.clone())
    except Exception as exc:  # noqa: BLE001 - report whatever went wrong
        return variant._replace(value_and_grad=None), clock.seconds, (
            f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
    seconds = clock.seconds
    return variant._replace(value_and_grad=compiled), seconds, f"compile {seconds:.0f} s"


def lbfgs_steps(value_and_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                x0: torch.Tensor, steps: int) -> tuple[torch.Tensor, float, int]:
    """``steps`` L-BFGS steps (torch defaults, strong Wolfe) on one variable; returns the
    final point, its loss and the number of evaluations."""
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([x], line_search_fn="strong_wolfe")
    count = [0]

    def closure() -> torch.Tensor:
        count[0] += 1
        loss, gx = value_and_grad(x.detach())
        x.grad = gx
        return loss

    for _ in range(steps):
        opt.step(closure)
    loss, _ = value_and_grad(x.detach())
    return x.detach(), float(loss), count[0]


def section_variants(rep: Report, prof: Profile, cases: list[Case],
                     use_compile: bool) -> list[dict[str, Any]]:
    rep.line("## 2a. One evaluation, other implementations (CPL objective)")
    rep.line()
    rep.line("Each variant computes the same loss and input gradient at CPL's first start "
             "(labels inferred). ms/eval: best of "
             f"{prof.eval_repeats}; s/step: {prof.steps} L-BFGS steps (torch defaults, strong "
             f"Wolfe) driven by that variant alone, best of {prof.repeats}; max rel. diff: max "
             "|grad - grad_current| / max |grad_current| at the start; final loss after the "
             "steps (the paths part once rounding differs). torch.compile: `dynamic=False`, "
             "compile time = the first call, shorter when inductor's on-disk cache already "
             "holds the kernels (a later run of this script).")
    rep.line()
    rows, out = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the oneDNN TF32 notice of mkldnn.flags
        for case in cases:
            x0 = start_of("cpl", case).inputs.clone()
            variants = _variants(case, use_compile)
            notes: dict[str, str] = {}
            ready = []
            for v in variants:
                if v.note == "compile":
                    v, _, note = _compile(v, x0)
                    notes[v.name] = note
                ready.append(v)
            ref_loss, ref_grad = ready[0].value_and_grad(x0.clone())
            per_eval: dict[str, float] = {}
            per_step: dict[str, float] = {}
            finals: dict[str, tuple[float, int]] = {}
            diffs: dict[str, float] = {}
            for v in ready:
                if v.value_and_grad is None:
                    continue
                try:
                    _, gx = v.value_and_grad(x0.clone())
                except Exception as exc:  # noqa: BLE001 - a variant that cannot run is reported
                    notes[v.name] = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
                    continue
                diffs[v.name] = float((gx - ref_grad).abs().max() / ref_grad.abs().max())
                fn = v.value_and_grad
                per_eval[v.name] = seconds_of(lambda fn=fn, x0=x0: fn(x0.clone()),
                                              prof.eval_repeats)
            for _ in range(prof.repeats):  # interleaved
                for v in ready:
                    if v.name not in per_eval:
                        continue
                    timed = best_of(lambda v=v, x0=x0: lbfgs_steps(v.value_and_grad, x0,
                                                                   prof.steps), 1)
                    (_, loss, evals), dt = timed.result, timed.best
                    per_step[v.name] = min(per_step.get(v.name, math.inf), dt / prof.steps)
                    finals[v.name] = (loss, evals)
            cur = ready[0].name
            for v in ready:
                if v.name not in per_eval:
                    rows.append([case.name, str(case.batch), v.name, "-", "-", "-", "-", "-",
                                 "-", notes.get(v.name, v.note)])
                    continue
                row = {"input": case.name, "batch": case.batch, "variant": v.name,
                       "eval_ms": 1e3 * per_eval[v.name], "step_s": per_step[v.name],
                       "diff": diffs[v.name], "loss": finals[v.name][0]}
                out.append(row)
                rows.append([case.name, str(case.batch), v.name, _g(row["eval_ms"]),
                             _ratio(per_eval[cur], per_eval[v.name]), _g(row["step_s"]),
                             _ratio(per_step[cur], per_step[v.name]),
                             f"{diffs[v.name]:.1e}", f"{finals[v.name][0]:.2e}",
                             notes.get(v.name, v.note)])
    rep.table(["input", "B", "variant", "ms/eval", "eval speed-up", "s/step", "step speed-up",
               "max rel. diff", "final loss", "note"], rows)
    return out


# ------------------------------------------------------------------------- section 2b
def _joint(name: str, case: Case, restarts: int, steps: int, seed: int
           ) -> tuple[list[float], list[float], int, Callable[[], Any]]:
    """``restarts`` starts of ``reconstruct(name, restarts=R, seed=seed)`` optimised together by
    one L-BFGS (block-diagonal loss through vmap). Returns per-restart gradient losses and
    MSEs (scoring only), the number of evaluations, and one batched evaluation (for timing)."""
    problem = _problem(name, case)
    dlg = problem.labels is None
    names = problem.names
    params = {n: p.detach() for n, p in zip(names, problem.params)}
    consts = dict(problem.constants)
    observed = problem.observed
    starts = [start_of(name, case, seed, i) for i in range(restarts)]
    xs = torch.stack([s.inputs for s in starts])

    def l2_one(x: torch.Tensor, logits: torch.Tensor | None) -> torch.Tensor:
        target = F.softmax(logits, dim=-1) if dlg else problem.labels

        def ce(p: dict[str, torch.Tensor]) -> torch.Tensor:
            return F.cross_entropy(functional_call(case.model, {**p, **consts}, (x,)), target)

        g = grad(ce)(params)
        return torch.stack([(g[n] - o).pow(2).sum() for n, o in zip(names, observed)]).sum()

    if dlg:
        ls = torch.stack([s.label_logits for s in starts])
        per = vmap(l2_one)
        vg = grad_and_value(lambda a, b: per(a, b).sum(), argnums=(0, 1))
        variables = [xs.clone().requires_grad_(True), ls.clone().requires_grad_(True)]
    else:
        per = vmap(lambda a: l2_one(a, None))
        vg = grad_and_value(lambda a: per(a).sum())
        variables = [xs.clone().requires_grad_(True)]
    opt = torch.optim.LBFGS(variables, line_search_fn="strong_wolfe")
    count = [0]

    def closure() -> torch.Tensor:
        count[0] += 1
        grads, loss = vg(*(v.detach() for v in variables))
        grads = grads if isinstance(grads, tuple) else (grads,)
        for v, gv in zip(variables, grads):
            v.grad = gv
        return loss

    for _ in range(steps):
        opt.step(closure)
    with torch.no_grad():
        losses = per(*(v.detach() for v in variables)).tolist()
    mses = [matched_mse(x.clamp(0, 1), case.truth) for x in variables[0].detach()]
    return losses, mses, count[0], lambda: vg(*(v.detach() for v in variables))


def section_restarts(rep: Report, prof: Profile) -> list[dict[str, Any]]:
    r, steps = prof.restarts, prof.restart_steps
    rep.line(f"## 2b. {r} restarts: one after the other vs optimised together (vmap)")
    rep.line()
    rep.line(f"Sequential: `reconstruct(attack, ..., restarts={r}, max_iterations={steps}, "
             f"early_stop=0)`; joint: the same {r} starts as one L-BFGS over all of them "
             "(loss = sum of the per-restart gradient distances, per-restart parameter gradients "
             f"through `vmap`), {steps} steps. ms/restart-eval: one evaluation of all {r} "
             f"restarts divided by {r} (sequential: one evaluation of one restart). Best loss / "
             "MSE: the restart with the lowest gradient loss and its matched MSE (the ground "
             "truth scores, never selects); solved: restarts with MSE <= 1e-3. One timed run "
             "each (the joint run's line search couples the restarts, so the two do not do the "
             "same work: compare the outcome too).")
    rep.line()
    rows, out = [], []
    for c, s in SHAPES:
        for b in prof.restart_batches:
            case = make_case(c, s, b)
            for name in ("dlg", "cpl"):
                timed = best_of(lambda case=case, b=b, name=name: attacks.reconstruct(
                    name, case.model, case.grads, input_shape=case.shape, num_classes=CLASSES,
                    batch_size=b, max_iterations=steps, restarts=r, early_stop=0.0, seed=0), 1)
                rec, seq_s = timed.result, timed.best
                # every attempt's final MSE is not reported by reconstruct: rerun each start
                seq_losses = [a["gradient_loss"] for a in rec.attempts]
                seq_mse = matched_mse(rec.inputs, case.truth)
                seq_solved = _solved_sequential(name, case, r, steps)
                full_s, _ = eval_costs(name, case, prof.eval_repeats)
                with grads.flush_denormals():
                    timed = best_of(lambda case=case, name=name: _joint(name, case, r, steps, 0),
                                    1)
                    (losses, mses, evals, one), joint_s = timed.result, timed.best
                    joint_eval = seconds_of(one, prof.eval_repeats)
                win = min(range(r), key=lambda i: losses[i])
                row = {"attack": name, "input": case.name, "batch": b, "sequential_s": seq_s,
                       "joint_s": joint_s, "seq_eval_ms": 1e3 * full_s,
                       "joint_eval_ms": 1e3 * joint_eval / r,
                       "seq_best": min(seq_losses), "joint_best": losses[win],
                       "seq_mse": seq_mse, "joint_mse": mses[win],
                       "seq_solved": seq_solved, "joint_solved": sum(m <= 1e-3 for m in mses),
                       "joint_evals": evals}
                out.append(row)
                rows.append([name.upper(), case.name, str(b), _g(seq_s), _g(joint_s),
                             _ratio(seq_s, joint_s), f"{evals}",
                             f"{_g(row['seq_eval_ms'])} / {_g(row['joint_eval_ms'])}",
                             f"{row['seq_best']:.1e} / {row['joint_best']:.1e}",
                             f"{seq_mse:.1e} / {row['joint_mse']:.1e}",
                             f"{seq_solved}/{r} / {row['joint_solved']}/{r}"])
    rep.table(["attack", "input", "B", "sequential s", "joint s", "speed-up",
               "evals joint", "ms/restart-eval seq / joint", "best loss seq / joint",
               "MSE seq / joint", "solved seq / joint"], rows)
    return out


def _solved_sequential(name: str, case: Case, restarts: int, steps: int) -> int:
    """How many of the sequential restarts reach MSE <= 1e-3 (each start run alone; scoring
    only, not timed)."""
    solved = 0
    for i in range(restarts):
        start = start_of(name, case, 0, i)
        attack = attacks.get(name)
        problem = _problem(name, case)
        cfg = _config(name, case, steps, 0)
        with grads.torch_threads(1), grads.flush_denormals():
            attempt = attack.attempt(problem, start, cfg)
        solved += matched_mse(cfg.report(attempt.inputs), case.truth) <= 1e-3
    return solved


# ------------------------------------------------------------------------- section 3
def _audit(workers: int) -> dict[str, Any]:
    """One default audit, timed, with the load average before and after."""
    load0 = load()
    engine = leakaudit.EngineConfig.make("process", workers=workers)
    timed = best_of(lambda: leakaudit.audit(engine=engine, progress=False), 1)
    return {"seconds": timed.best, "report": timed.result, "load_before": load0,
            "load_after": load()}


def _outcome(report: Any) -> list[tuple[Any, ...]]:
    return [(c["defense"], c["point"], c["attack"], c["example"], c["success"], c["mse"],
             c["iterations"], c["gradient_loss"]) for c in report.cells]


def section_audit(rep: Report, repeats: int) -> list[dict[str, Any]]:
    rep.line("## 3. The quick audit's wall time")
    rep.line()
    prof = auditing_mod.PROFILES["quick"]
    rep.line("`leakaudit.audit(engine=EngineConfig.make(\"process\", workers=W), "
             "progress=False)` with every other argument at its default: profile quick "
             f"({prof.max_iterations} L-BFGS steps, {prof.restarts} restart(s), "
             f"{prof.examples} examples, {prof.rounds} training rounds), the default defenses, "
             "attacks dlg/idlg/cpl, points 0/1/2, stage initial, on digits with LeNet. "
             "Torch threads "
             f"{torch.get_num_threads()} in this process (the training; the attacks pin "
             "themselves to 1 thread, here when W = 1, in each worker process otherwise). "
             f"W = 1 and W = 2 alternate ({repeats} pair(s), the order swapped every other "
             "pair) because other jobs share the machine. attack s: the sum of the cells' own "
             "times (overlapping when W = 2).")
    rep.line()
    rows, out = [], []
    base_outcome = None
    for i in range(repeats):
        for workers in ((1, 2) if i % 2 == 0 else (2, 1)):
            res = _audit(workers)
            report = res.pop("report")
            outcome = _outcome(report)
            base_outcome = base_outcome or outcome
            changed = sum(a != b for a, b in zip(outcome, base_outcome))
            wins = sum(bool(c["success"]) for c in report.cells)
            attack_s = sum(float(c["seconds"]) for c in report.cells)
            row = dict(res, workers=workers, attack_s=attack_s, cells=len(report.cells),
                       successes=wins, changed=changed)
            out.append(row)
            rows.append([str(workers), f"{row['seconds']:.0f}", f"{attack_s:.0f}",
                         f"{wins}/{len(report.cells)}", str(changed),
                         row["load_before"].replace("load ", "") or "-",
                         row["load_after"].replace("load ", "") or "-"])
    rep.table(["W", "wall s", "attack s (sum)", "successful cells",
               "cells differing from the first run", "load before (1/5/15)", "load after"], rows)
    best = {w: min(r["seconds"] for r in out if r["workers"] == w) for w in (1, 2)}
    faster = "workers=2" if best[2] < best[1] else "workers=1"
    rep.line(f"Faster: **{faster}** (best wall time {best[1]:.0f} s with 1 worker, "
             f"{best[2]:.0f} s with 2: ratio {best[1] / best[2]:.2f}).")
    rep.line()
    return out


# ------------------------------------------------------------------------------ main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; ``args.prof`` is the chosen profile with the overrides."""
    p = parser(__doc__, PROFILES, out_help="also write DIR/attack_speed.md")
    p.add_argument("--steps", type=at_least(1), default=None,
                   help="override the profile's steps")
    p.add_argument("--repeats", type=at_least(1), default=None,
                   help="override the repetitions")
    p.add_argument("--no-audit", action="store_true", help="skip section 3")
    p.add_argument("--audit-repeats", type=at_least(1), default=None,
                   help="(workers=1, workers=2) pairs in section 3 (quick 1, full 2)")
    p.add_argument("--audit-threads", type=at_least(0), default=1,
                   help="torch threads in this process during the audit (default 1; 0 keeps "
                        "torch's default)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (2a)")
    p.add_argument("--sections", default=None,
                   help="comma-separated subset of 1,2a,2b,3 (default: the profile's; all "
                   "but tiny's, which leaves out the audit)")
    args = p.parse_args(argv)
    prof = profile(PROFILES, args.profile)
    if args.steps is not None:
        prof = replace(prof, steps=args.steps, restart_steps=args.steps)
    if args.repeats is not None:
        prof = replace(prof, repeats=args.repeats, eval_repeats=max(3, args.repeats))
    if args.audit_repeats is not None:
        prof = replace(prof, audit_repeats=args.audit_repeats)
    if args.no_compile:
        prof = replace(prof, compile=False)
    args.prof = prof
    chosen = prof.sections if args.sections is None else args.sections.split(",")
    args.sections = {x.strip() for x in chosen if x.strip()}
    if args.sections - {"1", "2a", "2b", "3"}:
        p.error(f"--sections must be a subset of 1,2a,2b,3, got {args.sections!r}")
    if args.no_audit:
        args.sections.discard("3")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sections; print Markdown (and write it under --out)."""
    args = parse_args(argv)
    prof: Profile = args.prof
    rep = Report()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    clock = Stopwatch()
    try:
        rep.line("# Attack speed benchmark")
        rep.line()
        rep.line(environment(("torch",)) + f"; profile `{args.profile}` ({prof.steps} steps, "
                 f"best of {prof.repeats}), torch threads 1 (was {threads}).")
        rep.line()
        cases = _cases()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", attacks.ReLUWarning)
            if "1" in args.sections:
                section_steps(rep, prof, cases)
                section_audit_cells(rep, prof, cases)
            if "2a" in args.sections:
                with grads.flush_denormals():
                    section_variants(rep, prof, cases, prof.compile)
            if "2b" in args.sections:
                section_restarts(rep, prof)
            if "3" in args.sections:
                torch.set_num_threads(args.audit_threads or threads)
                section_audit(rep, prof.audit_repeats)
        rep.line(f"Total benchmark time: {clock.seconds:.0f} s; {load() or 'load unknown'}.")
    finally:
        torch.set_num_threads(threads)
    write_outputs(args.out, "attack_speed", markdown=rep.text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
