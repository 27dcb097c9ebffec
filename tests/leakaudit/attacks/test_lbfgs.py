"""The attacks' L-BFGS is torch.optim.LBFGS step for step, bit for bit (it only drops the
overheads), with and without the strong-Wolfe line search."""

import pytest
import torch
from torch import nn

from leakaudit.attacks.lbfgs import LBFGS
from leakaudit.attacks.problem import GradientProblem
from leakaudit.grads import batch_gradient


def _rosenbrock(v):
    return sum(100 * (v[1:] - v[:-1] ** 2) ** 2 + (1 - v[:-1]) ** 2)


def _matching():
    """A DLG-style gradient-matching objective on a small sigmoid MLP (double backward)."""
    gen = torch.Generator().manual_seed(3)
    net = nn.Sequential(nn.Linear(6, 5), nn.Sigmoid(), nn.Linear(5, 3))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) - 0.5)
    x, y = torch.rand(2, 6, generator=gen), torch.tensor([0, 2])
    problem = GradientProblem(net, batch_gradient(net, x, y), y)
    return problem.l2, torch.randn(2, 6, generator=gen)


def _trajectory(opt_cls, objective, start, line_search, steps):
    x = start.clone().requires_grad_(True)
    opt = opt_cls([x], line_search_fn=line_search)

    def closure():
        opt.zero_grad()
        loss = objective(x)
        loss.backward()
        return loss

    out = []
    for _ in range(steps):
        out.append((float(opt.step(closure).detach()), x.detach().clone()))
    return out


@pytest.mark.parametrize("line_search", ["strong_wolfe", None])
@pytest.mark.parametrize("case", ["rosenbrock", "matching"])
def test_same_iterates_as_torch_lbfgs_bit_for_bit(case, line_search):
    if case == "rosenbrock":
        objective, start = _rosenbrock, torch.tensor([-1.2, 1.0, -0.5, 0.8, 1.5])
    else:
        objective, start = _matching()
    ours = _trajectory(LBFGS, objective, start, line_search, 6)
    ref = _trajectory(torch.optim.LBFGS, objective, start, line_search, 6)
    for (lo, xo), (lr, xr) in zip(ours, ref):
        assert lo == lr or (lo != lo and lr != lr)
        assert torch.equal(xo.view(torch.int32), xr.view(torch.int32))
    assert ours[-1][0] < ours[0][0]  # and it does optimise


def test_unknown_line_search_is_refused():
    with pytest.raises(ValueError, match="line_search_fn"):
        LBFGS([torch.zeros(2, requires_grad=True)], line_search_fn="armijo")
