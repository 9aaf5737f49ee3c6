"""The regime pilot's committed records and the score of a run.

Each finished run is written as a committed record (:mod:`lab.evidence.records`) in
``figures/regime/records/`` — its config, summary and every metric row, integrity-checked through
``figures/regime/MANIFEST.sha256`` — with a ``meta`` block naming its plan entry, the digest of the
criteria file and its measured seconds. A run whose record exists is skipped, so the pilot resumes
where it stopped (a run interrupted mid-way resumes from its checkpoint under ``runs/``).

The score of a run (the criteria file's ``metric``) is the mean of its last ``last_k_evaluations`` evaluated
accuracies, in % (:func:`final_metric`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.config import Config
from lab.evidence.integrity import EvidenceError
from lab.regime.criteria import Criteria
from lab.repro import FIGURES_DIR

__all__ = ["PILOT_NAME", "PilotError", "PilotRecord", "final_metric", "load_records", "record_score", "records_dir"]

PILOT_NAME = "regime-pilot-issue28"
"""``meta.pilot`` of every record the pilot writes (records of other experiments in the folder are ignored)."""


class PilotError(EvidenceError):
    """A pilot record or plan entry is inconsistent (a record of another plan, a missing dependency)."""


def records_dir() -> Path:
    """``$FEDLAB_REGIME_RECORDS`` if set, else ``figures/regime/records`` of this repository."""
    env = os.environ.get("FEDLAB_REGIME_RECORDS")
    return Path(env).expanduser() if env else FIGURES_DIR / "regime" / "records"


@dataclass(frozen=True)
class PilotRecord:
    """One committed pilot run: its plan entry (``meta``), config, status and metric rows."""

    key: str
    meta: dict[str, Any]
    config: Config
    status: str
    metrics: pd.DataFrame = field(repr=False)

    @property
    def run_id(self) -> tuple[str, str, str, str, int]:
        m = self.meta
        return (m["stage"], m["candidate"], m["split"], m["arm"], int(m["seed"]))

    @property
    def seconds(self) -> float:
        """The run's cost: its measured wall seconds, or the sum of its rounds' seconds when that is more
        (a run resumed from a checkpoint, or loaded finished from ``runs/``, measured only part of it)."""
        rounds = float(self.meta.get("round_seconds", 0.0))
        return max(float(self.meta.get("wall_seconds", 0.0)), rounds)


_META_FIELDS = ("stage", "candidate", "split", "arm", "seed", "algorithm", "params", "criteria_sha256")


def load_records(directory: str | os.PathLike | None = None, criteria: Criteria | None = None) -> list[PilotRecord]:
    """Every pilot record in ``directory`` (default :func:`records_dir`), each checked by
    :func:`lab.evidence.records.load_record` (fields, key, evidence manifest).

    With ``criteria``, a record planned from another criteria file (its ``criteria_sha256``) is refused:
    the file is pre-registered, and records of a changed plan must not mix with it."""
    from lab.evidence.records import SUFFIX, load_record, record_meta

    folder = records_dir() if directory is None else Path(directory)
    out: list[PilotRecord] = []
    seen: dict[tuple[str, str, str, str, int], str] = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
        if path.name.startswith("."):
            continue
        key = path.name.removesuffix(SUFFIX)
        result = load_record(key, folder)
        meta = record_meta(key, folder)
        if meta.get("pilot") != PILOT_NAME:
            continue
        missing = [f for f in _META_FIELDS if f not in meta]
        if missing:
            raise PilotError(f"pilot record {path} lacks meta field(s) {', '.join(missing)}; restore it from git")
        if criteria is not None and meta["criteria_sha256"] != criteria.digest:
            raise PilotError(f"pilot record {path} was planned from another criteria file (sha256 "
                             f"{meta['criteria_sha256'][:12]}…, {criteria.path} is {criteria.digest[:12]}…); "
                             "the criteria are pre-registered: a changed plan needs its own records folder")
        rec = PilotRecord(key, meta, result.config, result.status, result.metrics)  # type: ignore[arg-type]
        if rec.run_id in seen:
            raise PilotError(f"pilot records {seen[rec.run_id]} and {key} are both {rec.run_id}")
        seen[rec.run_id] = key
        out.append(rec)
    return out


def final_metric(metrics: pd.DataFrame, last_k: int, *, upto_round: int | None = None) -> float:
    """The score of a run: the mean of its last ``last_k`` evaluated accuracies, in %.

    ``upto_round``: the score the run would have had had it stopped there (evaluations at rounds ≤ it;
    R4 compares the score at T with the one at 0.8 T). NaN when fewer than ``last_k`` evaluations exist
    or one of them is not finite (a diverged run)."""
    if "test_acc" not in metrics or "round" not in metrics:
        raise ValueError("final_metric needs the metric rows' 'round' and 'test_acc' columns")
    rows = metrics[metrics["test_acc"].notna()]
    if upto_round is not None:
        rows = rows[rows["round"] <= upto_round]
    values = rows["test_acc"].astype(float).to_numpy()[-last_k:]
    if len(values) < last_k or not all(math.isfinite(v) for v in values):
        return float("nan")
    return 100.0 * float(values.mean())


def record_score(rec: PilotRecord, last_k: int, upto_round: int | None = None) -> float:
    """:func:`final_metric` of a record; NaN for a run that did not finish (diverged, collapsed early)."""
    if rec.status != "finished":
        return float("nan")
    return final_metric(rec.metrics, last_k, upto_round=upto_round)
