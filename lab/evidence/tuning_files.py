"""Committed tuning results (``figures/tuning/<split>/<method>.csv/.json``, written by
:func:`fedlab.tune` through :func:`lab.evidence.tuning_protocol.tune_splits`): their place in the evidence
manifest and the checks a choice passes before a notebook uses it (:func:`load_tuning`).
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from lab.evidence.manifest import EvidenceError, add, verify

__all__ = ["TuningError", "load_tuning", "record_tuning", "tuning_root"]


class TuningError(EvidenceError, ValueError):
    """A tuning file cannot be used as a choice (corrupt, edited, or not its grid's best); names the file."""


def tuning_root(path: str | Path) -> Path:
    """The folder of the evidence manifest covering tuning file ``path``: the one above the nearest
    ``tuning/`` folder (``figures/``), else the file's own folder."""
    path = Path(path)
    return next((p.parent for p in path.parents if p.name == "tuning"), path.parent)


def _same(chosen: Any, cell: Any) -> bool:
    """Whether a chosen grid value equals a CSV cell (floats were written with 6 significant digits)."""
    if isinstance(chosen, bool) or isinstance(cell, bool):
        return str(chosen).lower() == str(cell).lower()
    if isinstance(chosen, (int, float)) and isinstance(cell, (int, float)):
        return math.isclose(float(chosen), float(cell), rel_tol=1e-5, abs_tol=1e-12)
    return str(chosen) == str(cell)


def load_tuning(json_path: str | Path, *, check_manifest: bool = True) -> dict[str, Any]:
    """A committed tuning result (``<stem>.json`` with its ``<stem>.csv``), checked; TuningError naming the file.

    Checked: both files parse; ``best`` is a non-empty point of ``grid`` (same keys, each value one of
    its candidates); the CSV table has a row per grid point and ``best`` is its best-scored *usable*
    point (finished, with a score; ties to the first row, as :func:`fedlab.tune` chooses); and both files'
    bytes match the evidence manifest (:mod:`lab.evidence.integrity`; ``check_manifest=False``: not this last
    check, for ``--rerecord``, which is about to replace the lines)."""
    json_path = Path(json_path)
    csv_path = json_path.with_suffix(".csv")
    what = f"tuning file {json_path}"
    fix = "restore it from git, or move it away and rerun `python -m lab regime rerun-tune`"
    try:
        json_bytes = json_path.read_bytes()
        done = json.loads(json_bytes.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TuningError(f"{what} is not a fedlab.tune result ({type(err).__name__}: {err}); {fix}") from None
    if not isinstance(done, dict) or not isinstance(done.get("best"), dict) or not isinstance(done.get("grid"), dict):
        raise TuningError(f"{what} lacks a 'best' point or a 'grid' (both objects); {fix}")
    best, grid = done["best"], done["grid"]
    if not best:
        raise TuningError(f"{what} chooses the empty point {{}}; a tuning choice is a point of its grid; {fix}")
    if any(not isinstance(v, list) or not v for v in grid.values()):
        raise TuningError(f"{what} has a grid whose candidates are not non-empty lists: {grid}; {fix}")
    if set(best) != set(grid) or any(best[k] not in grid[k] for k in grid):
        raise TuningError(f"{what} chooses {best}, which is not a point of its grid {grid}; {fix}")
    try:
        csv_bytes = csv_path.read_bytes()
        table = pd.read_csv(io.BytesIO(csv_bytes))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise TuningError(f"tuning table {csv_path} cannot be read ({type(err).__name__}: {err}); {fix}") from None
    absent = sorted((set(grid) | {"score", "status"}) - set(table.columns))
    if absent:
        raise TuningError(f"tuning table {csv_path} lacks column(s) {', '.join(absent)}; {fix}")
    scores = pd.to_numeric(table["score"], errors="coerce")
    usable = table[(table["status"] == "finished") & scores.notna()]
    if len(usable) == 0:
        raise TuningError(f"tuning table {csv_path} has no finished grid point with a score; {fix}")
    top = usable.loc[scores[usable.index].idxmax()]
    if not all(_same(best[k], top[k]) for k in grid):
        chosen = table[[all(_same(best[k], row[k]) for k in grid) for _, row in table.iterrows()]]
        state = (f"its row is {chosen.iloc[0]['status']} with score {chosen.iloc[0]['score']}"
                 if len(chosen) else "it has no row in the table")
        raise TuningError(f"{what} chooses {best}, but the best-scored finished point of {csv_path.name} is "
                          f"{ {k: getattr(top[k], 'item', lambda: top[k])() for k in grid} } (score {top['score']}); "
                          f"{state}; {fix}")
    if not check_manifest:
        return done
    root = tuning_root(json_path)
    try:
        verify(json_path, root, json_bytes)
        verify(csv_path, root, csv_bytes)
    except EvidenceError as err:  # one error type for every reason a tuning file is refused
        raise TuningError(str(err)) from None
    return done


def record_tuning(paths: dict[str, Path]) -> None:
    """Add a saved :class:`fedlab.tuning.TuneResult` (``save``'s paths) to the evidence manifest
    (refused if a different file was recorded under the same path)."""
    add([paths["csv"], paths["json"]], tuning_root(paths["json"]))
