"""Building a run: its dataset (and held-out split), partition, initial model, runs folder, client
schedule and the check that every round can draw its clients — everything
:meth:`fedlab.engine.loop.Simulation.build` validates before anything is created on disk.
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedlab.config import Config, ConfigError
from fedlab.data import Dataset, load_dataset
from fedlab.data.holdout import hold_out_validation
from fedlab.data.partition import Partition, make_partition
from fedlab.engine.sampling import BERNOULLI_RETRIES, load_schedule, sample_clients


@lru_cache(maxsize=8)
def _cached_dataset(name: str, device: str, train_size: int | None, test_size: int | None, seed: int,
                    as_cifar_shape: bool) -> Dataset:
    return load_dataset(name, device=device, train_size=train_size, test_size=test_size, seed=seed,
                        as_cifar_shape=as_cifar_shape)


def _held_out(dataset: Dataset, size: int | None) -> Dataset:
    """:func:`hold_out_validation`, its ``ValueError`` reported as the config's error (``validation_size``)."""
    try:
        return hold_out_validation(dataset, size)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def build_dataset(config: Config) -> Dataset:
    """The config's dataset on its device (cached in-process: notebooks run many configs on one).

    With ``validation_size`` set, the returned dataset is :func:`hold_out_validation` of it: clients
    train on the rest of the training set and the run is evaluated on the held-out part.
    """
    # Subsets are drawn with seed 0 unless the config asks for per-seed data: the data a method
    # trains on should not change with the training seed.
    full = _cached_dataset(config.dataset, config.device, config.train_size, config.test_size, 0,
                           config.as_cifar_shape)
    return _held_out(full, config.validation_size)


def build_partition(config: Config, dataset: Dataset) -> Partition:
    """The config's partition of ``dataset``'s training set (:func:`fedlab.data.partition.make_partition`)."""
    labels = dataset.y_train.cpu().numpy()
    try:
        params: dict[str, Any] = dict(config.partition_params)
        seed = config.seed if config.partition_seed is None else config.partition_seed
        return make_partition(config.partition, labels, config.n_clients, seed=seed,
                              alpha=config.alpha, classes_per_client=config.classes_per_client,
                              shards_per_client=config.shards_per_client,
                              natural_clients=dataset.natural_clients, **params)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"partition: {err}") from None


def _load_theta0(module: torch.nn.Module, theta0: Tensor, model_name: str, dataset: Dataset) -> str:
    """Copy a user θ₀ into ``module`` (so ``FlatModel.theta0()`` returns it); its SHA-256 for the key."""
    from fedlab.models.functional import load_flat_, param_spec

    d = param_spec(module).dim
    if not isinstance(theta0, Tensor):
        raise ConfigError(f"theta0 must be a torch.Tensor, a flat vector of {d} parameters "
                          f"(got {type(theta0).__name__})")
    if theta0.ndim != 1 or theta0.numel() != d:
        raise ConfigError(f"theta0 has shape {tuple(theta0.shape)} but model {model_name!r} for input "
                          f"{dataset.input_shape} and {dataset.n_classes} classes has d={d} parameters; pass a "
                          "flat vector of shape (d,) (fedlab.models.functional.flatten_params(module))")
    if not theta0.is_floating_point() or not bool(torch.isfinite(theta0).all()):
        raise ConfigError(f"theta0 must hold finite floating-point values (dtype {theta0.dtype})")
    load_flat_(module, theta0.detach())
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters() if p.requires_grad])
    return hashlib.sha256(flat.cpu().contiguous().view(torch.uint8).numpy()).hexdigest()


def check_runs_dir(root: Path) -> None:
    """ConfigError unless ``root`` is (or can be created as) a writable folder; creates nothing."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"runs_dir={str(root)!r} is a file, not a folder; give runs_dir a folder")
    existing = root.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"runs_dir={str(root)!r} cannot be created: {existing} is a file, not a folder")
    if not _writable(existing):
        raise ConfigError(f"runs_dir={str(root)!r} is not writable ({existing} denies writing); "
                          "give runs_dir a folder you can write to")


def _writable(folder: Path) -> bool:
    """Whether files can be created in ``folder``: permissions, and not a read-only mount (which
    ``os.access`` does not report to root)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        return not os.statvfs(folder).f_flag & os.ST_RDONLY
    except (AttributeError, OSError):  # no statvfs (Windows): permissions are all we can tell
        return True


def runs_dir_problem(root: Path) -> ConfigError | None:
    """:func:`check_runs_dir`'s error for ``root``, or None when runs can be written there."""
    try:
        check_runs_dir(root)
    except ConfigError as err:
        return err
    return None


def load_run_schedule(config: Config) -> list[list[int]] | None:
    """The validated client schedule of a ``sampling="schedule"`` config (ConfigError naming the file)."""
    if config.sampling != "schedule":
        return None
    try:
        return load_schedule(config.schedule_path, config.n_clients, config.rounds)  # eligibility: build()
    except ValueError as err:
        raise ConfigError(str(err)) from None


UNDRAWABLE_RISK = 1e-12
"""Below this chance that some round's Bernoulli draw fails, no round is drawn ahead (see
:func:`check_rounds_drawable`)."""


def undrawable_risk(config: Config, eligible: np.ndarray) -> float:
    """An upper bound on the chance that some round cannot be drawn: only Bernoulli sampling can fail, a
    round when all :data:`BERNOULLI_RETRIES` draws are empty ((1 − p)^E each, E eligible clients); the
    union bound over rounds."""
    if config.sampling != "bernoulli":
        return 0.0
    empty = (1.0 - config.participation) ** int(eligible.size)
    return min(1.0, config.rounds * empty**BERNOULLI_RETRIES)


def check_rounds_drawable(config: Config, schedule: list[list[int]] | None, eligible: np.ndarray) -> int:
    """Draw every round's clients ahead when a failure is possible (:func:`undrawable_risk` ≥
    :data:`UNDRAWABLE_RISK`), so it fails before anything is written; returns the rounds drawn (else 0).
    Each round has its own generator, so drawing ahead changes no number."""
    if undrawable_risk(config, eligible) < UNDRAWABLE_RISK:
        return 0
    for t in range(config.rounds):
        try:
            sample_clients(t, config.n_clients, config.participation, seed=config.seed, mode=config.sampling,
                           schedule=schedule, eligible=eligible)
        except RuntimeError as err:
            raise ConfigError(f"participation={config.participation!r} with sampling={config.sampling!r} and "
                              f"n_clients={config.n_clients}: {err} (round {t}); raise participation") from None
    return config.rounds
