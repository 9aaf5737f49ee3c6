"""The regime pilot's stage-A estimates: R1–R5 of ``lab/regime/criteria.yaml`` from the committed pilot records.

Every number is computed from the records (:func:`lab.regime.pilot_records.load_records`); the score of a run is
the file's metric, the mean of its last three evaluated accuracies in % (:func:`~lab.regime.pilot_records.final_metric`).
Per candidate, with the seeds as pairs (:func:`lab.evidence.paired.paired_difference`: d_s = left_s −
right_s over the seeds both arms have, d̄ ± t_{0.975, n−1} s_d / √n):

* **R1** the IID–Dir-0.1 gap of FedAvg, d_s = FedAvg_iid,s − FedAvg_dir,s;
* **R2** each drift correction (SCAFFOLD, Karimireddy et al. 2020; FedDyn, Acar et al. 2021; FedACG,
  Kim et al. 2024) minus FedAvg at Dir 0.1, and the best one by its mean stage-A score;
* **R3** FedSAM (Qu et al. 2022) minus FedAvg at IID for each ρ of the grid, ρ* = argmax of the mean
  FedSAM score (interior: neither 0 nor the grid's largest ρ), and FedSAM at ρ* minus FedAvg at Dir 0.1;
* **R4** for each arm of stage B, mean over seeds of acc(T) − acc(0.8 T), where acc(t) is the score a
  run would have had had it stopped at round t (its last three evaluations at rounds ≤ t), against the
  half-width of R3's paired interval; and whether the arms' ranking by mean is the same at 0.8 T and T;
* **R5** the measured seconds per run of each method, and the hours of the full rerun under the
  assumption stated in :data:`RERUN_ASSUMPTION`.

Stage A is screening (2 seeds): its intervals have one degree of freedom (t = 12.7) and the paired
protocol gives no verdict below three pairs (:data:`lab.evidence.paired.MIN_SEEDS_TO_PRINT`), so R1–R4 are
read from point estimates here, as the file's selection rule says; the decisions are stage B's (6 seeds).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lab.evidence.paired import PairedDifference, paired_difference
from lab.regime.criteria import REGISTERED_LATER, Criteria
from lab.regime.pilot_plan import best_drift, best_iid_rho, build_plan, rho_arm
from lab.regime.pilot_records import PilotRecord, record_score

__all__ = ["BUDGET_HOURS", "R1_GAP", "RERUN_ASSUMPTION", "STAGE_B_ARMS", "CandidateResult", "analyse", "rerun_hours",
           "scores_frame", "two_gradient_share"]

RERUN_TUNING_RUNS = 150
RERUN_CLAIM_ARMS = 20
RERUN_SPLITS = 3
RERUN_SEEDS = 6
RERUN_WORKERS = 2
R1_GAP = 5.0  # points, the file's R1 threshold
BUDGET_HOURS = 8.0  # the file's R5 budget
RERUN_ASSUMPTION = (f"the rerun trains {RERUN_TUNING_RUNS} tuning runs + {RERUN_CLAIM_ARMS} claim arms × "
                    f"{RERUN_SPLITS} splits × {RERUN_SEEDS} seeds = "
                    f"{RERUN_TUNING_RUNS + RERUN_CLAIM_ARMS * RERUN_SPLITS * RERUN_SEEDS} runs of the candidate, "
                    f"on {RERUN_WORKERS} workers; a run of a method with two gradients per local step costs the "
                    "candidate's measured FedSAM seconds, any other the mean measured seconds of its first-order "
                    "methods (FedAvg, SCAFFOLD, FedDyn, FedACG); the share of two-gradient methods is the "
                    "registry's; the analyses of notebooks 02, 03, 08, 09 and the test-set evaluation of 10,000 "
                    "samples (stage A evaluates 2,000) are not included")
STAGE_B_ARMS = (("iid", "fedavg"), ("iid", "fedsam@rho_star"), ("dir0.1", "fedavg"), ("dir0.1", "drift@best"),
                ("dir0.1", "fedsam@rho_star"))
"""The stage-B arms R4 reads (stage A's counterparts: ``fedsam@rho_star`` is the IID grid arm at ρ* and
the Dir-0.1 ``fedsam@best_iid_rho``; ``drift@best`` the best drift correction)."""


def scores_frame(records: Sequence[PilotRecord], criteria: Criteria) -> pd.DataFrame:
    """One row per record: stage, candidate, split, arm, algorithm, ρ, seed, rounds T, score (%), score at
    0.8 T (%), seconds, the machine's load average when the run started, status."""
    rows = []
    for r in records:
        m = r.meta
        rounds = int(r.config.rounds)
        rows.append({"stage": m["stage"], "candidate": m["candidate"], "split": m["split"], "arm": m["arm"],
                     "algorithm": m["algorithm"], "rho": float(m["params"].get("rho", math.nan)),
                     "seed": int(m["seed"]), "rounds": rounds, "score": record_score(r, criteria.last_k),
                     "score_08T": record_score(r, criteria.last_k, upto_round=int(math.floor(0.8 * rounds))),
                     "seconds": r.seconds, "load": float(m.get("load_at_start", math.nan)), "status": r.status})
    cols = ["stage", "candidate", "split", "arm", "algorithm", "rho", "seed", "rounds", "score", "score_08T",
            "seconds", "load", "status"]
    return pd.DataFrame(rows, columns=cols)


def _arm(frame: pd.DataFrame, candidate: str, split: str, arm: str, column: str = "score") -> dict[int, float]:
    sel = frame[(frame.candidate == candidate) & (frame.split == split) & (frame.arm == arm)]
    return {int(s): float(v) for s, v in zip(sel.seed, sel[column])}


def _paired(left: Mapping[int, float], right: Mapping[int, float]) -> PairedDifference | None:
    """The paired difference over finite pairs; None without a pair."""
    left = {s: v for s, v in left.items() if math.isfinite(v)}
    right = {s: v for s, v in right.items() if math.isfinite(v)}
    if not set(left) & set(right):
        return None
    return paired_difference(left, right)


@dataclass
class CandidateResult:
    """Stage-A estimates of one candidate (None / NaN where its records are missing)."""

    name: str
    model: str
    rounds: int
    n_records: int
    n_planned: int
    gap: PairedDifference | None = None  # R1: FedAvg iid − dir0.1
    drift: dict[str, PairedDifference | None] = field(default_factory=dict)  # R2: drift − FedAvg at dir0.1
    best_drift: str | None = None
    rho_gain: dict[float, PairedDifference | None] = field(default_factory=dict)  # R3: FedSAM@ρ − FedAvg, iid
    rho_star: float | None = None
    rho_star_interior: bool | None = None
    dir_sam_gain: PairedDifference | None = None  # FedSAM@ρ* − FedAvg at dir0.1
    horizon: dict[str, float] = field(default_factory=dict)  # R4: arm → mean acc(T) − acc(0.8T)
    horizon_n: dict[str, int] = field(default_factory=dict)  # R4: arm → seeds behind that mean
    ranking_stable: bool | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # R5: method → mean measured seconds per run
    load: float = math.nan  # median 1-minute load average when its runs started (the machine is shared)
    rerun_hours: float = math.nan

    def r1(self) -> bool | None:
        return None if self.gap is None else self.gap.mean >= R1_GAP

    def r2(self) -> bool | None:
        d = self.drift.get(self.best_drift) if self.best_drift else None
        return None if d is None else d.mean > 0

    def r3(self) -> bool | None:
        if self.rho_star is None:
            return None
        gain = self.rho_gain.get(self.rho_star)
        return None if gain is None else bool(self.rho_star_interior) and gain.mean > 0

    def r4_point(self) -> bool | None:
        """Stage-A reading of R4: every arm's |Δ| below R3's half-width and the ranking unchanged (None
        while an arm or the interval is missing)."""
        gain = self.rho_gain.get(self.rho_star) if self.rho_star is not None else None
        if gain is None or not math.isfinite(gain.half_width) or len(self.horizon) < len(STAGE_B_ARMS) \
                or self.ranking_stable is None or not all(math.isfinite(v) for v in self.horizon.values()):
            return None
        return max(abs(v) for v in self.horizon.values()) < gain.half_width and self.ranking_stable

    def r5(self) -> bool | None:
        return None if not math.isfinite(self.rerun_hours) else self.rerun_hours <= BUDGET_HOURS

    def qualifies(self) -> bool:
        """The file's selection rule on stage-A point estimates: R1, R2 and R3 met."""
        return bool(self.r1()) and bool(self.r2()) and bool(self.r3())


def two_gradient_share() -> float:
    """The share of the pilot's registry that takes two gradients per local step (the SAM family)."""
    from fedlab.algorithms import algorithm_class, algorithm_names

    names = [n for n in algorithm_names() if n not in REGISTERED_LATER]
    return sum(algorithm_class(n).grad_evals_per_step >= 2 for n in names) / len(names)


def rerun_hours(seconds: Mapping[str, float], share_two_gradient: float) -> float:
    """R5's estimate (see :data:`RERUN_ASSUMPTION`): runs × (share · s_SAM + (1 − share) · s_first) / workers."""
    sam = seconds.get("fedsam", math.nan)
    first = [seconds[m] for m in ("fedavg", "scaffold", "feddyn", "fedacg") if m in seconds]
    if not first or not math.isfinite(sam):
        return math.nan
    per_run = share_two_gradient * sam + (1 - share_two_gradient) * float(np.mean(first))
    runs = RERUN_TUNING_RUNS + RERUN_CLAIM_ARMS * RERUN_SPLITS * RERUN_SEEDS
    return runs * per_run / RERUN_WORKERS / 3600


def analyse(criteria: Criteria, records: Sequence[PilotRecord], stage: str = "A") -> list[CandidateResult]:
    """The stage-A estimates of every candidate of the file (in its order)."""
    frame = scores_frame([r for r in records if r.meta["stage"] == stage], criteria)
    scores = {r.run_id: record_score(r, criteria.last_k) for r in records}
    share = two_gradient_share()
    out = []
    for name, cand in criteria.candidates.items():
        plan = build_plan(criteria, stage, records, [name])
        res = CandidateResult(name, cand.model, cand.rounds, len(plan.done),
                              len(plan.done) + len(plan.todo) + sum(len(p.seeds) for p in plan.pending))
        res.gap = _paired(_arm(frame, name, "iid", "fedavg"), _arm(frame, name, "dir0.1", "fedavg"))
        dir_avg = _arm(frame, name, "dir0.1", "fedavg")
        res.drift = {d: _paired(_arm(frame, name, "dir0.1", d), dir_avg) for d in criteria.drift_corrections}
        res.best_drift = best_drift(criteria, name, scores)
        iid_avg = _arm(frame, name, "iid", "fedavg")
        res.rho_gain = {rho: _paired(_arm(frame, name, "iid", rho_arm(rho)), iid_avg)
                        for rho in criteria.rho_grid_for(name)}
        res.rho_star = best_iid_rho(criteria, name, scores)
        if res.rho_star is not None:
            grid = criteria.rho_grid_for(name)
            res.rho_star_interior = res.rho_star != 0.0 and res.rho_star != max(grid)
            res.dir_sam_gain = _paired(_arm(frame, name, "dir0.1", "fedsam@best_iid_rho"), dir_avg)
        res.horizon, res.ranking_stable = _horizon(frame, name, res)
        res.horizon_n = {label: len(_arm(frame, name, label.split(" ", 1)[0],
                                         _stage_a_arm(*label.split(" ", 1), res) or "")) for label in res.horizon}
        sel = frame[frame.candidate == name]
        res.seconds = {str(a): float(g.seconds.mean()) for a, g in sel.groupby("algorithm")}
        res.load = float(sel.load.median()) if len(sel) else math.nan
        res.rerun_hours = rerun_hours(res.seconds, share)
        out.append(res)
    return out


def _stage_a_arm(split: str, arm: str, res: CandidateResult) -> str | None:
    """The stage-A arm standing for stage-B arm ``arm`` (None while it is not known)."""
    if arm == "fedsam@rho_star":
        if res.rho_star is None:
            return None
        return rho_arm(res.rho_star) if split == "iid" else "fedsam@best_iid_rho"
    if arm == "drift@best":
        return res.best_drift
    return arm


def _horizon(frame: pd.DataFrame, name: str, res: CandidateResult) -> tuple[dict[str, float], bool | None]:
    """R4: each stage-B arm's mean acc(T) − acc(0.8T) and whether the ranking by mean is the same."""
    diffs: dict[str, float] = {}
    at_t: dict[str, float] = {}
    at_08: dict[str, float] = {}
    for split, arm in STAGE_B_ARMS:
        a = _stage_a_arm(split, arm, res)
        if a is None:
            continue
        t = _arm(frame, name, split, a)
        e = _arm(frame, name, split, a, "score_08T")
        if not t:
            continue
        label = f"{split} {arm}"
        at_t[label] = float(np.mean(list(t.values())))
        at_08[label] = float(np.mean(list(e.values())))
        diffs[label] = at_t[label] - at_08[label]
    if len(diffs) < len(STAGE_B_ARMS) or not all(math.isfinite(v) for v in [*at_t.values(), *at_08.values()]):
        return diffs, None
    rank_t = sorted(at_t, key=lambda k: -at_t[k])
    rank_08 = sorted(at_08, key=lambda k: -at_08[k])
    return diffs, rank_t == rank_08
