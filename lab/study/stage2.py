"""The failure map's stage 2 on its pages: the table (``figures/failure_map/stage2.csv``), its section of the decision
page, its budget against its amendment's, and its paragraph in the course (notebook 02), all from
:func:`lab.study.analysis.stage2_rows`."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.study.analysis import RECOVERS, FixRow
from lab.study.numbers import busy_seconds, decided, number
from lab.study.plan import planned_runs
from lab.study.spec import Study

__all__ = ["stage2_budget_markdown", "stage2_lesson", "stage2_markdown", "write_stage2_table"]


def write_stage2_table(rows: Sequence[FixRow], path: Path) -> None:
    """The stage-2 table, one row per (cell, fix): F − FedAvg, F − the better drift reference, F − FedSAM at the
    failing radius, with p and Holm's p, and the pre-registered reading."""
    import pandas as pd

    out = []
    for r in rows:
        row: dict[str, Any] = {"cell": r.cell, "fix": r.fix, "reference": r.reference}
        for name in ("over_fedavg", "over_reference", "over_sam"):
            e = getattr(r, name)
            row.update({name: e.mean, f"{name}_half_width": e.half_width, f"{name}_p": e.p,
                        f"{name}_p_holm": e.p_holm, f"{name}_n": e.n})
        row["verdict"] = r.verdict
        out.append(row)
    pd.DataFrame(out).to_csv(path, index=False, float_format="%.6g")


def stage2_markdown(study: Study, rows: Sequence[FixRow], recorded: int) -> str:
    """The stage-2 section of the decision page: which amendment ran it and beyond which budget, then per cell the
    fixes against FedAvg, against the better drift-only reference and against FedSAM at the failing radius."""
    planned = len(planned_runs(study, 2))
    names = ", ".join(a.path.name for a in study.amendments)
    lines = ["", f"## Stage 2: do the fixes recover SAM's advantage where local SAM fails? ({names})", "",
             f"Run under {names} (its reasons: a budget of its own, beyond the map's "
             f"{float(study.raw['budget']['hours']):.0f} h, stated before its first run), in the cells the map's "
             f"rule decides; {recorded} of {planned} runs recorded. Each fix and reference at its rerun-tuned "
             "hyperparameters (tuned on Dirichlet 0.1, K = 50, reused here). The better drift reference is SCAFFOLD or "
             "FedDyn, whichever has the higher mean in the cell; p(Holm) is adjusted across the cell's fixes, per "
             "column; 'recovers more than drift correction' when F − reference > 0 is decided.", "",
             "| cell | fix | F − FedAvg | p(Holm) | reference | F − reference | p(Holm) | F − FedSAM (failing ρ) | "
             "reading |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.cell} | {r.fix} | {r.over_fedavg.text()} | {number(r.over_fedavg.p_holm, '.3g')} | "
                     f"{r.reference} | {r.over_reference.text()} | {number(r.over_reference.p_holm, '.3g')} | "
                     f"{r.over_sam.text()} | {r.verdict} |")
    return "\n".join(lines) + "\n"


def stage2_budget_markdown(study: Study, rows: Sequence[Mapping[str, Any]]) -> str:
    """Stage 2's measured cost against its amendment's budget (the map's rows above leave stage 2 out)."""
    budget = sum(a.budget_hours for a in study.amendments)
    mine = [r for r in rows if r["arm"] in {a.name for a in study.stage2}]
    return (f"\n## Stage 2 ({', '.join(a.path.name for a in study.amendments)})\n\n"
            f"- runs measured: {len(mine)} of {len(planned_runs(study, 2))}; busy {busy_seconds(mine) / 3600:.2f} h of "
            f"wall time on {study.raw['budget']['workers']} workers, against the amendment's budget of {budget:.1f} h "
            f"(its estimate: {', '.join(f'`plan_{a.path.stem.removeprefix(study.path.stem + chr(95))}.md`' for a in study.amendments)}); one worker: {sum(r['seconds'] for r in mine) / 3600:.2f} h\n")


def stage2_lesson(study: Study, rows: Sequence[FixRow], recorded: int) -> str:
    """Stage 2 in the course's words, from its table: where local SAM fails, each fix against FedAvg and against
    the better drift-only reference, and what the pre-registered reading says of the fixes as a group."""
    from lab.evidence.map_table import split_label as label
    from lab.style import method_label

    planned = len(planned_runs(study, 2))
    cells = ", ".join(dict.fromkeys(f"{label(a.cell.split)}, K = {a.cell.local_steps}" for a in study.stage2
                                    if a.cell is not None))
    head = (f"* **Stage 2, where local SAM fails ({cells}):** the fixes against FedAvg and against drift correction "
            f"alone, run under `{', '.join(a.path.name for a in study.amendments)}` (a budget of its own, beyond the "
            "map's, stated before its first run)")
    if recorded < planned or any(r.untested for r in rows):
        return f"{head}: {recorded} of its {planned} runs recorded; read once every seed of every arm is.\n"
    ref = method_label(rows[0].reference)
    parts = [f"{method_label(r.fix)} {r.over_fedavg.text()} over FedAvg"
             + ("" if decided(r.over_fedavg) else " (not decided)")
             + f", {r.over_reference.text()} over {ref} ({r.verdict})" for r in rows]
    recovers = [method_label(r.fix) for r in rows if r.verdict == RECOVERS]
    if recovers:
        tail = (f"{', '.join(recovers)} {'recovers' if len(recovers) == 1 else 'recover'} more than drift correction "
                f"alone ({len(recovers)} of {len(rows)} fixes).")
    else:
        tail = (f"No fix is decided above {ref}, the better drift-only reference in this cell: what the fixes recover "
                "where local SAM fails is not shown to be more than what correcting client drift recovers.")
    return f"{head}: " + "; ".join(parts) + f". {tail}\n"
