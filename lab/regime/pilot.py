"""The regime pilot's runs: planned from ``lab/regime/criteria.yaml``, trained, committed as records.

The criteria file (committed before any pilot run) fixes the search space and the stages; this module
only reads it. A *run* of the pilot is one point of

    stage × candidate × split × arm × seed,

its :class:`fedlab.Config` the file's ``fixed`` fields, the candidate's model / train_size / K / η / T,
the split's partition and the arm's method and hyperparameters:

* stage A scores on ``validation_size`` samples held out of the training subset, so the subset has
  ``train_size + validation_size`` samples (``train_size: null`` stays null, all of the training set);
  stage B scores on the test set (no hold-out) with the candidate's ``train_size``;
* ``fedsam@rho_grid`` expands to one arm per radius of ``rho_grid`` (the ``cnn`` candidate: the
  thinned ``cnn_rho_grid`` of stage A); ``fedsam@best_iid_rho`` (stage A) and ``fedsam@rho_star``
  (stage B) use ρ* = argmax over the grid of the stage-A IID validation score (mean over the stage's
  seeds; ties go to the smaller radius), so they are planned only once every IID FedSAM run of the
  candidate is recorded; ``drift@best`` (stage B) is the drift correction with the best stage-A
  Dir-0.1 score; drift corrections run at their registry defaults.

The score of a run (the file's ``metric``) is the mean of its last ``last_k_evaluations`` evaluated
accuracies, in % (:func:`final_metric`).

Each finished run is written as a committed record (:mod:`lab.evidence.records`) in
``figures/regime/records/`` — its config, summary and every metric row, integrity-checked through
``figures/regime/MANIFEST.sha256`` — with a ``meta`` block naming its plan entry, the digest of the
criteria file and its measured seconds. A run whose record exists is skipped, so the pilot resumes
where it stopped (a run interrupted mid-way resumes from its checkpoint under ``runs/``).
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from fedlab.config import Config, ConfigError
from lab.evidence.integrity import EvidenceError
from lab.study.workers import clock
from lab.repro import FIGURES_DIR
from lab.study.spec import StudyError, need, read_design

__all__ = ["CRITERIA_FILE", "FIRST_GUESS", "PILOT_FILE", "REGISTERED_LATER", "Candidate", "Criteria", "CriteriaError", "Pending", "Pilot",
           "PilotError", "PilotRecord", "Plan", "PlannedRun", "analyse", "build_plan", "decide", "estimate_seconds",
           "final_metric", "load_criteria", "load_design", "load_records", "plan", "probe_costs", "records_dir",
           "training"]

CRITERIA_FILE = Path(__file__).with_name("criteria.yaml")
PILOT_FILE = Path(__file__).with_name("pilot.yaml")
"""The pilot's study file (``python -m lab study plan|train|analyse|decide lab/regime/pilot.yaml``)."""
PILOT_NAME = "regime-pilot-issue28"
"""``meta.pilot`` of every record this module writes (records of other experiments in the folder are ignored)."""
STAGES = ("A", "B")
SAM_METHODS = frozenset({"fedsam"})
"""Methods of the pilot that take two gradients per local step (their cost is guessed apart)."""

FIRST_GUESS: dict[tuple[str, bool], float] = {("mlp", False): 0.42, ("mlp", True): 0.56,
                                              ("cnn", False): 5.0, ("cnn", True): 10.0}
"""Seconds per round at 10 clients × K = 20 × B = 32, by (model, SAM method): the quiet-machine
measurements in the criteria file's header (mlp vectorised; cnn sequential; the cnn's FedSAM is not
measured there and is guessed at twice FedAvg: two gradients per step). Scaled linearly in K. Used only
until a record of the candidate and method gives a measured cost."""


CriteriaError = StudyError
"""The pilot's name for a pre-registered file that cannot be read as its plan (one error for every study file)."""


class PilotError(EvidenceError):
    """A pilot record or plan entry is inconsistent (a record of another plan, a missing dependency)."""



REGISTERED_LATER = frozenset({"fedlesam_s", "fedlesam_d", "dp_fedavg", "dp_fedsam", "fedscar"})
"""Methods registered after the pilot decided and the rerun was planned (issue 45). The pilot's R5 share and the
rerun's ``methods: all`` mean the registry they read, so these are left out by name here, in one place: else each
new method would move a committed estimate (and a pre-registered file would be edited for it)."""

def records_dir() -> Path:
    """``$FEDLAB_REGIME_RECORDS`` if set, else ``figures/regime/records`` of this repository."""
    env = os.environ.get("FEDLAB_REGIME_RECORDS")
    return Path(env).expanduser() if env else FIGURES_DIR / "regime" / "records"


# --- the criteria file --------------------------------------------------------------------------
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
"""The arms of the criteria file that are not one method at its defaults (see the module docstring)."""
DEPENDENT_ARMS = frozenset({"fedsam@best_iid_rho", "fedsam@rho_star", "drift@best"})
"""The arms whose hyperparameters come from recorded stage-A runs."""


def _check_arm(arm: str, where: str, path: Path) -> None:
    from fedlab.algorithms import ALGORITHMS

    if arm not in PLACEHOLDERS and arm not in ALGORITHMS:
        raise CriteriaError(f"{path}: {where} names arm {arm!r}, neither a registered method nor one of "
                            f"{', '.join(PLACEHOLDERS)}")


# --- records ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PilotRecord:
    """One committed pilot run: its plan entry (``meta``), config, status and metric rows."""

    key: str
    meta: dict[str, Any]
    config: Config
    status: str
    metrics: pd.DataFrame = field(repr=False)

    @property
    def run_id(self) -> tuple[str, str, str, str, int]:
        m = self.meta
        return (m["stage"], m["candidate"], m["split"], m["arm"], int(m["seed"]))

    @property
    def seconds(self) -> float:
        """The run's cost: its measured wall seconds, or the sum of its rounds' seconds when that is more
        (a run resumed from a checkpoint, or loaded finished from ``runs/``, measured only part of it)."""
        rounds = float(self.meta.get("round_seconds", 0.0))
        return max(float(self.meta.get("wall_seconds", 0.0)), rounds)


_META_FIELDS = ("stage", "candidate", "split", "arm", "seed", "algorithm", "params", "criteria_sha256")


def load_records(directory: str | os.PathLike | None = None, criteria: Criteria | None = None) -> list[PilotRecord]:
    """Every pilot record in ``directory`` (default :func:`records_dir`), each checked by
    :func:`lab.evidence.records.load_record` (fields, key, evidence manifest).

    With ``criteria``, a record planned from another criteria file (its ``criteria_sha256``) is refused:
    the file is pre-registered, and records of a changed plan must not mix with it."""
    from lab.evidence.records import SUFFIX, load_record, record_meta

    folder = records_dir() if directory is None else Path(directory)
    out: list[PilotRecord] = []
    seen: dict[tuple[str, str, str, str, int], str] = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
        if path.name.startswith("."):
            continue
        key = path.name.removesuffix(SUFFIX)
        result = load_record(key, folder)
        meta = record_meta(key, folder)
        if meta.get("pilot") != PILOT_NAME:
            continue
        missing = [f for f in _META_FIELDS if f not in meta]
        if missing:
            raise PilotError(f"pilot record {path} lacks meta field(s) {', '.join(missing)}; restore it from git")
        if criteria is not None and meta["criteria_sha256"] != criteria.digest:
            raise PilotError(f"pilot record {path} was planned from another criteria file (sha256 "
                             f"{meta['criteria_sha256'][:12]}…, {criteria.path} is {criteria.digest[:12]}…); "
                             "the criteria are pre-registered: a changed plan needs its own records folder")
        rec = PilotRecord(key, meta, result.config, result.status, result.metrics)  # type: ignore[arg-type]
        if rec.run_id in seen:
            raise PilotError(f"pilot records {seen[rec.run_id]} and {key} are both {rec.run_id}")
        seen[rec.run_id] = key
        out.append(rec)
    return out


def final_metric(metrics: pd.DataFrame, last_k: int, *, upto_round: int | None = None) -> float:
    """The score of a run: the mean of its last ``last_k`` evaluated accuracies, in %.

    ``upto_round``: the score the run would have had had it stopped there (evaluations at rounds ≤ it;
    R4 compares the score at T with the one at 0.8 T). NaN when fewer than ``last_k`` evaluations exist
    or one of them is not finite (a diverged run)."""
    if "test_acc" not in metrics or "round" not in metrics:
        raise ValueError("final_metric needs the metric rows' 'round' and 'test_acc' columns")
    rows = metrics[metrics["test_acc"].notna()]
    if upto_round is not None:
        rows = rows[rows["round"] <= upto_round]
    values = rows["test_acc"].astype(float).to_numpy()[-last_k:]
    if len(values) < last_k or not all(math.isfinite(v) for v in values):
        return float("nan")
    return 100.0 * float(values.mean())


def record_score(rec: PilotRecord, last_k: int, upto_round: int | None = None) -> float:
    """:func:`final_metric` of a record; NaN for a run that did not finish (diverged, collapsed early)."""
    if rec.status != "finished":
        return float("nan")
    return final_metric(rec.metrics, last_k, upto_round=upto_round)


# --- the plan -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedRun:
    """One run of the plan, with the config it trains."""

    stage: str
    candidate: str
    split: str
    arm: str
    seed: int
    algorithm: str
    params: dict[str, Any]
    config: Config
    order: tuple[int, ...] = field(default=(), compare=False)  # scheduling priority (smaller first)

    @property
    def run_id(self) -> tuple[str, str, str, str, int]:
        return (self.stage, self.candidate, self.split, self.arm, self.seed)

    def label(self) -> str:
        return f"{self.stage} {self.candidate} {self.split} {self.arm} s{self.seed}"

    def meta(self, criteria: Criteria) -> dict[str, Any]:
        amended = criteria.amendment is not None and self.stage in criteria.amendment.stage_fixed
        return {"pilot": PILOT_NAME, "criteria_sha256": criteria.digest, "stage": self.stage,
                "candidate": self.candidate, "split": self.split, "arm": self.arm, "seed": self.seed,
                "algorithm": self.algorithm, "params": dict(self.params),
                **({"amendment": criteria.amendment.path.name, "amendment_sha256": criteria.amendment.digest}
                   if amended else {})}


@dataclass(frozen=True)
class Pending:
    """An arm that cannot be planned yet, and what it waits for."""

    stage: str
    candidate: str
    split: str
    arm: str
    seeds: tuple[int, ...]
    needs: str


@dataclass(frozen=True)
class Plan:
    """The runs still to train (``todo``, in scheduling order), those recorded (``done``) and the arms
    waiting for other runs (``pending``)."""

    stage: str
    todo: list[PlannedRun]
    done: list[PlannedRun]
    pending: list[Pending]


def build_config(criteria: Criteria, stage: str, candidate: str, split: str, algorithm: str,
                 params: Mapping[str, Any], seed: int) -> Config:
    """The :class:`Config` of one pilot run (see the module docstring for the train_size arithmetic)."""
    cand = criteria.candidates[candidate]
    fixed = criteria.stage_fixed(stage)
    hold_out = fixed.pop("validation_size", None)
    if stage == "A":
        train_size = None if cand.train_size is None else cand.train_size + int(hold_out or 0)
        validation_size = hold_out
    else:
        train_size, validation_size = cand.train_size, None
    split_spec = dict(criteria.splits[split])
    if split_spec.get("partition") != "dirichlet" and "alpha" not in split_spec:
        split_spec["alpha"] = None  # α means nothing for an iid split: keep it out of the key
    values = {**fixed, **split_spec, "model": cand.model, "train_size": train_size, "validation_size": validation_size,
              "local_steps": cand.local_steps, "lr": cand.lr, "rounds": cand.rounds, "algorithm": algorithm,
              "algorithm_params": dict(params), "seed": int(seed),
              "name": f"{candidate} {split} {algorithm}{''.join(f' {k}={v:g}' for k, v in params.items())} s{seed}"}
    try:
        return Config.from_dict(values)
    except ConfigError as err:
        raise CriteriaError(f"{criteria.path}: stage {stage}, candidate {candidate}, split {split}: {err}") from None


def rho_arm(rho: float) -> str:
    """The arm name of FedSAM at radius ``rho`` in the grid: ``fedsam@rho=0.05``."""
    return f"fedsam@rho={rho:g}"


def _scores(records: Iterable[PilotRecord], criteria: Criteria) -> dict[tuple[str, str, str, str, int], float]:
    return {r.run_id: record_score(r, criteria.last_k) for r in records}


def _mean_score(scores: Mapping[tuple[str, str, str, str, int], float], stage: str, candidate: str, split: str,
                arm: str, seeds: Sequence[int]) -> float | None:
    """Mean over ``seeds`` (None if one is not recorded; NaN scores rank last: −inf)."""
    values = []
    for s in seeds:
        v = scores.get((stage, candidate, split, arm, s))
        if v is None:
            return None
        values.append(v if math.isfinite(v) else -math.inf)
    return sum(values) / len(values)


def best_iid_rho(criteria: Criteria, candidate: str, scores: Mapping[tuple[str, str, str, str, int], float]) \
        -> float | None:
    """ρ* of ``candidate``: argmax over its grid of the mean stage-A IID FedSAM score (ties: the smaller
    radius); None until every (ρ, seed) of the grid is recorded."""
    means = []
    for rho in criteria.rho_grid_for(candidate):
        m = _mean_score(scores, "A", candidate, "iid", rho_arm(rho), criteria.seeds("A"))
        if m is None:
            return None
        means.append((m, -rho))
    if all(m == -math.inf for m, _ in means):
        raise PilotError(f"every stage-A IID FedSAM run of {candidate} diverged: ρ* is undefined")
    return -max(means)[1]


def best_drift(criteria: Criteria, candidate: str, scores: Mapping[tuple[str, str, str, str, int], float]) \
        -> str | None:
    """The drift correction with the best mean stage-A Dir-0.1 score (ties: the file's order); None until
    all are recorded."""
    best: tuple[float, int, str] | None = None
    for i, name in enumerate(criteria.drift_corrections):
        m = _mean_score(scores, "A", candidate, "dir0.1", name, criteria.seeds("A"))
        if m is None:
            return None
        if best is None or (m, -i) > (best[0], -best[1]):
            best = (m, i, name)
    return None if best is None else best[2]


def _arms(criteria: Criteria, stage: str, candidate: str, split: str,
          scores: Mapping[tuple[str, str, str, str, int], float]) -> tuple[list[tuple[str, str, dict[str, Any]]],
                                                                          list[tuple[str, str]]]:
    """``([(arm, algorithm, params)], [(arm, needs)])`` of one split of a stage."""
    ready: list[tuple[str, str, dict[str, Any]]] = []
    waiting: list[tuple[str, str]] = []
    for arm in criteria.stages[stage]["arms"].get(split, []):
        if arm == "fedsam@rho_grid":
            ready += [(rho_arm(r), "fedsam", {"rho": r}) for r in criteria.rho_grid_for(candidate)]
        elif arm in ("fedsam@best_iid_rho", "fedsam@rho_star"):
            rho = best_iid_rho(criteria, candidate, scores)
            if rho is None:
                waiting.append((arm, "every stage-A IID FedSAM run of the grid"))
            else:
                ready.append((arm, "fedsam", {"rho": rho}))
        elif arm == "drift@best":
            name = best_drift(criteria, candidate, scores)
            if name is None:
                waiting.append((arm, "every stage-A Dir-0.1 drift-correction run"))
            else:
                ready.append((arm, name, {}))
        else:
            ready.append((arm, arm, {}))
    return ready, waiting


def build_plan(criteria: Criteria, stage: str, records: Sequence[PilotRecord] = (),
               candidates: Sequence[str] | None = None) -> Plan:
    """The runs of ``stage`` for ``candidates`` (default: all, cheapest first by the first-guess cost),
    split into those recorded, those to train and the arms still waiting for other runs.

    A record whose plan entry matches a run but whose config differs in a field that decides the numbers
    is refused (:class:`PilotError`): it was made under another plan."""
    if stage not in STAGES:
        raise CriteriaError(f"stage {stage!r} is not one of {', '.join(STAGES)}")
    names = list(criteria.candidates) if candidates is None else list(candidates)
    unknown = [c for c in names if c not in criteria.candidates]
    if unknown:
        raise CriteriaError(f"candidate(s) {', '.join(unknown)} not in {criteria.path} "
                            f"(declared: {', '.join(criteria.candidates)})")
    if candidates is None:  # cheapest first: the cnn candidate, the most expensive, last
        declared = {c: i for i, c in enumerate(names)}
        names.sort(key=lambda c: (first_guess_stage_seconds(criteria, c), declared[c]))
    by_id = {r.run_id: r for r in records}
    scores = _scores(records, criteria)
    todo: list[PlannedRun] = []
    done: list[PlannedRun] = []
    pending: list[Pending] = []
    seeds = criteria.seeds(stage)
    for c_rank, cand in enumerate(names):
        for s_rank, split in enumerate(criteria.stages[stage]["arms"]):
            ready, waiting = _arms(criteria, stage, cand, split, scores)
            for a_rank, (arm, algorithm, params) in enumerate(ready):
                for seed in seeds:
                    cfg = build_config(criteria, stage, cand, split, algorithm, params, seed)
                    # an arm planned from other runs (ρ*, the best drift correction) runs after the fixed
                    # arms of its candidate, before the next candidate
                    order = (c_rank, 1 if arm in DEPENDENT_ARMS else 0, s_rank, seeds.index(seed), a_rank)
                    run = PlannedRun(stage, cand, split, arm, seed, algorithm, params, cfg, order)
                    rec = by_id.get(run.run_id)
                    if rec is None:
                        todo.append(run)
                        continue
                    want, have = _hashed(cfg), _hashed(rec.config)
                    differ = sorted(k for k in want if want[k] != have.get(k))
                    if differ:
                        raise PilotError(f"pilot record {rec.key} is {run.label()} but its config differs in "
                                         f"{', '.join(differ)}; it was made under another plan")
                    done.append(run)
            pending += [Pending(stage, cand, split, arm, seeds, needs) for arm, needs in waiting]
    todo.sort(key=lambda r: r.order)
    return Plan(stage, todo, done, pending)


def _hashed(config: Config) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(config.hashed_fields(), sort_keys=True, default=str))


# --- cost ---------------------------------------------------------------------------------------
def first_guess_seconds(criteria: Criteria, candidate: str, algorithm: str) -> float:
    """:data:`FIRST_GUESS` for one run: seconds per round × K/20 × T."""
    cand = criteria.candidates[candidate]
    per_round = FIRST_GUESS.get((cand.model, algorithm in SAM_METHODS))
    if per_round is None:
        per_round = 20.0  # a model the header does not measure: a pessimistic guess, said so by the source
    return per_round * cand.local_steps / 20 * cand.rounds


def first_guess_stage_seconds(criteria: Criteria, candidate: str) -> float:
    """A candidate's stage-A cost by :data:`FIRST_GUESS` (orders the candidates, cheapest first)."""
    n_rho = len(criteria.rho_grid_for(candidate)) + 1  # the grid at IID + ρ* at Dir 0.1
    n_other = 1 + 1 + len(criteria.drift_corrections)
    return n_rho * first_guess_seconds(criteria, candidate, "fedsam") + n_other * first_guess_seconds(
        criteria, candidate, "fedavg")


def estimate_seconds(criteria: Criteria, run: PlannedRun | Pending, records: Sequence[PilotRecord],
                     probe: Mapping[tuple[str, bool], float] | None = None) -> tuple[float, str]:
    """One run's expected seconds and where the number comes from: the mean measured cost of the
    candidate's recorded runs of that method ("measured"), else the probe's seconds per round × T
    ("probe"), else :data:`FIRST_GUESS` times the slowdown measured on the recorded runs
    (:func:`measured_slowdown`, "first guess × slowdown"), else :data:`FIRST_GUESS` ("first guess"). A
    pending arm counts as FedSAM (its method is unknown until its dependency is recorded, and FedSAM is
    the dearer)."""
    algorithm = run.algorithm if isinstance(run, PlannedRun) else "fedsam"
    costs = [r.seconds for r in records if r.meta["candidate"] == run.candidate and r.meta["algorithm"] == algorithm]
    if costs:
        return sum(costs) / len(costs), "measured"
    sam = algorithm in SAM_METHODS
    if probe is not None and (run.candidate, sam) in probe:
        return probe[(run.candidate, sam)] * criteria.candidates[run.candidate].rounds, "probe"
    slowdown = measured_slowdown(criteria, records)
    if slowdown is not None:
        return first_guess_seconds(criteria, run.candidate, algorithm) * slowdown, "first guess × slowdown"
    return first_guess_seconds(criteria, run.candidate, algorithm), "first guess"


def measured_slowdown(criteria: Criteria, records: Sequence[PilotRecord]) -> float | None:
    """The median of measured / first-guess seconds over the recorded runs (None without one): how much
    slower than the quiet-machine figures this machine runs now, applied to what no record measured yet."""
    ratios = sorted(r.seconds / first_guess_seconds(criteria, r.meta["candidate"], r.meta["algorithm"])
                    for r in records if r.meta["candidate"] in criteria.candidates and r.seconds > 0)
    if not ratios:
        return None
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def probe_costs(criteria: Criteria, candidates: Sequence[str], rounds: int = 5,
                out: TextIO | None = None) -> dict[tuple[str, bool], float]:
    """Seconds per round of FedAvg and FedSAM for each candidate, measured by training ``rounds`` rounds
    of its stage-A IID run (first seed) in a temporary runs folder (deleted after): the busy machine's
    cost, including one evaluation every ``eval_every`` rounds and the first round's chunk choice."""
    out = sys.stdout if out is None else out
    import shutil
    import tempfile

    import fedlab

    seconds: dict[tuple[str, bool], float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="regime-probe-"))
    try:
        for cand in candidates:
            for algorithm, params in (("fedavg", {}), ("fedsam", {"rho": 0.05})):
                cfg = build_config(criteria, "A", cand, "iid", algorithm, params, criteria.seeds("A")[0])
                cfg = cfg.replace(runs_dir=str(tmp))
                t0 = time.perf_counter()
                fedlab.run(cfg, progress=False, stop_after_rounds=rounds)
                per_round = (time.perf_counter() - t0) / rounds
                seconds[(cand, algorithm in SAM_METHODS)] = per_round
                print(f"probe {cand:14s} {algorithm:7s} {per_round:7.2f} s/round → {per_round * cfg.rounds:7.0f} s "
                      f"per run ({cfg.rounds} rounds)", file=out, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return seconds


# --- running ------------------------------------------------------------------------------------
def _write(run: PlannedRun, criteria: Criteria, out: dict[str, Any], directory: Path) -> PilotRecord:
    from lab.study.workers import write_run

    metrics: pd.DataFrame = out["metrics"]
    # a run resumed from its checkpoint measured only part of its wall time: its rounds' seconds say the rest
    rounds = float(metrics["wall_seconds"].sum()) if "wall_seconds" in metrics else 0.0
    _, path, meta = write_run(out, {**run.meta(criteria), "round_seconds": rounds}, directory)
    return PilotRecord(path.name.removesuffix(".json.gz"), meta, out["config"], out["status"], metrics)


def remaining_seconds(criteria: Criteria, plan: Plan, records: Sequence[PilotRecord], workers: int,
                      probe: Mapping[tuple[str, bool], float] | None = None,
                      running: Iterable[PlannedRun] = ()) -> float:
    """Expected wall seconds of what is left of ``plan`` (to train and pending, the running runs counted
    whole) on ``workers`` workers: the sum of the runs' estimates / workers."""
    busy = {r.run_id for r in running}
    todo = [r for r in plan.todo if r.run_id not in busy] + list(running)
    total = sum(estimate_seconds(criteria, r, records, probe)[0] for r in todo)
    total += sum(len(p.seeds) * estimate_seconds(criteria, p, records, probe)[0] for p in plan.pending)
    return total / max(1, workers)


# --- the pilot as a study (lab/regime/pilot.yaml): the ``staged`` kind of lab.study.runner -------------
@dataclass(frozen=True)
class Pilot:
    """The pilot's study file: a thin wrapper naming the criteria and their amendment, which stay where they
    are because every committed pilot record names the criteria file's SHA-256."""

    path: Path
    sha256: str
    name: str
    criteria: Criteria
    kind: str = "staged"

    @property
    def designs(self) -> tuple[Path, ...]:
        """The study file, the criteria and the amendment: each must be committed unchanged before a run."""
        amendment = self.criteria.amendment
        return (self.path, self.criteria.path, *(() if amendment is None else (amendment.path,)))


def load_design(path: Path, data: bytes, raw: Mapping[str, Any]) -> Pilot:
    """A ``kind: staged`` study file (:func:`lab.study.spec.load_study`): ``study`` (the name the records
    carry, :data:`PILOT_NAME`), ``criteria`` and an optional ``amendment``, both beside the file."""
    name = need(raw, "study", "", path, str)
    if name != PILOT_NAME:
        raise StudyError(f"{path}: study={name!r} is invalid; allowed: {PILOT_NAME} (its records' meta.pilot)")
    criteria = path.parent / need(raw, "criteria", "", path, str)
    amendment = None if "amendment" not in raw else path.parent / need(raw, "amendment", "", path, str)
    return Pilot(path, hashlib.sha256(data).hexdigest(), name, load_criteria(criteria, amendment))


def _stage(criteria: Criteria, stage: str | None, candidates: Sequence[str] | None) -> str:
    """The stage a command plans or trains (default A); stage B only for candidates named, and under an
    amendment only for those of its order (stage A chose them: the criteria's selection)."""
    stage = "A" if stage is None else stage
    order = criteria.amendment.order if criteria.amendment is not None else None
    if stage == "B" and not candidates:
        raise StudyError("stage B runs only the candidates chosen from stage A (criteria.yaml, selection): name "
                         "them with --candidate")
    if stage == "B" and order is not None and any(c not in order for c in candidates or ()):
        raise StudyError(f"--candidate {', '.join(c for c in candidates or () if c not in order)}: stage B runs "
                         f"only the candidates of {criteria.amendment.path.name} (stage_b.order: {', '.join(order)})")
    return stage


def training(study: Pilot, *, registered: str, stage: str | None, candidates: Sequence[str] | None,
             workers: int, records: Path | None, out: TextIO) -> Any:
    """A stage's session for :func:`lab.study.runner.train` (records in ``records``, default :func:`records_dir`).

    Re-planned after every finished run, so an arm that waits for the IID FedSAM runs (ρ*) starts as soon
    as they are recorded; after a complete session an arm still waiting names runs no plan has (an error).
    ``registered`` is not written: a pilot record names the criteria's digest, as the first ones did."""
    from lab.study.runner import Training
    from lab.study.workers import Progress

    criteria = study.criteria
    stage = _stage(criteria, stage, candidates)
    directory = records_dir() if records is None else Path(records)
    state = {"records": load_records(directory, criteria)}
    state["plan"] = build_plan(criteria, stage, state["records"], candidates)

    def write(run: PlannedRun, result: dict[str, Any]) -> str:
        rec = _write(run, criteria, result, directory)
        state["records"] = [*state["records"], rec]
        state["plan"] = build_plan(criteria, stage, state["records"], candidates)
        return f"{record_score(rec, criteria.last_k):5.2f} % ({rec.seconds:.0f} s, {rec.status})"

    def done_total() -> tuple[int, int]:
        plan = state["plan"]
        return len(plan.done), len(plan.done) + len(plan.todo) + sum(len(p.seeds) for p in plan.pending)

    def finish(failed: int, stopped: bool) -> None:
        plan = state["plan"]
        if not stopped and not failed and plan.pending and not plan.todo:
            raise PilotError(f"stage {stage}: {len(plan.pending)} arm(s) wait for runs that are not planned: "
                             + "; ".join(f"{p.candidate} {p.split} {p.arm}" for p in plan.pending))

    progress = Progress(todo=lambda: state["plan"].todo, done_total=done_total,
                        eta=lambda running: remaining_seconds(criteria, state["plan"], state["records"], workers,
                                                              running=running))
    return Training(f"stage {stage}", progress, config_of=lambda r: r.config, key_of=lambda r: r.run_id,
                    label_of=PlannedRun.label, write=write, finish=finish)


def plan(study: Pilot, args: Any) -> int:
    """``study plan lab/regime/pilot.yaml [--stage S] [--candidate C] [--probe N]``: print a stage's planned runs
    with their expected seconds and the stage's wall time on ``--workers``; trains nothing (a probe measures N
    rounds per candidate in a temporary runs folder first, for the candidates no record costs yet)."""
    criteria, candidates, workers = study.criteria, args.candidate, args.workers
    stage = _stage(criteria, args.stage, candidates)
    names = candidates or sorted(criteria.candidates, key=lambda c: first_guess_stage_seconds(criteria, c))
    probe = probe_costs(criteria, names, args.probe) if args.probe > 0 else None
    directory = records_dir()
    records = load_records(directory, criteria)
    todo = build_plan(criteria, stage, records, candidates)
    print(f"stage {stage}: {len(todo.done)} recorded, {len(todo.todo)} to train, "
          f"{sum(len(p.seeds) for p in todo.pending)} waiting (pending arms); records in {directory}")
    sources: dict[str, int] = {}
    for run in todo.todo:
        sec, source = estimate_seconds(criteria, run, records, probe)
        sources[source] = sources.get(source, 0) + 1
        params = " ".join(f"{k}={v:g}" for k, v in run.params.items())
        print(f"  {run.candidate:14s} {run.split:6s} {run.arm:20s} seed {run.seed:<4d} {run.algorithm:8s} "
              f"{params:10s} ~{sec:6.0f} s ({source})")
    for p in todo.pending:
        sec, source = estimate_seconds(criteria, p, records, probe)
        sources[source] = sources.get(source, 0) + len(p.seeds)
        print(f"  {p.candidate:14s} {p.split:6s} {p.arm:20s} seeds {','.join(map(str, p.seeds)):9s} waits for "
              f"{p.needs} ~{sec:6.0f} s each ({source})")
    wall = remaining_seconds(criteria, todo, records, workers, probe)
    print(f"estimated wall time: {clock(wall)} on {workers} worker(s) (cost sources: "
          + ", ".join(f"{n} {s}" for s, n in sorted(sources.items())) + ")")
    return 0


def analyse(study: Pilot, args: Any) -> int:
    """``study analyse lab/regime/pilot.yaml``: stage A's screening (:func:`lab.regime.analyse.write_outputs`)."""
    from lab.regime.analyse import write_outputs

    for path in write_outputs(study.criteria).values():
        print(f"wrote {path}")
    return 0


def decide(study: Pilot, args: Any) -> int:
    """``study decide lab/regime/pilot.yaml [--candidate C]``: stage B's decisions and the outcome
    (:func:`lab.regime.decide.report`)."""
    from lab.regime.decide import report

    return report(study.criteria, args.candidate)
