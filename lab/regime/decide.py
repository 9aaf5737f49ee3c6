"""The regime pilot's stage-B decisions: R1–R5 of ``lab/regime/criteria.yaml`` on the test set, and the outcome.

Stage B trains the chosen candidate on the test set with the seeds of ``stages.B`` (200–205), each arm at
every seed, so the seeds pair the arms (common θ₀, client sampling and batch order). With the score of
a run the file's metric (:func:`lab.regime.pilot.record_score`: mean of the last three evaluated test
accuracies, in %) and, per comparison, d_s = left_s − right_s over the stage-B seeds, the paired
interval is d̄ ± t_{0.975, n−1} s_d / √n (:func:`lab.evidence.paired.paired_difference`, the statistics of
the lab's claims). The criteria, read exactly as the file writes them:

* **R1** d = FedAvg_iid − FedAvg_dir0.1: met iff d̄ ≥ 5.0 and the interval's lower end > 0;
* **R2** d = drift@best − FedAvg at Dir 0.1 (drift@best: the drift correction with the best stage-A
  validation score, :func:`lab.regime.pilot.best_drift` — SCAFFOLD, Karimireddy et al. 2020; FedDyn,
  Acar et al. 2021; FedACG, Kim et al. 2024): met iff the interval lies above 0;
* **R3** ρ* = argmax of the stage-A IID FedSAM score over the grid (:func:`lab.regime.pilot.best_iid_rho`;
  FedSAM, Qu et al. 2022) must be neither 0 nor the grid's largest ρ, and d = FedSAM@ρ* − FedAvg at IID
  must have its interval above 0 (an edge ρ* fails R3 whatever the interval); FedSAM@ρ* − FedAvg at
  Dir 0.1 is reported beside it, not a criterion;
* **R4** for every stage-B arm, |mean_s acc_s(T) − mean_s acc_s(0.8 T)| < h₃, the half-width of R3's
  interval, where acc(t) is the score the run would have had had it stopped at round ⌊t⌋
  (:func:`lab.regime.analyse.scores_frame`), and the arms ranked by mean at 0.8 T as at T;
* **R5** the rule's estimate of the rerun, Σ over its planned runs of the candidate's measured stage-A
  seconds per run of that method / 2 workers ≤ 8 h (:func:`lab.regime.analyse.rerun_hours` under
  :data:`lab.regime.analyse.RERUN_ASSUMPTION`). The same estimate from the stage-B runs' seconds, and the
  median load average at the start of the runs each estimate uses, are printed beside it — labelled as
  not the rule (the machine is shared: seconds measured at load 4–6 on 2 cores overstate a quiet one).

A criterion on a stage-B interval is decided only once every seed of both arms is recorded and finite:
before that it is "undecided (runs missing)" (a diverged run: "undecided (diverged run)"). The outcome
follows the file's ``selection``: the stage-B candidates in the order of R5's estimate (cheapest first),
the first meeting R1–R5 is the regime; if none meets R3 (an edge ρ* in stage A, or its stage-B
interval), the ``if_none`` consequence: SAM-specific claims are "not testable at cpu scale" and the rerun
runs in the cheapest stage-B candidate meeting R1, R2, R4 and R5. A candidate that never reached stage B
cannot meet R3 (R3's rule reads a stage-B interval).

Outputs (``figures/regime/``): ``stage_b.md`` (per candidate the criteria table, the per-seed values, the
outcome), ``stage_b.png/.pdf`` with sidecar, and ``stage_b.csv`` — the figure's data and the numeric
table in one file (``panel``: decision, seeds, horizon, curves, cost), written by
:func:`lab.tools.figures.save_figure`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lab.evidence.paired import PairedDifference
from lab.regime import analyse as an
from lab.regime.pilot import (Criteria, CriteriaError, PilotRecord, best_drift, best_iid_rho, build_plan, load_criteria,
                              load_records, record_score, records_dir)
from lab.repro import FIGURES_DIR
from lab.study.report import number, paired_text

__all__ = ["Decision", "Outcome", "Verdict", "amended_outcome", "decide", "report", "selection_outcome", "stage_b_markdown",
           "write_outputs"]

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

    Raises :class:`lab.regime.pilot.PilotError` (through :func:`build_plan`) when a stage-B record was made
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


# --- outputs ------------------------------------------------------------------------------------
def _rule(criteria: Criteria, key: str) -> str:
    """The file's rule of criterion ``key``, on one line, its ``|`` escaped for a markdown table."""
    return re.sub(r"\s+", " ", str(criteria.raw["criteria"][key]["rule"])).strip().replace("|", "\\|")


def _secs(seconds: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f} s" for k, v in sorted(seconds.items())) or "–"


def _arm_label(d: Decision, label: str) -> str:
    """``dir0.1 drift@best (feddyn)``: the arm, and its method where the arm's name does not say it."""
    alg = d.algorithm.get(label, "")
    return label if not alg or label.endswith(f" {alg}") or alg == "drift@best" else f"{label} ({alg})"


def screening_note(decisions: Sequence[Decision], screened: Sequence[an.CandidateResult]) -> str:
    """Which candidates stage A sent to stage B (R1–R3 on point estimates) and which of them the outcome
    counts: only candidates with stage-B records can meet R3, whose rule reads a stage-B interval."""
    deciding = {d.name for d in decisions}
    parts = []
    for r in screened:
        state = ("meets R1–R3 on its stage-A point estimates" if r.qualifies() else
                 f"stage A incomplete ({r.n_records}/{r.n_planned})" if r.n_records < r.n_planned else
                 "does not meet R1–R3 on its stage-A point estimates")
        parts.append(f"{r.name}: {state}" + ("; decided here" if r.name in deciding else ""))
    return ("Stage A's screening (`python -m lab regime analyse`): " + "; ".join(parts) + ". The outcome counts "
            "the candidates with stage-B records only (R3's rule reads a stage-B interval).")


def stage_b_markdown(decisions: Sequence[Decision], criteria: Criteria, outcome: Outcome, note: str = "") -> str:
    """``stage_b.md``: per candidate the criteria table, the per-seed values and R5's estimates; the outcome
    (``note``: :func:`screening_note`, printed under it)."""
    lines = ["# Regime pilot, stage B (decisions)", "",
             "Generated by `python -m lab regime decide` from the committed records in `figures/regime/records/` "
             f"(criteria: `lab/regime/criteria.yaml`, sha256 {criteria.digest[:12]}…). Scores are test accuracy "
             f"in % (mean of the last {criteria.last_k} evaluations); differences are paired by seed, "
             "`mean ± 95 % half-width (n = pairs)`, Student t with n − 1 degrees of freedom. A criterion is decided "
             f"only when every stage-B seed ({', '.join(map(str, criteria.seeds('B')))}) of its arms is recorded.",
             "", "## Outcome (criteria.yaml, `selection` / `if_none`" + (
                 f"; amended by `lab/regime/{criteria.amendment.path.name}`, sha256 {criteria.amendment.digest[:12]}…"
                 if criteria.amendment is not None else "") + ")", "", f"**{outcome.text}**", ""]
    if note:
        lines += [note, ""]
    for d in decisions:
        v = d.verdicts()
        h = d.horizon()
        moves = {k: t - e for k, (t, e, _) in h.items()}
        rank_t, rank_08 = d.rankings()
        worst = max(moves, key=lambda k: abs(moves[k]), default=None)
        hw = d.sam_gain.half_width if d.sam_gain is not None else math.nan
        where = "interior" if d.rho_star_interior else "edge"
        rho = "–" if d.rho_star is None else f"ρ* = {d.rho_star:g} ({where} of {list(d.rho_grid)})"
        r4_effect = ("–" if worst is None else
                     f"max \\|acc(T) − acc(0.8T)\\| = {abs(moves[worst]):.2f} ({worst}) vs R3 half-width {number(hw)}; "
                     f"ranking {'stable' if rank_t == rank_08 else 'changes'}")
        r5_effect = (f"{number(d.hours_rule, '.1f')} h (stage-A seconds: {_secs(d.seconds_rule)}; median load at start "
                     f"{number(d.load_rule, '.1f')})")
        lines += [f"## {d.name}: {d.n_records}/{d.n_planned} stage-B runs recorded", "",
                  f"drift@best = {d.best_drift or '–'}, {rho} (both from stage A).", "",
                  "| criterion | rule (criteria.yaml) | paired effect (mean ± half-width, n) | verdict |",
                  "|---|---|---|---|",
                  f"| R1 | {_rule(criteria, 'R1')} | FedAvg IID − Dir 0.1: {paired_text(d.gap)} | **{v['R1'].word}** |",
                  f"| R2 | {_rule(criteria, 'R2')} | {d.best_drift or 'drift@best'} − FedAvg (Dir 0.1): "
                  f"{paired_text(d.drift_gain)} | **{v['R2'].word}** |",
                  f"| R3 | {_rule(criteria, 'R3')} | {rho}; FedSAM@ρ* − FedAvg (IID): {paired_text(d.sam_gain)}"
                  + (f" ({v['R3'].why})" if v['R3'].met is False and v['R3'].why else "") + f" | **{v['R3'].word}** |",
                  "| (R3, informative) | not a criterion | FedSAM@ρ* − FedAvg (Dir 0.1): "
                  f"{paired_text(d.sam_gain_dir)} | – |",
                  f"| R4 | {_rule(criteria, 'R4')} | {r4_effect} | **{v['R4'].word}** |",
                  f"| R5 | {_rule(criteria, 'R5')} | {r5_effect} | **{v['R5'].word}** |", "",
                  f"R5's estimate assumes {an.RERUN_ASSUMPTION}. **Not the rule**, for comparison only: the same "
                  f"estimate from the stage-B runs' seconds is {number(d.hours_stage_b, '.1f')} h "
                  f"({_secs(d.seconds_stage_b)}; median load at start {number(d.load_stage_b, '.1f')}; stage B also "
                  "evaluates the 10,000 test samples). "
                  "The machine is shared: seconds measured at a load of 4–6 on 2 cores overstate a quiet machine's; "
                  "the verdict is the rule's.", "",
                  "### Per seed (test accuracy, %; differences in points)", "",
                  "| seed | " + " | ".join(_arm_label(d, k) for k in d.arms)
                  + " | R1 d | R2 d | R3 d | R3 Dir d |",
                  "|---|" + "---|" * (len(d.arms) + 4)]
        diffs = [dict(x.differences) if x is not None else {}
                 for x in (d.gap, d.drift_gain, d.sam_gain, d.sam_gain_dir)]
        for s in d.seeds:
            cells = [number(d.arms[k].get(s, math.nan)) for k in d.arms]
            cells += [number(x.get(s, math.nan), "+.2f") for x in diffs]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines += ["", "### R4: acc(T) and acc(0.8 T), mean over seeds (%)", "",
                  "| arm | method | seeds | acc(0.8T) | acc(T) | acc(T) − acc(0.8T) | rank at 0.8T | rank at T |",
                  "|---|---|---|---|---|---|---|---|"]
        for k, (t, e, n) in h.items():
            lines.append(f"| {k} | {d.algorithm.get(k, '')} | {n} | {e:.2f} | {t:.2f} | {t - e:+.2f} | "
                         f"{rank_08.index(k) + 1} | {rank_t.index(k) + 1} |")
        lines.append("")
    lines += [f"acc(0.8 T) is the score a run would have had had it stopped at round ⌊0.8 T⌋ (its last "
              f"{criteria.last_k} evaluations at or before it).", ""]
    return "\n".join(lines)


def _tables(decisions: Sequence[Decision]) -> dict[str, pd.DataFrame]:
    """The numbers of ``stage_b.csv`` by panel: decision, seeds, horizon, curves, cost."""
    dec, seeds, hor, cost = [], [], [], []
    for d in decisions:
        v = d.verdicts()
        comps = [("R1", "fedavg_iid_minus_dir", "", "fedavg", d.gap, an.R1_GAP),
                 ("R2", "drift_minus_fedavg", "dir0.1", d.best_drift or "drift@best", d.drift_gain, 0.0),
                 ("R3", "fedsam_minus_fedavg", "iid", "fedsam@rho_star", d.sam_gain, 0.0),
                 ("R3_informative", "fedsam_minus_fedavg", "dir0.1", "fedsam@rho_star", d.sam_gain_dir, math.nan)]
        for crit, qty, split, arm, x, thr in comps:
            met = v[crit].met if crit in v else None
            dec.append({"candidate": d.name, "criterion": crit, "quantity": qty, "split": split, "arm": arm,
                        "rho": d.rho_star if d.rho_star is not None and "fedsam" in arm else math.nan,
                        "n": 0 if x is None else x.n, "value": math.nan if x is None else x.mean,
                        "half_width": math.nan if x is None else x.half_width,
                        "low": math.nan if x is None else x.low, "high": math.nan if x is None else x.high,
                        "threshold": thr, "met": math.nan if met is None else float(met)})
            for s, val in ([] if x is None else x.differences):
                seeds.append({"candidate": d.name, "criterion": crit, "quantity": qty, "split": split, "arm": arm,
                              "seed": s, "value": val})
        hw = d.sam_gain.half_width if d.sam_gain is not None else math.nan
        rank_t, rank_08 = d.rankings()
        for k, (t, e, n) in d.horizon().items():
            split, arm = k.split(" ", 1)
            hor.append({"candidate": d.name, "criterion": "R4", "split": split, "arm": arm,
                        "algorithm": d.algorithm.get(k, ""), "n": n, "acc_T": t, "acc_08T": e, "value": t - e,
                        "threshold": hw, "rank_T": rank_t.index(k) + 1, "rank_08T": rank_08.index(k) + 1})
        for crit in ("R4", "R5"):
            met = v[crit].met
            dec.append({"candidate": d.name, "criterion": crit,
                        "quantity": "all_arms_move_less_than_R3_half_width_and_ranking_stable" if crit == "R4"
                        else "rerun_hours_estimate", "n": d.n_records if crit == "R4" else math.nan,
                        "value": (max((abs(t - e) for t, e, _ in d.horizon().values()), default=math.nan)
                                  if crit == "R4" else d.hours_rule),
                        "threshold": hw if crit == "R4" else an.BUDGET_HOURS,
                        "met": math.nan if met is None else float(met)})
        for source, secs, hours, load in (("stage_A_rule", d.seconds_rule, d.hours_rule, d.load_rule),
                                          ("stage_B_not_the_rule", d.seconds_stage_b, d.hours_stage_b,
                                           d.load_stage_b)):
            for alg, s in secs.items():
                cost.append({"candidate": d.name, "criterion": "R5", "quantity": f"seconds_per_run_{source}",
                             "algorithm": alg, "value": s})
            cost.append({"candidate": d.name, "criterion": "R5", "quantity": f"rerun_hours_{source}", "value": hours})
            cost.append({"candidate": d.name, "criterion": "R5", "quantity": f"load_at_start_median_{source}",
                         "value": load})
    curves = [c.assign(candidate=d.name) for d in decisions for c in [d.curves] if len(c)]
    return {"decision": pd.DataFrame(dec), "seeds": pd.DataFrame(seeds), "horizon": pd.DataFrame(hor),
            "curves": pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(
                columns=["candidate", "split", "arm", "algorithm", "round", "accuracy"]),
            "cost": pd.DataFrame(cost)}


def draw(decisions: Sequence[Decision]) -> Any:
    """Per candidate (a row): the per-seed paired differences of R1–R3 (points) with mean and 95 % interval
    (R1's threshold dashed at 5, 0 solid); R4's accuracy curves of the arms (mean over seeds) with 0.8 T
    and T marked; R4's |acc(T) − acc(0.8 T)| per arm against R3's half-width."""
    import matplotlib.pyplot as plt

    from lab.style import method_color, method_label
    from lab.tools.plots import use_house_style

    use_house_style()
    rows = max(1, len(decisions))
    fig, axes = plt.subplots(rows, 3, figsize=(16, 4.4 * rows), squeeze=False,
                             gridspec_kw={"width_ratios": [1.1, 1.3, 1.0]})
    if not decisions:
        for ax in axes[0]:
            ax.text(0.5, 0.5, "no stage-B records", ha="center", va="center", transform=ax.transAxes)
    for i, d in enumerate(decisions):
        ax, ax_c, ax_h = axes[i]
        drift = d.best_drift or "drift@best"
        avg, sam = method_label("fedavg"), method_label("fedsam")
        comps = [("R1", f"{avg}\nIID − Dir 0.1", d.gap, method_color("fedavg")),
                 ("R2", f"{method_label(drift)} −\n{avg}, Dir 0.1", d.drift_gain, method_color(drift)),
                 ("R3", f"{sam} ρ* −\n{avg}, IID", d.sam_gain, method_color("fedsam")),
                 ("(R3)", f"{sam} ρ* −\n{avg}, Dir 0.1", d.sam_gain_dir, method_color("fedsam"))]
        v = d.verdicts()
        for j, (crit, label, x, color) in enumerate(comps):
            if x is None:
                continue
            ax.plot([j + 0.12] * x.n, x.values, "o", ms=4, color=color, alpha=0.5, zorder=2)
            err = x.half_width if math.isfinite(x.half_width) else 0.0
            ax.errorbar([j - 0.12], [x.mean], yerr=[[err], [err]], fmt="D", ms=6, color=color, capsize=4, zorder=3,
                        mfc="white" if crit == "(R3)" else color)
            # short words: four columns share the axis' width (the table says why a criterion is open)
            word = ("undecided" if v[crit].met is None else v[crit].word) if crit in v else "informative"
            ax.annotate(word, (j, 1.0), xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=7)
        ax.axhline(0.0, color="0.3", lw=0.8)
        ax.plot([-0.4, 0.4], [an.R1_GAP, an.R1_GAP], "--", color=method_color("fedavg"), lw=1.0)
        ax.set_xticks(range(len(comps)), [f"{c}\n{label}" for c, label, _, _ in comps], fontsize=7)
        ax.set_xlim(-0.6, len(comps) - 0.4)
        ax.set_ylabel("paired difference (test accuracy, points)")
        ax.set_title(f"{d.name}: paired differences, seeds (points), mean ± 95 % interval\n"
                     "dashed: R1's 5 points; open: informative, not a criterion", fontsize=8, pad=14)
        # R4: the curves
        rounds = 0
        for (split, arm), g in d.curves.groupby(["split", "arm"], sort=False) if len(d.curves) else []:
            alg = str(g.algorithm.iloc[0])
            rounds = int(g.rounds.iloc[0])
            n = int(g.n_seeds.min())  # seeds behind every point of the curve
            name = f"{method_label(alg)}{' ρ*' if alg == 'fedsam' else ''}"
            ax_c.plot(g["round"], g.accuracy, "-" if split == "iid" else "--", color=method_color(alg), lw=1.3,
                      label=f"{name} ({'IID' if split == 'iid' else 'Dir 0.1'}, {n} seed{'s' if n != 1 else ''})")
        if rounds:
            for t, name in ((math.floor(HORIZON_FRACTION * rounds), "0.8 T"), (rounds, "T")):
                ax_c.axvline(t, color="0.5", lw=0.8, ls=":")
                ax_c.annotate(name, (t, 1.0), xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=7)
            ax_c.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax_c.set_xlabel("round")
        ax_c.set_ylabel("test accuracy (%), mean over seeds")
        ax_c.set_title("R4: accuracy curves of the stage-B arms", fontsize=8, pad=14)
        # R4: movement per arm vs R3's half-width
        h = d.horizon()
        labels = list(h)
        ax_h.bar(range(len(labels)), [abs(t - e) for t, e, _ in h.values()],
                 color=[method_color(d.algorithm.get(k, "")) for k in labels], alpha=0.8)
        if d.sam_gain is not None and math.isfinite(d.sam_gain.half_width):
            ax_h.axhline(d.sam_gain.half_width, color=method_color("fedsam"), lw=1.0, ls="--",
                         label="R3's half-width")
            ax_h.legend(fontsize=7)
        ax_h.set_xticks(range(len(labels)), [
            f"{'IID' if k.startswith('iid') else 'Dir 0.1'}\n{method_label(d.algorithm.get(k, k.split(' ', 1)[1]))}"
            + (" ρ*" if k.endswith("rho_star") else "") for k in labels], fontsize=7)
        ax_h.set_ylabel("|acc(T) − acc(0.8 T)| (points)")
        ax_h.set_title(f"R4: {v['R4'].word}", fontsize=8, pad=14)
    fig.suptitle("Regime pilot, stage B: test accuracy, paired by seed", fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(criteria: Criteria | None = None, candidates: Sequence[str] | None = None,
                  records_folder: Path | None = None, out_dir: Path | None = None) -> tuple[dict[str, Path], Outcome,
                                                                                              list[Decision]]:
    """Decide stage B of ``candidates`` (default: every candidate with a stage-B record) and write
    ``stage_b.md``, ``stage_b.png/.pdf/.json`` and ``stage_b.csv`` (the numeric table)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lab.evidence.records import load_record
    from lab.tools.figures import save_figure

    criteria = load_criteria() if criteria is None else criteria
    folder = records_dir() if records_folder is None else Path(records_folder)
    out = FIGURES_DIR / "regime" if out_dir is None else Path(out_dir)
    records = load_records(folder, criteria)
    if candidates is None:
        names = [c for c in criteria.candidates if any(r.meta["stage"] == "B" and r.meta["candidate"] == c
                                                        for r in records)]
    else:
        names = list(candidates)
    decisions = [decide(criteria, records, c) for c in names]
    screened = an.analyse(criteria, records)
    outcome = selection_outcome(decisions) if criteria.amendment is None else \
        amended_outcome(decisions, criteria.amendment, screened)
    out.mkdir(parents=True, exist_ok=True)
    fig = draw(decisions)
    b_runs = [load_record(r.key, folder) for r in records if r.meta["stage"] == "B" and r.meta["candidate"] in names]
    paths = save_figure(
        fig, "stage_b", notebook="lab/regime/decide.py", profile="cpu", kind="results", out_dir=out,
        command="python -m lab regime decide" + "".join(f" --candidate {c}" for c in (candidates or [])),
        caption="Regime pilot, stage B (test set, paired by seed): R1–R3's per-seed paired differences with mean "
                "and 95 % interval; R4's accuracy curves with 0.8 T and T, and each arm's movement against R3's "
                "half-width",
        parameters={"criteria": "lab/regime/criteria.yaml", "criteria_sha256": criteria.digest, "stage": "B",
                    **({"amendment": f"lab/regime/{criteria.amendment.path.name}",
                        "amendment_sha256": criteria.amendment.digest} if criteria.amendment else {}),
                    "seed": list(criteria.seeds("B")), "candidates": names, "outcome": outcome.kind, "regime": outcome.regime},
        data=_tables(decisions), runs=[r for r in b_runs if r is not None])
    plt.close(fig)
    paths["md"] = out / "stage_b.md"
    paths["md"].write_text(stage_b_markdown(decisions, criteria, outcome,
                                            screening_note(decisions, screened)))
    return paths, outcome, decisions


def report(criteria: Criteria, names: Sequence[str] | None = None) -> int:
    """Decide ``names`` (default: every candidate with stage-B records), print the verdicts and the outcome and
    write the outputs: the pilot's ``study decide`` (``python -m lab regime decide [--candidate NAME]``)."""
    unknown = [c for c in names or [] if c not in criteria.candidates]
    if unknown:
        raise CriteriaError(f"--candidate {', '.join(unknown)} not in {criteria.path} (declared: "
                            f"{', '.join(criteria.candidates)})")
    if not names:
        records = load_records(records_dir(), criteria)
        names = [c for c in criteria.candidates if any(r.meta["stage"] == "B" and r.meta["candidate"] == c
                                                        for r in records)]
        if not names:
            print(f"undecided ({MISSING}): no candidate has stage-B records in {records_dir()}; nothing written "
                  "(name one with --candidate to see what it lacks)")
            return 0
    paths, outcome, decisions = write_outputs(criteria, names)
    for d in decisions:
        print(f"{d.name}: {d.n_records}/{d.n_planned} stage-B runs recorded; drift@best = {d.best_drift or '–'}, "
              f"ρ* = {'–' if d.rho_star is None else format(d.rho_star, 'g')}")
        effects = {"R1": paired_text(d.gap), "R2": paired_text(d.drift_gain), "R3": paired_text(d.sam_gain),
                   "R4": f"max |Δ| {number(max((abs(t - e) for t, e, _ in d.horizon().values()), default=math.nan))}"
                         f" vs h3 {number(d.sam_gain.half_width if d.sam_gain else math.nan)}",
                   "R5": f"{number(d.hours_rule, '.1f')} h (stage-A seconds, load {number(d.load_rule, '.1f')})"}
        for k, v in d.verdicts().items():
            print(f"  {k}: {effects[k]:40s} {v.word}" + (f" ({v.why})" if v.met is False and v.why else ""))
        print(f"  R3 at Dir 0.1 (informative): {paired_text(d.sam_gain_dir)}")
        print(f"  not the rule: R5's estimate from stage-B seconds {number(d.hours_stage_b, '.1f')} h "
              f"(median load {number(d.load_stage_b, '.1f')})")
    print(f"outcome: {outcome.text}")
    for path in paths.values():
        print(f"wrote {path}")
    return 0
