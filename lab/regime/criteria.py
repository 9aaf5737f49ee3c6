"""The regime pilot's pre-registered criteria (``lab/regime/criteria.yaml``), read and checked.

The criteria file (committed before any pilot run) fixes the search space and the stages: the ``fixed``
Config fields, the candidate regimes, the splits, the FedSAM radii and the drift corrections, and each
stage's seeds and arms (a registered method, or one of :data:`PLACEHOLDERS`). This module only reads it,
with the amendment that governs stage B (:mod:`lab.regime.amendment`); the plan
(:mod:`lab.regime.pilot_plan`) and the analysis read what it returns.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.study.spec import StudyError, need, read_design

__all__ = ["CRITERIA_FILE", "DEPENDENT_ARMS", "PLACEHOLDERS", "REGISTERED_LATER", "STAGES", "Candidate", "Criteria",
           "CriteriaError", "load_criteria"]

CRITERIA_FILE = Path(__file__).with_name("criteria.yaml")
STAGES = ("A", "B")


CriteriaError = StudyError
"""The pilot's name for a pre-registered file that cannot be read as its plan (one error for every study file)."""


REGISTERED_LATER = frozenset({"fedlesam_s", "fedlesam_d", "dp_fedavg", "dp_fedsam", "fedscar", "fedfsa"})
"""Methods registered after the pilot decided and the rerun was planned (issue 45). The pilot's R5 share and the
rerun's ``methods: all`` mean the registry they read, so these are left out by name here, in one place: else each
new method would move a committed estimate (and a pre-registered file would be edited for it)."""


@dataclass(frozen=True)
class Candidate:
    """One candidate regime of the search space."""

    name: str
    model: str
    train_size: int | None
    local_steps: int
    lr: float
    rounds: int


@dataclass(frozen=True)
class Criteria:
    """The parts of ``criteria.yaml`` the plan and the analysis read (``raw``: the whole file)."""

    path: Path
    digest: str  # SHA-256 of the file's bytes: every record names the criteria it was planned from
    fixed: dict[str, Any]
    candidates: dict[str, Candidate]
    splits: dict[str, dict[str, Any]]
    rho_grid: tuple[float, ...]
    drift_corrections: tuple[str, ...]
    stages: dict[str, dict[str, Any]]
    last_k: int
    raw: dict[str, Any] = field(repr=False)
    amendment: Any = None  # lab.regime.amendment.Amendment: rules added before the runs they govern

    def stage_fixed(self, stage: str) -> dict[str, Any]:
        """The ``fixed`` Config fields of ``stage``: the file's, with an amendment's overrides for it."""
        extra = self.amendment.stage_fixed.get(stage, {}) if self.amendment is not None else {}
        return {**self.fixed, **extra}

    def seeds(self, stage: str) -> tuple[int, ...]:
        return tuple(self.stages[stage]["seeds"])

    def rho_grid_for(self, candidate: str) -> tuple[float, ...]:
        """The FedSAM radii screened for ``candidate``: stage A's ``cnn_rho_grid`` for the cnn, else ``rho_grid``."""
        thinned = self.stages["A"].get("cnn_rho_grid")
        if self.candidates[candidate].model == "cnn" and thinned is not None:
            return tuple(float(r) for r in thinned)
        return self.rho_grid


def load_criteria(path: str | os.PathLike | None = None, amendment: str | os.PathLike | None = None) -> Criteria:
    """Read and check the criteria file (default ``lab/regime/criteria.yaml``) and its amendment
    (:mod:`lab.regime.amendment`; default: ``amendment1.yaml`` with the default criteria, none otherwise).

    Refused with a :class:`CriteriaError` that names the file and the field: a file that is not YAML
    or not a mapping, a missing block (fixed, candidates, splits, rho_grid, drift_corrections, stages,
    metric), a candidate without model / train_size / local_steps / lr / rounds, a stage without seeds
    or arms, an arm naming an unknown method or placeholder, a grid that is not a list of numbers ≥ 0.
    """
    path = CRITERIA_FILE if path is None else Path(path)
    data, raw = read_design(path, "criteria")
    fixed = dict(need(raw, "fixed", "", path, dict))
    cands: dict[str, Candidate] = {}
    for name, spec in need(raw, "candidates", "", path, dict).items():
        where = f"candidates.{name}."
        size = need(spec, "train_size", where, path, (int, type(None)))
        cands[str(name)] = Candidate(str(name), need(spec, "model", where, path, str), size,
                                     need(spec, "local_steps", where, path, int),
                                     float(need(spec, "lr", where, path, (int, float))),
                                     need(spec, "rounds", where, path, int))
    if not cands:
        raise CriteriaError(f"{path}: candidates is empty")
    splits = {str(k): dict(v) for k, v in need(raw, "splits", "", path, dict).items()}
    for key, spec in splits.items():
        need(spec, "partition", f"splits.{key}.", path, str)

    def grid(values: Any, where: str) -> tuple[float, ...]:
        if not isinstance(values, list) or not values or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in values):
            raise CriteriaError(f"{path}: {where}={values!r} must be a non-empty list of numbers ≥ 0")
        return tuple(float(v) for v in values)

    rho_grid = grid(need(raw, "rho_grid", "", path), "rho_grid")
    drifts = tuple(need(raw, "drift_corrections", "", path, list))
    stages = {str(k): dict(v) for k, v in need(raw, "stages", "", path, dict).items()}
    for stage in STAGES:
        spec = need(stages, stage, "stages.", path, dict)
        seeds = need(spec, "seeds", f"stages.{stage}.", path, list)
        if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise CriteriaError(f"{path}: stages.{stage}.seeds={seeds!r} must be a non-empty list of integers ≥ 0")
        arms = need(spec, "arms", f"stages.{stage}.", path, dict)
        for split, names in arms.items():
            if split not in splits:
                raise CriteriaError(f"{path}: stages.{stage}.arms.{split} names no split of 'splits' "
                                    f"({', '.join(splits)})")
            if not isinstance(names, list) or not names:
                raise CriteriaError(f"{path}: stages.{stage}.arms.{split} must be a non-empty list of arms")
            for arm in names:
                _check_arm(str(arm), f"stages.{stage}.arms.{split}", path)
    if "cnn_rho_grid" in stages["A"]:
        grid(stages["A"]["cnn_rho_grid"], "stages.A.cnn_rho_grid")
    metric = need(raw, "metric", "", path, dict)
    last_k = need(metric, "last_k_evaluations", "metric.", path, int)
    if last_k < 1:
        raise CriteriaError(f"{path}: metric.last_k_evaluations={last_k} must be ≥ 1")
    from fedlab.algorithms import ALGORITHMS

    for name in drifts:
        if name not in ALGORITHMS:
            raise CriteriaError(f"{path}: drift_corrections names {name!r}, which is not a registered method")
    digest = hashlib.sha256(data).hexdigest()
    from lab.regime.amendment import AMENDMENT_FILE, load_amendment

    if amendment is None and path == CRITERIA_FILE and AMENDMENT_FILE.exists():
        amendment = AMENDMENT_FILE
    amended = None if amendment is None else load_amendment(amendment, digest, cands)
    return Criteria(path, digest, fixed, cands, splits, rho_grid, drifts, stages, last_k, raw, amended)


PLACEHOLDERS = ("fedsam@rho_grid", "fedsam@best_iid_rho", "fedsam@rho_star", "drift@best")
"""The arms of the criteria file that are not one method at its defaults (see :mod:`lab.regime.pilot_plan`)."""
DEPENDENT_ARMS = frozenset({"fedsam@best_iid_rho", "fedsam@rho_star", "drift@best"})
"""The arms whose hyperparameters come from recorded stage-A runs."""


def _check_arm(arm: str, where: str, path: Path) -> None:
    from fedlab.algorithms import ALGORITHMS

    if arm not in PLACEHOLDERS and arm not in ALGORITHMS:
        raise CriteriaError(f"{path}: {where} names arm {arm!r}, neither a registered method nor one of "
                            f"{', '.join(PLACEHOLDERS)}")
