"""Committed run records: the per-run evidence behind the figures, small enough for git.

A *record* is one run's ``config.json`` (the Config, its hash, partition fingerprint and summary of
the split), ``summary.json`` and ``metrics.csv``, without the checkpoint, stored as one gzipped JSON
file named after the run directory::

    figures/records/<algorithm>-<hash>.json.gz

Why this form: one file per run is add-only in git (notebooks that share runs, as 04/05/06 do, never
conflict over a shared table), the name is the run directory's (``RunStore.for_run``), so a record
follows the store's key whatever goes into it, and gzipped JSON needs no extra dependency and is
readable with ``zcat``. A 50-round run is about 3 KB. A record is read back, and checked, by
:mod:`lab.evidence.record_load`; :func:`write_record` adds each new record's line to the evidence manifest
``figures/MANIFEST.sha256`` (:mod:`lab.evidence.integrity`). A record is written create-if-absent (hard link of a
temporary sibling), so the first record of a key stays the evidence even between racing writers; a write
interrupted between the link and the manifest line is repaired by the next write (:func:`repair_unlisted`).

What records are for:

* re-plotting a figure from committed data in seconds (:func:`figure_runs`, :func:`figure_data`);
* skipping runs already done on another machine: :func:`run_or_load` returns a run's record where one
  is committed, whether or not ``runs/`` holds a copy (``theta=None``; ``need_theta=True`` trains it
  where the model itself is analysed). Loading a record is always this explicit act of the lab:
  :func:`fedlab.run` only trains, resumes or loads from ``runs/``;
* checking any number: every metric row of every run behind a figure is in its record.

The directory is ``$FEDLAB_RECORDS`` if set, else ``<repo>/figures/records``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.config import Config
from lab.repro import FIGURES_DIR, in_scratch
from lab.evidence.manifest import EvidenceError, add, evidence_root, manifest_path, read_listed, read_manifest
from lab.evidence.record_load import (ALLOWED_STATUSES, OLDER_CODE_NAME, SUFFIX, RecordError, check_record_file,
                                      check_run, list_older_code, load_record, record_meta, record_path, records_dir,
                                      run_key)
from fedlab.results import RunResult
from fedlab.store.atomic import TMP_SUFFIX

__all__ = ["ALLOWED_STATUSES", "OLDER_CODE_NAME", "SUFFIX", "RecordError", "check_record_file", "check_run",
           "figure_data", "figure_runs", "list_older_code", "load_record", "record_meta", "record_path", "recorded",
           "records_dir", "remove_orphan_tmps", "repair_unlisted", "run_key", "sidecar", "write_record"]

TMP_PATTERN = f".*{SUFFIX}.*{TMP_SUFFIX}"
"""Orphans of interrupted record writes (``.<key>.json.gz.<random>.tmp``): never loaded, removed on the next write."""


def _payload(result: RunResult, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    info = result.stored_config()  # the run directory's config record, with the digests its key is formed from
    source = Path(result.run_dir) if result.run_dir is not None else None
    if info is None and source is not None and source.name.endswith(SUFFIX) and source.is_file():
        # a record of a record (load_record's result): the source's own config block, with the partition,
        # dataset and θ₀ digests its run key is formed from (check_run re-forms it on every load)
        info = json.loads(gzip.decompress(source.read_bytes()))["config"]
    elif info is None:  # a result with neither (built by hand): its config alone
        info = {"config": result.config.to_dict(), "hash": result.key}
    # where the run lived on the machine that trained it is not part of the evidence (and not hashed)
    info = {**info, "config": {**info["config"], "runs_dir": None}}
    metrics = result.metrics
    payload = {"key": result.run_id, "config": info, "summary": result.summary,
               "metrics": {"columns": list(metrics.columns),
                           "data": json.loads(metrics.to_json(orient="values", double_precision=15))}}
    if meta is not None:
        payload["meta"] = dict(meta)
    return payload


def _key(result: RunResult) -> str:
    """The key ``result``'s record is stored under: its run's id (``<algorithm>-<hash>``, the run directory's name)."""
    if result.run_id is None:
        raise RecordError(f"{result!r} has no run key (its summary has no config_hash): only a run is recorded")
    return result.run_id


def _record_bytes(result: RunResult, meta: Mapping[str, Any] | None = None) -> bytes:
    """The record of ``result`` as deterministic bytes (sorted JSON, gzip without a timestamp)."""
    return encode_payload(_payload(result, meta))


def encode_payload(payload: dict[str, Any]) -> bytes:
    """A record payload as the deterministic bytes every record is stored as."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9, filename="") as gz:
        gz.write(text)
    return buf.getvalue()


@contextlib.contextmanager
def _writers_lock(root: Path, exclusive: bool) -> Iterator[bool]:
    """Writers share this lock while a temporary file of theirs exists; the orphan sweep takes it
    exclusively without waiting (yields False when some writer is busy: then it sweeps nothing), so a
    live writer's temporary file is never taken for an orphan."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".records.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def remove_orphan_tmps(directory: Path | None = None) -> list[Path]:
    """Delete the temporary files interrupted record writes left in ``directory`` (none while another
    writer is busy there); returns what was removed."""
    folder = records_dir() if directory is None else Path(directory)
    if not folder.is_dir():
        return []
    with _writers_lock(evidence_root(folder, "records"), exclusive=True) as alone:
        if not alone:
            return []
        removed = [p for p in folder.glob(TMP_PATTERN) if p.is_file()]
        for p in removed:
            p.unlink(missing_ok=True)
    return removed


def write_record(result: RunResult, directory: Path | None = None, *, meta: Mapping[str, Any] | None = None) -> Path:
    """Write ``result``'s record (deterministic bytes: gzip without a timestamp), add its line to the
    evidence manifest (:mod:`lab.evidence.integrity`) and return its path.

    ``meta``: facts about the run that are the lab's, not the run's (which entry of an experiment plan
    it is, how long it took on which machine), stored as the record's ``meta`` block, hashed with the
    rest of the file; :func:`record_meta` reads it back. The run's own blocks are unchanged by it.

    An existing record is never replaced: its key is the run's (same config, data, code → same
    numbers), the first one written is the evidence, and a run that was itself *loaded* from a
    record would otherwise overwrite it with less (a record's config block lacks the split summary
    of the run directory's ``config.json``, and a retrained run's wall times differ). The write is
    create-if-absent even between racing writers: the bytes go to a temporary sibling that is
    hard-linked to the final name, which fails if the name exists (the first writer wins, the others
    keep its record). Orphans of interrupted writes are removed first, and records of writes interrupted
    after the link are listed (:func:`repair_unlisted`)."""
    path = record_path(_key(result), directory)
    folder, root = path.parent, evidence_root(path.parent, "records")
    folder.mkdir(parents=True, exist_ok=True)
    remove_orphan_tmps(folder)
    repair_unlisted(folder)  # a write killed between its link and its line left a record that blocks its run
    if path.exists():
        return path
    data = _record_bytes(result, meta)
    with _writers_lock(root, exclusive=False):
        tmp = folder / f".{path.name}.{secrets.token_hex(6)}{TMP_SUFFIX}"
        try:
            with open(tmp, "xb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # atomic and exclusive: never replaces a record another writer made
                won = True
            except FileExistsError:
                won = path.read_bytes() == data  # the same bytes: this writer vouches for them too
        finally:
            tmp.unlink(missing_ok=True)
    if won:
        add(path, root)
    return path


def repair_unlisted(directory: Path | None = None) -> list[Path]:
    """List in the manifest every record in ``directory`` that has no line but is sound; return them.

    Why this is safe: a record is linked under its final name before its line is added, so a writer
    killed in between leaves exactly this — a complete record (fsynced before the link) without a line,
    which every later load refuses and no later write replaces. It is listed only if :func:`check_record_file`
    passes (it parses, it is the run its key names: its config block hashes to its key under this code, and
    its summary agrees with its metrics), so what gets listed is what the writer would have listed. One that
    fails is left unlisted (its loads keep refusing it, naming it) and reported on stderr. Each repair
    says which file and why on stderr."""
    import sys

    folder = records_dir() if directory is None else Path(directory)
    if not folder.is_dir():
        return []
    root = evidence_root(folder, "records")
    listed = read_manifest(root)
    scratch = in_scratch(folder)
    repaired = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        rel = path.relative_to(root).as_posix()
        if path.name.startswith(".") or rel in listed:
            continue
        try:
            check_record_file(path)
        except EvidenceError as err:
            if not scratch:  # the ci profile's scratch keeps stale runs of older code: not evidence, not news
                print(f"warning: unlisted record {path} is not repaired: {err}", file=sys.stderr)
            continue
        add(path, root)
        repaired.append(path)
        print(f"repaired: {path} was written but not listed in {manifest_path(root)} (a write interrupted "
              "between the record and its line); it is a sound record of its key, now listed", file=sys.stderr)
    return repaired


def run_or_load(config: Config, *, need_theta: bool = False, dataset: Any = None,
                progress: bool = False) -> RunResult:
    """``config``'s committed record when one exists for its run key and θ is not needed; else
    :func:`fedlab.run` (train, resume, or load from ``runs/``).

    The record wins over a copy of the run in ``runs/``: the record is the evidence, and a run trained
    again (here, or on a CPU whose float kernels round differently) can differ from it in its last bits,
    which 100 chaotic rounds carry to the accuracy. A record has no model (``theta=None``), so pass
    ``need_theta=True`` where the model itself is analysed (Hessians, landscapes): the run is then
    trained, with the record's numbers on the CPU that wrote it (on another, within that rounding).
    ``dataset`` goes to the run as in :func:`fedlab.run`."""
    from fedlab.engine import Simulation

    sim = Simulation.build(config, dataset)
    if not need_theta:
        # read-only: no lock, and nothing is created under runs/
        committed = load_record(sim.store.dir.name, partition=sim.partition, config=sim.config)
        if committed is not None:  # the caller's label (Config.name, not in the key) names it in figures
            return dataclasses.replace(committed, config=committed.config.replace(name=config.name))
    return sim.run(progress=progress)


def recorded(result: RunResult, directory: Path | None = None) -> RunResult:
    """The committed record of ``result``'s run (same run key) when there is one, else ``result`` itself.

    A model analysed for its θ may have been trained again here (:func:`run_or_load` with ``need_theta``), and
    on another CPU its last bits, and so its accuracy after 100 chaotic rounds, can differ from the record's:
    a figure's accuracy is read from the record, the evidence, and only θ from the retrained run. A run with
    no record (a ``ci`` run, never committed) is its own evidence."""
    if result.run_id is None:
        return result
    committed = load_record(result.run_id, directory, config=result.config)
    return result if committed is None else committed


def write_records(results: Iterable[RunResult], directory: Path | None = None) -> list[str]:
    """Write the records of ``results`` (each once) and return their keys in order."""
    keys: list[str] = []
    for res in results:
        key = _key(res)
        if key not in keys:
            write_record(res, directory)
            keys.append(key)
    return keys


# --- figures from committed data ----------------------------------------------------------------
def sidecar(name: str, figures_dir: Path | None) -> dict[str, Any]:
    """Figure ``name``'s sidecar, checked against the evidence manifest: it decides which records a claim
    reads, so an edited or deleted sidecar is refused (EvidenceError naming it), never read as it is."""
    folder = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    path = folder / f"{name}.json"
    data = read_listed(path, folder)
    if data is None:
        raise FileNotFoundError(f"no sidecar {path}; is {name!r} a figure saved by lab.tools.figures.save_figure?")
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"sidecar {path} is not JSON ({type(err).__name__}: {err}); restore it from git") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("records", []), list):
        raise RecordError(f"sidecar {path} is not a JSON object with a list of records; restore it from git")
    return meta


def figure_runs(name: str, figures_dir: Path | None = None) -> list[RunResult]:
    """The runs behind figure ``name``, loaded from its committed records (no training, no θ)."""
    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    meta = sidecar(name, figures_dir)
    keys: Sequence[str] = meta.get("records", [])
    folder = figures_dir / str(meta.get("records_dir", "records"))  # a study's figure names figures/records
    runs = []
    for key in keys:
        res = load_record(key, folder)
        if res is None:
            raise RecordError(f"figure {name!r} names record {key!r}, which is not in {folder}")
        runs.append(res)
    return runs


def figure_data(name: str, figures_dir: Path | None = None) -> pd.DataFrame:
    """The numbers figure ``name`` plots, from the CSV that ``save_figure(data=...)`` wrote beside it, checked
    against the evidence manifest (EvidenceError naming it when edited, or listed and deleted)."""
    folder = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    path = folder / f"{name}.csv"
    data = read_listed(path, folder)  # the numbers a claim is computed from: checked like any evidence
    if data is None:
        raise FileNotFoundError(f"figure {name!r} has no data file {path}")
    return pd.read_csv(io.BytesIO(data))
