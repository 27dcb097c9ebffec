"""CPL: Wei et al., "A framework for evaluating client privacy leakages in federated
learning", ESORICS 2020.

Initialisation: patterned. One uniform [0, 1) tile of side ``ceil(side / pattern)`` per example
and channel, repeated ``pattern`` x ``pattern`` times and cropped to the image (``pattern=2``:
a 14x14 tile for 28x28 images, 16x16 for 32x32; 4 and 8 are the paper's other options; 1 is a
plain uniform image). Tabular rows: a tile of ``ceil(F / pattern)`` features repeated.
Labels: inferred as in iDLG. Optimised: the dummy batch only. Objective: squared L2 gradient
distance; L-BFGS (torch defaults), strong-Wolfe line search unless ``line_search=None``.

The reference code keeps the iterate closest to the ground truth; an attacker cannot, so
here restarts and iterates are chosen by gradient loss only.

Clamping: the dummy is optimised unconstrained; images are reported clamped to [0, 1],
tabular rows unclamped.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._validate import check_int
from .attempt import Config, Start
from .base import Attack

__all__ = ["CPL"]


class CPL(Attack):
    """CPL: patterned initialisation, labels inferred, L2 gradient matching with L-BFGS."""

    name = "cpl"
    paper = "Wei et al., A framework for evaluating client privacy leakages in FL, ESORICS 2020"
    defaults = {"line_search": "strong_wolfe", "pattern": 2}

    def check_option(self, key: str, value: Any) -> Any:
        if key == "pattern":
            return check_int("pattern", value, 1)
        return super().check_option(key, value)

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        return Start(patterned(gen, cfg.batch_size, cfg.input_shape, cfg.options["pattern"]))


def patterned(gen: torch.Generator, batch_size: int, input_shape: tuple[int, ...],
              pattern: int) -> torch.Tensor:
    """A uniform [0, 1) tile repeated ``pattern`` times along each spatial axis (images:
    the last two axes; tabular: the feature axis), cropped to ``input_shape``."""
    spatial = input_shape[-2:] if len(input_shape) >= 2 else input_shape
    lead = input_shape[: len(input_shape) - len(spatial)]
    tile_shape = tuple(math.ceil(s / pattern) for s in spatial)
    tile = torch.rand((batch_size, *lead, *tile_shape), generator=gen)
    reps = (1,) * (1 + len(lead)) + (pattern,) * len(spatial)
    full = tile.repeat(*reps)
    index = (slice(None),) * (1 + len(lead)) + tuple(slice(0, s) for s in spatial)
    return full[index].contiguous()
