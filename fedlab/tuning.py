"""Hyperparameter selection on a validation set held out from the training data (never the test set).

``fedlab.tune(base, grid=None, rounds=..., seed=0)`` trains ``base`` once per point of ``grid`` with
``validation_size`` training samples held out (:func:`fedlab.engine.hold_out_validation`: clients
train on the rest, every evaluation is on the held-out part, the test set is not loaded into the
run at all), scores each point, and returns the grid, every score and the choice as a
:class:`TuneResult` that saves itself as CSV + JSON. The papers tune the same way — a small grid of
each method's sensitive hyperparameters per setting — but on the test set; fedlab does not.

Score: the mean validation accuracy over the evaluations in the last quarter of the tuning run
(rounds r > T − ⌈T/4⌉, at least the last evaluation), which is less noisy than the last value alone.
A point whose run diverged or collapsed (:mod:`fedlab.engine.collapse`) is never chosen. Ties go to the
first point in grid order. Call it once per split (partition scheme and α): the choice is per split.

Grid keys are the algorithm's hyperparameter names (and ``"preset"``), or ``"lr"`` (the local
learning rate, a Config field). Each method declares its sensitive hyperparameters' candidates on its
class (``tuning``); :data:`DEFAULT_GRIDS` collects them.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.algorithms import algorithm_class, algorithm_classes
from fedlab.config import Config, ConfigError
from fedlab.data import Dataset
from fedlab.results import RunResult

__all__ = ["DEFAULT_GRIDS", "TUNABLE_CONFIG_FIELDS", "TuneResult", "default_grid", "tune"]

TUNABLE_CONFIG_FIELDS = ("lr",)
"""Config fields a grid may vary besides the algorithm's hyperparameters."""

DEFAULT_GRIDS: dict[str, dict[str, tuple[Any, ...]]] = {cls.name: dict(cls.tuning) for cls in algorithm_classes()}
"""Each method's sensitive hyperparameters and their candidates (the grid ``tune`` uses by default), read from
its class (:attr:`fedlab.algorithms.Algorithm.tuning`), in the figures' order."""


def default_grid(algorithm: str) -> dict[str, tuple[Any, ...]]:
    """The declared grid of ``algorithm`` (a copy); ValueError naming the allowed methods if it is unknown."""
    return dict(algorithm_class(algorithm).tuning)


def _check_grid(algorithm: str, grid: Mapping[str, Sequence[Any]]) -> None:
    cls = algorithm_class(algorithm)
    names = {f.name for f in dataclasses.fields(cls.hparams_cls)} | ({"preset"} if cls.presets else set())
    for key, values in grid.items():
        if key not in names and key not in TUNABLE_CONFIG_FIELDS:
            raise ConfigError(f"grid key {key!r} is neither a hyperparameter of {algorithm} "
                              f"({', '.join(sorted(names))}) nor a tunable Config field "
                              f"({', '.join(TUNABLE_CONFIG_FIELDS)})")
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"grid[{key!r}] must be a non-empty list of values, got {values!r}")


def _points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _apply(base: Config, point: Mapping[str, Any]) -> Config:
    params = dict(base.algorithm_params)
    changes = {}
    for key, value in point.items():
        if key in TUNABLE_CONFIG_FIELDS:
            changes[key] = value
        else:
            params[key] = value
    return base.replace(algorithm_params=params, **changes)


def validation_score(rounds: Sequence[int], accuracies: Sequence[float], total_rounds: int) -> float:
    """Mean accuracy over the evaluations in the last quarter of the rounds (NaN without any)."""
    evaluated = [(int(r), float(a)) for r, a in zip(rounds, accuracies) if not math.isnan(float(a))]
    if not evaluated:
        return float("nan")
    start = total_rounds - math.ceil(total_rounds / 4)
    tail = [a for r, a in evaluated if r > start] or [evaluated[-1][1]]
    return sum(tail) / len(tail)


@dataclass
class TuneResult:
    """The grid, every score and the choice of one tuning (one method on one split)."""

    base: Config  # the config to run with the chosen point (validation_size back to None)
    grid: dict[str, list[Any]]
    table: pd.DataFrame  # one row per grid point: the point, score, final accuracy, status, run key
    best: dict[str, Any]  # the chosen point
    protocol: dict[str, Any] = dataclasses.field(default_factory=dict)  # validation_size, rounds, seed
    runs: list[Any] = dataclasses.field(default_factory=list, repr=False)  # the RunResult of each point (not saved)

    @property
    def best_config(self) -> Config:
        """``base`` with the chosen hyperparameters: the config of the real (test-set) runs."""
        return _apply(self.base, self.best)

    def to_dict(self) -> dict[str, Any]:
        base = {k: v for k, v in self.base.to_dict().items() if k != "runs_dir"}  # a local path, not a setting
        return {"algorithm": self.base.algorithm, "base": base, "grid": self.grid,
                "best": self.best, "protocol": self.protocol, "best_algorithm_params": self.best_config.algorithm_params,
                "scores": json.loads(self.table.to_json(orient="records")),
                "selection": "max mean validation accuracy over the last quarter of rounds; diverged and "
                             "collapsed points excluded; ties to the first point in grid order"}

    def save(self, stem: str | Path) -> dict[str, Path]:
        """Write ``<stem>.csv`` (the table) and ``<stem>.json`` (grid, scores, choice, base config)."""
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        paths = {"csv": stem.with_suffix(".csv"), "json": stem.with_suffix(".json")}
        self.table.to_csv(paths["csv"], index=False, float_format="%.6g")
        paths["json"].write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return paths


def tune(base: Config, grid: Mapping[str, Sequence[Any]] | None = None, *, rounds: int | None = None,
         seed: int = 0, validation_size: int = 5000, dataset: Dataset | None = None,
         progress: bool = True, runner: Callable[..., RunResult] | None = None) -> TuneResult:
    """Select ``base.algorithm``'s hyperparameters on a held-out validation set (never the test set).

    ``grid`` maps hyperparameter names (or ``"lr"``) to candidates; default
    :func:`default_grid`. ``rounds`` shortens the tuning horizon (default ``base.rounds``); ``seed``
    is the one tuning seed; ``validation_size`` training samples are held out (class-balanced,
    seed 0, disjoint from what clients train on). ``dataset`` optionally supplies the full dataset (it
    is split here, its test part is ignored). Each point is run through ``runner(config,
    dataset=dataset)``, default :func:`fedlab.run`, so it is cached under ``runs/`` and resumable like
    any run (a caller with results stored elsewhere passes its own loader). An empty grid returns
    ``base`` unchanged.
    """
    from tqdm import tqdm

    from fedlab.engine import run

    runner = runner if runner is not None else functools.partial(run, progress=False)
    grid = default_grid(base.algorithm) if grid is None else dict(grid)
    _check_grid(base.algorithm, grid)
    tuning = base.replace(validation_size=validation_size, seed=seed,
                          rounds=base.rounds if rounds is None else rounds)
    points = _points(grid) if grid else [{}]
    configs = [_apply(tuning, p) for p in points]  # validates every point before anything is run
    rows, runs = [], []
    for point, cfg in tqdm(list(zip(points, configs)), desc=f"tune {base.algorithm}", disable=not progress,
                           leave=False):
        res = runner(cfg, dataset=dataset)
        runs.append(res)
        m = res.metrics
        score = validation_score(m["round"], m["test_acc"], cfg.rounds)
        rows.append({**point, "score": score, "final_val_acc": res.final_accuracy, "status": res.status,
                     "run": Path(res.run_dir).name})
    table = pd.DataFrame(rows)
    usable = table[(table["status"] == "finished") & table["score"].notna()]
    if len(usable) == 0:
        raise RuntimeError(f"tune({base.algorithm}): every grid point diverged or collapsed:\n"
                           f"{table.to_string(index=False)}")
    best = points[int(usable["score"].idxmax())]
    return TuneResult(base.replace(validation_size=None), {k: list(v) for k, v in grid.items()}, table, best,
                      {"validation_size": validation_size, "rounds": tuning.rounds, "seed": seed}, runs)
