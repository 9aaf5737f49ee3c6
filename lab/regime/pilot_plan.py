"""The regime pilot's plan: every run of a stage, planned from the criteria and the records so far.

A *run* of the pilot is one point of

    stage × candidate × split × arm × seed,

its :class:`fedlab.Config` the criteria file's ``fixed`` fields, the candidate's model / train_size / K / η / T,
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

The candidates are planned cheapest first, by a first guess of their cost (:data:`FIRST_GUESS`) made before any
run measured one.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedlab.config import Config, ConfigError
from lab.regime.criteria import DEPENDENT_ARMS, STAGES, Criteria, CriteriaError
from lab.regime.pilot_records import PILOT_NAME, PilotError, PilotRecord, record_score

__all__ = ["FIRST_GUESS", "SAM_METHODS", "Pending", "Plan", "PlannedRun", "best_drift", "best_iid_rho", "build_config",
           "build_plan", "first_guess_seconds", "first_guess_stage_seconds", "rho_arm"]

SAM_METHODS = frozenset({"fedsam"})
"""Methods of the pilot that take two gradients per local step (their cost is guessed apart)."""

FIRST_GUESS: dict[tuple[str, bool], float] = {("mlp", False): 0.42, ("mlp", True): 0.56,
                                              ("cnn", False): 5.0, ("cnn", True): 10.0}
"""Seconds per round at 10 clients × K = 20 × B = 32, by (model, SAM method): the quiet-machine
measurements in the criteria file's header (mlp vectorised; cnn sequential; the cnn's FedSAM is not
measured there and is guessed at twice FedAvg: two gradients per step). Scaled linearly in K. Used only
until a record of the candidate and method gives a measured cost."""


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
