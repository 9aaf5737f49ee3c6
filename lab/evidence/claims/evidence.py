"""What a claim is judged from: the committed runs of the figure its setting names, or that figure's CSV.

:func:`evidence_of` reads it (every record and table checked against the evidence manifest: a damaged file
raises, naming it, never a quiet "not run"); :class:`Evidence` gives an arm's per-seed values, the reading's
unit. An arm's runs are its independent ones (:func:`independent_runs`: one per seed, never one config twice);
collapsed and diverged runs are never averaged in, but counted in a note.
"""
from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.results import RunResult
from lab.evidence.claims.spec import Claim, arm_name
from lab.evidence.validity import matches

__all__ = ["Evidence", "arm_runs", "cost_check", "evidence_of", "final_how", "finished_runs", "independent_runs",
           "run_value", "table_rows"]


def run_value(res: RunResult, metric: str) -> float:
    """One run's value of a claim's ``metric``: its final accuracy (the protocol's), or its mean flatness distance
    Δ_D over the last quarter of the rounds."""
    if metric == "final_test_acc":  # the protocol's final metric, or the labelled fallback of an older record
        from lab.evidence.protocol import final_metric

        return final_metric(res).value
    m = res.metrics[["round", "flatness_distance"]].dropna()
    total = int(res.config.rounds)
    tail = m[m["round"] > total - math.ceil(total / 4)]
    return float((tail if len(tail) else m)["flatness_distance"].mean())


def independent_runs(runs: Sequence[RunResult]) -> tuple[list[RunResult], int]:
    """The runs that are independent samples: the first of each seed, and never two identical configs
    (``runs_dir`` aside); returns them and how many were left out. A repeated seed is the same draw of
    initialisation, sampling and batches, so counting it twice would shrink the interval for nothing."""
    kept: list[RunResult] = []
    seeds: set[Any] = set()
    configs: set[str] = set()
    for r in runs:
        config = json.dumps({**r.config.to_dict(), "runs_dir": None}, sort_keys=True, default=str)
        if r.config.seed in seeds or config in configs:
            continue
        seeds.add(r.config.seed)
        configs.add(config)
        kept.append(r)
    return kept, len(runs) - len(kept)


def _duplicates_note(arm: Mapping[str, Any], n: int) -> str:
    return f"{arm_name(arm)}: {n} duplicate run(s) (a repeated seed or config) counted once" if n else ""


def arm_runs(runs: Sequence[RunResult], claim: Claim, arm: Mapping[str, Any]) -> list[RunResult]:
    """The arm's independent runs (one per seed), whatever their status."""
    return independent_runs([r for r in runs if matches(r, arm, claim.select)])[0]


def finished_runs(runs: Sequence[RunResult], claim: Claim, arm: Mapping[str, Any]) -> tuple[list[RunResult], str]:
    """The arm's finished independent runs, and a note on its repeated, collapsed and diverged ones."""
    chosen, repeated = independent_runs([r for r in runs if matches(r, arm, claim.select)])
    ok = [r for r in chosen if r.status == "finished"]
    bad = [r for r in chosen if r.status in ("collapsed", "diverged")]
    notes = [_duplicates_note(arm, repeated)] if repeated else []
    if bad:
        counts = {s: sum(r.status == s for r in bad) for s in ("collapsed", "diverged")}
        notes.append(f"{arm_name(arm)}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return ok, "; ".join(notes)


def _seeds_from_runs(runs: Sequence[RunResult], claim: Claim,
                     arm: Mapping[str, Any]) -> tuple[dict[Hashable, float] | None, str]:
    """``{config.seed: value}`` of the arm's finished independent runs (one run per seed by construction)."""
    ok, note = finished_runs(runs, claim, arm)
    return {r.config.seed: run_value(r, claim.metric) for r in ok}, note


def table_rows(table: pd.DataFrame, claim: Claim, arm: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """The finished rows of the arm in the figure's table (whole-row repeats counted once), and a note."""
    col, arm_col = claim.metric["column"], claim.metric.get("arm_column")
    if col not in table.columns:
        raise ValueError(f"claim {claim.id!r}: figure {claim.figure}.csv has no column {col!r} "
                         f"(columns: {', '.join(map(str, table.columns))})")
    rows = table
    for key, value in claim.select.items():  # the setting's filter, on the columns the table has
        if key in rows.columns:
            rows = rows[rows[key] == value]
    if arm_col and arm.get("algorithm"):
        rows = rows[rows[arm_col] == arm["algorithm"]]
    note = ""
    valid = claim.metric.get("valid")
    if valid:  # e.g. λ_max estimates whose power iteration did not converge: flagged in the data, never used
        if valid not in table.columns:
            raise ValueError(f"claim {claim.id!r}: figure {claim.figure}.csv has no column {valid!r} (metric.valid)")
        ok = rows[valid].astype(str).str.lower().isin(("true", "1", "1.0"))
        dropped = int((~ok & rows[col].notna()).sum())
        rows = rows[ok]
        if dropped:
            note = f"{arm_name(arm)}: {dropped} estimate(s) with {valid} = False excluded"
    if "seed" in rows.columns:
        # a row repeated whole (same seed, same setting, same values) is one measurement written twice; rows
        # of one seed that differ (per client, per α) are the table's own samples and all count
        unique = rows.drop_duplicates(keep="first")
        note = "; ".join(x for x in (note, _duplicates_note(arm, len(rows) - len(unique))) if x)
        rows = unique
    if "status" in rows.columns:
        status = rows["status"].fillna("finished")
        counts = {s: int((status == s).sum()) for s in ("collapsed", "diverged")}
        if any(counts.values()):
            note = "; ".join(x for x in (note, f"{arm_name(arm)}: " + ", ".join(
                f"{n} {s}" for s, n in counts.items() if n)) if x)
        rows = rows[status == "finished"]
    return rows, note


def _seed_label(seed: Any) -> Hashable:
    """A seed as read from a CSV (``0.0``) as the integer it is; anything else unchanged."""
    return int(seed) if isinstance(seed, float) and seed.is_integer() else seed


def _seeds_from_table(table: pd.DataFrame, claim: Claim, arm: Mapping[str, Any],
                      average: bool = False) -> tuple[dict[Hashable, float] | None, str]:
    """``{seed: value}`` of the arm in the figure's table; ``None`` (and why) when the table cannot be paired:
    no seed column, or several values of one seed (per-client rows are samples within a seed, not pairs)
    unless ``average``, which takes each seed's mean (the seed, not the client, is the independent unit)."""
    rows, note = table_rows(table, claim, arm)
    col = claim.metric["column"]
    rows = rows[rows[col].notna()]
    if "seed" not in rows.columns:
        return None, "; ".join(x for x in (note, f"{claim.figure}.csv has no seed column: cannot pair") if x)
    per_seed = rows.groupby("seed")[col]
    if average:
        return {_seed_label(k): float(v) for k, v in per_seed.mean().items()}, note
    if len(rows) and int(per_seed.size().max()) > 1:
        return None, "; ".join(x for x in (note, f"{arm_name(arm)}: several values per seed in "
                                                  f"{claim.figure}.csv: cannot pair by seed") if x)
    return {_seed_label(k): float(v) for k, v in per_seed.first().items()}, note


@dataclass(frozen=True)
class Evidence:
    """What a claim is judged from: the figure's committed runs, or its CSV table."""

    runs: Sequence[RunResult] | None = None
    table: pd.DataFrame | None = None

    def seeds(self, claim: Claim, arm: Mapping[str, Any],
              average: bool = False) -> tuple[dict[Hashable, float] | None, str]:
        """The arm's ``{seed: value}``, or ``None`` and why it cannot be paired."""
        if self.table is not None:
            return _seeds_from_table(self.table, claim, arm, average)
        return _seeds_from_runs(self.runs or [], claim, arm)


def evidence_of(claim: Claim, figures_dir: Path) -> Evidence | str:
    """The claim's evidence in ``figures_dir``, or (a string) why there is none: the claim is not run."""
    from lab.evidence.records import figure_data, figure_runs

    # a study's figure lives in its own folder with its own manifest (failure_map/failure_map)
    folder, name = figures_dir / Path(claim.figure).parent, Path(claim.figure).name
    if isinstance(claim.metric, Mapping):
        try:  # checked against the manifest: an edited (or deleted) table is refused, naming it
            return Evidence(table=figure_data(name, folder))
        except FileNotFoundError:
            return f"no {claim.figure}.csv yet"
    try:
        runs = figure_runs(name, folder)
    except FileNotFoundError as err:  # no sidecar: the figure was never made. A bad record raises (loudly).
        return str(err).split(";")[0]
    if not runs:
        return f"{claim.figure} has no committed records yet"
    return Evidence(runs=runs)


def cost_check(claim: Claim) -> tuple[bool, str]:
    """Whether the claim's gradient-cost ratio (``cost``) is that of the algorithm registry, and a note."""
    from fedlab.algorithms import algorithm_class

    ratio = (algorithm_class(claim.left["algorithm"]).grad_evals_per_step
             / algorithm_class(claim.right[0]["algorithm"]).grad_evals_per_step)
    ok = math.isclose(ratio, float(claim.cost["left_over_right"]))  # type: ignore[index]
    return ok, f"gradient cost ratio {ratio:g} ({'as claimed' if ok else 'not as claimed'})"


def final_how(claim: Claim, evidence: Evidence) -> str:
    """How the final accuracies behind ``claim`` were computed (one label per kind, joined)."""
    if claim.metric != "final_test_acc" or not evidence.runs:
        return ""
    from lab.evidence.protocol import final_metric

    arms = [claim.left, *claim.right]
    used = [r for r in evidence.runs if r.status == "finished" and any(matches(r, a, claim.select) for a in arms)]
    return "; ".join(sorted({final_metric(r).how for r in used}))
