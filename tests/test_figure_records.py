"""A committed figure's per-run numbers are its records' numbers (issue 41, item 5).

For every committed figure in ``figures/`` whose JSON sidecar names run records and whose CSV holds per-run rows
(a ``seed`` column), each value in a column that a record also holds must equal what the record says:

* a per-round row (a ``round`` column): ``test_acc`` / ``test_acc_pct`` (in %), ``train_loss``, ``test_loss`` and
  ``flatness_distance`` equal the record's metrics row of that round;
* a per-run row (no ``round``): a final accuracy (``final_acc``, ``final_acc_pct`` in %, ``final_test_acc``,
  ``test_acc``, ``fedavg_acc``) equals :func:`lab.evidence.protocol.final_metric` of the record — the one final
  metric of every notebook and of the claims table.

A row is matched to the records of its ``seed``; where the row names an algorithm (an ``algorithm`` or ``method``
column whose values are algorithm names of the records), a ``status``, or a value of an algorithm parameter (a
column named like one, e.g. ``rho``), only the records that agree are candidates, and the row passes if one
candidate gives its value. A figure may retrain θ for an *analysis* quantity (λ_max, a landscape): those columns
are not record metrics and are not compared, but its accuracy columns still must be the records'.

Tolerance: ``save_figure`` writes the CSV with ``%.6g``, so a value matches when it is within half a unit of its
sixth significant digit: relative 5e-6 (``REL_TOL``). A run retrained on another CPU differs from its record by far
more (the seed-0 curves of 04 by up to 0.39 points, from round 5 on).
"""
from __future__ import annotations

import ast
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedlab.results import RunResult
from lab.evidence.protocol import final_metric
from lab.evidence.records import load_record
from lab.repro import FIGURES_DIR

PER_ROUND = {"test_acc": ("test_acc", 1.0), "test_acc_pct": ("test_acc", 100.0), "train_loss": ("train_loss", 1.0),
             "test_loss": ("test_loss", 1.0), "flatness_distance": ("flatness_distance", 1.0)}
"""CSV column → (record metrics column, scale of the CSV value)."""
FINAL = {"final_acc": 1.0, "final_acc_pct": 100.0, "final_test_acc": 1.0, "test_acc": 1.0, "fedavg_acc": 1.0}
"""CSV column of a per-run final accuracy → scale (100: in %)."""
REL_TOL = 5e-6  # half a unit of the 6th significant digit of the CSV's %.6g

KNOWN: dict[str, str] = {}
"""Committed figures that break the rule today, each with why; strict: a fixed figure fails here until its entry
is removed."""


def _sidecar(path: Path) -> dict[str, Any] | None:
    meta = json.loads(path.read_text())
    return meta if isinstance(meta, dict) else None


def _record_keys(meta: dict[str, Any]) -> list[str]:
    keys = meta.get("records") or []
    # older sidecars wrote the list through str(); both forms name the same keys
    return list(ast.literal_eval(keys) if isinstance(keys, str) else keys)


def checked_figures(figures_dir: Path = FIGURES_DIR) -> list[str]:
    """The committed figures this test applies to: records in the sidecar, a CSV with per-run rows and a column
    that a record holds too."""
    names = []
    for side in sorted(figures_dir.glob("*.json")):
        meta, csv = _sidecar(side), side.with_suffix(".csv")
        if not meta or not _record_keys(meta) or not csv.exists():
            continue
        columns = set(pd.read_csv(csv, nrows=0).columns)
        value_columns = PER_ROUND if "round" in columns else FINAL
        if "seed" in columns and columns & set(value_columns):
            names.append(side.stem)
    return names


@lru_cache(maxsize=None)
def _runs(name: str, figures_dir: Path = FIGURES_DIR) -> tuple[RunResult, ...]:
    meta = _sidecar(figures_dir / f"{name}.json")
    assert meta is not None
    runs = []
    for key in _record_keys(meta):
        # the committed records, whatever folder the figure is read from (a record is verified against the
        # manifest of its own folder)
        res = load_record(key, FIGURES_DIR / "records")
        assert res is not None, f"{name}: the sidecar names record {key}, which is not committed"
        runs.append(res)
    return tuple(runs)


def _candidates(row: pd.Series, runs: tuple[RunResult, ...], method_column: str | None) -> list[RunResult]:
    out = []
    for r in runs:
        if r.config.seed != int(row["seed"]):
            continue
        if method_column is not None and r.config.algorithm != row[method_column]:
            continue
        if "status" in row.index and isinstance(row["status"], str) and r.status != row["status"]:
            continue
        params = r.config.algorithm_params
        if any(k in row.index and isinstance(row[k], (int, float)) and not pd.isna(row[k])
               and isinstance(params[k], (int, float)) and not math.isclose(row[k], params[k], rel_tol=1e-12)
               for k in params):
            continue
        out.append(r)
    return out


def _at_round(run: RunResult, column: str, rnd: int) -> float | None:
    m = run.metrics
    rows = m.loc[m["round"] == rnd, column] if column in m else pd.Series(dtype=float)
    return float(rows.iloc[0]) if len(rows) else None


def _close(csv_value: float, record_value: float) -> bool:
    # abs_tol: a value the CSV rounded to 0 (a loss of 1e-300 is written 1e-300, so this only covers exact zeros)
    return math.isclose(csv_value, record_value, rel_tol=REL_TOL, abs_tol=1e-300)


def mismatches(name: str, figures_dir: Path = FIGURES_DIR, limit: int = 8) -> tuple[int, list[str]]:
    """How many values figure ``name``'s CSV holds that a record holds too, and the ones that differ from every
    candidate record, in words (the first ``limit``, then a line counting the rest)."""
    runs = _runs(name, figures_dir)
    table = pd.read_csv(figures_dir / f"{name}.csv")
    algorithms = {r.config.algorithm for r in runs}
    method_column = next((c for c in ("algorithm", "method") if c in table
                          and set(table[c].dropna()) and set(table[c].dropna()) <= algorithms), None)
    per_round = "round" in table
    columns = [c for c in (PER_ROUND if per_round else FINAL) if c in table]
    checked, bad = 0, []
    for _, row in table[table["seed"].notna()].iterrows():
        candidates = _candidates(row, runs, method_column)
        for col in columns:
            value = row[col]
            if pd.isna(value):
                continue
            checked += 1
            if per_round:
                metric, scale = PER_ROUND[col]
                at = [_at_round(r, metric, int(row["round"])) for r in candidates]
                wanted = [scale * a for a in at if a is not None]
            else:
                wanted = [FINAL[col] * final_metric(r).value for r in candidates]
            if not any(_close(float(value), w) for w in wanted):
                where = f"seed {int(row['seed'])}" + (f", {row[method_column]}" if method_column else "") + \
                        (f", round {int(row['round'])}" if per_round else "")
                bad.append(f"{col} = {value!r} ({where}); the records say {sorted(wanted)}")
    return checked, bad[:limit] + ([f"… {len(bad) - limit} more"] if len(bad) > limit else [])


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN[n], strict=True))
                                  if n in KNOWN else n for n in checked_figures()])
def test_figure_csv_equals_its_records(name):
    checked, bad = mismatches(name)
    assert checked > 0, f"{name}: no value was compared"
    assert not bad, f"{name}: of {checked} values, these in the CSV differ from the records its sidecar names:\n" + \
        "\n".join(bad)


def test_known_violations_are_committed_figures():
    """An entry of KNOWN names a figure that this test checks (a renamed or removed figure leaves no stale entry)."""
    assert set(KNOWN) <= set(checked_figures())


def test_a_retrained_curve_is_caught(tmp_path):
    """The check can fail: a copy of a clean figure whose one accuracy value is moved by 0.01 points is reported."""
    import shutil

    name = "10_benchmarks_curves_fmnist"
    for suffix in (".json", ".csv"):
        shutil.copy(FIGURES_DIR / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    assert mismatches(name, tmp_path)[1] == []
    table = pd.read_csv(tmp_path / f"{name}.csv")
    i = table["test_acc"].first_valid_index()
    table.loc[i, "test_acc"] += 1e-4  # 0.01 points: one image in 10 000
    table.to_csv(tmp_path / f"{name}.csv", index=False)
    checked, bad = mismatches(name, tmp_path)
    assert len(bad) == 1 and "test_acc" in bad[0], bad
