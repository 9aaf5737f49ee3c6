"""A study's runs: every (cell, arm, seed) as a :class:`fedlab.Config`, the committed records that already hold
them, and the budget estimate from measured seconds.

A planned run is matched to a committed record by its config (every field that changes a number), never by
a name: a run that any earlier experiment committed with the same config is that run's record, and a resumed
study trains nothing twice (:func:`committed_runs`).
"""
from __future__ import annotations

import gzip
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.study.calibrate import load_calibration
from lab.study.spec import CALIBRATED, Arm, Cell, Study, StudyError, out_dir

__all__ = ["StudyRun", "committed_runs", "estimate", "measured_seconds", "planned_runs", "run_config",
           "seconds_of", "study_configs"]


@dataclass(frozen=True)
class StudyRun:
    """One run of a study: an arm in a cell at a seed."""

    cell: Cell
    arm: Arm
    seed: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.cell.name, self.arm.name, self.seed)

    def label(self) -> str:
        return f"{self.cell.name} {self.arm.name} s{self.seed}"


def planned_runs(study: Study, stage: int | None = None) -> list[StudyRun]:
    """Every run of the study (of one ``stage``: 1 the map, 2 its amendments' stage 2), cheapest local work
    first, then seed-major inside it (a session that stops early leaves whole seeds of the cheap cells, which
    pair across arms and cells), the controls with the arms of their K; stage 2 after the map, also seed-major."""
    out = []
    if stage in (None, 1):
        for k in sorted(study.local_steps):
            for seed in study.seeds:
                out += [StudyRun(Cell(s, k), a, seed) for s in study.splits for a in study.arms]
                out += [StudyRun(a.cell, a, seed) for a in study.controls
                        if a.cell is not None and a.cell.local_steps == k]
    if stage in (None, 2):
        for k in sorted(study.local_steps):
            for seed in study.seeds:
                out += [StudyRun(a.cell, a, seed) for a in study.stage2 if a.cell is not None and a.cell.local_steps == k]
    return out


def run_config(study: Study, run: StudyRun, calibrated: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """The Config of ``run``: the study's federation, the cell's split and K, the arm's method and
    hyperparameters (a ``calibrated`` value from ``calibrated[arm]``), the seed drawing its own partition.
    :class:`StudyError` when a calibrated value is not measured yet."""
    from fedlab.config import Config

    params = dict(run.arm.params)
    for name, value in params.items():
        if value == CALIBRATED:
            got = (calibrated or {}).get(run.arm.name, {})
            if name not in got:
                raise StudyError(f"{run.arm.name}: {name} is calibrated and not measured yet "
                                 "(python -m lab study train measures it first)")
            params[name] = got[name]
    return Config.from_dict({**study.federation, **study.splits[run.cell.split], "local_steps": run.cell.local_steps,
                             "algorithm": run.arm.algorithm, "algorithm_params": params, "seed": run.seed,
                             "partition_seed": run.seed})


def study_configs(study: Study, runs: Sequence[StudyRun]) -> dict[tuple[str, str, int], Any]:
    """The Config of each of ``runs`` whose hyperparameters are known (a calibrated arm's wait for its calibration)."""
    calibrated = load_calibration(out_dir(study) / "calibration.json")
    out = {}
    for run in runs:
        try:
            out[run.key] = run_config(study, run, calibrated)
        except StudyError:
            continue  # waits for its calibration
    return out


def _plain(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=str)


def _hashed(config_block: Mapping[str, Any]) -> str | None:
    """The canonical hashed fields of a record's config block (None when it is no valid Config)."""
    from fedlab.config import Config

    try:
        return _plain(Config.from_dict(dict(config_block)).hashed_fields())
    except (TypeError, ValueError):
        return None


def committed_runs(configs: Mapping[tuple[str, str, int], Any], directory: Path | None = None) \
        -> dict[tuple[str, str, int], str]:
    """Which planned runs (key → Config) a committed record already holds: key → record key. A record matches
    when its config block's hashed fields equal the run's; the match is then loaded through
    :func:`lab.evidence.records.load_record` with the run's config, which checks the file against the
    evidence manifest and refuses a record made for another config."""
    from lab.evidence.records import SUFFIX, load_record, records_dir

    folder = records_dir() if directory is None else Path(directory)
    want: dict[str, list[tuple[str, str, int]]] = {}
    algorithms = set()
    for key, config in configs.items():
        want.setdefault(_plain(config.hashed_fields()), []).append(key)
        algorithms.add(config.algorithm)
    out: dict[tuple[str, str, int], str] = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
        record = path.name.removesuffix(SUFFIX)
        if record.rsplit("-", 1)[0] not in algorithms:
            continue
        try:
            block = json.loads(gzip.decompress(path.read_bytes()))["config"]["config"]
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            continue  # a damaged file is no match; the integrity check names it
        keys = want.get(_hashed(block) or "")
        if not keys:
            continue
        for key in keys:
            if key not in out and load_record(record, folder, config=configs[key]) is not None:
                out[key] = record
    return out


def measured_seconds(directory: Path | None = None) -> dict[tuple[str, str], float]:
    """Mean measured wall seconds of the rerun's committed records (``meta.rerun``), per (method, split key
    of the rerun): the cost the budget estimate is made from."""
    from lab.evidence.records import SUFFIX, records_dir

    folder = records_dir() if directory is None else Path(directory)
    got: dict[tuple[str, str], list[float]] = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        try:
            meta = json.loads(gzip.decompress(path.read_bytes())).get("meta", {})
        except (OSError, EOFError, ValueError):
            continue
        if meta.get("rerun") and "wall_seconds" in meta:
            got.setdefault((meta["method"], meta["split"]), []).append(float(meta["wall_seconds"]))
    return {k: statistics.fmean(v) for k, v in got.items()}


def seconds_of(run: StudyRun, base_k: int, seconds: Mapping[tuple[str, str], float]) -> tuple[float, str]:
    """Estimated seconds of one run and where the number comes from: the method's mean over the rerun's
    splits (a split the rerun did not train costs the mean of those it did), scaled by K / base K."""
    per_split = [v for (m, _), v in seconds.items() if m == run.arm.algorithm]
    if not per_split:  # a method the rerun did not train at all: FedSAM's cost if it takes two gradients
        from fedlab.algorithms import algorithm_class

        twin = "fedsam" if algorithm_class(run.arm.algorithm).grad_evals_per_step >= 2 else "fedavg"
        per_split = [v for (m, _), v in seconds.items() if m == twin]
        source = f"{twin}'s"
    else:
        source = "its own"
    if not per_split:
        raise StudyError("no measured seconds for FedAvg or FedSAM in the committed rerun records")
    return statistics.fmean(per_split) * run.cell.local_steps / base_k, source


def estimate(study: Study, runs: Sequence[StudyRun], committed: Mapping[tuple[str, str, int], str],
             seconds: Mapping[tuple[str, str], float], base_k: int = 50, budget_hours: float | None = None) \
        -> dict[str, Any]:
    """The cost of ``runs`` on ``study.raw['budget']['workers']`` workers, from measured seconds (:func:`measured_seconds`,
    at K = ``base_k``): committed runs cost 0, each calibration one run of its cell at the rerun's FedSAM cost
    (when ``runs`` hold the map's); checked against ``budget_hours`` (default the study file's budget)."""
    workers = int(study.raw["budget"]["workers"])
    budget = float(study.raw["budget"]["hours"]) if budget_hours is None else float(budget_hours)
    parts: dict[str, dict[str, float]] = {}
    for run in runs:
        part = parts.setdefault(f"{run.cell.name} {run.arm.name}", {"runs": 0, "committed": 0, "seconds": 0.0})
        part["runs"] += 1
        if run.key in committed:
            part["committed"] += 1
            continue
        part["seconds"] += seconds_of(run, base_k, seconds)[0]
    calibration = 0.0
    for arm in (study.raw.get("calibration") or {}) if any(r.arm.stage == 1 for r in runs) else ():
        cell = study.arm(arm).cell
        assert cell is not None
        calibration += seconds_of(StudyRun(cell, Arm("calibration", "fedsam", {}), 0), base_k, seconds)[0]
    total = sum(p["seconds"] for p in parts.values()) + calibration
    hours = total / workers / 3600
    return {"parts": parts, "calibration_seconds": calibration, "total_seconds": total, "workers": workers,
            "hours": hours, "budget_hours": budget,
            "fits": hours <= budget and math.isfinite(hours),
            "runs": len(runs), "committed": sum(1 for r in runs if r.key in committed)}
