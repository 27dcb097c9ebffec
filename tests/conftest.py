"""Shared test settings (a bounded hypothesis profile so the suite fits CI's budget) and the
release counter that checks ledgers against the noise draws defenses make."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class ReleaseCounter:
    """Counts the noise releases defenses make (each ``_ops`` noise call is one release)
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
    from leakaudit.defenses import _ops

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
