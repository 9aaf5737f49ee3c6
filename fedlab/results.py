"""Run directories: one authoritative checkpoint, derived views, a lock, verified loads.

A run lives in ``<runs_dir>/<algorithm>-<key>/`` where the key is :meth:`fedlab.config.Config.hash`::

    checkpoint.pt   THE record: server and client states, every metric row, status, next round,
                    and a SHA-256 digest of all of it (torch.save; loaded with weights_only=True)
    metrics.csv     derived view: the checkpoint's rows as CSV
    summary.json    derived view: status (running | finished | diverged | collapsed), accuracies, timings
    config.json     derived view: the Config as given, plus key, fingerprint and version
    .lock           the run's lock file (``filelock``): held by the process working on the run

The contract (one authoritative file, verified loads that never change a file, atomic writes
through :mod:`fedlab.store.atomic`, one process per run, nothing ever deleted) is the book's guide
``results.md``, with the tests that hold it (kills between the writes below: ``tests/faults.py``).
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock
import pandas as pd
import torch
from torch import Tensor

State = dict[str, Tensor]  # an algorithm's server or client state (fedlab.algorithms.base.State)

from fedlab.store.atomic import atomic_torch_save, atomic_write_bytes, atomic_write_text, remove_orphans
from fedlab.config import Config, ConfigError

__all__ = ["Checkpoint", "CheckpointError", "RunResult", "RunStore", "STATUSES",
           "TERMINAL_STATUSES", "atomic_torch_save", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "payload_digest"]

TERMINAL_STATUSES = frozenset({"finished", "diverged", "collapsed"})
"""Statuses of a run that is over: loaded from disk, never trained further."""
STATUSES = TERMINAL_STATUSES | {"running"}

CHECKPOINT_FORMAT = 2
RUN_ID = "{algorithm}-{key}"  # a run's name (RunResult.run_id): its folder's under runs_dir
_REQUIRED = frozenset({"format", "next_round", "server", "clients", "rows", "status", "config_hash",
                       "theta0", "digest"})


class CheckpointError(RuntimeError):
    """A run file exists but cannot be used; the message names the file and what to do."""


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, _json_text(obj))


def _json_text(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _feed(h: "hashlib._Hash", obj: Any) -> None:
    """Feed ``obj`` to ``h`` in an unambiguous, type-tagged encoding (tensors by their raw bytes)."""
    if isinstance(obj, Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(obj.shape)}:".encode())
        h.update(t.view(torch.uint8).numpy())
    elif isinstance(obj, dict):
        h.update(b"{%d" % len(obj))
        for k in sorted(obj, key=str):
            _feed(h, str(k))
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for v in obj:
            _feed(h, v)
    elif isinstance(obj, bool) or obj is None:
        h.update(repr(obj).encode() + b";")
    elif isinstance(obj, int):
        h.update(b"i%d;" % obj)
    elif isinstance(obj, float):
        h.update(b"f" + struct.pack("<d", obj))
    elif isinstance(obj, str):
        raw = obj.encode()
        h.update(b"s%d:" % len(raw) + raw)
    else:
        h.update(b"r" + repr(obj).encode() + b";")


def payload_digest(ckpt: dict[str, Any]) -> str:
    """SHA-256 over every entry of a checkpoint except ``digest`` (every tensor byte, every row)."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in ckpt.items() if k != "digest"})
    return h.hexdigest()


def config_record(config: Config, info: dict[str, Any]) -> dict[str, Any]:
    """The contents of ``config.json``: the config as given, plus the run's key and provenance."""
    return {"config": config.to_dict(), **info}


def metrics_text(rows: list[dict[str, Any]]) -> str:
    """The exact contents of ``metrics.csv`` for these rows."""
    return pd.DataFrame(rows).to_csv(index=False)


@dataclass
class RunResult:
    """A finished (or diverged, or stopped) run: what notebooks and plots consume."""

    config: Config
    metrics: pd.DataFrame
    theta: Tensor
    status: str
    run_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)
    partition: Any = None  # fedlab.data.partition.Partition when the run was built in this process
    server: State | None = None  # the final server state (θ and the method's server vectors), on CPU;
    # None for a run read from a committed record (records keep no tensors)

    @property
    def final_accuracy(self) -> float:
        acc = self.metrics["test_acc"].dropna()
        return float(acc.iloc[-1]) if len(acc) else float("nan")

    @property
    def label(self) -> str:
        return self.config.name or self.config.algorithm

    @property
    def key(self) -> str | None:
        """The run key (:meth:`fedlab.config.Config.hash` as the run formed it); None for a result built by hand."""
        return self.summary.get("config_hash")

    @property
    def run_id(self) -> str | None:
        """``<algorithm>-<key>``: the run's name, its folder's under ``runs_dir`` (:meth:`RunStore.for_run`)."""
        return None if self.key is None else RUN_ID.format(algorithm=self.config.algorithm, key=self.key)

    def stored_config(self) -> dict[str, Any] | None:
        """The run's ``config.json`` (:func:`config_record`: the Config, its key, split and data digests) from its
        run directory; None where it has none (a result built by hand or read from elsewhere)."""
        path = RunStore(self.run_dir).config_path if self.run_dir is not None else None
        return json.loads(path.read_text()) if path is not None and path.is_file() else None

    def __repr__(self) -> str:
        return (f"RunResult({self.label}, status={self.status}, rounds={len(self.metrics)}, "
                f"final_acc={self.final_accuracy:.4f})")


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint records: everything a run needs to resume or to be returned as finished.

    The on-disk layout (:meth:`payload`, :meth:`from_payload`) is known here and nowhere else: every
    tensor detached and on the CPU, client ids as strings in ascending order, plus the rows, the
    status, the run key, θ_0 and the fedlab version; :meth:`RunStore.write_checkpoint` adds the
    format number and the SHA-256 digest.
    """

    next_round: int  # rounds done: the round a resumed run starts with
    server: State
    client_states: dict[int, State]
    rows: list[dict[str, Any]]  # one metrics row per round done
    status: str  # one of STATUSES
    config_hash: str  # the run key
    theta0: Tensor  # the initial global model (stateful methods initialise client state from it)
    version: str | None  # the fedlab version that wrote it
    # client states kept on disk (fedlab.store.client_states.DiskClientStates.checkpoint); then
    # client_states is empty and this names the generation of the files beside the checkpoint
    client_store: dict[str, Any] | None = None

    def payload(self) -> dict[str, Any]:
        """The dict saved to ``checkpoint.pt`` (without ``format`` and ``digest``)."""
        out = {"next_round": self.next_round, "server": _on_cpu(self.server),
               "clients": {str(i): _on_cpu(s) for i, s in sorted(self.client_states.items())},
               "rows": self.rows, "status": self.status, "config_hash": self.config_hash,
               "theta0": self.theta0.cpu(), "version": self.version}
        if self.client_store is not None:  # absent otherwise: in-memory checkpoints keep their bytes
            out["client_store"] = self.client_store
        return out

    @classmethod
    def from_payload(cls, ckpt: dict[str, Any]) -> "Checkpoint":
        """A verified ``checkpoint.pt`` dict (see :meth:`RunStore.load_checkpoint`) as a Checkpoint."""
        return cls(next_round=int(ckpt["next_round"]), server=dict(ckpt["server"]),
                   client_states={int(i): dict(s) for i, s in ckpt["clients"].items()},
                   rows=list(ckpt["rows"]), status=ckpt["status"], config_hash=ckpt["config_hash"],
                   theta0=ckpt["theta0"], version=ckpt.get("version"), client_store=ckpt.get("client_store"))


def _on_cpu(state: State) -> State:
    return {k: v.detach().cpu() for k, v in state.items()}


class RunStore:
    """The files of one run directory (see the module docstring for the contract)."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.config_path = self.dir / "config.json"
        self.metrics_path = self.dir / "metrics.csv"
        self.summary_path = self.dir / "summary.json"
        self.checkpoint_path = self.dir / "checkpoint.pt"
        self.lock_path = self.dir / ".lock"

    @staticmethod
    def for_run(root: Path, algorithm: str, run_key: str) -> "RunStore":
        """The store of the run with key ``run_key`` (:meth:`fedlab.config.Config.hash`) under ``root``."""
        return RunStore(root / RUN_ID.format(algorithm=algorithm, key=run_key))

    # --- the lock ---------------------------------------------------------------------------------
    @contextmanager
    def lock(self, *, quiet: bool = False) -> Iterator[None]:
        """Hold the run's file lock (creating the run directory); waits while another process has it.

        The lock is an OS lock (``flock`` through ``filelock``): the kernel releases it when its
        holder dies, so a killed run never leaves a stale lock behind.
        """
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(self.lock_path, thread_local=False)
            try:
                lock.acquire(timeout=0)
            except filelock.Timeout:
                if not quiet:
                    print(f"waiting for {self.dir}: another process is working on this run", file=sys.stderr)
                lock.acquire()
        except OSError as err:
            raise ConfigError(f"runs_dir: cannot create or lock {self.dir} ({err.strerror or err}); "
                              "choose a writable folder with runs_dir=") from None
        try:
            yield
        finally:
            lock.release()

    def remove_orphans(self) -> list[Path]:
        """Delete ``.tmp`` files of interrupted writes; only while holding :meth:`lock`."""
        return remove_orphans(self.dir)

    # --- reading ---------------------------------------------------------------------------------
    def read_metrics(self) -> pd.DataFrame:
        """The metrics view; ``CheckpointError`` naming the file if unreadable."""
        try:
            return pd.read_csv(self.metrics_path)
        except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise CheckpointError(f"cannot read {self.metrics_path}: {err}; rerun the config to rebuild it "
                                  "from the checkpoint") from None

    def load_checkpoint(self, expected_hash: str) -> "Checkpoint | None":
        """The verified checkpoint, ``None`` if there is none; ``CheckpointError`` if it is unusable."""
        path = self.checkpoint_path
        if not path.exists():
            return None
        keep = "Nothing was changed. Restore that file, or move it away to restart the run from round 0."
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 — any unpickling failure means "corrupted"
            raise CheckpointError(f"checkpoint {path} is corrupted or unreadable "
                                  f"({type(err).__name__}: {err}). {keep}") from None
        if not isinstance(ckpt, dict) or not _REQUIRED <= set(ckpt) or ckpt.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"checkpoint {path} is not a format-{CHECKPOINT_FORMAT} fedlab checkpoint "
                                  f"(needs fields {sorted(_REQUIRED)}). {keep}")
        if payload_digest(ckpt) != ckpt["digest"]:
            raise CheckpointError(f"checkpoint {path} is corrupted: its contents do not match the SHA-256 "
                                  f"digest stored in it. {keep}")
        if ckpt["config_hash"] != expected_hash:
            raise CheckpointError(f"checkpoint {path} belongs to run key {ckpt['config_hash']}, "
                                  f"not {expected_hash}; refusing to mix runs. {keep}")
        if ckpt["status"] not in STATUSES:
            raise CheckpointError(f"checkpoint {path} has unknown status {ckpt['status']!r}. {keep}")
        return Checkpoint.from_payload(ckpt)

    # --- writing ---------------------------------------------------------------------------------
    def write_config(self, record: dict[str, Any]) -> None:
        """Write config.json (a :func:`config_record`)."""
        atomic_write_json(self.config_path, record)

    def write_checkpoint(self, ckpt: "Checkpoint") -> None:
        """Write the authoritative record (:meth:`Checkpoint.payload`, plus ``format`` and ``digest``)."""
        obj = {**ckpt.payload(), "format": CHECKPOINT_FORMAT}
        obj["digest"] = payload_digest(obj)
        atomic_torch_save(self.checkpoint_path, obj)

    def write_views(self, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """Write metrics.csv and summary.json (after the checkpoint they are derived from)."""
        atomic_write_text(self.metrics_path, metrics_text(rows))
        atomic_write_json(self.summary_path, summary)

    def repair_views(self, rows: list[dict[str, Any]], summary: dict[str, Any],
                     config: dict[str, Any]) -> list[Path]:
        """Rewrite each view whose bytes differ from what the checkpoint implies; return those rewritten."""
        repaired = []
        for path, text in ((self.metrics_path, metrics_text(rows)), (self.summary_path, _json_text(summary)),
                           (self.config_path, _json_text(config))):
            try:
                ok = path.read_bytes() == text.encode("utf-8")
            except OSError:
                ok = False
            if not ok:
                atomic_write_text(path, text)
                repaired.append(path)
        return repaired
