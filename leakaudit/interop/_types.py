"""The observation types the taps produce (what an attacker sees; the truth kept apart)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

try:  # the redesign (issue 10) puts them in leakaudit.fl.observe
    from ..fl import GroundTruth, Observation
except ImportError:  # pragma: no cover - before the redesign: the same fields
    @dataclass
    class Observation:  # type: ignore[no-redef]
        """What an attacker at a leak point saw; nothing else."""

        point: int
        round: int
        client: int
        local_step: int | None
        tensors: list[torch.Tensor] = field(repr=False)
        weights: dict[str, torch.Tensor] = field(repr=False)
        lr: float
        local_steps: int
        batch_size: int
        defense: str = ""

        def as_gradient(self) -> list[torch.Tensor]:
            if self.point == 2:
                return [t.clone() for t in self.tensors]
            scale = -1.0 / (self.lr * self.local_steps)
            return [t * scale for t in self.tensors]

    @dataclass(frozen=True)
    class GroundTruth:  # type: ignore[no-redef]
        """The examples behind an observation: for scoring only, never for an attack."""

        inputs: torch.Tensor = field(repr=False)
        labels: torch.Tensor = field(repr=False)

__all__ = ["GroundTruth", "Observation"]
