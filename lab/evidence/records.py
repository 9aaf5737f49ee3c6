"""Committed run records: the per-run evidence behind the figures, small enough for git.

A *record* is one run's ``config.json`` (the Config, its hash, partition fingerprint and summary of
the split), ``summary.json`` and ``metrics.csv``, without the checkpoint, stored as one gzipped JSON
file named after the run directory::

    figures/records/<algorithm>-<hash>.json.gz

Why this form: one file per run is add-only in git (notebooks that share runs, as 04/05/06 do, never
conflict over a shared table), the name is the run directory's (``RunStore.for_run``), so a record
follows the store's key whatever goes into it, and gzipped JSON needs no extra dependency and is
readable with ``zcat``. A 50-round run is about 3 KB. Every load checks the gzip CRC, the fields, that
the record is the key's run (payload key, hash, algorithm, an allowed status), its SHA-256 against
the evidence manifest ``figures/MANIFEST.sha256`` (:mod:`lab.evidence.integrity`), to which
:func:`write_record` adds each new record's line, and then that its content is what its key says
(:func:`check_run`): the config block, hashed as the run key is formed, gives the key, and the summary
agrees with the metrics (final and best accuracy, rounds, status). A record keyed by older numeric code
(whose key this code cannot reproduce) is accepted only byte for byte as listed in
``<root>/RECORDS_OLDER_CODE.sha256`` (:func:`list_older_code`), so re-recording an edited record's digest
(``--rerecord``) never makes it evidence. A record is written create-if-absent (hard link of a temporary
sibling), so the first record of a key stays the evidence even between racing writers; a write
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
import gzip
import io
import json
import os
import secrets
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.config import Config
from lab.repro import FIGURES_DIR, in_scratch
from lab.evidence.manifest import (EvidenceError, add, evidence_root, file_digest, manifest_path, read_listed,
                                   read_manifest, verify)
from fedlab.results import TERMINAL_STATUSES, RunResult
from fedlab.store.atomic import TMP_SUFFIX

__all__ = ["ALLOWED_STATUSES", "OLDER_CODE_NAME", "RecordError", "check_record_file", "check_run", "figure_data",
           "figure_runs", "list_older_code", "load_record", "record_meta", "record_path", "recorded", "records_dir",
           "remove_orphan_tmps", "repair_unlisted", "run_key", "sidecar", "write_record"]

SUFFIX = ".json.gz"


class RecordError(EvidenceError):
    """A committed record exists but cannot be used; the message names the file."""


ALLOWED_STATUSES: frozenset[str] = TERMINAL_STATUSES
"""The statuses a record may carry: only a run that is over is evidence (never ``running``)."""
_REQUIRED: dict[str, tuple[str, ...]] = {"": ("key", "config", "summary", "metrics"), "config": ("config", "hash"),
                                         "summary": ("status",), "metrics": ("columns", "data")}
OLDER_CODE_NAME = "RECORDS_OLDER_CODE.sha256"
"""Beside the manifest: the records whose keys older numeric code made (``<sha-256>  records/<key>.json.gz``)."""
TMP_PATTERN = f".*{SUFFIX}.*{TMP_SUFFIX}"
"""Orphans of interrupted record writes (``.<key>.json.gz.<random>.tmp``): never loaded, removed on the next write."""


def records_dir() -> Path:
    """``$FEDLAB_RECORDS`` if set, else ``figures/records`` of this repository."""
    env = os.environ.get("FEDLAB_RECORDS")
    return Path(env).expanduser() if env else FIGURES_DIR / "records"


def record_path(key: str, directory: Path | None = None) -> Path:
    return (records_dir() if directory is None else Path(directory)) / f"{key}{SUFFIX}"


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
        if committed is not None:
            return committed
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
