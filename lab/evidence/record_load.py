"""A committed run record read back (:func:`load_record`), and every check a load runs.

A record (:mod:`lab.evidence.records`, which writes them) is stored under its run key in :func:`records_dir`. Every
load checks the gzip CRC, the fields, that the record is the key's run (payload key, hash, algorithm, an allowed
status), its SHA-256 against the evidence manifest ``figures/MANIFEST.sha256`` (:mod:`lab.evidence.integrity`),
and then that its content is what its key says (:func:`check_run`): the config block, hashed as the run key is
formed, gives the key, and the summary agrees with the metrics (final and best accuracy, rounds, status). A record
keyed by older numeric code (whose key this code cannot reproduce) is accepted only byte for byte as listed in
``<root>/RECORDS_OLDER_CODE.sha256`` (:func:`list_older_code`), so re-recording an edited record's digest
(``--rerecord``) never makes it evidence.

The directory is ``$FEDLAB_RECORDS`` if set, else ``<repo>/figures/records``.
"""
from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.config import Config
from fedlab.results import TERMINAL_STATUSES, RunResult
from lab.evidence.manifest import EvidenceError, evidence_root, file_digest, read_listed, verify
from lab.repro import FIGURES_DIR

__all__ = ["ALLOWED_STATUSES", "OLDER_CODE_NAME", "SUFFIX", "RecordError", "check_record_file", "check_run",
           "list_older_code", "load_record", "record_meta", "record_path", "records_dir", "run_key"]

SUFFIX = ".json.gz"


class RecordError(EvidenceError):
    """A committed record exists but cannot be used; the message names the file."""


ALLOWED_STATUSES: frozenset[str] = TERMINAL_STATUSES
"""The statuses a record may carry: only a run that is over is evidence (never ``running``)."""
_REQUIRED: dict[str, tuple[str, ...]] = {"": ("key", "config", "summary", "metrics"), "config": ("config", "hash"),
                                         "summary": ("status",), "metrics": ("columns", "data")}
OLDER_CODE_NAME = "RECORDS_OLDER_CODE.sha256"
"""Beside the manifest: the records whose keys older numeric code made (``<sha-256>  records/<key>.json.gz``)."""


def records_dir() -> Path:
    """``$FEDLAB_RECORDS`` if set, else ``figures/records`` of this repository."""
    env = os.environ.get("FEDLAB_RECORDS")
    return Path(env).expanduser() if env else FIGURES_DIR / "records"


def record_path(key: str, directory: Path | None = None) -> Path:
    return (records_dir() if directory is None else Path(directory)) / f"{key}{SUFFIX}"


def run_key(info: Mapping[str, Any]) -> str:
    """The run key (``<algorithm>-<hash>``) this code forms from a record's config block ``info`` — the
    way :meth:`fedlab.engine.Simulation.build` forms it: the config's hashed fields with the algorithm's
    resolved hyperparameters, the partition fingerprint, the dataset digest and θ₀'s digest, the client
    schedule's digest, the numeric code and the version (:meth:`fedlab.config.Config.hash`)."""
    from fedlab.engine.sampling import schedule_digest

    cfg = Config.from_dict(dict(info["config"]))
    if "partition_fingerprint" not in info and "dataset_digest" not in info:
        # a result built by hand (no run directory, no split: a test's synthetic run) is keyed by its config
        # alone, ``Config.hash()``; its config is still bound to its key
        extra = ""
    else:
        extra = f"{info['partition_fingerprint']}|data:{info['dataset_digest']}"
    if info.get("theta0_digest"):
        extra += f"|theta0:{info['theta0_digest']}"
    schedule = None
    if cfg.sampling == "schedule":
        from fedlab.engine.loop import load_run_schedule

        schedule = load_run_schedule(cfg)
    return f"{cfg.algorithm}-{cfg.hash(extra, schedule_digest(schedule))}"


def _older_code(root: Path) -> dict[str, str]:
    """``{records/<key>.json.gz: sha-256}`` of ``root``'s :data:`OLDER_CODE_NAME` ({} without one)."""
    return _read_digest_lines(root / OLDER_CODE_NAME)


def _read_digest_lines(path: Path) -> dict[str, str]:
    """The manifest's line format (``<sha-256>  <path>``), so the list reads and diffs like the manifest."""
    import re

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"^([0-9a-f]{64})  (\S(?:.*\S)?)$", line)
        if match is None:
            raise RecordError(f"{path} line {number} is not '<sha-256>  <path>': {line[:80]!r}; restore it from git")
        entries[match.group(2)] = match.group(1)
    return entries


def check_run(path: Path, key: str, payload: Mapping[str, Any], metrics: pd.DataFrame, data: bytes) -> None:
    """That record ``path`` (key ``key``, parsed ``payload``, its ``metrics`` table, its bytes ``data``) is the
    run its key names: RecordError naming the file otherwise.

    * the config block gives the key (:func:`run_key`), or the record is listed byte for byte in
      :data:`OLDER_CODE_NAME` beside its manifest (a run keyed by older numeric code, which this code cannot
      re-key): a config block edited after the run — another seed, another hyperparameter — is refused even
      where its manifest line was re-recorded;
    * the summary agrees with the metrics and the config: ``rounds_done`` is the number of rows, ``rounds``
      the config's, ``final_test_acc`` and ``best_test_acc`` the last and highest evaluated ``test_acc``, and
      the status is the one the rows give (``finished``/``collapsed``: all rounds done, collapsed exactly when
      :func:`fedlab.engine.collapse.is_collapsed` says so; ``diverged``: no more rounds than configured).
    """
    import math

    from fedlab.engine.collapse import is_collapsed

    info, summary = payload["config"], payload["summary"]
    fix = "restore it from git (an intended change is a new run with its own key, never an edit)"
    try:
        computed = run_key(info)
    except (KeyError, TypeError, ValueError) as err:
        raise RecordError(f"record {path}: its run key cannot be formed from its config block "
                          f"({type(err).__name__}: {err}); {fix}") from None
    if computed != key:
        root = evidence_root(path.parent, "records")
        rel = path.resolve().relative_to(root.resolve()).as_posix()
        older = _older_code(root)
        if older.get(rel) != file_digest(data):
            listed = ("is listed there with other bytes" if rel in older else "is not listed there")
            raise RecordError(f"record {path}: its config block hashes to {computed}, not to its key {key}; either the "
                              f"config, summary or status was edited after the run, or older numeric code keyed it "
                              f"and it {listed} ({root / OLDER_CODE_NAME}); {fix}")
    if "test_acc" not in metrics.columns or "round" not in metrics.columns:
        absent = [c for c in ("round", "test_acc") if c not in metrics.columns]
        raise RecordError(f"record {path} has no {' or '.join(absent)} column in its metrics; {fix}")
    rounds = int(info["config"].get("rounds", 0) or 0)
    accs = [float(a) for a in metrics["test_acc"] if not math.isnan(float(a))]
    status = summary["status"]

    def differs(field: str, want: Any) -> bool:
        have = summary.get(field, want)  # an older summary without the field has nothing to disagree with
        if isinstance(want, float) and isinstance(have, (int, float)):
            return not math.isclose(float(have), want, rel_tol=1e-9, abs_tol=1e-12)
        return have != want

    checks = {"rounds_done": len(metrics), "rounds": rounds, "algorithm": info["config"].get("algorithm"),
              "final_test_acc": accs[-1] if accs else None, "best_test_acc": max(accs) if accs else None}
    wrong = [f"{k} {summary.get(k)!r} (its metrics give {v!r})" for k, v in checks.items() if differs(k, v)]
    if status in ("finished", "collapsed"):
        n_classes = summary.get("n_classes")
        if len(metrics) != rounds:
            wrong.append(f"status {status!r} with {len(metrics)} of {rounds} rounds")
        elif isinstance(n_classes, int) and n_classes >= 2:
            collapsed = is_collapsed(metrics["round"].tolist(), metrics["test_acc"].tolist(), rounds, n_classes)
            if collapsed != (status == "collapsed"):
                wrong.append(f"status {status!r}, but its accuracies are {'' if collapsed else 'not '}at chance")
    elif status == "diverged" and len(metrics) > rounds:
        wrong.append(f"status 'diverged' with {len(metrics)} rows for {rounds} rounds")
    if wrong:
        raise RecordError(f"record {path}: its summary disagrees with its metrics: {'; '.join(wrong)}; {fix}")


def check_record_file(path: str | os.PathLike) -> None:
    """Every check a load runs on record ``path`` except its manifest line (what ``--rerecord`` and the
    repair of an interrupted write run before they list a record); RecordError naming the file."""
    path = Path(path)
    _load(path.name.removesuffix(SUFFIX), path.parent, manifest=False)


def list_older_code(root: str | os.PathLike) -> list[str]:
    """Write ``root``'s :data:`OLDER_CODE_NAME`: every record in ``root/records`` whose key this code cannot
    reproduce from its config block, with its digest as the manifest has it (the explicit, reviewed step
    for records keyed by older numeric code, which :func:`lab.evidence.rekey.rekey` leaves under their
    historical keys). Refused, naming the file, for a record whose bytes are not its manifest's, and for one
    already listed with other bytes. Returns the listed paths."""
    from fedlab.store.atomic import atomic_write_text

    root = Path(root)
    entries = _older_code(root)
    for path in sorted((root / "records").glob(f"*{SUFFIX}")):
        rel = path.relative_to(root).as_posix()
        data = verify(path, root)
        payload = json.loads(gzip.decompress(data))
        if run_key(payload["config"]) == path.name.removesuffix(SUFFIX):
            continue
        if rel in entries and entries[rel] != file_digest(data):
            raise RecordError(f"record {path} is listed in {root / OLDER_CODE_NAME} with other bytes; restore it "
                              "from git")
        entries[rel] = file_digest(data)
    atomic_write_text(root / OLDER_CODE_NAME, "".join(f"{entries[k]}  {k}\n" for k in sorted(entries)))
    return sorted(entries)


def _missing(payload: Any) -> list[str]:
    """The required fields ``payload`` lacks (dotted names), or its top level when it is no object."""
    if not isinstance(payload, dict):
        return ["<a JSON object>"]
    missing = []
    for block, names in _REQUIRED.items():
        part = payload if not block else payload.get(block)
        if not isinstance(part, dict):
            missing.append(block if block not in payload else f"{block} (not an object)")
            continue
        missing += [f"{block}.{n}" if block else n for n in names if n not in part]
    return sorted(set(missing))


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(values, sort_keys=True, default=str))


def load_record(key: str, directory: Path | None = None, *, partition: Any = None,
                config: Config | None = None) -> RunResult | None:
    """The run stored under ``key`` as a :class:`RunResult` with ``theta=None``; None if there is none.

    Refused with a :class:`RecordError` naming the file: bytes that are not gzip JSON, a missing
    field, a record of another run (payload key, config hash or algorithm not the key's), a status
    outside :data:`ALLOWED_STATUSES`, a config block unlike ``config`` (the requested run's, when given;
    ``runs_dir`` aside) or a split unlike ``partition``'s, and bytes that differ from the evidence
    manifest's digest (checked after these, so a damaged file is named for what is wrong with it); then,
    for a record the manifest vouches for, that it is the run its key names (:func:`check_run`), so a
    record whose line was re-recorded after an edit is still refused."""
    return _load(key, directory, partition=partition, config=config)


def _load(key: str, directory: Path | None = None, *, partition: Any = None, config: Config | None = None,
          manifest: bool = True) -> RunResult | None:
    """:func:`load_record`; ``manifest=False``: without the manifest check (:func:`check_record_file`)."""
    path = record_path(key, directory)
    if Path(key).name != key or key.startswith("."):  # a sidecar's key must not reach outside the folder
        raise RecordError(f"{key!r} is not a record key (<algorithm>-<hash>); refusing to read {path}")
    if not path.exists():
        if manifest:  # a record the manifest lists that is gone is deleted evidence, not a run to train
            try:
                read_listed(path, evidence_root(path.parent, "records"))
            except EvidenceError as err:
                raise RecordError(str(err)) from None
        return None
    try:
        data = path.read_bytes()
        payload = json.loads(gzip.decompress(data))
    except (OSError, EOFError, gzip.BadGzipFile, json.JSONDecodeError, UnicodeDecodeError, zlib.error) as err:
        raise RecordError(f"record {path} is corrupted or not a fedlab record ({type(err).__name__}: {err}); "
                          "restore it from git or delete it to retrain the run") from None
    missing = _missing(payload)
    if missing:
        raise RecordError(f"record {path} lacks required field(s) {', '.join(missing)}; restore it from git")
    info, summary = payload["config"], payload["summary"]
    # each place a record names its run must name the key's hash; the message says which one does not
    named = {"key": payload["key"], "config.hash": f"{key.rsplit('-', 1)[0]}-{info['hash']}",
             "summary.config_hash": f"{key.rsplit('-', 1)[0]}-{summary.get('config_hash', info['hash'])}"}
    wrong = [f"{field} names {value!r}" for field, value in named.items() if value != key]
    if wrong:
        raise RecordError(f"record {path} is filed as {key!r} but its {', '.join(wrong)}; allowed: the run its "
                          "file name names (a record of another run, or an edited one); refusing to mix runs")
    try:
        loaded = Config.from_dict(info["config"])
        metrics = pd.DataFrame(payload["metrics"]["data"], columns=payload["metrics"]["columns"])
        metrics = metrics.astype({c: float for c in metrics.columns if c in ("test_acc", "test_loss")})
    except (TypeError, ValueError, KeyError) as err:
        raise RecordError(f"record {path} has an unusable config or metrics block ({type(err).__name__}: {err}); "
                          "restore it from git") from None
    if key.rsplit("-", 1)[0] != loaded.algorithm:
        raise RecordError(f"record {path} holds a run of algorithm {loaded.algorithm!r}, not of {key!r}; "
                          "refusing to mix runs")
    if summary["status"] not in ALLOWED_STATUSES:
        raise RecordError(f"record {path} has status {summary['status']!r}; a record's status is one of "
                          f"{', '.join(sorted(ALLOWED_STATUSES))}")
    if config is not None:
        # the fields that decide the numbers (how a run executes — threads, vmap, runs_dir — does not)
        want, have = _plain(config.hashed_fields()), _plain(loaded.hashed_fields())
        differ = sorted(k for k in want if want[k] != have.get(k))
        if differ:
            raise RecordError(f"record {path} was made for another config (differs in: {', '.join(differ)}); "
                              "refusing to return it for this run")
    fingerprint = getattr(partition, "fingerprint", None)
    if fingerprint is not None and summary.get("partition_fingerprint", fingerprint) != fingerprint:
        raise RecordError(f"record {path} was made on another split (partition fingerprint "
                          f"{summary['partition_fingerprint'][:12]}…, this run's {fingerprint[:12]}…)")
    if manifest:
        try:
            verify(path, evidence_root(path.parent, "records"), data)
        except EvidenceError as err:
            raise RecordError(str(err)) from None
    check_run(path, key, payload, metrics, data)
    return RunResult(loaded, metrics, None, summary["status"], path, summary, partition)  # type: ignore[arg-type]


def record_meta(key: str, directory: Path | None = None) -> dict[str, Any]:
    """The ``meta`` block of the record stored under ``key`` ({} when it has none), after the same checks
    as :func:`load_record` (a missing record is a :class:`RecordError`)."""
    if load_record(key, directory) is None:
        raise RecordError(f"no record {record_path(key, directory)}")
    payload = json.loads(gzip.decompress(record_path(key, directory).read_bytes()))
    meta = payload.get("meta", {})
    if not isinstance(meta, dict):
        raise RecordError(f"record {record_path(key, directory)} has a meta block that is not an object; "
                          "restore it from git")
    return meta
