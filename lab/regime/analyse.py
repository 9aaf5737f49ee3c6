"""The regime pilot's stage-A outputs, from the estimates of :mod:`lab.regime.stage_a` (R1–R5 read from point
estimates on stage A's two seeds; the decisions are stage B's, :mod:`lab.regime.decide`).

Outputs (``figures/regime/``): ``pilot_table.csv`` (one row per candidate × quantity, numbers only),
``pilot.png/.pdf`` with its sidecar and data (:func:`lab.tools.figures.save_figure`) and ``pilot.md``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lab.evidence.paired import PairedDifference
from lab.regime.criteria import Criteria, load_criteria
from lab.regime.pilot_plan import rho_arm
from lab.regime.pilot_records import load_records, record_score, records_dir
from lab.regime.stage_a import (R1_GAP, RERUN_ASSUMPTION, STAGE_B_ARMS, CandidateResult, analyse, rerun_hours,
                                scores_frame, two_gradient_share)
from lab.repro import FIGURES_DIR
from lab.study.report import number, paired_text

__all__ = ["CandidateResult", "RERUN_ASSUMPTION", "STAGE_B_ARMS", "analyse", "pilot_table", "record_score",
           "rerun_hours", "scores_frame", "summary_markdown", "two_gradient_share", "write_outputs"]


# --- table ----------------------------------------------------------------------------------------
TABLE_COLUMNS = ["candidate", "criterion", "quantity", "split", "arm", "rho", "n", "value", "half_width"]


def _row(c: str, crit: str, qty: str, split: str = "", arm: str = "", rho: float = math.nan,
         d: PairedDifference | None = None, value: float = math.nan, n: int | None = None) -> dict[str, Any]:
    if d is not None:
        value, n, half = d.mean, d.n, d.half_width
    else:
        half = math.nan
    return {"candidate": c, "criterion": crit, "quantity": qty, "split": split, "arm": arm, "rho": rho,
            "n": n if n is not None else (0 if d is None else d.n), "value": value, "half_width": half}


def pilot_table(results: Sequence[CandidateResult], frame: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate × quantity: validation scores per arm, R1 gap, R2 gains, R3 gains and ρ*,
    R4 horizon differences and ranking, R5 seconds and hours (value and half-width in points where a
    difference; n = pairs or seeds)."""
    rows = []
    for res in results:
        c = res.name
        sel = frame[frame.candidate == c]
        for (split, arm), g in sel.groupby(["split", "arm"], sort=False):
            finite = g.score[np.isfinite(g.score)]
            half = math.nan
            if len(finite) >= 2:
                from scipy import stats
                half = float(stats.t.ppf(0.975, len(finite) - 1) * finite.std(ddof=1) / math.sqrt(len(finite)))
            rows.append({**_row(c, "score", "validation_accuracy", split, str(arm), float(g.rho.iloc[0]),
                                value=float(finite.mean()) if len(finite) else math.nan, n=len(finite)),
                         "half_width": half})
        rows.append(_row(c, "R1", "fedavg_iid_minus_dir", arm="fedavg", d=res.gap))
        for d, diff in res.drift.items():
            rows.append(_row(c, "R2", "drift_minus_fedavg", "dir0.1", d, d=diff))
        rows.append(_row(c, "R2", "best_drift_minus_fedavg", "dir0.1", res.best_drift or "",
                         d=res.drift.get(res.best_drift) if res.best_drift else None))
        for rho, diff in res.rho_gain.items():
            rows.append(_row(c, "R3", "fedsam_minus_fedavg", "iid", rho_arm(rho), rho, d=diff))
        rho_star = math.nan if res.rho_star is None else res.rho_star
        rows.append(_row(c, "R3", "rho_star", "iid", "fedsam", rho_star, value=rho_star))
        rows.append(_row(c, "R3", "rho_star_interior", "iid", "fedsam", rho_star,
                         value=math.nan if res.rho_star_interior is None else float(res.rho_star_interior)))
        rows.append(_row(c, "R3", "fedsam_minus_fedavg", "dir0.1", "fedsam@best_iid_rho", rho_star,
                         d=res.dir_sam_gain))
        for label, v in res.horizon.items():
            split, arm = label.split(" ", 1)
            rows.append(_row(c, "R4", "acc_T_minus_acc_08T", split, arm, value=v, n=res.horizon_n.get(label, 0)))
        rows.append(_row(c, "R4", "ranking_stable", value=math.nan if res.ranking_stable is None
                         else float(res.ranking_stable)))
        for alg, s in res.seconds.items():
            rows.append(_row(c, "R5", "seconds_per_run", arm=alg, value=s,
                             n=int((sel.algorithm == alg).sum())))
        rows.append(_row(c, "R5", "rerun_hours_estimate", value=res.rerun_hours))
        rows.append(_row(c, "R5", "load_average_at_start_median", value=res.load, n=len(sel)))
        rows.append(_row(c, "progress", "records", value=float(res.n_records), n=res.n_planned))
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


# --- figure ---------------------------------------------------------------------------------------
def draw(results: Sequence[CandidateResult], frame: pd.DataFrame, criteria: Criteria) -> tuple[Any, pd.DataFrame]:
    """The pilot figure: per candidate, FedSAM − FedAvg (validation, points) vs ρ at IID (seeds thin,
    mean line) and at ρ* on Dir 0.1; below, the IID–Dir gap and each drift correction's gain per
    candidate, and the seconds per run. Returns the figure and the per-seed points it plots."""
    import matplotlib.pyplot as plt

    from lab.style import method_color, method_label
    from lab.tools.plots import use_house_style

    use_house_style()
    names = [r.name for r in results]
    fig = plt.figure(figsize=(3.0 * len(names), 6.6))
    grid = fig.add_gridspec(2, len(names) * 2, height_ratios=[1.0, 0.9], hspace=0.45, wspace=0.9)
    points = []
    sam, avg = method_color("fedsam"), method_color("fedavg")
    top_axes = []
    for i, res in enumerate(results):
        ax = fig.add_subplot(grid[0, 2 * i:2 * i + 2], sharey=top_axes[0] if top_axes else None)
        top_axes.append(ax)
        grid_rhos = criteria.rho_grid_for(res.name)
        xs, means = [], []
        for rho in grid_rhos:
            d = res.rho_gain.get(rho)
            if d is None:
                continue
            for seed, v in d.differences:
                ax.plot(rho, v, "o", ms=3, color=sam, alpha=0.45, zorder=2)
                points.append({"candidate": res.name, "split": "iid", "rho": rho, "seed": seed, "gain": v})
            xs.append(rho)
            means.append(d.mean)
        if xs:
            ax.plot(xs, means, "-", color=sam, lw=1.5, label="IID (mean)", zorder=3)
        if res.dir_sam_gain is not None and res.rho_star is not None:
            for seed, v in res.dir_sam_gain.differences:
                ax.plot(res.rho_star, v, "s", ms=4, mfc="none", color=sam, alpha=0.6, zorder=2)
                points.append({"candidate": res.name, "split": "dir0.1", "rho": res.rho_star, "seed": seed, "gain": v})
            ax.plot(res.rho_star, res.dir_sam_gain.mean, "s", ms=7, mfc="none", mew=1.6, color=sam,
                    label="Dir 0.1 at ρ*", zorder=3)
        if res.rho_star is not None:
            ax.axvline(res.rho_star, color="0.6", lw=0.8, ls=":")
        ax.axhline(0.0, color=avg, lw=0.8)
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlim(-0.002, max(grid_rhos) * 1.6)
        ax.set_title(f"{res.name} ({res.model}, T={res.rounds})", fontsize=9)
        ax.set_xlabel("ρ")
        if i == 0:
            ax.set_ylabel(f"{method_label('fedsam')} − {method_label('fedavg')}\n(validation accuracy, points)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower left")
    half = len(names)
    ax_gap = fig.add_subplot(grid[1, :half + (half // 2)])
    width = 0.8 / (1 + len(criteria.drift_corrections))
    x = np.arange(len(names))
    series = [("gap", "FedAvg IID − Dir 0.1", avg, [r.gap for r in results])]
    series += [(d, f"{method_label(d)} − FedAvg (Dir 0.1)", method_color(d), [r.drift.get(d) for r in results])
               for d in criteria.drift_corrections]
    for j, (key, label, color, diffs) in enumerate(series):
        pos = x - 0.4 + width * (j + 0.5)
        means = [d.mean if d is not None else np.nan for d in diffs]
        ax_gap.bar(pos, means, width=width * 0.9, color=color, alpha=0.75, label=label)
        for k, d in enumerate(diffs):
            if d is None:
                continue
            for seed, v in d.differences:
                ax_gap.plot(pos[k], v, "o", ms=2.5, color="0.2", zorder=3)
                points.append({"candidate": names[k], "split": "dir0.1", "rho": np.nan, "seed": seed,
                               "gain": v, "quantity": key})
    ax_gap.axhline(R1_GAP, color=avg, lw=0.8, ls="--")
    ax_gap.axhline(0.0, color="0.3", lw=0.6)
    ax_gap.set_xticks(x, names, fontsize=8)
    ax_gap.set_ylabel("points (validation accuracy)")
    ax_gap.set_title("heterogeneity gap (R1, dashed: 5 points) and drift-correction gain (R2)", fontsize=9)
    ax_gap.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    ax_cost = fig.add_subplot(grid[1, half + (half // 2) + 1:])
    algos = ["fedavg", "fedsam"]
    for j, alg in enumerate(algos):
        vals = [r.seconds.get(alg, np.nan) for r in results]
        ax_cost.bar(x - 0.2 + 0.4 * j, vals, width=0.38, color=method_color(alg), alpha=0.8,
                    label=method_label(alg))
    ax_cost.set_xticks(x, names, fontsize=7, rotation=30, ha="right")
    ax_cost.set_ylabel("seconds per run (measured)")
    ax_cost.set_title("cost (R5)", fontsize=9)
    ax_cost.legend(fontsize=7, loc="upper left")
    fig.suptitle("Regime pilot, stage A: validation accuracy, 2 seeds (points: seeds; screening, not decisions)",
                 fontsize=10)
    data = pd.DataFrame(points)
    if "quantity" not in data:
        data["quantity"] = np.nan
    data["quantity"] = data["quantity"].fillna("fedsam_minus_fedavg")
    return fig, data


# --- summary --------------------------------------------------------------------------------------
def _word(v: bool | None) -> str:
    return "undecided (runs missing)" if v is None else "met" if v else "not met"


def summary_markdown(results: Sequence[CandidateResult], criteria: Criteria, share: float) -> str:
    """``pilot.md``: per candidate and criterion, met / not met / undecided on stage A's point estimates."""
    lines = ["# Regime pilot, stage A (screening)", "",
             f"Generated by `python -m lab regime analyse` from the committed records in `figures/regime/records/` "
             f"(criteria: `lab/regime/criteria.yaml`, sha256 {criteria.digest[:12]}…). Scores are validation "
             f"accuracy in % (mean of the last {criteria.last_k} evaluations, {criteria.fixed.get('validation_size')} "
             "held-out training samples); differences are paired by seed, `mean ± 95 % half-width (n = pairs)`.", "",
             "**Stage A is screening.** With 2 seeds a paired interval has one degree of freedom (t = 12.7) and the "
             "paired protocol decides nothing below 3 pairs, so R1–R3 are read from point estimates only, as the "
             "file's selection rule says; whether they hold is decided by stage B's 6 seeds on the test set. R4 "
             "compares each arm's movement over the last 20 % of rounds with R3's half-width: at n = 2 that "
             "half-width is not the stage-B one, so its stage-A reading is indicative. R5 is an estimate "
             f"({RERUN_ASSUMPTION}; two-gradient share {share:.2f}), from seconds measured on a shared "
             "2-core machine: `load` is the median 1-minute load average when the candidate's runs started "
             "(2 = both cores busy), so an estimate measured at a higher load overstates a quiet machine's "
             "hours by about that ratio.", "",
             "| candidate | records | R1 gap (≥ 5) | R2 best drift − FedAvg | R3 ρ*, FedSAM − FedAvg at ρ* (IID) | "
             "R3 Dir 0.1 at ρ* | R4 max \\|acc(T) − acc(0.8T)\\|, ranking | R5 s/run FedAvg / FedSAM, rerun h | "
             "load | to stage B |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        gain = r.rho_gain.get(r.rho_star) if r.rho_star is not None else None
        best = r.drift.get(r.best_drift) if r.best_drift else None
        rho = "–" if r.rho_star is None else f"ρ* = {r.rho_star:g} ({'interior' if r.rho_star_interior else 'edge'})"
        h = max((abs(v) for v in r.horizon.values() if math.isfinite(v)), default=math.nan)
        rank = "–" if r.ranking_stable is None else ("stable" if r.ranking_stable else "changes")
        secs = f"{number(r.seconds.get('fedavg', math.nan), '.0f')} / {number(r.seconds.get('fedsam', math.nan), '.0f')}, " \
               f"{number(r.rerun_hours, '.1f')} h"
        lines.append(
            f"| {r.name} | {r.n_records}/{r.n_planned} | {paired_text(r.gap)}: **{_word(r.r1())}** | "
            f"{r.best_drift or '–'} {paired_text(best)}: **{_word(r.r2())}** | {rho}, {paired_text(gain)}: **{_word(r.r3())}** | "
            f"{paired_text(r.dir_sam_gain)} | {number(h, '.2f')}, {rank}: **{_word(r.r4_point())}** (indicative) | {secs}: "
            f"**{_word(r.r5())}** | {number(r.load, '.1f')} | {'yes' if r.qualifies() else 'no' if r.n_records == r.n_planned else 'not yet'} |")
    qualified = sorted((r for r in results if r.qualifies()), key=lambda r: r.rerun_hours)
    lines += ["", "## Selection (criteria.yaml, `selection`)", ""]
    if qualified:
        lines.append("Candidates whose stage-A point estimates meet R1, R2 and R3, cheapest first (R5): "
                     + ", ".join(f"{r.name} ({r.rerun_hours:.1f} h)" for r in qualified) + ". They go to stage B "
                     "(`python -m lab regime pilot --stage B --candidate NAME`).")
    else:
        missing = [r.name for r in results if r.n_records < r.n_planned]
        lines.append("No candidate meets R1, R2 and R3 on its stage-A point estimates"
                     + (f" so far (still running: {', '.join(missing)})." if missing else "."))
        if not missing and not any(r.r3() for r in results):
            lines.append("")
            lines.append("No candidate meets R3: per the file's `if_none`, SAM does not help at this scale, and every "
                         "SAM-specific claim is 'not testable at cpu scale' in the rerun.")
    if criteria.amendment is not None:
        am = criteria.amendment
        lines += ["", f"**Amendment** (`lab/regime/{am.path.name}`, sha256 {am.digest[:12]}…, committed before any "
                  f"stage-B run): stage B runs {', '.join(am.order)} in that order, and the regime is the first whose "
                  "stage B meets " + " (else ".join(", ".join(t) for t in am.require) + ")" * (len(am.require) - 1)
                  + "; its reasons and the outcome rule are in the file, the decisions in `stage_b.md`."]
    lines += ["", "## FedSAM − FedAvg by ρ (IID, validation, points)", "",
              "| candidate | " + " | ".join(f"ρ = {r:g}" for r in criteria.rho_grid) + " |",
              "|---|" + "---|" * len(criteria.rho_grid)]
    for r in results:
        cells = [paired_text(r.rho_gain.get(rho)) if rho in r.rho_gain else "not screened" for rho in criteria.rho_grid]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    lines += ["", "R4's acc(0.8 T) is the score a run would have had had it stopped at round ⌊0.8 T⌋ (its last "
              f"{criteria.last_k} evaluations at or before that round).", ""]
    return "\n".join(lines)


def write_outputs(criteria: Criteria | None = None, records_folder: Path | None = None,
                  out_dir: Path | None = None) -> dict[str, Path]:
    """Read the records, write ``pilot_table.csv``, ``pilot.png/.pdf`` (+ sidecar and data) and ``pilot.md``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lab.evidence.records import load_record
    from lab.tools.figures import save_figure

    criteria = load_criteria() if criteria is None else criteria
    folder = records_dir() if records_folder is None else Path(records_folder)
    out = FIGURES_DIR / "regime" if out_dir is None else Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = load_records(folder, criteria)
    stage_a = [r for r in records if r.meta["stage"] == "A"]
    results = analyse(criteria, records)
    frame = scores_frame(stage_a, criteria)
    table = pilot_table(results, frame)
    fig, data = draw(results, frame, criteria)
    runs = [load_record(r.key, folder) for r in stage_a]
    paths = dict(save_figure(  # first: it refuses a dirty tree before anything is written
        fig, "pilot", notebook="lab/regime/analyse.py", profile="cpu", kind="tuning", out_dir=out,
        command="python -m lab regime analyse",
        caption="Regime pilot, stage A (validation, 2 seeds): FedSAM − FedAvg vs ρ per candidate (IID line and "
                "seeds, Dir 0.1 at ρ*); FedAvg's IID–Dir 0.1 gap and the drift corrections' gain; seconds per run",
        parameters={"criteria": "lab/regime/criteria.yaml", "criteria_sha256": criteria.digest, "stage": "A",
                    "seed": list(criteria.seeds("A"))},
        data=data, runs=[r for r in runs if r is not None]))
    plt.close(fig)
    paths["table"] = out / "pilot_table.csv"
    table.to_csv(paths["table"], index=False, float_format="%.6g")
    paths["md"] = out / "pilot.md"
    paths["md"].write_text(summary_markdown(results, criteria, two_gradient_share()))
    return paths
