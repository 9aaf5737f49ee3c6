"""The failure map's decision written by code from the committed records: ``figures/failure_map/decision.md``,
``map.csv`` and the figure ``figures/failure_map.png`` (FedSAM − FedAvg, paired, over split × K × ρ), with its
provenance sidecar (``python -m lab study analyse lab/study/failure_map.yaml``)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.study.analysis import MapCell, analyse, estimate_of, fails_anywhere
from lab.study.plan import committed_runs, planned_runs, run_config
from lab.study.spec import Study

__all__ = ["README_END", "README_START", "control_rows", "decision_markdown", "headline", "load_values",
           "replace_readme_block", "run_problem", "write_outputs"]

CHANCE = 0.1  # ten classes


def run_problem(result: Any) -> str | None:
    """Why a run is not read (the study's ``validity`` rule), or None: status diverged; the sampled clients'
    mean training loss non-finite or above 10 × its round-1 value in some round; final metric ≤ 1.5 × chance."""
    from lab.evidence.protocol import final_metric

    if result.status == "diverged":
        return "diverged (status)"
    loss = result.metrics["train_loss"].astype(float).tolist()
    if loss and (not all(math.isfinite(v) for v in loss) or max(loss) > 10 * loss[0]):
        return f"diverged (training loss up to {max(loss):.3g}, round 1: {loss[0]:.3g})"
    value = final_metric(result).value
    if not value > 1.5 * CHANCE:
        return f"collapsed (final accuracy {100 * value:.1f} %)"
    return None


def load_values(study: Study, directory: Path | None = None) -> tuple[dict[tuple[str, str, int], float],
                                                                     dict[tuple[str, str], str], dict[str, Any]]:
    """(values, untested, results): every committed run of ``study`` as its final metric in points, keyed by
    (cell, arm, seed); the (cell, arm)s with a run that breaks the validity rule, with the reason; and the
    runs themselves by record key."""
    from lab.evidence.protocol import final_metric
    from lab.evidence.records import load_record
    from lab.study.calibrate import load_calibration
    from lab.study.runner import out_dir

    calibrated = load_calibration(out_dir(study) / "calibration.json")
    configs = {}
    for run in planned_runs(study):
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
        problem = run_problem(res)
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


def _split_label(split: str) -> str:
    return {"iid": "IID", "dir0.1": "Dirichlet 0.1", "path2": "pathological, 2 classes"}.get(split, split)


README_START, README_END = "<!-- fedlab:map:start -->", "<!-- fedlab:map:end -->"


def headline(study: Study, cells: Sequence[MapCell], recorded: int, planned: int) -> str:
    """The map's answer in one sentence, whichever way it comes out (README's headline, the decision page's)."""
    complete = recorded >= planned and all(not any("seeds recorded" in u for u in c.untested) for c in cells)
    failing = [c for c in cells if c.verdict == "local SAM fails here"]
    if not complete:
        return (f"The failure map is not decided yet: {recorded} of its {planned} pre-registered runs are recorded "
                "(`python -m lab study train lab/study/failure_map.yaml` resumes it).")
    if failing:
        where = "; ".join(f"{_split_label(c.split)}, K = {c.local_steps}, {c.arm}" for c in failing)
        return f"Local SAM fails on the failure map in: {where}."
    return "Local SAM does not fail anywhere on the failure map."


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
        lines.append(f"| {_split_label(c.split)} | {c.local_steps} | {c.arm} | {c.gap.text()} | {_p(c.gap.p_holm)} | "
                     f"{c.interaction.text()} | {_p(c.interaction.p_holm)} | {c.cost.text()} | {c.verdict} |")
    lines += ["", "## Controls (read by the claims; not in the map's families)", "",
              "| control | cell | against | paired difference (points) |", "|---|---|---|---|"]
    lines += [f"| {r['control']} | {r['cell']} | {r['against']} | {r['estimate'].text()} |" for r in controls]
    if untested:
        lines += ["", "## Not read (the study's validity rule)", ""]
        lines += [f"- {cell} {arm}: {why}" for (cell, arm), why in sorted(untested.items())]
    return "\n".join(lines) + "\n"


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.3g}"


def replace_readme_block(text: str, sentence: str) -> str:
    """``text`` (README) with its map block (:data:`README_START` … :data:`README_END`) holding ``sentence``."""
    i, j = text.find(README_START), text.find(README_END)
    if i < 0 or j < i:
        raise ValueError(f"README.md has no {README_START} … {README_END} block for the failure map's headline")
    return text[: i + len(README_START)] + "\n" + sentence + "\n" + text[j:]


def write_outputs(study: Study, *, figure: bool = True, readme: Path | None = None) -> dict[str, Path]:
    """Write the decision page and the map's table (and its figure) under ``figures/<study stem>/``; with
    ``readme``, its map block gets the headline."""
    import pandas as pd

    from lab.study.runner import out_dir

    values, untested, results = load_values(study)
    cells = analyse(study, values, untested=untested)
    controls = control_rows(study, values)
    folder = out_dir(study)
    folder.mkdir(parents=True, exist_ok=True)
    planned = len(planned_runs(study))
    text = decision_markdown(study, cells, controls, untested, len(results), planned)
    paths = {"decision": folder / "decision.md", "table": folder / "map.csv"}
    paths["decision"].write_text(text)
    rows = [{"split": c.split, "local_steps": c.local_steps, "arm": c.arm, "n": c.gap.n, "gap": c.gap.mean,
             "gap_half_width": c.gap.half_width, "gap_p": c.gap.p, "gap_p_holm": c.gap.p_holm,
             "interaction": c.interaction.mean, "interaction_half_width": c.interaction.half_width,
             "interaction_p": c.interaction.p, "interaction_p_holm": c.interaction.p_holm,
             "fedavg_cost": c.cost.mean, "verdict": c.verdict} for c in cells]
    pd.DataFrame(rows).to_csv(paths["table"], index=False, float_format="%.6g")
    if readme is not None:
        readme.write_text(replace_readme_block(readme.read_text(), headline(study, cells, len(results), planned)))
        paths["readme"] = readme
    if figure:
        paths.update(_figure(study, cells, list(results.values()), values))
    print(text)
    print("fails anywhere:", fails_anywhere(cells))
    return paths


def _figure(study: Study, cells: Sequence[MapCell], runs: list[Any],
            values: Mapping[tuple[str, str, int], float]) -> dict[str, Path]:
    """FedSAM − FedAvg (points, paired) per split, one panel per K, one marker per ρ, IID included."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from lab.repro import FIGURES_DIR
    from lab.tools.figures import save_figure

    base = study.baseline_arm, study.reference_split
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
            sub = data[(data.local_steps == k) & (data.arm == arm)]
            x = [splits.index(s) + (j - (len(arms) - 1) / 2) * 0.18 for s in sub.split]
            err = [sub.gap - sub.low, sub.high - sub.gap]
            ax.errorbar(x, sub.gap, yerr=err, fmt="o", capsize=3, label=f"FedSAM ρ = {arm.split('-')[-1]}")
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set_xticks(range(len(splits)), [_split_label(s).replace(", ", "\n") for s in splits])
        ax.set_title(f"K = {k} local steps")
    axes[0][0].set_ylabel("FedSAM − FedAvg (points, paired)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    caption = ("The failure map: FedSAM − FedAvg in final accuracy (mean over the last 20 % of rounds), paired over "
               f"{len(study.seeds)} seeds (each its own partition), mean and 95 % t-interval, per split and local "
               "work K, at two fixed radii; below 0, local SAM loses to FedAvg.")
    saved = save_figure(fig, "failure_map", notebook="lab/study/report.py", profile="cpu", caption=caption,
                        parameters={"study": study.name, "study_sha256": study.sha256}, out_dir=FIGURES_DIR,
                        data=data, runs=runs, kind="results",
                        command=f"python -m lab study analyse {study.path.relative_to(study.path.parents[2])}")
    plt.close(fig)
    return {f"figure_{k}": v for k, v in saved.items()}
