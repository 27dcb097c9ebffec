"""L-BFGS of the attacks: ``torch.optim.LBFGS`` (torch 2.13, Nocedal & Wright 2006, Alg. 7.4
and 7.5, line search Alg. 3.5/3.6 via torch's ``_strong_wolfe``) step for step, bit for bit,
without its overheads on the small problems of gradient inversion.

The same arithmetic on the same tensors in the same order; what differs:

* the two-loop recursion (Alg. 7.4) computes each ``rho_i * <s_i, q>`` as the float32
  product of the dot product's value and ``rho_i``, in numpy float32 scalars (an IEEE
  single-precision product, as torch's 0-dim tensor product is), instead of three 0-dim
  tensor operations: up to 100 history pairs x 20 inner iterations x 2 loops per step made
  those tiny operations about a third of an attack's time;
* it is not a ``torch.optim.Optimizer``: building one imports ``torch._dynamo`` (about 2 s
  of CPU in every fresh worker process) and wraps every step in profiling hooks.

Only what the attacks use: one group of dense real tensors, lr 1, ``max_iter`` 20,
``max_eval`` 25, history 100, ``line_search_fn`` "strong_wolfe" or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.optim.lbfgs import _strong_wolfe  # the line search itself, unchanged

__all__ = ["LBFGS", "two_loop"]

_f32 = np.float32


def two_loop(flat_grad: torch.Tensor, h_diag: Any, old_dirs: Sequence[torch.Tensor],
             old_stps: Sequence[torch.Tensor], ro: Sequence[np.float32]) -> torch.Tensor:
    """The L-BFGS direction ``-H g`` by the two-loop recursion (Nocedal & Wright 2006,
    Alg. 7.4): ``old_dirs`` are the y_i, ``old_stps`` the s_i, ``ro`` the rho_i = 1 / <y_i, s_i>
    as float32 scalars, ``h_diag`` the initial Hessian scale. The same float32 operations in
    the same order as ``torch.optim.LBFGS``."""
    num_old = len(old_dirs)
    al: list[np.float32] = [_f32(0.0)] * num_old
    q = flat_grad.neg()
    with np.errstate(all="ignore"):  # inf/NaN propagate silently, as in torch
        for i in range(num_old - 1, -1, -1):
            al[i] = _f32(old_stps[i].dot(q).item()) * ro[i]
            q.add_(old_dirs[i], alpha=-float(al[i]))
        r = torch.mul(q, h_diag)
        for i in range(num_old):
            be_i = _f32(old_dirs[i].dot(r).item()) * ro[i]
            r.add_(old_stps[i], alpha=float(al[i] - be_i))
    return r


class LBFGS:
    """``torch.optim.LBFGS(params, line_search_fn=...)`` with its defaults: ``step(closure)``
    and ``zero_grad()``, the same iterates bit for bit."""

    def __init__(self, params: Sequence[torch.Tensor], lr: float = 1.0, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"line_search_fn must be 'strong_wolfe' or None, got "
                             f"{line_search_fn!r}")
        self._params = list(params)
        if any(p.is_sparse or torch.is_complex(p) for p in self._params):
            raise ValueError("params must be dense real tensors")
        self.lr = lr
        self.max_iter = max_iter
        self.max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
        self.tolerance_grad = tolerance_grad
        self.tolerance_change = tolerance_change
        self.history_size = history_size
        self.line_search_fn = line_search_fn
        self._numel = sum(p.numel() for p in self._params)
        self.state: dict[str, Any] = {"func_evals": 0, "n_iter": 0}

    def zero_grad(self) -> None:
        for p in self._params:
            p.grad = None

    def _gather_flat_grad(self) -> torch.Tensor:
        return torch.cat([p.new(p.numel()).zero_() if p.grad is None else p.grad.view(-1)
                          for p in self._params], 0)

    def _add_grad(self, step_size: Any, update: torch.Tensor) -> None:
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(update[offset:offset + numel].view_as(p), alpha=step_size)
            offset += numel

    def _clone_param(self) -> list[torch.Tensor]:
        return [p.clone(memory_format=torch.contiguous_format) for p in self._params]

    def _set_param(self, params_data: Sequence[torch.Tensor]) -> None:
        for p, pdata in zip(self._params, params_data, strict=True):
            p.copy_(pdata)

    def _directional_evaluate(self, closure: Callable[[], torch.Tensor], x: list[torch.Tensor],
                              t: Any, d: torch.Tensor) -> tuple[float, torch.Tensor]:
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure: Callable[[], torch.Tensor]) -> torch.Tensor:
        """One optimisation step (up to ``max_iter`` iterations); returns the closure's loss
        at the starting point."""
        with torch.no_grad():
            return self._step(torch.enable_grad()(closure))

    def _step(self, closure: Callable[[], torch.Tensor]) -> torch.Tensor:
        lr, max_iter, max_eval = self.lr, self.max_iter, self.max_eval
        tolerance_grad, tolerance_change = self.tolerance_grad, self.tolerance_change
        state = self.state

        orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        opt_cond = flat_grad.abs().max() <= tolerance_grad
        if opt_cond:
            return orig_loss

        d = state.get("d")
        t = state.get("t")
        prev_flat_grad = state.get("prev_flat_grad")
        prev_loss = state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            d = self._direction(flat_grad, prev_flat_grad, d, t)

            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.clone(memory_format=torch.contiguous_format)
            else:
                prev_flat_grad.copy_(flat_grad)
            prev_loss = loss

            # ---- step length
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            if self.line_search_fn is not None:
                x_init = self._clone_param()

                def obj_func(x: list[torch.Tensor], t: Any, d: torch.Tensor
                             ) -> tuple[float, torch.Tensor]:
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd,
                    max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = flat_grad.abs().max() <= tolerance_grad
            else:
                self._add_grad(t, d)
                if n_iter != max_iter:
                    with torch.enable_grad():
                        loss = closure()
                    loss = float(loss)
                    flat_grad = self._gather_flat_grad()
                    opt_cond = flat_grad.abs().max() <= tolerance_grad
                    ls_func_evals = 1

            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            # ---- stopping tests
            if n_iter == max_iter:
                break
            if current_evals >= max_eval:
                break
            if opt_cond:
                break
            if d.mul(t).abs().max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss

    def _direction(self, flat_grad: torch.Tensor, prev_flat_grad: torch.Tensor | None,
                   d: torch.Tensor | None, t: Any) -> torch.Tensor:
        """The search direction: steepest descent at the first iteration, else the history
        updated with the last step (when its curvature ``<y, s>`` is > 1e-10) and the
        two-loop recursion."""
        state = self.state
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1)
            return flat_grad.neg()
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        y = flat_grad.sub(prev_flat_grad)
        s = d.mul(t)
        ys = y.dot(s)
        if ys > 1e-10:
            if len(old_dirs) == self.history_size:
                old_dirs.pop(0)
                old_stps.pop(0)
                ro.pop(0)
            old_dirs.append(y)
            old_stps.append(s)
            ro.append(_f32((1.0 / ys).item()))
            state["H_diag"] = ys / y.dot(y)
        return two_loop(flat_grad, state["H_diag"], old_dirs, old_stps, ro)
