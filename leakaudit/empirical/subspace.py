"""Where a release may hide a functional without noise: a sparse random subspace of the
release (per-tensor sums, per-tensor canary parts, random signed partitions) and Fisher's
discriminant there under the noise covariance of canary-out runs (the ``subspace``
statistic of :mod:`leakaudit.empirical.game`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

__all__ = ["Subspace", "make_subspace", "subspace_weights", "SUBSPACE_GROUPS", "SUBSPACE_SEED",
           "RIDGE"]


class Game(Protocol):
    """What a subspace needs of a game (:class:`leakaudit.empirical.game.GameSetup`)."""

    canary: list[torch.Tensor]

    @property
    def direction(self) -> torch.Tensor: ...


#: groups of the random partition of one tensor's coordinates, at most
SUBSPACE_GROUPS = 32
#: the seed of the subspace's random partitions and signs (pre-registered: a fixed function)
SUBSPACE_SEED = 20231


@dataclass(frozen=True)
class Subspace:
    """Where a release may hide a functional without noise: per parameter tensor, its sum,
    its part along the canary, and a random signed partition of its coordinates into groups
    (a sparse random projection, fixed by :data:`SUBSPACE_SEED`), G + 2T directions in all,
    kept as the dense (D, G + 2T) float32 matrix ``pt`` = P^T (a matmul is faster on CPU
    than the equivalent scatter-adds)."""

    pt: torch.Tensor
    groups: int
    tensors: int

    @property
    def dims(self) -> int:
        return self.groups + 2 * self.tensors

    def project(self, rows: torch.Tensor) -> torch.Tensor:
        """(m, D) releases -> (m, G + 2T): group sums, tensor sums, per-tensor canary part."""
        return rows.float() @ self.pt

    def gram(self) -> torch.Tensor:
        """G = P P^T (float64): the covariance of the projections of unit isotropic noise."""
        p = self.pt.double()
        return p.T @ p


def make_subspace(setup: Game, runs: int) -> Subspace:
    """The :class:`Subspace` of a game whose reference has ``runs`` canary-out runs: at most
    ``runs // 2`` directions (a covariance estimated from fewer runs than twice its
    dimension has spurious null directions), at most :data:`SUBSPACE_GROUPS` per tensor."""
    sizes = [c.numel() for c in setup.canary]
    t = len(sizes)
    per = max(1, min(SUBSPACE_GROUPS, (max(runs // 2, 1) - 2 * t) // t))
    gen = torch.Generator().manual_seed(SUBSPACE_SEED)
    group, tensor, start = [], [], 0
    for k, n in enumerate(sizes):
        g = min(n, per)
        group.append(torch.randperm(n, generator=gen) % g + start)
        tensor.append(torch.full((n,), k, dtype=torch.long))
        start += g
    d = sum(sizes)
    sign = torch.randint(0, 2, (d,), generator=gen).float() * 2.0 - 1.0
    cols, tensors = torch.arange(d), torch.cat(tensor)
    pt = torch.zeros(d, start + 2 * t)
    pt[cols, torch.cat(group)] = sign
    pt[cols, start + tensors] = 1.0
    pt[cols, start + t + tensors] = setup.direction.float()
    return Subspace(pt=pt, groups=start, tensors=t)


#: ridge on the whitened noise covariance before it is inverted (relative to its scale)
RIDGE = 1e-6


def subspace_weights(space: Subspace, s1: torch.Tensor, s2: torch.Tensor, n: int,
                     direction: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Fisher's discriminant in the subspace, a = S^+ P u (S the noise covariance of the n
    canary-out runs' projections, P u the canary's projection), and the noise floor.

    Both are taken against the declared isotropic noise: the projections are whitened by
    G = P P^T (the covariance isotropic unit noise would have there; its null directions,
    linear dependencies of the directions, dropped), so that isotropic noise of any scale
    has covariance s^2 I. The floor is the smallest eigenvalue of the whitened covariance
    over their mean: about (1 - sqrt(r/n))^2 for isotropic noise (Marchenko-Pastur, r
    whitened dimensions), 0 where some functional of the release carries no noise. A ridge
    of :data:`RIDGE` (relative) keeps the inverse finite; the discriminant puts its weight
    on a noise-free functional the canary moves, and the statistic then separates the
    worlds without error (the true eps is infinite)."""
    mean = s1 / n
    cov = (s2 / n - torch.outer(mean, mean)) * n / max(n - 1, 1)
    gram = space.gram()
    lam, vec = torch.linalg.eigh(gram)
    keep = lam > 1e-9 * float(lam.max())
    w = vec[:, keep] / lam[keep].sqrt()
    m = w.T @ cov @ w
    m = 0.5 * (m + m.T)
    scale = float(m.diagonal().mean())
    if not scale > 0:   # no noise at all: any direction the canary moves separates
        scale = 1.0
    eig = torch.linalg.eigvalsh(m)
    floor = float(eig.min()) / scale if n > 1 else math.nan
    target = w.T @ (space.pt.double().T @ direction.double())
    eye = torch.eye(m.shape[0], dtype=m.dtype)
    b = torch.linalg.solve(m + RIDGE * scale * eye, target)
    return w @ b, floor
