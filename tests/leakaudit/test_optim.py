"""The simulator's local optimizers against torch.optim, and the simulator's Adam path."""

import pytest
import torch
from conftest import replay_adam

from leakaudit.fl import Tap, simulate
from leakaudit.optim import SGD, Adam, make_optimizer


def _noisy_grads(shapes, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) * (1 + 3 * (t % 3)) for s in shapes]
            for t in range(steps)]


@pytest.mark.parametrize("lr", [1e-3, 0.05])
def test_adam_matches_torch_optim_adam_fed_the_same_gradients(lr):
    shapes = [(4, 3), (3,)]
    start = {f"p{i}": torch.randn(s, generator=torch.Generator().manual_seed(i))
             for i, s in enumerate(shapes)}
    ref = [p.clone().requires_grad_(True) for p in start.values()]
    torch_adam = torch.optim.Adam(ref, lr=lr)
    ours, params = Adam(lr), dict(start)
    for grads in _noisy_grads(shapes, 50):
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        torch_adam.step()
        params = ours.step(params, grads)
    for p, q in zip(ref, params.values()):
        torch.testing.assert_close(q, p.detach(), rtol=1e-6, atol=1e-7)


def test_adam_bias_correction_uses_the_power_t():
    # first step of Adam moves every coordinate by ~lr whatever the gradient's scale
    # (m_hat / sqrt(v_hat) = sign(g)); without the power t this fails from step 2 on.
    adam, p = Adam(0.1), {"w": torch.zeros(3)}
    for _ in range(3):
        p = adam.step(p, [torch.tensor([1e-3, 1.0, 1e3])])
    torch.testing.assert_close(p["w"], torch.full((3,), -0.3), rtol=1e-4, atol=1e-4)


def test_sgd_and_bad_arguments():
    p = SGD(0.5).step({"w": torch.ones(2)}, [torch.ones(2)])
    torch.testing.assert_close(p["w"], torch.full((2,), 0.5))
    with pytest.raises(ValueError, match="lr"):
        SGD(0.0)
    with pytest.raises(ValueError, match="betas"):
        Adam(0.1, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer("rmsprop", 0.1)


def test_simulator_adam_is_torch_adam_on_the_gradients_it_applied():
    steps = 4
    run = simulate(dataset="digits", defense="fed-cdp", clients=2, clients_per_round=1,
                   rounds=1, local_steps=steps, batch_size=8, lr=0.01, optimizer="adam",
                   taps=[Tap(2, local_step=s) for s in range(steps)], progress=False, seed=3)
    obs = run.observations_at(2)
    assert len(obs) == steps
    replay_adam(obs, lr=0.01)
