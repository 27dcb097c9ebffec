"""Pure tensor operations the defenses share: per-example clipping, noise, pruning.

Every noise draw of a defense goes through :func:`gaussian_like` or :func:`laplace_like`,
called as ``ops.gaussian_like(...)`` (one call = one release), so that tests can count the
releases a defense makes and compare them with the steps its ledger holds.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

__all__ = ["flat_norms", "clip_flat", "clipped_sum", "clip_per_layer", "gaussian_like",
           "laplace_like", "prune_smallest", "update_norm", "l1_norm", "trials"]

#: leading number of independent draws per noise call (None: one draw, the training path)
_TRIALS: contextvars.ContextVar[int | None] = contextvars.ContextVar("trials", default=None)


@contextlib.contextmanager
def trials(n: int) -> Iterator[None]:
    """Within this block every noise draw has a leading dimension of ``n`` independent trials.

    The empirical privacy audit runs a defense's own code once for many trials of a release:
    the defense's arithmetic on (sum + noise) broadcasts over the leading dimension. Outside
    the block (training) nothing changes.
    """
    token = _TRIALS.set(int(n))
    try:
        yield
    finally:
        _TRIALS.reset(token)


def _noise_shape(t: torch.Tensor) -> tuple[int, ...]:
    n = _TRIALS.get()
    return tuple(t.shape) if n is None else (n, *t.shape)


def flat_norms(grads: list[torch.Tensor]) -> torch.Tensor:
    """L2 norm of each example's whole gradient: grads are (B, *shape) per parameter."""
    sq = torch.stack([g.reshape(g.shape[0], -1).pow(2).sum(dim=1) for g in grads], dim=1)
    return sq.sum(dim=1).sqrt()


def clip_flat(grads: list[torch.Tensor], clip: float) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Scale each example's whole gradient to L2 norm <= clip (Abadi et al. 2016, Alg. 1).

    Returns the clipped per-example gradients and the pre-clipping norms.
    """
    norms = flat_norms(grads)
    factor = (clip / (norms + 1e-12)).clamp(max=1.0)
    clipped = [g * factor.view(-1, *([1] * (g.dim() - 1))) for g in grads]
    return clipped, norms


def clipped_sum(grads: list[torch.Tensor], clip: float,
                per_layer: bool = False) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Sum over the batch of the clipped per-example gradients, without materialising them.

    Returns the sums and the clipped norms: (B,) for flat clipping, (B, layers) per layer.
    Same result as clipping then summing, one fused contraction per parameter.
    """
    if per_layer:
        norms = torch.stack([g.reshape(g.shape[0], -1).norm(dim=1) for g in grads], dim=1)
        factors = (clip / (norms + 1e-12)).clamp(max=1.0)
        sums = [torch.einsum("b,b...->...", factors[:, i], g) for i, g in enumerate(grads)]
        return sums, norms * factors
    norms = flat_norms(grads)
    factor = (clip / (norms + 1e-12)).clamp(max=1.0)
    return [torch.einsum("b,b...->...", factor, g) for g in grads], norms * factor


def clip_per_layer(grads: list[torch.Tensor],
                   clip: float) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Clip each parameter tensor ("layer") of each example to L2 norm <= clip.

    The whole clipped per-example gradient then has norm <= clip * sqrt(layers). Returns the
    clipped gradients and the clipped per-layer norms, shape (B, layers).
    """
    out, norms = [], []
    for g in grads:
        n = g.reshape(g.shape[0], -1).norm(dim=1)
        factor = (clip / (n + 1e-12)).clamp(max=1.0)
        out.append(g * factor.view(-1, *([1] * (g.dim() - 1))))
        norms.append(n * factor)
    return out, torch.stack(norms, dim=1)


def gaussian_like(tensors: list[torch.Tensor], std: float,
                  generator: torch.Generator) -> list[torch.Tensor]:
    """Independent N(0, std^2) noise shaped like each tensor, from the given generator."""
    return [torch.randn(_noise_shape(t), generator=generator, dtype=t.dtype, device=t.device)
            * std for t in tensors]


def laplace_like(tensors: list[torch.Tensor], scale: float,
                 generator: torch.Generator) -> list[torch.Tensor]:
    """Independent Laplace(0, scale) noise shaped like each tensor, from the given generator.

    Inverse CDF of a uniform on (-1/2, 1/2): -scale * sign(u) * log(1 - 2|u|).
    """
    out = []
    for t in tensors:
        u = torch.rand(_noise_shape(t), generator=generator, dtype=torch.float64,
                       device=t.device) - 0.5
        u = u.clamp(min=-0.5 + 1e-16, max=0.5 - 1e-16)
        out.append((-scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())).to(t.dtype))
    return out


def l1_norm(update: list[torch.Tensor]) -> torch.Tensor:
    """L1 norm of a whole update (all parameters concatenated)."""
    return sum(u.abs().sum() for u in update)


def update_norm(update: list[torch.Tensor]) -> torch.Tensor:
    """L2 norm of a whole update (all parameters concatenated)."""
    return torch.sqrt(sum(u.pow(2).sum() for u in update))


def prune_smallest(update: list[torch.Tensor], rate: float) -> list[torch.Tensor]:
    """Zero exactly round(rate * n) coordinates of smallest magnitude, over all parameters.

    Ties are broken by position (stable sort), so the share is exact.
    """
    flat = torch.cat([u.reshape(-1) for u in update])
    k = int(round(rate * flat.numel()))
    if k == 0:
        return [u.clone() for u in update]
    order = torch.sort(flat.abs(), stable=True).indices
    mask = torch.ones_like(flat)
    mask[order[:k]] = 0.0
    pruned = flat * mask
    out, start = [], 0
    for u in update:
        out.append(pruned[start:start + u.numel()].view_as(u))
        start += u.numel()
    return out
