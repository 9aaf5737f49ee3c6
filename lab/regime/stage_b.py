"""The regime pilot's stage-B decisions: R1–R5 of ``lab/regime/criteria.yaml`` on the test set, and the outcome.

Stage B trains the chosen candidate on the test set with the seeds of ``stages.B`` (200–205), each arm at
every seed, so the seeds pair the arms (common θ₀, client sampling and batch order). With the score of
a run the file's metric (:func:`lab.regime.pilot_records.record_score`: mean of the last three evaluated test
accuracies, in %) and, per comparison, d_s = left_s − right_s over the stage-B seeds, the paired
interval is d̄ ± t_{0.975, n−1} s_d / √n (:func:`lab.evidence.paired.paired_difference`, the statistics of
the lab's claims). The criteria, read exactly as the file writes them:

* **R1** d = FedAvg_iid − FedAvg_dir0.1: met iff d̄ ≥ 5.0 and the interval's lower end > 0;
* **R2** d = drift@best − FedAvg at Dir 0.1 (drift@best: the drift correction with the best stage-A
  validation score, :func:`lab.regime.pilot_plan.best_drift` — SCAFFOLD, Karimireddy et al. 2020; FedDyn,
  Acar et al. 2021; FedACG, Kim et al. 2024): met iff the interval lies above 0;
* **R3** ρ* = argmax of the stage-A IID FedSAM score over the grid (:func:`lab.regime.pilot_plan.best_iid_rho`;
  FedSAM, Qu et al. 2022) must be neither 0 nor the grid's largest ρ, and d = FedSAM@ρ* − FedAvg at IID
  must have its interval above 0 (an edge ρ* fails R3 whatever the interval); FedSAM@ρ* − FedAvg at
  Dir 0.1 is reported beside it, not a criterion;
* **R4** for every stage-B arm, |mean_s acc_s(T) − mean_s acc_s(0.8 T)| < h₃, the half-width of R3's
  interval, where acc(t) is the score the run would have had had it stopped at round ⌊t⌋
  (:func:`lab.regime.stage_a.scores_frame`), and the arms ranked by mean at 0.8 T as at T;
* **R5** the rule's estimate of the rerun, Σ over its planned runs of the candidate's measured stage-A
  seconds per run of that method / 2 workers ≤ 8 h (:func:`lab.regime.stage_a.rerun_hours` under
  :data:`lab.regime.stage_a.RERUN_ASSUMPTION`). The same estimate from the stage-B runs' seconds, and the
  median load average at the start of the runs each estimate uses, are printed beside it — labelled as
  not the rule (the machine is shared: seconds measured at load 4–6 on 2 cores overstate a quiet one).

A criterion on a stage-B interval is decided only once every seed of both arms is recorded and finite:
before that it is "undecided (runs missing)" (a diverged run: "undecided (diverged run)"). The outcome
follows the file's ``selection``: the stage-B candidates in the order of R5's estimate (cheapest first),
the first meeting R1–R5 is the regime; if none meets R3 (an edge ρ* in stage A, or its stage-B
interval), the ``if_none`` consequence: SAM-specific claims are "not testable at cpu scale" and the rerun
runs in the cheapest stage-B candidate meeting R1, R2, R4 and R5. A candidate that never reached stage B
cannot meet R3 (R3's rule reads a stage-B interval).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lab.evidence.paired import PairedDifference
from lab.regime import stage_a as an
from lab.regime.criteria import Criteria, CriteriaError
from lab.regime.pilot_plan import best_drift, best_iid_rho, build_plan
from lab.regime.pilot_records import PilotRecord, record_score

__all__ = ["CRITERIA", "DIVERGED", "HORIZON_FRACTION", "MISSING", "Decision", "Outcome", "Verdict", "amended_outcome",
           "decide", "selection_outcome"]

HORIZON_FRACTION = 0.8  # R4's acc(0.8 T)
MISSING = "runs missing"
DIVERGED = "diverged run"


@dataclass(frozen=True)
class Verdict:
    """One criterion's verdict: ``met`` True / False, or None (undecided, ``why`` says for what)."""

    met: bool | None
    why: str = ""

    @property
    def word(self) -> str:
        if self.met is None:
            return f"undecided ({self.why or MISSING})"
        return "met" if self.met else "not met"


@dataclass
class Decision:
    """Stage B of one candidate: its paired effects, R4's horizon, R5's estimates and the verdicts."""

    name: str
    seeds: tuple[int, ...]
    n_records: int
    n_planned: int
    rho_star: float | None
    rho_star_interior: bool | None
    rho_grid: tuple[float, ...]
    best_drift: str | None
    arms: dict[str, dict[int, float]] = field(default_factory=dict)  # "split arm" → {seed: score at T}
    arms_08: dict[str, dict[int, float]] = field(default_factory=dict)  # … at 0.8 T
    algorithm: dict[str, str] = field(default_factory=dict)  # "split arm" → the method it trains
    gap: PairedDifference | None = None  # R1
    drift_gain: PairedDifference | None = None  # R2
    sam_gain: PairedDifference | None = None  # R3 (IID)
    sam_gain_dir: PairedDifference | None = None  # informative: FedSAM@ρ* − FedAvg at Dir 0.1
    hours_rule: float = math.nan  # R5: stage-A seconds (the rule)
    load_rule: float = math.nan
    stage_a_complete: bool = False
    hours_stage_b: float = math.nan  # not the rule: stage-B seconds
    load_stage_b: float = math.nan
    seconds_rule: dict[str, float] = field(default_factory=dict)
    seconds_stage_b: dict[str, float] = field(default_factory=dict)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    # --- state of an arm / a comparison --------------------------------------------------------
    def _state(self, *labels: str) -> str:
        """The empty string when every seed of every arm is recorded with a finite score, else why not."""
        for label in labels:
            values = self.arms.get(label, {})
            if any(s not in values for s in self.seeds):
                return MISSING
        for label in labels:
            if not all(math.isfinite(v) for v in self.arms[label].values()):
                return DIVERGED
        return ""

    def r1(self) -> Verdict:
        why = self._state("iid fedavg", "dir0.1 fedavg")
        if why or self.gap is None:
            return Verdict(None, why or MISSING)
        return Verdict(self.gap.mean >= an.R1_GAP and self.gap.low > 0)

    def r2(self) -> Verdict:
        why = self._state("dir0.1 drift@best", "dir0.1 fedavg")
        if why or self.drift_gain is None:
            return Verdict(None, why or MISSING)
        return Verdict(self.drift_gain.low > 0)

    def r3(self) -> Verdict:
        if self.rho_star is None:
            return Verdict(None, "stage A incomplete: ρ* unknown")
        if not self.rho_star_interior:
            return Verdict(False, f"ρ* = {self.rho_star:g} is on the grid's edge")
        why = self._state("iid fedsam@rho_star", "iid fedavg")
        if why or self.sam_gain is None:
            return Verdict(None, why or MISSING)
        return Verdict(self.sam_gain.low > 0)

    def horizon(self) -> dict[str, tuple[float, float, int]]:
        """R4 per stage-B arm: (mean acc(T), mean acc(0.8 T), seeds), over the arm's finite seeds."""
        out = {}
        for split, arm in an.STAGE_B_ARMS:
            label = f"{split} {arm}"
            t, e = self.arms.get(label, {}), self.arms_08.get(label, {})
            seeds = [s for s in t if math.isfinite(t[s]) and math.isfinite(e.get(s, math.nan))]
            if seeds:
                out[label] = (float(np.mean([t[s] for s in seeds])), float(np.mean([e[s] for s in seeds])),
                              len(seeds))
        return out

    def rankings(self) -> tuple[list[str], list[str]]:
        """The arms ranked by mean at T and at 0.8 T (best first)."""
        h = self.horizon()
        return sorted(h, key=lambda k: -h[k][0]), sorted(h, key=lambda k: -h[k][1])

    def r4(self) -> Verdict:
        why = self._state(*(f"{s} {a}" for s, a in an.STAGE_B_ARMS))
        if why:
            return Verdict(None, why)
        if self.sam_gain is None or not math.isfinite(self.sam_gain.half_width):
            return Verdict(None, MISSING)
        moves = {k: abs(t - e) for k, (t, e, _) in self.horizon().items()}
        rank_t, rank_08 = self.rankings()
        too_far = [k for k, v in moves.items() if v >= self.sam_gain.half_width]
        if too_far:
            return Verdict(False, "moves ≥ R3's half-width: " + ", ".join(too_far))
        if rank_t != rank_08:
            return Verdict(False, "ranking at 0.8 T differs from T")
        return Verdict(True)

    def r5(self) -> Verdict:
        if not self.stage_a_complete or not math.isfinite(self.hours_rule):
            return Verdict(None, "stage A incomplete")
        if self.hours_rule <= an.BUDGET_HOURS:
            return Verdict(True)
        return Verdict(False, f"{self.hours_rule:.1f} h > {an.BUDGET_HOURS:g} h")

    def verdicts(self) -> dict[str, Verdict]:
        return {"R1": self.r1(), "R2": self.r2(), "R3": self.r3(), "R4": self.r4(), "R5": self.r5()}


def _curves(records: Sequence[PilotRecord]) -> pd.DataFrame:
    """Per stage-B arm, the mean over seeds of the evaluated test accuracy (%) at each evaluated round."""
    rows = []
    for r in records:
        m = r.metrics[r.metrics["test_acc"].notna()]
        for rnd, acc in zip(m["round"], m["test_acc"]):
            rows.append({"split": r.meta["split"], "arm": r.meta["arm"], "algorithm": r.meta["algorithm"],
                         "seed": int(r.meta["seed"]), "round": int(rnd), "accuracy": 100.0 * float(acc)})
    cols = ["split", "arm", "algorithm", "round", "accuracy", "n_seeds", "rounds"]
    if not rows:
        return pd.DataFrame(columns=cols)
    long = pd.DataFrame(rows)
    out = long.groupby(["split", "arm", "algorithm", "round"], sort=False).agg(
        accuracy=("accuracy", "mean"), n_seeds=("seed", "nunique")).reset_index()
    out["rounds"] = int(records[0].config.rounds)
    return out[cols]


def decide(criteria: Criteria, records: Sequence[PilotRecord], candidate: str) -> Decision:
    """Stage B of ``candidate`` from the records (stage A gives ρ*, drift@best and R5's seconds).

    Raises :class:`lab.regime.pilot_records.PilotError` (through :func:`build_plan`) when a stage-B record was made
    under another plan (e.g. a FedSAM radius that is not stage A's ρ*)."""
    if candidate not in criteria.candidates:
        raise CriteriaError(f"candidate {candidate!r} not in {criteria.path} "
                            f"(declared: {', '.join(criteria.candidates)})")
    mine = [r for r in records if r.meta["candidate"] == candidate]
    plan_b = build_plan(criteria, "B", mine, [candidate])
    plan_a = build_plan(criteria, "A", mine, [candidate])
    stage_a_scores = {r.run_id: record_score(r, criteria.last_k) for r in mine if r.meta["stage"] == "A"}
    rho = best_iid_rho(criteria, candidate, stage_a_scores)
    grid = criteria.rho_grid_for(candidate)
    b_records = [r for r in mine if r.meta["stage"] == "B"]
    d = Decision(candidate, criteria.seeds("B"), len(plan_b.done),
                 len(plan_b.done) + len(plan_b.todo) + sum(len(p.seeds) for p in plan_b.pending),
                 rho, None if rho is None else (rho != 0.0 and rho != max(grid)), grid,
                 best_drift(criteria, candidate, stage_a_scores))
    frame = an.scores_frame(b_records, criteria)
    for split, arm in an.STAGE_B_ARMS:
        label = f"{split} {arm}"
        d.arms[label] = an._arm(frame, candidate, split, arm)
        d.arms_08[label] = an._arm(frame, candidate, split, arm, "score_08T")
        algos = frame[(frame.split == split) & (frame.arm == arm)].algorithm.unique()
        if len(algos):
            d.algorithm[label] = str(algos[0])
        elif arm == "drift@best" and d.best_drift:
            d.algorithm[label] = d.best_drift
        else:
            d.algorithm[label] = "fedsam" if arm.startswith("fedsam") else arm
    d.gap = an._paired(d.arms["iid fedavg"], d.arms["dir0.1 fedavg"])
    d.drift_gain = an._paired(d.arms["dir0.1 drift@best"], d.arms["dir0.1 fedavg"])
    d.sam_gain = an._paired(d.arms["iid fedsam@rho_star"], d.arms["iid fedavg"])
    d.sam_gain_dir = an._paired(d.arms["dir0.1 fedsam@rho_star"], d.arms["dir0.1 fedavg"])
    # R5: the rule's estimate is analyse's (stage-A seconds of this candidate, by method)
    stage_a = next(r for r in an.analyse(criteria, mine) if r.name == candidate)
    d.stage_a_complete = not plan_a.todo and not plan_a.pending
    d.hours_rule, d.load_rule, d.seconds_rule = stage_a.rerun_hours, stage_a.load, dict(stage_a.seconds)
    if len(frame):
        d.seconds_stage_b = {str(a): float(g.seconds.mean()) for a, g in frame.groupby("algorithm")}
        d.hours_stage_b = an.rerun_hours(d.seconds_stage_b, an.two_gradient_share())
        d.load_stage_b = float(frame.load.median())
    d.curves = _curves(b_records)
    return d


# --- the outcome --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """The file's selection applied to the stage-B decisions: ``kind`` is ``regime``, ``undecided``,
    ``if_none`` or ``none`` (R3 met somewhere, yet no candidate meets R1–R5); ``regime`` the chosen
    candidate (the regime, or the rerun's candidate under ``if_none``), ``text`` the sentence."""

    kind: str
    regime: str | None
    text: str


def _failed(d: Decision) -> list[str]:
    return [k for k, v in d.verdicts().items() if v.met is False]


def selection_outcome(decisions: Sequence[Decision]) -> Outcome:
    """criteria.yaml ``selection`` / ``if_none`` on the stage-B candidates, cheapest first by R5's estimate."""
    if not decisions:
        return Outcome("undecided", None, "undecided (runs missing): no candidate has stage-B records")
    order = sorted(decisions, key=lambda d: (not math.isfinite(d.hours_rule), d.hours_rule))
    for d in order:
        v = d.verdicts()
        if all(x.met is True for x in v.values()):
            return Outcome("regime", d.name, f"{d.name} is the regime: the first stage-B candidate (cheapest first "
                                             "by R5's estimate) to meet R1–R5.")
        open_ = [k for k, x in v.items() if x.met is None]
        if open_:
            text = (f"undecided ({MISSING}): {d.name} has {d.n_records}/{d.n_planned} stage-B runs recorded; "
                    f"open: {', '.join(f'{k} ({v[k].why})' for k in open_)}"
                    + (f"; not met already: {', '.join(_failed(d))}" if _failed(d) else "") + ".")
            if all(x.r3().met is False for x in order):
                text += (" R3 is already not met for every stage-B candidate, so the file's `if_none` applies "
                         "whatever the missing runs show: every SAM-specific claim is 'not testable at cpu "
                         "scale'; the rerun's candidate (R1, R2, R4, R5 at the lowest cost) is still open.")
            return Outcome("undecided", None, text)
    if not any(d.r3().met for d in order):
        why = "; ".join(f"{d.name}: {d.r3().why or 'interval not above 0'}" for d in order)
        rest = [d for d in order if all(d.verdicts()[k].met for k in ("R1", "R2", "R4", "R5"))]
        text = (f"No candidate meets R3 ({why}). Per criteria.yaml `if_none`: SAM does not help at this scale; "
                "every SAM-specific claim is marked 'not testable at cpu scale' in the rerun")
        if rest:
            return Outcome("if_none", rest[0].name,
                           text + f", which runs in {rest[0].name}, the cheapest candidate meeting R1, R2, R4 and "
                                  f"R5 (rule's estimate {rest[0].hours_rule:.1f} h).")
        fails = "; ".join(f"{d.name} fails "
                          + ", ".join(k for k in ("R1", "R2", "R4", "R5") if d.verdicts()[k].met is False)
                          for d in order)
        return Outcome("if_none", None, text + f"; no stage-B candidate meets R1, R2, R4 and R5 ({fails}), so the "
                                               "file names no candidate for the rerun.")
    parts = []
    for d in order:
        failed = _failed(d)
        if failed == ["R5"]:
            parts.append(f"{d.name} meets R1–R4 but not R5 (R5 alone fails: the rule's estimate of the rerun is "
                         f"{d.hours_rule:.1f} h > {an.BUDGET_HOURS:g} h)")
        else:
            parts.append(f"{d.name} fails {', '.join(failed)}")
    return Outcome("none", None, "No candidate is the regime: " + "; ".join(parts) + ".")


def amended_outcome(decisions: Sequence[Decision], amendment: Any,
                    screened: Sequence[an.CandidateResult] = ()) -> Outcome:
    """The outcome under an amendment (:mod:`lab.regime.amendment`): its ``stage_b.order`` and
    ``outcome.require`` tiers. The regime is the first candidate of the order meeting every criterion of
    the first tier; a candidate is judged only once every criterion of the tiers is decided for it, and a
    later one only after every earlier one fails the tier. If none meets the first tier, the first
    meeting the next tier, and so on. If no candidate meets R3, the criteria's ``if_none``: the rerun's
    candidate is the cheapest of ``screened`` (stage A) meeting R1 and R2 by its point estimates."""
    by_name = {d.name: d for d in decisions}
    needed = sorted({k for tier in amendment.require for k in tier})
    for name in amendment.order:
        d = by_name.get(name)
        if d is None:
            return Outcome("undecided", None, f"undecided ({MISSING}): {name}, next in {amendment.path.name}'s "
                           f"order, has no stage-B records (python -m lab regime pilot --stage B --candidate {name})")
        v = d.verdicts()
        open_ = [k for k in needed if v[k].met is None]
        if open_:
            return Outcome("undecided", None, f"undecided ({MISSING}): {name} has {d.n_records}/{d.n_planned} "
                           f"stage-B runs recorded; open: " + ", ".join(f"{k} ({v[k].why})" for k in open_) + ".")
        if all(v[k].met for k in amendment.require[0]):
            break  # the first tier is met: no later candidate is needed
    for tier in amendment.require:
        for name in amendment.order:
            d = by_name.get(name)
            if d is not None and all(d.verdicts()[k].met for k in tier):
                v = d.verdicts()
                # R5 is the rerun plan's under the amendment (reasons.r5): stage A's estimate is shown, not judged
                missed = [f"{k} ({v[k].why or 'not met'})" for k in CRITERIA[:4] if v[k].met is not True]
                return Outcome("regime", name, f"{name} is the regime ({amendment.path.name}): the first candidate "
                               f"of its order whose stage B meets {', '.join(tier)}"
                               + (f"; it does not meet {', '.join(missed)}, which every claim and the README "
                                  "report beside the result" if missed else "; it meets R1–R4")
                               + f". R5 is the rerun plan's (`python -m lab regime rerun-plan`); the file's stage-A "
                                 f"estimate is {d.hours_rule:.1f} h.")
    rerun = sorted((r for r in screened if r.r1() and r.r2()), key=lambda r: r.rerun_hours)
    why = "; ".join(f"{n}: {by_name[n].r3().why or 'interval not above 0'}" for n in amendment.order)
    return Outcome("if_none", rerun[0].name if rerun else None,
                   f"No candidate of {amendment.path.name}'s order meets R3 in stage B ({why}). Per criteria.yaml "
                   "`if_none`: SAM does not help at this scale; every SAM-specific claim is marked 'not testable at "
                   "cpu scale' in the rerun, "
                   + (f"which runs in {rerun[0].name}, the cheapest stage-A candidate meeting R1 and R2."
                      if rerun else "and no stage-A candidate meets R1 and R2 to run it in."))


CRITERIA = ("R1", "R2", "R3", "R4", "R5")
