"""The prior-aware identification attack (Hayes, Mahloujifar, Balle, "Bounding training data
reconstruction in DP-SGD", NeurIPS 2023, Sec. 4 and Alg. 1).

The attacker knows a finite candidate set {z_1, ..., z_k} the target was drawn from
(uniformly: a blind guess succeeds with probability exactly 1/k), the model at the leak
point, the mechanism and its public noise parameters. For each candidate it computes the
mean of the release under "the target is z_i", and outputs the candidate whose hypothesis
gives the observed release the largest likelihood (the Bayes-optimal, i.e. MAP, guess under
the uniform prior):

    score_i = log p(observed | z_i) = - ||observed - m_i||_2^2 / (2 s^2)   (Gaussian noise)
                                    = - ||observed - m_i||_1 / b           (Laplace noise)

Release models (what ``observed`` is: a gradient-shaped list of tensors, e.g.
``Observation.as_gradient()``; ``clip`` and ``noise_std`` in the units of ``observed``):

* ``clip_mode="example"`` (fed-cdp, DP-SGD): observed = (sum over the batch of
  clip_C(g(x)) + noise) / ``divisor``; m_i = (clip_C(g(z_i)) + sum over the known rest of
  clip_C(g(r))) / divisor.
* ``clip_mode="update"`` (fed-sdp, DP-FedAvg with one local step): observed =
  clip_C(mean over the batch of g(x)) + noise; m_i = clip_C((g(z_i) + sum_r g(r)) / B).
* ``clip_mode=None``: no clipping (the mean gradient plus noise).

Informed adversary (Hayes et al.'s threat model; ``known_inputs``/``known_labels``): it knows
the other B - 1 examples of the batch exactly. The uninformed variant (``informed=False``)
does not: it replaces the rest by B - 1 copies of the candidates' mean contribution (the
only data it has). At B = 1 both coincide.

The attack never sees which candidate is true: it gets the candidates in the caller's order
and returns an index; whether that index is the target is for the scorer.

Success is bounded, for a mu-GDP release under add/remove of the target, by
``Phi(Phi^-1(1/k) + mu)`` (:func:`leakaudit.metrics.rero_bound_gdp`); the attack reaches it
when the candidates' release means are equidistant and far apart (e.g. two antipodal
means), and falls below it when candidates share their gradient (two images of one label
through an untrained network).

:class:`CandidateScorer` computes the candidates' release means once (they depend on the
model and the candidates only) and then scores any number of releases; the registered
attack ``"prior-aware"`` wraps it in the :func:`leakaudit.attacks.reconstruct` interface
(options ``candidates``, ``candidate_labels``, ``noise_std``, ``clip``, ``clip_mode``,
``noise``, ``known_inputs``, ``known_labels``, ``informed``, ``divisor``): its
reconstruction is the chosen candidate (with the known rest of the batch), its label the
candidate's, and its history holds the chosen index and the scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .._validate import check_number
from ..grads import per_example_gradients
from .attempt import Attempt, Config, Start
from .base import Attack
from .problem import GradientProblem, trainable

__all__ = ["CLIP_MODES", "NOISES", "CandidateScorer", "PriorAware", "identify"]

CLIP_MODES = ("example", "update", None)
NOISES = ("gaussian", "laplace")


def _flat_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                    chunk: int = 64) -> torch.Tensor:
    """Per-example gradients of the cross-entropy, (n, P) float64, in the order of the
    model's trainable parameters."""
    named = trainable(model)
    params = {n: p.detach() for n, p in named}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    dtype = named[0][1].dtype
    out = []
    for start in range(0, len(x), chunk):
        xb = x[start:start + chunk].to(dtype)
        yb = y[start:start + chunk].to(torch.int64)
        g = per_example_gradients(model, params, buffers, xb, yb)
        out.append(torch.cat([t.reshape(len(xb), -1) for t in g], dim=1).double())
    return torch.cat(out) if out else torch.zeros(0, sum(p.numel() for _, p in named),
                                                  dtype=torch.float64)


def _clip_rows(g: torch.Tensor, clip: float | None) -> torch.Tensor:
    if clip is None:
        return g
    norms = g.norm(dim=1, keepdim=True)
    return g * torch.clamp(clip / norms.clamp_min(1e-300), max=1.0)


class CandidateScorer:
    """The likelihood of a release under each candidate (see the module docstring).

    Args:
        model: the model at the leak point (its weights are read, never changed).
        candidates: (k, *input_shape) candidate inputs; ``candidate_labels``: (k,) labels.
        noise_std: the noise's standard deviation per coordinate of the observed release
            (Gaussian), or the Laplace scale b (``noise="laplace"``); > 0.
        clip: the clipping norm in the release's units, None for no clipping.
        clip_mode: "example", "update" or None (see the module docstring).
        known_inputs, known_labels: the rest of the batch (B - 1 examples) for the informed
            adversary; None for B = 1.
        informed: whether the rest is known (False: it is replaced by the candidates' mean).
        batch_size: B (default: 1 + the number of known examples).
        divisor: what the clipped sum is divided by in ``clip_mode="example"`` (the
            defense's expected batch size; default B).
    """

    def __init__(self, model: nn.Module, candidates: torch.Tensor,
                 candidate_labels: torch.Tensor | Sequence[int], *, noise_std: float,
                 clip: float | None = None, clip_mode: str | None = "example",
                 noise: str = "gaussian", known_inputs: torch.Tensor | None = None,
                 known_labels: torch.Tensor | Sequence[int] | None = None,
                 informed: bool = True, batch_size: int | None = None,
                 divisor: float | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(candidates, torch.Tensor) or candidates.ndim < 2 \
                or len(candidates) < 1:
            raise ValueError("candidates must be a (k, *input_shape) tensor with k >= 1")
        labels = torch.as_tensor(candidate_labels)
        if labels.ndim != 1 or len(labels) != len(candidates) or labels.dtype.is_floating_point:
            raise ValueError(f"candidate_labels must be {len(candidates)} integer labels")
        self.noise_std = check_number("noise_std", noise_std)
        if self.noise_std <= 0:
            raise ValueError(f"noise_std must be > 0, got {noise_std}")
        if clip is not None:
            clip = check_number("clip", clip)
            if clip <= 0:
                raise ValueError(f"clip must be > 0 or None, got {clip}")
        if clip_mode not in CLIP_MODES:
            raise ValueError(f"clip_mode must be one of {CLIP_MODES}, got {clip_mode!r}")
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        if not isinstance(informed, bool):
            raise ValueError(f"informed must be True or False, got {informed!r}")
        if (known_inputs is None) != (known_labels is None):
            raise ValueError("known_inputs and known_labels go together")
        n_known = 0 if known_inputs is None else len(known_inputs)
        if known_inputs is not None and tuple(known_inputs.shape[1:]) != \
                tuple(candidates.shape[1:]):
            raise ValueError(f"known_inputs must have the candidates' example shape "
                             f"{tuple(candidates.shape[1:])}, got {tuple(known_inputs.shape)}")
        self.batch_size = 1 + n_known if batch_size is None else int(batch_size)
        if self.batch_size < 1 + n_known:
            raise ValueError(f"batch_size must be >= 1 + len(known_inputs) = {1 + n_known}")
        if not informed and n_known:
            raise ValueError("the uninformed adversary has no known_inputs")
        self.divisor = float(self.batch_size if divisor is None else
                             check_number("divisor", divisor))
        if self.divisor <= 0:
            raise ValueError(f"divisor must be > 0, got {divisor}")
        self.clip, self.clip_mode, self.noise, self.informed = clip, clip_mode, noise, informed
        self.candidates, self.labels = candidates, labels.to(torch.int64)
        g = _flat_gradients(model, candidates, self.labels)
        rest_count = self.batch_size - 1
        if known_inputs is not None:
            rest = _flat_gradients(model, known_inputs, torch.as_tensor(known_labels))
        else:
            rest = None
        if clip_mode == "example":
            gc = _clip_rows(g, clip)
            if rest is not None:
                background = _clip_rows(rest, clip).sum(dim=0)
            else:  # uninformed (or B = 1: rest_count = 0)
                background = rest_count * gc.mean(dim=0)
            means = (gc + background) / self.divisor
        else:
            if rest is not None:
                background = rest.sum(dim=0)
            else:
                background = rest_count * g.mean(dim=0)
            mean_grad = (g + background) / self.batch_size
            means = _clip_rows(mean_grad, clip if clip_mode == "update" else None)
        self.means = means.to(torch.float32)
        self.sq_norms = means.pow(2).sum(dim=1)
        #: (name, numel) of each trainable tensor, in the order of the flat release
        self.tensors = [(n, p.numel()) for n, p in trainable(model)]

    def scores(self, observed: Sequence[torch.Tensor] | torch.Tensor,
               subset: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        """Log-likelihood (up to a constant) of ``observed`` under each candidate (of
        ``subset``, indices into the candidates, when given), float64."""
        y = observed if isinstance(observed, torch.Tensor) and observed.ndim == 1 else \
            torch.cat([t.detach().reshape(-1).double() for t in observed])
        if y.numel() != self.means.shape[1]:
            raise ValueError(f"observed has {y.numel()} values, the model "
                             f"{self.means.shape[1]} parameters")
        idx = None if subset is None else torch.as_tensor(subset, dtype=torch.int64)
        means = self.means if idx is None else self.means[idx]
        if self.noise == "gaussian":
            sq = self.sq_norms if idx is None else self.sq_norms[idx]
            # -||y - m||^2 / 2s^2 = (<y, m> - ||m||^2 / 2) / s^2 - ||y||^2 / 2s^2
            dots = means.double() @ y.double()
            return (dots - 0.5 * sq) / self.noise_std ** 2
        return -(means.double() - y.double()).abs().sum(dim=1) / self.noise_std

    def tensor_scores(self, observed: Sequence[torch.Tensor] | torch.Tensor,
                      subset: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        """Scores of the candidates (of ``subset``) on the whole release (row 0, as
        :meth:`scores`) and on each trainable tensor alone (row 1 + i for
        ``self.tensors[i]``), float64, shape (1 + tensors, candidates). The likelihood of the
        stated noise model on one tensor is still that model's; a release whose noise is
        missing on part of the parameters is identified by the row of that part even when
        the noise of the rest hides it in row 0. Choosing the best row after seeing the
        outcomes is a multiple comparison: pay for it (e.g. Bonferroni over the rows)."""
        y = observed if isinstance(observed, torch.Tensor) and observed.ndim == 1 else \
            torch.cat([t.detach().reshape(-1).double() for t in observed])
        if y.numel() != self.means.shape[1]:
            raise ValueError(f"observed has {y.numel()} values, the model "
                             f"{self.means.shape[1]} parameters")
        idx = None if subset is None else torch.as_tensor(subset, dtype=torch.int64)
        means = (self.means if idx is None else self.means[idx]).double()
        rows = [self.scores(y.double(), subset)]
        start = 0
        for _, size in self.tensors:
            m, part = means[:, start:start + size], y[start:start + size].double()
            if self.noise == "gaussian":
                rows.append((m @ part - 0.5 * m.pow(2).sum(dim=1)) / self.noise_std ** 2)
            else:
                rows.append(-(m - part).abs().sum(dim=1) / self.noise_std)
            start += size
        return torch.stack(rows)

    def identify(self, observed: Sequence[torch.Tensor] | torch.Tensor,
                 subset: Sequence[int] | torch.Tensor | None = None) -> int:
        """The index (into ``subset`` when given, else into the candidates) of the most
        likely candidate; ties go to the first."""
        return int(torch.argmax(self.scores(observed, subset)))


def identify(model: nn.Module, observed: Sequence[torch.Tensor], candidates: torch.Tensor,
             candidate_labels: torch.Tensor | Sequence[int], **kwargs: Any) -> int:
    """One-shot :class:`CandidateScorer` (same keyword arguments): the index of the
    candidate that makes ``observed`` most likely."""
    return CandidateScorer(model, candidates, candidate_labels, **kwargs).identify(observed)


class PriorAware(Attack):
    """The prior-aware identification attack as a registered attack (no optimiser)."""

    name = "prior-aware"
    optimises = False
    paper = "Hayes, Mahloujifar, Balle, NeurIPS 2023 (prior-aware MAP identification)"
    learns_labels = True  # the label comes with the chosen candidate, not from inference
    defaults = {"candidates": None, "candidate_labels": None, "noise_std": None,
                "clip": None, "clip_mode": "example", "noise": "gaussian",
                "known_inputs": None, "known_labels": None, "informed": True,
                "divisor": None}

    def check_option(self, key: str, value: Any) -> Any:
        if key in ("candidates", "candidate_labels", "noise_std") and value is None:
            raise ValueError(f"{key} is required by the prior-aware attack")
        return value

    def start(self, gen: torch.Generator, cfg: Config) -> Start:
        shape = (cfg.batch_size, *cfg.input_shape)
        return Start(torch.zeros(shape), torch.zeros(cfg.batch_size, cfg.num_classes))

    def attempt(self, problem: GradientProblem, start: Start, cfg: Config) -> Attempt:
        o = cfg.options
        known = o["known_inputs"]
        n_known = 0 if known is None else len(known)
        if n_known != cfg.batch_size - 1 and o["informed"]:
            raise ValueError(f"known_inputs must hold the other {cfg.batch_size - 1} "
                             f"example(s) of the batch for the informed adversary, got "
                             f"{n_known}")
        scorer = CandidateScorer(
            problem.model, torch.as_tensor(o["candidates"]), o["candidate_labels"],
            noise_std=o["noise_std"], clip=o["clip"], clip_mode=o["clip_mode"],
            noise=o["noise"], known_inputs=known, known_labels=o["known_labels"],
            informed=o["informed"], batch_size=cfg.batch_size, divisor=o["divisor"])
        scores = scorer.scores(problem.observed)
        best = int(torch.argmax(scores))
        x = scorer.candidates[best:best + 1].to(start.inputs.dtype)
        labels = scorer.labels[best:best + 1]
        if known is not None:
            x = torch.cat([x, torch.as_tensor(known).to(x.dtype)])
            labels = torch.cat([labels, torch.as_tensor(o["known_labels"]).to(torch.int64)])
        elif cfg.batch_size > 1:  # uninformed: the rest is unknown; repeat the guess
            x = x.repeat(cfg.batch_size, *([1] * (x.ndim - 1)))
            labels = labels.repeat(cfg.batch_size)
        logits = torch.nn.functional.one_hot(labels, cfg.num_classes).double()
        loss = float(-scores[best]) if math.isfinite(float(scores[best])) else math.inf
        entry: dict[str, Any] = {"iteration": 1, "gradient_loss": loss, "chosen": best,
                                 "scores": scores.tolist()}
        if cfg.keep_iterates:
            entry["inputs"] = cfg.report(x)
        return Attempt(inputs=x.to(problem.device, problem.dtype),
                       label_logits=logits.to(problem.device, problem.dtype),
                       gradient_loss=loss, iterations=1, history=[entry])
