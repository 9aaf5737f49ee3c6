"""Run directories: config, metrics, summary and checkpoints, written atomically.

A run lives in ``<runs_dir>/<algorithm>-<hash>/`` where the hash covers the config (with resolved
hyperparameters), the partition fingerprint and the fedlab version::

    config.json     the Config as given, plus hash, fingerprint and version
    metrics.csv     one row per round
    summary.json    status (running | finished | diverged | collapsed), final/best accuracy, timings
    checkpoint.pt   server state, client states, metric rows, next round (torch.save, weights_only load)

Every write goes to a temporary file in the same folder and is moved into place with ``os.replace``,
so an interrupted write never leaves a half-written file behind, and nothing here ever deletes a
finished result.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from fedlab.config import Config


TERMINAL_STATUSES = frozenset({"finished", "diverged", "collapsed"})
"""Statuses of a run that will not train further (a later ``run`` loads it instead of resuming)."""


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be used; the message says which file and what to do."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def atomic_torch_save(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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

    @property
    def final_accuracy(self) -> float:
        acc = self.metrics["test_acc"].dropna()
        return float(acc.iloc[-1]) if len(acc) else float("nan")

    @property
    def label(self) -> str:
        return self.config.name or self.config.algorithm

    def __repr__(self) -> str:
        return (f"RunResult({self.label}, status={self.status}, rounds={len(self.metrics)}, "
                f"final_acc={self.final_accuracy:.4f})")


class RunStore:
    """The files of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.config_path = self.dir / "config.json"
        self.metrics_path = self.dir / "metrics.csv"
        self.summary_path = self.dir / "summary.json"
        self.checkpoint_path = self.dir / "checkpoint.pt"

    @staticmethod
    def for_config(config: Config, fingerprint: str, root: Path) -> "RunStore":
        return RunStore(root / f"{config.algorithm}-{config.hash(fingerprint)}")

    # --- reading ---------------------------------------------------------------------------------
    def read_summary(self) -> dict[str, Any] | None:
        if not self.summary_path.exists():
            return None
        try:
            return json.loads(self.summary_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise CheckpointError(f"cannot read {self.summary_path}: {err}; "
                                  "move the run directory away to recompute it") from None

    def read_metrics(self) -> pd.DataFrame:
        return pd.read_csv(self.metrics_path)

    def load_checkpoint(self, expected_hash: str) -> dict[str, Any] | None:
        """The checkpoint dict, ``None`` if there is none; ``CheckpointError`` if it is unusable."""
        if not self.checkpoint_path.exists():
            return None
        try:
            ckpt = torch.load(self.checkpoint_path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 — any unpickling failure means "corrupted"
            raise CheckpointError(
                f"checkpoint {self.checkpoint_path} is corrupted or unreadable ({type(err).__name__}: {err}). "
                "Nothing was changed. Delete that file to restart the run from round 0, or restore it."
            ) from None
        required = {"next_round", "server", "clients", "rows", "config_hash"}
        if not isinstance(ckpt, dict) or not required <= set(ckpt):
            raise CheckpointError(f"checkpoint {self.checkpoint_path} lacks fields {sorted(required)}; "
                                  "it was not written by this fedlab. Delete it to restart the run.")
        if ckpt["config_hash"] != expected_hash:
            raise CheckpointError(f"checkpoint {self.checkpoint_path} belongs to config {ckpt['config_hash']}, "
                                  f"not {expected_hash}; refusing to mix runs.")
        return ckpt

    # --- writing ---------------------------------------------------------------------------------
    def write_config(self, config: Config, info: dict[str, Any]) -> None:
        atomic_write_json(self.config_path, {"config": config.to_dict(), **info})

    def write_progress(self, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        atomic_write_text(self.metrics_path, pd.DataFrame(rows).to_csv(index=False))
        atomic_write_json(self.summary_path, summary)

    def write_checkpoint(self, ckpt: dict[str, Any]) -> None:
        atomic_torch_save(self.checkpoint_path, ckpt)
