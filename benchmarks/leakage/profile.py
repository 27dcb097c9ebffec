"""Sizes of one run of the leakage curves (profiles), the output columns, the dataset and
models every job builds."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from leakaudit import data, models

COLUMNS = ("defense", "point", "attack", "model", "stage", "batch_size", "local_steps",
           "sigma", "eps_release", "eps_train", "mu", "asr", "psnr", "ssim",
           "identification", "bound_asr", "bound_id", "label_accuracy")
SWEEP_DEFENSES = ("fed-cdp", "fed-sdp-client", "fed-alpha-cdp", "adaclip")
#: training rounds behind each stage (weights after that many undefended FedAvg rounds)
STAGES = {"initial": 0, "round1": 1, "round5": 5}
DELTA = 1e-5
#: the leak point at which each defense site acts (its noise protects that point and later)
SITE_POINT = {"example": 2, "client": 1, "server": 0}


@dataclasses.dataclass(frozen=True)
class Profile:
    """Sizes of one run of the curves (every attack budget is explicit here)."""

    dataset: str
    models: tuple[str, ...]
    stages: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    local_steps: tuple[int, ...]
    grid_attacks: tuple[str, ...]
    sigmas: tuple[float, ...]
    sweep_defenses: tuple[str, ...]
    #: batch size -> attacks of the noise sweep
    sweep_attacks: tuple[tuple[int, tuple[str, ...]], ...]
    points: tuple[int, ...]
    #: attack -> optimiser steps
    iterations: tuple[tuple[str, int], ...]
    examples: int
    client_lr: float
    #: the standard training run (eps at each sigma; stages): N, K, T, L, B, lr, optimizer
    train: tuple[tuple[str, Any], ...]
    #: batches per sweep cell
    sweep_examples: int = 1
    #: sigmas at which the standard run's sound eps is computed (one training run each)
    eps_sigmas: tuple[float, ...] = ()
    #: adaptive refinement passes of the sigma grid
    refine: int = 0
    #: attack -> options (the schedule and TV of the signed-Adam attacks)
    options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    restarts: int = 1
    #: defense -> attacks of its sweep lines at every B instead of ``sweep_attacks`` (the
    #: per-tensor attacks against per-layer clipping)
    defense_attacks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: batches per batch size of the label-count section (c)
    label_batches: int = 10
    #: batch size -> factor on every grid attack's steps (B = 8 needs ~4x iDLG's B = 1 steps)
    budget_scale: tuple[tuple[int, int], ...] = ()
    #: section (d), the prior-aware attack: defenses, sigmas, candidate-set sizes, trials per
    #: cell, pool the targets and candidates come from, the defenses' clip
    id_defenses: tuple[str, ...] = ()
    id_sigmas: tuple[float, ...] = ()
    id_ks: tuple[int, ...] = (2, 10, 100)
    id_trials: int = 300
    id_pool: int = 300
    id_clip: float = 0.5


_TRAIN = (("clients", 10), ("clients_per_round", 5), ("rounds", 10), ("local_steps", 5),
          ("batch_size", 32), ("lr", 0.01), ("optimizer", "adam"))
_SIGMAS = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0)
_ADAM = (("tv_weight", 0.01), ("schedule", "cosine"))
_OPTIONS = (("ig", _ADAM), ("fedavg", _ADAM), ("ig-layer", _ADAM))
PROFILES: dict[str, Profile] = {
    "quick": Profile(
        dataset="digits", models=("lenet",), stages=("initial",),
        batch_sizes=(1, 8), local_steps=(1, 2),
        grid_attacks=("ig", "fedavg", "idlg", "fedavg-l2"), sigmas=_SIGMAS,
        sweep_defenses=("fed-cdp", "fed-sdp-client", "fed-alpha-cdp"),
        sweep_attacks=((1, ("ig",)),), points=(1,),
        defense_attacks=(("fed-alpha-cdp", ("idlg-layer",)),),
        iterations=(("ig", 300), ("fedavg", 300), ("idlg", 50), ("fedavg-l2", 30),
                    ("idlg-norm", 20), ("idlg-layer", 20), ("ig-layer", 300)),
        examples=1, client_lr=0.01, train=_TRAIN, sweep_examples=3,
        eps_sigmas=(1.0,), refine=2, options=_OPTIONS, budget_scale=((8, 4),),
        id_defenses=("fed-cdp", "fed-sdp-client"), id_sigmas=(0.5, 1.0, 2.0)),
    "full": Profile(
        dataset="fashion-mnist", models=("lenet", "relu_cnn"),
        stages=("initial", "round1", "round5"),
        batch_sizes=(1, 2, 4, 8, 16, 32), local_steps=(1, 2, 5, 10),
        grid_attacks=("ig", "fedavg", "idlg", "fedavg-l2"),
        sigmas=(0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 0.5, 1.0,
                2.0),
        sweep_defenses=SWEEP_DEFENSES,
        sweep_attacks=((1, ("ig", "idlg-norm", "idlg-layer")), (4, ("ig", "idlg-layer")),
                       (8, ("ig", "ig-layer"))),
        points=(0, 1, 2),
        iterations=(("ig", 2000), ("fedavg", 2000), ("idlg", 300), ("fedavg-l2", 300),
                    ("idlg-norm", 300), ("idlg-layer", 300), ("ig-layer", 2000)),
        examples=2, client_lr=0.01, train=_TRAIN, sweep_examples=4,
        eps_sigmas=(0.1, 0.3, 0.5, 1.0, 2.0), refine=3, options=_OPTIONS, restarts=2,
        defense_attacks=(("fed-alpha-cdp", ("idlg-layer", "ig-layer")),),
        budget_scale=((8, 4), (16, 8), (32, 8)),
        id_defenses=("fed-cdp", "fed-sdp-client"), id_sigmas=(0.5, 1.0, 2.0),
        id_trials=1000),
}
#: what the tiny profile changes in the quick one (one optimiser step per attack)
TINY = dict(batch_sizes=(1, 2), local_steps=(1, 2), sigmas=(0.0, 1.0),
            sweep_defenses=("fed-cdp",), sweep_attacks=((1, ("idlg",)),), points=(2,),
            iterations=(("ig", 2), ("fedavg", 2), ("idlg", 1), ("fedavg-l2", 1),
                        ("idlg-norm", 1), ("idlg-layer", 1), ("ig-layer", 2)),
            sweep_examples=1, eps_sigmas=(1.0,), refine=1, restarts=1, defense_attacks=(),
            train=(("clients", 2), ("clients_per_round", 2), ("rounds", 1),
                   ("local_steps", 1), ("batch_size", 4), ("lr", 0.01), ("optimizer", "sgd")),
            label_batches=1, budget_scale=(), id_defenses=("fed-cdp",), id_sigmas=(1.0,),
            id_ks=(2, 10), id_trials=20, id_pool=20)
PROFILES["tiny"] = dataclasses.replace(PROFILES["quick"], **TINY)


#: what one identification cell runs: defense x sigma, every k on the same releases
ID_COLUMNS = ("defense", "sigma", "k", "trials", "successes", "success", "ci_low",
              "ci_high", "kappa", "mu", "bound", "ratio", "scorer")
#: two-sided confidence level of the identification intervals (Clopper-Pearson)
ID_CONFIDENCE = 0.95


@functools.lru_cache(maxsize=2)
def load_dataset(name: str, seed: int) -> data.Dataset:
    """``data.load`` once per process (every job reads the same data; the jobs never change
    it), not once per job."""
    return data.load(name, seed=seed)


def build_model(name: str, ds: data.Dataset, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    if name == "lenet":
        return models.lenet(ds.in_channels, ds.image_size, ds.num_classes, generator=gen)
    if name == "relu_cnn":
        return models.relu_cnn(ds.in_channels, ds.image_size, ds.num_classes, generator=gen)
    raise ValueError(f"model must be 'lenet' or 'relu_cnn', got {name!r}")


def csv_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The CSV's rows: floats with 6 significant digits."""
    return [{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}
            for row in rows]
