"""Committed run records: the per-run evidence behind the figures, small enough for git.

A *record* is one run's ``config.json`` (the Config, its hash, partition fingerprint and summary of
the split), ``summary.json`` and ``metrics.csv``, without the checkpoint, stored as one gzipped JSON
file named after the run directory::

    figures/records/<algorithm>-<hash>.json.gz

Why this form: one file per run is add-only in git (notebooks that share runs, as 04/05/06 do, never
conflict over a shared table), the name is the run directory's (``RunStore.for_run``), so a record
follows the store's key whatever goes into it, and gzipped JSON needs no extra dependency and is
readable with ``zcat``. A 50-round run is about 3 KB. The gzip CRC is checked on every load.

What records are for:

* re-plotting a figure from committed data in seconds (:func:`figure_runs`, :func:`figure_data`);
* skipping runs already done on another machine: :func:`fedlab.run` returns a run that is absent from
  ``runs/`` but present here from its record (``theta=None``; ``fedlab.run(..., need_theta=True)``
  trains it where the model itself is analysed);
* checking any number: every metric row of every run behind a figure is in its record.

The directory is ``$FEDLAB_RECORDS`` if set, else ``<repo>/figures/records``.
"""
from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.config import Config
from fedlab.tools.repro import FIGURES_DIR
from fedlab.results import RunResult, atomic_write_bytes

__all__ = ["RecordError", "figure_data", "figure_runs", "load_record", "record_path", "records_dir",
           "write_record"]

SUFFIX = ".json.gz"


class RecordError(RuntimeError):
    """A committed record exists but cannot be used; the message names the file."""


def records_dir() -> Path:
    """``$FEDLAB_RECORDS`` if set, else ``figures/records`` of this repository."""
    env = os.environ.get("FEDLAB_RECORDS")
    return Path(env).expanduser() if env else FIGURES_DIR / "records"


def record_path(key: str, directory: Path | None = None) -> Path:
    return (records_dir() if directory is None else Path(directory)) / f"{key}{SUFFIX}"


def _payload(result: RunResult) -> dict[str, Any]:
    config_file = Path(result.run_dir) / "config.json"
    if config_file.exists():
        info = json.loads(config_file.read_text())
    else:  # a record of a record: its own config block
        info = {"config": result.config.to_dict(), "hash": result.summary.get("config_hash")}
    # where the run lived on the machine that trained it is not part of the evidence (and not hashed)
    info = {**info, "config": {**info["config"], "runs_dir": None}}
    metrics = result.metrics
    return {"key": Path(result.run_dir).name.removesuffix(SUFFIX), "config": info, "summary": result.summary,
            "metrics": {"columns": list(metrics.columns),
                        "data": json.loads(metrics.to_json(orient="values", double_precision=15))}}


def write_record(result: RunResult, directory: Path | None = None) -> Path:
    """Write ``result``'s record (deterministic bytes: gzip without a timestamp) and return its path.

    An existing record is never replaced: its key is the run's (same config, data, code → same
    numbers), the first one written is the evidence, and a run that was itself *loaded* from a
    record would otherwise overwrite it with less (a record's config block lacks the split summary
    of the run directory's ``config.json``, and a retrained run's wall times differ)."""
    key = Path(result.run_dir).name.removesuffix(SUFFIX)
    path = record_path(key, directory)
    if path.exists():
        return path
    payload = _payload(result)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9, filename="") as gz:
        gz.write(text)
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_record(key: str, directory: Path | None = None, *, partition: Any = None) -> RunResult | None:
    """The run stored under ``key`` as a :class:`RunResult` with ``theta=None``; None if there is none."""
    path = record_path(key, directory)
    if not path.exists():
        return None
    try:
        payload = json.loads(gzip.decompress(path.read_bytes()))
        info = payload["config"]
        config = Config.from_dict(info["config"])
        metrics = pd.DataFrame(payload["metrics"]["data"], columns=payload["metrics"]["columns"])
        summary = payload["summary"]
    except (OSError, EOFError, gzip.BadGzipFile, json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise RecordError(f"record {path} is corrupted or not a fedlab record ({type(err).__name__}: {err}); "
                          "restore it from git or delete it to retrain the run") from None
    if payload.get("key") != key or (info.get("hash") and not key.endswith(str(info["hash"]))):
        raise RecordError(f"record {path} holds run {payload.get('key')!r} (hash {info.get('hash')}), "
                          f"not {key!r}; refusing to mix runs")
    metrics = metrics.astype({c: float for c in metrics.columns if c in ("test_acc", "test_loss")})
    return RunResult(config, metrics, None, summary["status"], path, summary, partition)  # type: ignore[arg-type]


def write_records(results: Iterable[RunResult], directory: Path | None = None) -> list[str]:
    """Write the records of ``results`` (each once) and return their keys in order."""
    keys: list[str] = []
    for res in results:
        key = Path(res.run_dir).name.removesuffix(SUFFIX)
        if key not in keys:
            write_record(res, directory)
            keys.append(key)
    return keys


# --- figures from committed data ----------------------------------------------------------------
def _sidecar(name: str, figures_dir: Path | None) -> dict[str, Any]:
    path = (FIGURES_DIR if figures_dir is None else Path(figures_dir)) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no sidecar {path}; is {name!r} a figure saved by fedlab.tools.figures.save_figure?")
    return json.loads(path.read_text())


def figure_runs(name: str, figures_dir: Path | None = None) -> list[RunResult]:
    """The runs behind figure ``name``, loaded from its committed records (no training, no θ)."""
    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    keys: Sequence[str] = _sidecar(name, figures_dir).get("records", [])
    runs = []
    for key in keys:
        res = load_record(key, figures_dir / "records")
        if res is None:
            raise RecordError(f"figure {name!r} names record {key!r}, which is not in {figures_dir / 'records'}")
        runs.append(res)
    return runs


def figure_data(name: str, figures_dir: Path | None = None) -> pd.DataFrame:
    """The numbers figure ``name`` plots, from the CSV that ``save_figure(data=...)`` wrote beside it."""
    path = (FIGURES_DIR if figures_dir is None else Path(figures_dir)) / f"{name}.csv"
    if not path.exists():
        raise FileNotFoundError(f"figure {name!r} has no data file {path}")
    return pd.read_csv(path)
