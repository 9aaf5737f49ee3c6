"""The failure map's decision written by code from the committed records: ``figures/failure_map/decision.md``,
``map.csv`` and the figure ``figures/failure_map/failure_map.png`` (FedSAM − FedAvg, paired, over split × K × ρ), with its
provenance sidecar (``python -m lab study analyse lab/study/failure_map.yaml``)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.evidence.map_table import HELPS, split_label
from lab.study.analysis import FAILS, MapCell, analyse, estimate_of, fails_anywhere, failing, not_shown, stage2_rows
from lab.study.numbers import busy_seconds, decided, number, paired_text
from lab.study.plan import committed_runs, planned_runs, run_config, study_configs
from lab.study.spec import Study, out_dir
from lab.study.stage2 import stage2_budget_markdown, stage2_lesson, stage2_markdown, write_stage2_table

__all__ = ["README_END", "README_START", "budget_markdown", "busy_seconds", "control_rows", "decision_markdown",
           "headline", "lesson_markdown", "load_values", "map_lesson", "measured_runs", "number", "paired_text",
           "replace_readme_block", "write_outputs", "write_table"]

def load_values(study: Study, directory: Path | None = None, stage: int | None = 1) \
        -> tuple[dict[tuple[str, str, int], float], dict[tuple[str, str], str], dict[str, Any]]:
    """(values, untested, results): every committed run of ``study`` (of ``stage``: 1 the map, 2 its amendments'
    stage 2, None both) as its final metric in points, keyed by
    (cell, arm, seed); the (cell, arm)s with a run that breaks the validity rule, with the reason; and the
    runs themselves by record key."""
    from lab.evidence.divergence import run_divergence
    from lab.evidence.protocol import final_metric
    from lab.evidence.records import load_record
    from lab.study.calibrate import load_calibration

    calibrated = load_calibration(out_dir(study) / "calibration.json")
    configs = {}
    for run in planned_runs(study, stage):
        try:
            configs[run.key] = run_config(study, run, calibrated)
        except ValueError:
            continue
    found = committed_runs(configs, directory)
    values: dict[tuple[str, str, int], float] = {}
    untested: dict[tuple[str, str], str] = {}
    results: dict[str, Any] = {}
    for key, record in sorted(found.items()):
        res = load_record(record, directory, config=configs[key])
        results[record] = res
        problem = run_divergence(res)  # the study's validity rule is the evidence's divergence rule
        if problem is not None:
            untested.setdefault(key[:2], f"seed {key[2]} {problem}")
            continue
        values[key] = 100 * final_metric(res).value
    return values, untested, results


def control_rows(study: Study, values: Mapping[tuple[str, str, int], float]) -> list[dict[str, Any]]:
    """Each control against its same-cell partner (the arm of the same method without the control's change:
    FedAvg for FedAvg, FedSAM at ρ = 0.05 for every FedSAM and FedGF control)."""
    partner = {"fedavg": study.baseline_arm, "fedsam": "fedsam-0.05", "fedgf": "fedsam-0.05"}
    rows = []
    for arm in study.controls:
        assert arm.cell is not None
        other = partner.get(arm.algorithm, study.baseline_arm)
        diffs = [values[(arm.cell.name, arm.name, s)] - values[(arm.cell.name, other, s)] for s in study.seeds
                 if (arm.cell.name, arm.name, s) in values and (arm.cell.name, other, s) in values]
        rows.append({"control": arm.name, "cell": arm.cell.name, "against": other, "estimate": estimate_of(diffs)})
    return rows


README_START, README_END = "<!-- fedlab:map:start -->", "<!-- fedlab:map:end -->"


def headline(study: Study, cells: Sequence[MapCell], recorded: int, planned: int) -> str:
    """The map's answer in one sentence, whichever way it comes out (README's headline, the decision page's)."""
    complete = recorded >= planned and all(not any("seeds recorded" in u for u in c.untested) for c in cells)
    if not complete:
        so_far = ""
        for k in study.local_steps:  # a K whose cells are all recorded is decided already: say how
            at = [c for c in cells if c.local_steps == k]
            if any("seeds recorded" in u for c in at for u in c.untested):
                continue
            undecided = len(not_shown(at))
            so_far += (f" At K = {k}, all {len(at)} cells recorded, local SAM fails in "
                       + (_places(failing(at)) if failing(at) else "none")
                       + (f" (FedSAM − FedAvg is not decided either way in {undecided} of them)." if undecided else "."))
        return (f"The failure map is not decided yet: {recorded} of its {planned} pre-registered runs are recorded "
                f"(`python -m lab study train lab/study/failure_map.yaml` resumes it).{so_far}")
    if failing(cells):
        return f"Local SAM fails on the failure map in: {_places(failing(cells))}."
    undecided = len(not_shown(cells))
    rest = "" if not undecided else (f" (in {undecided} of its {len(cells)} cells FedSAM − FedAvg is not decided "
                                    "either way)")
    return f"Local SAM does not fail anywhere on the failure map{rest}."


def _places(cells: Sequence[MapCell]) -> str:
    return "; ".join(f"{split_label(c.split)}, K = {c.local_steps}, {c.arm}" for c in cells)


def decision_markdown(study: Study, cells: Sequence[MapCell], controls: Sequence[Mapping[str, Any]],
                      untested: Mapping[tuple[str, str], str], recorded: int, planned: int) -> str:
    """The decision page: the one-sentence answer, every cell's G, I, H with Holm-adjusted p, the controls."""
    lines = [f"# {study.name}: the decision", "",
             f"Generated by `python -m lab study analyse {study.path.name}` from the committed records "
             f"(study file sha256 {study.sha256[:12]}…). Values are the final metric (mean test accuracy over the "
             f"last {round(100 * study.last_fraction)} % of rounds, full test set) in points; each estimate is the "
             "mean over paired seeds ± the 95 % Student-t half-width; p is the two-sided t-test, p(Holm) adjusted "
             "inside its family (the Gs; the Is); a cell with seeds missing is 'not tested' until they are.", "",
             f"**{headline(study, cells, recorded, planned)}**", "",
             "| split | K | arm | G = FedSAM − FedAvg | p(Holm) | I = G − G(IID) | p(Holm) | H = FedAvg IID − split | "
             "verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        lines.append(f"| {split_label(c.split)} | {c.local_steps} | {c.arm} | {c.gap.text()} | {number(c.gap.p_holm, '.3g')} | "
                     f"{c.interaction.text()} | {number(c.interaction.p_holm, '.3g')} | {c.cost.text()} | {c.verdict} |")
    lines += ["", "## Controls (read by the claims; not in the map's families)", "",
              "| control | cell | against | paired difference (points) |", "|---|---|---|---|"]
    lines += [f"| {r['control']} | {r['cell']} | {r['against']} | {r['estimate'].text()} |" for r in controls]
    if untested:
        lines += ["", "## Not read (the study's validity rule)", ""]
        lines += [f"- {cell} {arm}: {why}" for (cell, arm), why in sorted(untested.items())]
    return "\n".join(lines) + "\n"


def measured_runs(study: Study, records: Sequence[str], directory: Path | None = None) -> list[dict[str, Any]]:
    """What each of ``records`` that ``study`` trained itself cost where it ran (its record's ``meta``: cell,
    arm, wall seconds, load at start, when it finished); records reused from another study are left out."""
    from lab.evidence.records import record_meta

    rows = []
    for record in records:
        meta = record_meta(record, directory)
        if meta.get("study") == study.name and "wall_seconds" in meta:
            rows.append({"cell": meta["cell"], "arm": meta["arm"], "seed": meta["seed"],
                         "seconds": float(meta["wall_seconds"]), "load": float(meta.get("load_at_start", math.nan)),
                         "finished": meta["finished_utc"], "cpu_count": meta.get("cpu_count")})
    return rows


def budget_markdown(study: Study, est: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The budget estimate (``plan.md``, made before the first run) against the measured cost, per (cell, arm):
    seconds of one worker estimated and measured, their ratio, and the wall time the workers were busy."""
    import statistics

    by_part: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_part.setdefault(f"{r['cell']} {r['arm']}", []).append(r)
    measured = sum(r["seconds"] for r in rows)
    # the estimate of the runs measured so far: each part's estimated seconds per run it trains, times those measured
    estimated = sum(p["seconds"] / (p["runs"] - p["committed"]) * len(by_part[name])
                    for name, p in est["parts"].items() if name in by_part and p["runs"] > p["committed"])
    planned = sum(p["runs"] - p["committed"] for p in est["parts"].values())
    loads = [r["load"] for r in rows if math.isfinite(r["load"])]
    busy = busy_seconds(rows)
    lines = [f"# {study.name}: the budget, estimated and measured", "",
             f"Generated by `python -m lab study analyse {study.path.name}` from the study's committed records (their "
             "`meta`: wall seconds of each run where it ran, load at its start, when it finished) against the "
             f"estimate `plan.md` made before the first run from the rerun's measured seconds.", "",
             f"- runs measured: {len(rows)} of the {planned} the study trains itself (reused records cost 0)",
             f"- one worker: estimated {estimated / 3600:.2f} h for these runs, measured {measured / 3600:.2f} h "
             f"(ratio {measured / estimated if estimated else math.nan:.2f})",
             f"- on {est['workers']} workers: busy {busy / 3600:.2f} h of wall time so far (the union of the runs' "
             f"intervals); estimate for the whole study {est['hours']:.2f} h, budget {est['budget_hours']:.1f} h; "
             f"the runs measured so far and the rest at the estimate: "
             f"{(measured + est['total_seconds'] - estimated) / est['workers'] / 3600:.2f} h",
             f"- load average at a run's start: median {statistics.median(loads) if loads else math.nan:.2f} on "
             f"{rows[0]['cpu_count'] if rows else '?'} cores (above the core count, other work shared the machine "
             "and the run's seconds are an upper bound of a quiet machine's)", "",
             "| cell | arm | runs measured | estimated s per run | measured s per run (median) | ratio |",
             "|---|---|---|---|---|---|"]
    for name, part in est["parts"].items():
        got = by_part.get(name, [])
        trained = part["runs"] - part["committed"]
        if not trained:
            continue
        per_run = part["seconds"] / trained
        med = statistics.median(r["seconds"] for r in got) if got else math.nan
        cell, arm = name.split(" ", 1)
        lines.append(f"| {cell} | {arm} | {len(got)}/{trained} | {per_run:.0f} | {number(med, '.0f')} | "
                     f"{number(med / per_run, '.2f')} |")
    return "\n".join(lines) + "\n"


def lesson_markdown(study: Study, cells: Sequence[MapCell], recorded: int, planned: int) -> str:
    """The map's "what we learned" for the course (notebook 02), written from the cells' numbers and verdicts:
    per local work K, what heterogeneity costs FedAvg (H) and what SAM gains or loses against FedAvg in the
    split (G) and against its own IID gain (I), each with whether Holm's rule decides it; then what that says
    about the thesis. No number in it is typed by hand, and no direction is stated that the verdicts do not give."""
    radius = {a.name: a.params.get("rho") for a in study.arms}
    out = [f"**{headline(study, cells, recorded, planned)}**", ""]
    for k in study.local_steps:
        at_k = [c for c in cells if c.local_steps == k]
        if all(c.gap.n == 0 for c in at_k):
            out.append(f"* **K = {k} local steps:** no cell complete yet.")
            continue
        parts = []
        for split in dict.fromkeys(c.split for c in at_k):
            row = [c for c in at_k if c.split == split]
            gaps = ", ".join(f"{c.gap.text()} at ρ = {radius[c.arm]}"
                             + ("" if decided(c.gap) else " (not decided)") for c in row)
            inter = [c for c in row if decided(c.interaction)]
            more = "".join(f"; against its IID gain at ρ = {radius[c.arm]}, I = {c.interaction.text()} (decided)"
                           for c in inter)
            parts.append(f"{split_label(split)} costs FedAvg {row[0].cost.text()} points against IID, and "
                         f"FedSAM − FedAvg there is {gaps}{more}")
        untested = [c for c in at_k if c.untested]
        tail = f" ({len(untested)} of its {len(at_k)} cells not tested yet)" if untested else ""
        out.append(f"* **K = {k} local steps{tail}:** " + "; ".join(parts) + ".")
    helps = [c for c in cells if c.verdict == HELPS]
    hints = [c for c in not_shown(cells) if c.gap.mean < 0
             and decided(c.interaction) and c.interaction.mean < 0]
    if helps:
        out.append("* Local SAM *helps* on this network, decided after Holm, in: "
                   + "; ".join(f"{split_label(c.split)}, K = {c.local_steps}, ρ = {radius[c.arm]}" for c in helps)
                   + ".")
    for c in hints:
        out.append(f"* The papers' direction shows only as an interaction: with {split_label(c.split)} at K = "
                   f"{c.local_steps} and ρ = {radius[c.arm]}, FedSAM − FedAvg is {abs(c.interaction.mean):.2f} points "
                   "lower than in the IID federation (I, decided), but its loss against FedAvg in that split itself is not "
                   "decided, and the pre-registered rule asks for both. The toy's mechanism (part 1) is a possibility "
                   "this map has not shown on data.")
    return "\n".join(out) + "\n"


def map_lesson(study: Study | None = None) -> str:
    """:func:`lesson_markdown` of the committed failure map (``lab/study/failure_map.yaml``)."""
    from lab.study.spec import load_study

    study = load_study(Path(__file__).with_name("failure_map.yaml")) if study is None else study
    values, untested, results = load_values(study)
    cells = analyse(study, values, untested=untested)
    text = lesson_markdown(study, cells, len(results), len(planned_runs(study, 1)))
    if study.stage2:
        values2, untested2, results2 = load_values(study, stage=2)
        rows = stage2_rows(study, {**values, **values2}, failing(cells), untested={**untested, **untested2})
        text += stage2_lesson(study, rows, len(results2))
    return text


def replace_readme_block(text: str, sentence: str) -> str:
    """``text`` (README) with its map block (:data:`README_START` … :data:`README_END`) holding ``sentence``."""
    i, j = text.find(README_START), text.find(README_END)
    if i < 0 or j < i:
        raise ValueError(f"README.md has no {README_START} … {README_END} block for the failure map's headline")
    return text[: i + len(README_START)] + "\n" + sentence + "\n" + text[j:]


def write_table(cells: Sequence[MapCell], path: Path) -> None:
    """The map's table, one row per (split, K, SAM arm): G, I, H with p and Holm's p, and the verdict — what
    the claims read (:func:`lab.evidence.map_table.map_reading`)."""
    import pandas as pd

    rows = [{"split": c.split, "local_steps": c.local_steps, "arm": c.arm, "n": c.gap.n, "gap": c.gap.mean,
             "gap_half_width": c.gap.half_width, "gap_p": c.gap.p, "gap_p_holm": c.gap.p_holm,
             "interaction": c.interaction.mean, "interaction_half_width": c.interaction.half_width,
             "interaction_p": c.interaction.p, "interaction_p_holm": c.interaction.p_holm,
             "fedavg_cost": c.cost.mean, "verdict": c.verdict} for c in cells]
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")


def write_outputs(study: Study, *, figure: bool = True, readme: Path | None = None) -> dict[str, Path]:
    """Write the decision page and the map's table (and its figure) under ``figures/<study stem>/``; with
    ``readme``, its map block gets the headline."""
    values, untested, results = load_values(study)
    cells = analyse(study, values, untested=untested)
    controls = control_rows(study, values)
    folder = out_dir(study)
    folder.mkdir(parents=True, exist_ok=True)
    planned = len(planned_runs(study, 1))
    text = decision_markdown(study, cells, controls, untested, len(results), planned)
    paths = {"decision": folder / "decision.md", "table": folder / "map.csv", "budget": folder / "measured.md"}
    paths["decision"].write_text(text)
    paths["budget"].write_text(budget_markdown(study, _estimate(study), measured_runs(study, sorted(results))))
    write_table(cells, paths["table"])
    if study.stage2:
        values2, untested2, results2 = load_values(study, stage=2)
        rows = stage2_rows(study, {**values, **values2}, failing(cells), untested={**untested, **untested2})
        paths["stage2"] = folder / "stage2.csv"
        write_stage2_table(rows, paths["stage2"])
        text += stage2_markdown(study, rows, len(results2))
        paths["decision"].write_text(text)
        with paths["budget"].open("a") as page:
            page.write(stage2_budget_markdown(study, measured_runs(study, sorted(results2))))
    if figure:  # before the README: a citable figure is refused once a tracked file outside figures/ changed
        paths.update(_figure(study, cells, sorted(results), values))
    if readme is not None:
        readme.write_text(replace_readme_block(readme.read_text(), headline(study, cells, len(results), planned)))
        paths["readme"] = readme
    print(text)
    print("fails anywhere:", fails_anywhere(cells))
    return paths


def _estimate(study: Study) -> dict[str, Any]:
    """The plan's estimate made again from what it was made from: the rerun's measured seconds, and as
    committed only the records the study reuses (its own records were still to train when it was made)."""
    from lab.evidence.records import record_meta
    from lab.study.plan import estimate, measured_seconds

    runs = planned_runs(study, 1)
    reused = {k: r for k, r in committed_runs(study_configs(study, runs)).items()
              if record_meta(r).get("study") != study.name}
    return estimate(study, runs, reused, measured_seconds())


def _figure(study: Study, cells: Sequence[MapCell], records: list[str],
            values: Mapping[tuple[str, str, int], float]) -> dict[str, Path]:
    """FedSAM − FedAvg (points, paired) per split, one panel per K, one marker per ρ, IID included; the sidecar
    names the committed ``records`` it reads (in ``figures/records/``, not copied beside it)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from lab.tools.figures import save_figure

    base = study.baseline_arm
    arms = [a.name for a in study.arms if a.name != base]
    rows = []
    for k in study.local_steps:
        for split in study.splits:
            for arm in arms:
                est = estimate_of([values[(f"{split}-K{k}", arm, s)] - values[(f"{split}-K{k}", base, s)]
                                   for s in study.seeds if (f"{split}-K{k}", arm, s) in values
                                   and (f"{split}-K{k}", base, s) in values])
                verdict = next((c.verdict for c in cells if c.split == split and c.local_steps == k and c.arm == arm),
                               "reference")
                rows.append({"local_steps": k, "split": split, "arm": arm, "gap": est.mean, "low": est.low,
                             "high": est.high, "n": est.n, "verdict": verdict})
    data = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, len(study.local_steps), figsize=(4.2 * len(study.local_steps), 3.4), sharey=True,
                             squeeze=False)
    splits = list(study.splits)
    for ax, k in zip(axes[0], study.local_steps):
        for j, arm in enumerate(arms):
            sub = data[(data.local_steps == k) & (data.arm == arm) & (data.n > 0)]
            x = [splits.index(s) + (j - (len(arms) - 1) / 2) * 0.18 for s in sub.split]
            err = [sub.gap - sub.low, sub.high - sub.gap]
            ax.errorbar(x, sub.gap, yerr=err, fmt="o", capsize=3, color=f"C{j}",
                        label=f"FedSAM ρ = {arm.split('-')[-1]}")
            fails = sub[sub.verdict == FAILS]
            ax.scatter([splits.index(s) + (j - (len(arms) - 1) / 2) * 0.18 for s in fails.split], fails.gap, s=160,
                       facecolors="none", edgecolors="red", zorder=3)
        if not (data[data.local_steps == k].n > 0).any():
            ax.text(0.5, 0.5, "no runs recorded yet", transform=ax.transAxes, ha="center", color="0.4")
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set_xticks(range(len(splits)), [split_label(s).replace(", ", "\n") for s in splits])
        ax.set_title(f"K = {k} local steps")
    axes[0][0].set_ylabel("FedSAM − FedAvg (points, paired)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    caption = ("The failure map: FedSAM − FedAvg in final accuracy (mean over the last 20 % of rounds), paired over "
               f"{len(study.seeds)} seeds (each its own partition), mean and 95 % t-interval, per split and local "
               "work K, at two fixed radii; below 0, local SAM loses to FedAvg; a red ring marks a cell where the "
               "pre-registered rule decides that local SAM fails (G and I below 0 after Holm, G ≤ −0.3).")
    saved = save_figure(fig, "failure_map", notebook="lab/study/report.py", profile="cpu", caption=caption,
                        parameters={"study": study.name, "study_sha256": study.sha256, "seeds": list(study.seeds)},
                        out_dir=out_dir(study),
                        data=data, read_records=records, kind="results",
                        command=f"python -m lab study analyse {study.path.relative_to(study.path.parents[2])}")
    plt.close(fig)
    return {f"figure_{k}": v for k, v in saved.items()}
