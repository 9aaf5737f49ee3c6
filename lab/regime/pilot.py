"""The regime pilot as a study (``lab/regime/pilot.yaml``, the ``staged`` kind of :mod:`lab.study.runner`): its
commands, and what its runs cost.

The pilot's pieces, lowest first: the pre-registered criteria (:mod:`lab.regime.criteria`), its committed records
and the score of a run (:mod:`lab.regime.pilot_records`), the plan of a stage (:mod:`lab.regime.pilot_plan`). This
module prices a plan (:func:`estimate_seconds`: measured, probed or guessed), trains a stage through the study
runner (:func:`training`) and hands ``analyse`` and ``decide`` to the modules that read the records
(:mod:`lab.regime.analyse`, :mod:`lab.regime.decide`); the names of the pieces are importable from here too.
"""
from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from lab.regime.criteria import CRITERIA_FILE, REGISTERED_LATER, Candidate, Criteria, CriteriaError, load_criteria
from lab.regime.pilot_plan import (FIRST_GUESS, SAM_METHODS, Pending, Plan, PlannedRun, build_config, build_plan,
                                   first_guess_seconds, first_guess_stage_seconds, rho_arm)
from lab.regime.pilot_records import (PILOT_NAME, PilotError, PilotRecord, final_metric, load_records, record_score,
                                      records_dir)
from lab.study.spec import StudyError, need
from lab.study.workers import clock

__all__ = ["CRITERIA_FILE", "FIRST_GUESS", "PILOT_FILE", "REGISTERED_LATER", "Candidate", "Criteria", "CriteriaError", "Pending", "Pilot",
           "PilotError", "PilotRecord", "Plan", "PlannedRun", "analyse", "build_config", "build_plan", "decide",
           "estimate_seconds", "final_metric", "load_criteria", "load_design", "load_records", "plan", "probe_costs",
           "records_dir", "rho_arm", "training"]

PILOT_FILE = Path(__file__).with_name("pilot.yaml")
"""The pilot's study file (``python -m lab study plan|train|analyse|decide lab/regime/pilot.yaml``)."""


# --- cost ---------------------------------------------------------------------------------------
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
