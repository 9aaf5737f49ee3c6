"""Grids of experiments and the tables the papers print from them.

A *sweep* is the cartesian product of a few :class:`~fedlab.config.Config` fields, repeated over
seeds::

    runs = sweep(base, {"algorithm": ["fedavg", "fedsam", "fedvssam"]}, seeds=[0, 1, 2])
    summary_table(runs, target=0.75)

Every run goes through :func:`fedlab.run` (cached under ``runs/``, resumed when interrupted) on the
backends of :mod:`fedlab.sweep.backends`, with the same bits on each. Fields that must change
*together* (a partition and its parameter, a method and its hyperparameters) belong in separate
sweeps over different ``base`` configs, whose results can be summarised in one table."""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedlab.config import _NOT_HASHED, Config, ConfigError
from fedlab.results import RunResult
from fedlab.sweep.backends import (BACKENDS, MissingExtraError, RunFailure, SweepError, SweepInterrupted,
                                    execute)
from fedlab.uncertainty import mean_interval

__all__ = ["BACKENDS", "MAX_RUNS", "MissingExtraError", "RunFailure", "SweepError", "SweepInterrupted",
           "expand_grid", "rounds_to_target", "summary_table", "sweep"]

MAX_RUNS = 1000
"""The most runs a sweep expands to unless ``max_runs`` is raised: past it a grid is more likely a
slip (a list pasted where a value was meant) than a plan. Checked from the list lengths alone."""

# Config fields that never identify a group of runs: the seed is averaged over, and the fields that
# are not hashed change no number.
_NOT_GROUPED = _NOT_HASHED | {"seed"}


def _field_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Config))


def _same(value: Any) -> str:
    """A canonical text of a grid value, so 0.1 and 0.10 or two equal dicts count as the same value."""
    return json.dumps(value, sort_keys=True, default=str)


def expand_grid(base: Config, grid: Mapping[str, Sequence[Any]], seeds: Sequence[int] = (0,), *,
                max_runs: int = MAX_RUNS) -> list[Config]:
    """The configs of a sweep, in order: grid combinations (first key slowest), then seeds.

    ConfigError naming the key, before anything is built: a key that is not a Config field (or is
    ``seed``), a value that is not a non-empty list, a seed or value listed twice (the same run is one
    measurement, not two), more than ``max_runs`` runs, or an invalid combination."""
    names = _field_names()
    for key, values in grid.items():
        if key == "seed":
            raise ConfigError("grid key 'seed' is not allowed: pass the seeds as sweep(..., seeds=[...]) so that "
                              "summary_table can average over them")
        if key not in names:
            raise ConfigError(f"grid key {key!r} is not a Config field; allowed: {', '.join(sorted(names))}")
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence) or len(values) == 0:
            raise ConfigError(f"grid[{key!r}] must be a non-empty list of values, got {values!r}")
        twice = _first_repeat([_same(v) for v in values])
        if twice is not None:
            raise ConfigError(f"grid[{key!r}] lists {values[twice]!r} twice: its runs would be the same runs "
                              "counted again, not independent evidence; list each value once")
    seeds = list(seeds)
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad or not seeds:  # before the repeat check: True == 1, so [True, 1] would read as seed 1 listed twice
        raise ConfigError(f"seeds={seeds!r}" + (f": {bad[0]!r} is not a seed" if bad else "") +
                          "; allowed: a non-empty list of integers ≥ 0 (a bool is not a seed)")
    twice = _first_repeat(seeds)
    if twice is not None:
        raise ConfigError(f"seeds {seeds} list seed {seeds[twice]} twice: a seed names one run, so a repeat "
                          "is that run again, not an independent one; list each seed once")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise ConfigError(f"max_runs={max_runs!r} is invalid; allowed: an integer ≥ 1")
    sizes = [len(v) for v in grid.values()]
    n_runs = math.prod(sizes) * len(seeds)
    if n_runs > max_runs:
        shape = " × ".join([f"{len(v)} {k}" for k, v in grid.items()] + [f"{len(seeds)} seeds"])
        raise ConfigError(f"the grid has {n_runs:,} runs ({shape}), more than max_runs={max_runs}; each run "
                          f"trains a model: if you mean it, pass max_runs={n_runs} (a grid file: max_runs: {n_runs})")
    keys = list(grid)
    configs = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        changes = dict(zip(keys, combo))
        for seed in seeds:
            try:
                configs.append(base.replace(**changes, seed=seed))
            except ConfigError as err:
                raise ConfigError(f"grid combination {changes} (seed {seed}): {err}") from None
    return configs


def _first_repeat(items: Sequence[Any]) -> int | None:
    """The index of the first item equal to an earlier one, ``None`` if all differ."""
    seen: set[Any] = set()
    for i, item in enumerate(items):
        if item in seen:
            return i
        seen.add(item)
    return None


def sweep(base: Config, grid: dict[str, list], seeds: list[int] = [0], *,  # noqa: B006 — read-only default
          progress: bool = True, backend: str = "local", address: str | None = None, cpus_per_run: int = 1,
          gpus_per_run: float = 0, max_workers: int | None = None, fail_fast: bool = False,
          max_runs: int = MAX_RUNS, logger: Any = None) -> list[RunResult]:
    """Run (or load from ``runs/``) every combination of ``grid`` × ``seeds`` on top of ``base``.

    Results come back in the order of :func:`expand_grid`; diverged runs are returned like finished
    ones (check ``status``). ``backend`` is ``"local"`` (``max_workers`` processes, default usable cores
    ÷ ``cpus_per_run``), ``"sequential"`` or ``"ray"`` (``address`` as for ``ray.init``; ``gpus_per_run``
    may be a fraction); every run computes at ``cpus_per_run`` threads, so all backends give the same
    bits. A failing run does not stop the others: :class:`SweepError` reports every failure at the end
    and carries the finished results (``fail_fast``: start nothing after the first). Grid points that
    differ only in fields that change no number name one run, trained and counted once. Ctrl-C raises
    :class:`SweepInterrupted` (running runs keep their checkpoints; calling again finishes the rest).
    ``logger``: ``"tensorboard"`` or a :class:`fedlab.tracking.Logger`, handed every trained run's rounds."""
    configs = expand_grid(base, grid, seeds, max_runs=max_runs)
    keys = list(grid)
    labels = [", ".join([f"{k}={_short(getattr(c, k))}" for k in keys] + [f"seed={c.seed}"]) for c in configs]
    return execute(configs, labels=labels, backend=backend, address=address, cpus_per_run=cpus_per_run,
                   gpus_per_run=gpus_per_run, max_workers=max_workers, fail_fast=fail_fast, progress=progress,
                   logger=logger)


def rounds_to_target(metrics: pd.DataFrame, target: float, *, exact: bool = False) -> float:
    """The first evaluated round whose ``test_acc`` (a fraction) is ≥ ``target``; NaN if none.

    Rounds without evaluation are skipped, so with ``eval_every = 5`` this is an upper bound on the true
    first round, as in the papers. ``exact=True`` answers at round resolution or not at all (nothing is
    interpolated: accuracy is not monotone in the round): every round up to the answer must have been
    evaluated, else ValueError names the first that was not (use ``eval_every=1`` with ``eval_subsample``)."""
    if not (isinstance(target, (int, float)) and math.isfinite(target) and 0 <= target <= 1):
        raise ValueError(f"target must be an accuracy in [0, 1] (test_acc is a fraction), got {target!r}")
    evaluated = metrics[["round", "test_acc"]].dropna()
    hit = evaluated[evaluated["test_acc"] >= target]
    first = float(hit["round"].iloc[0]) if len(hit) else float(metrics["round"].max())
    missing = sorted(set(range(1, int(first) + 1)) - set(evaluated["round"].astype(int))) if exact else []
    if missing:
        raise ValueError(f"rounds_to_target(exact=True): round {missing[0]} was not evaluated, so the first round "
                         f"reaching {target} is not known to the round; run with eval_every=1")
    return first if len(hit) else float("nan")


def _group_key(config: Config, paired: bool = False) -> str:
    values = {k: v for k, v in config.to_dict().items()
              if k not in _NOT_GROUPED and not (paired and k == "partition_seed")}
    return json.dumps(values, sort_keys=True, default=str)


def _short(value: Any) -> Any:
    """A table-friendly form of a config value (dicts as compact ``k=v`` strings)."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else "defaults"
    return value


def _uplink_per_client(res: RunResult, column: str) -> float:
    """Mean floats one client sends (or receives) per round, in units of the model size d."""
    # records (lab.evidence.records) carry no θ, but their summary has the model size
    d = int(res.theta.numel()) if res.theta is not None else int(res.summary["n_params"])
    m = res.metrics
    return float((m[column] / (m["n_sampled"] * d)).mean())


def summary_table(results: Iterable[RunResult], target: float | None = None, *, paired: bool = False) -> pd.DataFrame:
    """One row per group of runs that differ only in their seed, in order of first appearance; with
    ``paired`` the partition seed counts as part of the seed (each seed drew its own partition, as the
    paired protocol's runs do: ``partition_seed = seed``).

    Columns: the config fields that vary between groups (always ``algorithm``); ``n_seeds``,
    ``n_collapsed``, ``n_diverged`` (collapsed and diverged seeds are never averaged in);
    ``final_acc_mean`` / ``_std`` (ddof 1) / ``_ci95`` (the 95 % Student-t half-width,
    :func:`fedlab.mean_interval`) over the finished seeds and ``final_acc_seeds`` (every seed's value);
    ``best_acc``; with ``target``, ``rounds_to_target`` (NaN if any seed never reaches it, the papers'
    "–") and ``reached``; ``uplink_x_d`` / ``downlink_x_d`` (floats per client and round ÷ d: FedAvg 1,
    SCAFFOLD 2); ``sec_per_round``; ``status`` (``finished``, or the seeds' statuses joined by ``/``).
    Accuracies are fractions. A run passed twice (the same run folder) is counted once."""
    results = list(results)
    if not results:
        raise ValueError("summary_table needs at least one RunResult")
    groups: dict[str, list[RunResult]] = {}
    seen: set[str] = set()
    for res in results:
        # the run's folder identifies it (a custom dataset's runs share a config but not a folder)
        run_key = str(res.run_dir) if res.run_dir else res.config.hash()
        if run_key in seen:
            continue
        seen.add(run_key)
        groups.setdefault(_group_key(res.config, paired), []).append(res)
    configs = [grp[0].config.to_dict() for grp in groups.values()]
    varying = [name for name in _field_names() if name not in _NOT_GROUPED and not (paired and name == "partition_seed")
               and len({json.dumps(c[name], sort_keys=True, default=str) for c in configs}) > 1]
    if "algorithm" not in varying:
        varying.insert(0, "algorithm")
    rows = []
    for grp, cfg in zip(groups.values(), configs):
        ok = [r for r in grp if r.status == "finished"]
        finals = np.array([r.final_accuracy for r in ok], dtype=float)
        bests = np.array([r.metrics["test_acc"].max() for r in ok], dtype=float)
        row: dict[str, Any] = {name: _short(cfg[name]) for name in varying}
        row["n_seeds"] = len(grp)
        row["n_collapsed"] = sum(r.status == "collapsed" for r in grp)
        row["n_diverged"] = sum(r.status == "diverged" for r in grp)
        est = mean_interval(finals) if len(ok) and np.isfinite(finals).all() else None
        row["final_acc_mean"] = est.mean if est else float("nan")
        row["final_acc_std"] = float(finals.std(ddof=1)) if len(ok) > 1 else float("nan")
        row["final_acc_ci95"] = est.half_width if est else float("nan")
        row["final_acc_seeds"] = " ".join(f"{r.config.seed}:{r.final_accuracy:.4f}" for r in grp)
        row["best_acc"] = float(bests.mean()) if len(ok) else float("nan")
        if target is not None:
            hits = np.array([rounds_to_target(r.metrics, target) for r in grp], dtype=float)
            row["rounds_to_target"] = float(hits.mean()) if not np.isnan(hits).any() else float("nan")
            row["reached"] = int((~np.isnan(hits)).sum())
        row["uplink_x_d"] = float(np.mean([_uplink_per_client(r, "uplink_floats") for r in grp]))
        row["downlink_x_d"] = float(np.mean([_uplink_per_client(r, "downlink_floats") for r in grp]))
        row["sec_per_round"] = float(np.mean([r.metrics["wall_seconds"].mean() for r in grp]))
        statuses = [r.status for r in grp]
        row["status"] = "finished" if all(s == "finished" for s in statuses) else "/".join(statuses)
        rows.append(row)
    return pd.DataFrame(rows)
