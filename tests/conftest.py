"""Shared test settings (a bounded hypothesis profile so the suite fits CI's budget) and the
release counter that checks ledgers against the noise draws defenses make."""

import importlib.util
import os

import pytest
from hypothesis import HealthCheck, settings

# One intra-op thread per test process (set before torch is imported; a caller's setting
# wins), as every simulation of the audit runs: under pytest-xdist (`make test` runs
# `-n auto`) each worker is one process per core, so two workers on two cores do not fight
# over four threads; and a single-process run (`pytest -k ...`) of the tests' tiny models
# is not slowed by threads waiting on a busy machine's cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile("dev", max_examples=200, deadline=None)
# `make test-fast`: quick feedback; `make test` and CI run the "ci" profile
settings.register_profile("fast", max_examples=8, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class ReleaseCounter:
    """Counts the noise releases defenses make (each ``ops`` noise call is one release)
    and the releases a list of ledgers holds, by kind, so tests can compare the two."""

    def __init__(self) -> None:
        self.draws = {"gaussian": 0, "laplace": 0}

    @staticmethod
    def in_ledgers(ledgers) -> dict[str, int]:
        """Gaussian steps (sampled or not) and Laplace releases recorded in ``ledgers``."""
        from accounting.events import GaussianSchedule, Laplace, SampledGaussian

        out = {"gaussian": 0, "laplace": 0, "other": 0}
        for ledger in ledgers:
            for e in ledger.events:
                if isinstance(e, (SampledGaussian, GaussianSchedule)):
                    out["gaussian"] += e.steps
                elif isinstance(e, Laplace):
                    out["laplace"] += e.steps
                else:
                    out["other"] += e.steps
        return out


@pytest.fixture
def release_counter(monkeypatch) -> ReleaseCounter:
    """Wrap the defenses' noise functions with counters for the duration of a test."""
    from leakaudit.defenses import ops as _ops

    counter = ReleaseCounter()
    real = {"gaussian": _ops.gaussian_like, "laplace": _ops.laplace_like}

    def wrap(kind: str):
        def counted(*args, **kwargs):
            counter.draws[kind] += 1
            return real[kind](*args, **kwargs)

        return counted

    monkeypatch.setattr(_ops, "gaussian_like", wrap("gaussian"))
    monkeypatch.setattr(_ops, "laplace_like", wrap("laplace"))
    return counter


def load_benchmark(name: str):
    """Import the benchmark script ``benchmarks/<name>.py`` (the package ``benchmarks`` at
    the repository root; ``pythonpath = ["."]`` in pyproject puts the root on the path)."""
    return importlib.import_module(f"benchmarks.{name}")


def replay_adam(observations, lr: float) -> None:
    """Assert that type-2 observations of consecutive local steps are torch.optim.Adam fed
    the gradients the client applied (the weights of step l+1 follow from step l)."""
    import torch

    obs = sorted(observations, key=lambda o: o.local_step)
    ref = [w.clone().requires_grad_(True) for w in obs[0].weights.values()]
    torch_adam = torch.optim.Adam(ref, lr=lr)
    for o, nxt in zip(obs, obs[1:]):
        for p, g in zip(ref, o.tensors):
            p.grad = g.clone()
        torch_adam.step()
        for p, w in zip(ref, nxt.weights.values()):
            torch.testing.assert_close(p.detach(), w, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def one_torch_thread():
    """The attacks run on one thread; so do the observed gradients the tests make (faster on
    a shared CPU)."""
    from leakaudit.grads import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def digits():
    """The built-in digits (scikit-learn, upsampled to 28x28), seed 0: loaded once per run.
    A ``Dataset`` is frozen; tests must not write into its tensors."""
    from leakaudit import data

    return data.load("digits", seed=0)


@pytest.fixture
def scratch_registry():
    """The accountant event types registered during the test are unregistered after it."""
    from accounting.registry import registered_types, unregister_event

    before = set(registered_types().values())
    yield
    for cls in set(registered_types().values()) - before:
        unregister_event(cls)


# ----------------------------------------------------------------------------- sweeps
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sweeps", action="store_true", default=False,
                     help="also run the statistical sweeps (many seeds x 10,000 runs per "
                          "side; minutes per test): `make test-sweeps`")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Tests marked ``sweep`` (the repeated-seed sweeps behind docs/results.md) are
    deselected unless ``--sweeps`` is given: the suite keeps one seed of each of them."""
    if config.getoption("--sweeps"):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("sweep") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
