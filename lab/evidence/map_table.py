"""What the failure map says about one FedSAM arm, read from the map's committed table.

The failure map (``lab/study/failure_map.yaml``, issue 42) decides, per split s, local work K and radius ρ,
whether local SAM fails there: ``G = FedSAM − FedAvg`` below zero by at least the smallest effect of interest
*and* below SAM's own IID gain (``I < 0``), both decided after Holm (:mod:`lab.study.analysis`). Its analysis
writes one row per (s, K, arm) to ``figures/failure_map/map.csv``; a claim of ``figures/claims.yaml`` that the
map tests names its arm (``map: {arm: fedsam-0.05}``) and :func:`map_reading` turns that arm's rows into the
sentence printed beside the claim's verdict. The verdict words are defined here, once, and written by the map's
analysis, so the sentence can only say what the decision page says.
"""
from __future__ import annotations

import csv
from pathlib import Path

from lab.repro import FIGURES_DIR

__all__ = ["FAILS", "HELPS", "MAP_TABLE", "NOT_SHOWN", "map_reading", "split_label"]

FAILS = "local SAM fails here"
HELPS = "does not fail: SAM helps here"
NOT_SHOWN = "failure not shown: G not decided"
MAP_TABLE = FIGURES_DIR / "failure_map" / "map.csv"

_SPLITS = {"iid": "IID", "dir0.1": "Dirichlet 0.1", "path2": "pathological, 2 classes"}


def split_label(split: str) -> str:
    """A map split's name as the pages write it (``path2`` → ``pathological, 2 classes``)."""
    return _SPLITS.get(split, split)


def map_reading(arm: str, table: Path | None = None) -> str:
    """One sentence: where, on the failure map, local SAM at ``arm``'s radius fails against FedAvg.

    Every cell of ``arm`` in ``table`` (default :data:`MAP_TABLE`) counts; while any is untested the sentence
    says the map is incomplete and reports only the cells decided so far. Raises ``ValueError`` naming the file
    when it is missing or holds no row of ``arm``."""
    path = MAP_TABLE if table is None else Path(table)
    if not path.is_file():
        raise ValueError(f"{path}: no failure-map table (python -m lab study analyse lab/study/failure_map.yaml "
                         "writes it)")
    with path.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("arm") == arm]
    if not rows:
        raise ValueError(f"{path}: no row of the arm {arm!r}; a claim's map.arm must be one of the map's SAM arms")
    place = lambda r: f"{split_label(r['split'])}, K = {r['local_steps']}"  # noqa: E731
    tested = [r for r in rows if not r["verdict"].startswith("not tested")]
    failing = [place(r) for r in tested if r["verdict"] == FAILS]
    helps = sum(r["verdict"] == HELPS for r in tested)
    undecided = sum(r["verdict"] == NOT_SHOWN for r in tested)
    rest = "; ".join(x for x in (f"SAM helps, decided, in {helps}" if helps else "",
                                   f"FedSAM − FedAvg not decided in {undecided}" if undecided else "") if x)
    rest = f" ({rest})" if rest else ""
    where = f"on the failure map ({arm}, {len(rows)} cells of split × K, figures/failure_map/decision.md)"
    if len(tested) < len(rows):
        return (f"{where}: not complete, {len(tested)} of {len(rows)} cells tested; local SAM fails in "
                + ("; ".join(failing) if failing else "none of them") + f" so far{rest}")
    if failing:
        return f"{where}: local SAM fails in {'; '.join(failing)}{rest}"
    return f"{where}: not reproduced anywhere on the map — local SAM fails in none of its cells{rest}"
