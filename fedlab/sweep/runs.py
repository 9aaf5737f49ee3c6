"""One run of a sweep, as every backend executes it (:func:`execute_one`), and the sweep's progress.

The body of every backend of :mod:`fedlab.sweep.backends` and of the local pool's workers
(:mod:`fedlab.sweep.pool`): it sits below both, so neither has to import the other's internals.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedlab.config import Config
from fedlab.results import RunResult

__all__ = ["LOG_DIR_NAME", "RunFailure", "executed_on", "execute_one", "log_path", "placement_path", "runs_root"]

LOG_DIR_NAME = "sweep-logs"

@dataclass(frozen=True)
class RunFailure:
    """A run that raised (or whose worker died): its config, the error, and the run's log file."""

    config: Config
    label: str
    error: str
    log_path: Path


@dataclass
class _Outcome:
    """What a worker sends back: the result, or the error of a failed run (workers never raise)."""

    key: int
    result: RunResult | None
    error: str | None
    log_path: str


def runs_root(config: Config) -> Path:
    """The folder ``config``'s run lives under (``runs_dir``, else :func:`fedlab._paths.default_runs_dir`)."""
    from fedlab._paths import default_runs_dir

    return Path(config.runs_dir) if config.runs_dir else default_runs_dir()


def log_path(config: Config) -> Path:
    """The log file of one run of a sweep (appended to by every attempt), named by :meth:`Config.hash` of
    the config alone; its ``== run key`` line names the run folder's key."""
    return runs_root(config) / LOG_DIR_NAME / f"{config.algorithm}-seed{config.seed}-{config.hash()}.log"


def placement_path(config: Config) -> Path:
    """The sidecar of one run's log: one JSON line per attempt saying where it executed."""
    return log_path(config).with_suffix(".where.jsonl")


def _placement(backend: str) -> dict[str, Any]:
    """Where this process is: host name, process id, backend and — on Ray — the node id of the raylet
    that runs the task (two nodes on one host share the host name, never the node id)."""
    where: dict[str, Any] = {"host": platform.node(), "pid": os.getpid(), "backend": backend, "ray_node_id": None}
    if backend == "ray":
        import ray

        where["ray_node_id"] = ray.get_runtime_context().get_node_id()
    return where


def executed_on(config: Config) -> list[dict[str, Any]]:
    """Where each attempt of ``config``'s run in a sweep executed, oldest first: dicts with ``started``
    (UTC, ISO 8601), ``host``, ``pid``, ``backend`` and ``ray_node_id`` (None off Ray), read from
    :func:`placement_path`. ``[]`` if no sweep has started the run (a run loaded from the store by a
    later sweep is an attempt too: it says where it was loaded). Not part of the run or its hash."""
    import json

    path = placement_path(config)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def execute_one(key: int, config: Config, threads: int, backend: str, logger: Any = None) -> _Outcome:
    """Train (or load, or resume) one config through :func:`fedlab.run`: the body of every backend.

    Runs at ``threads`` intra-op threads, sends the run's output to its log file and returns its
    error instead of raising, so one failing run never takes a pool or a sweep down with it.
    """
    from fedlab.engine import Simulation

    path = log_path(config)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # checked by execute() before the sweep; this is the folder vanishing since
        return _Outcome(key, None, f"cannot create the log folder {path.parent}: {err.strerror or err}", str(path))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        with open(path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            where = _placement(backend)
            node = f" (Ray node {where['ray_node_id']})" if where["ray_node_id"] else ""
            print(f"== {now} start: {config.algorithm} seed {config.seed} on "
                  f"{where['host']}{node} pid {where['pid']}, backend {backend}, {threads} intra-op thread(s)",
                  flush=True)
            _append_placement(config, {"started": now, **where})
            try:
                sim = Simulation.build(config)
                # the run key names the run folder; it covers the data and the split, which this log's
                # file name (Config.hash of the fields alone, known before anything is loaded) cannot
                print(f"== run key {sim.config_hash}: {sim.store.dir}", flush=True)
                result = sim.run(progress=False, logger=logger)
            except Exception as err:  # noqa: BLE001 — any failure of a run is reported, not raised
                traceback.print_exc(file=log)
                print(f"== failed after {time.perf_counter() - t0:.1f} s", flush=True)
                return _Outcome(key, None, f"{type(err).__name__}: {err}", str(path))
            print(f"== {result.status} after {time.perf_counter() - t0:.1f} s: {result.run_dir}", flush=True)
        return _Outcome(key, result, None, str(path))
    finally:
        torch.set_num_threads(previous)


def _append_placement(config: Config, where: dict[str, Any]) -> None:
    """One line per attempt, appended (one process works on a run at a time: the run directory's
    lock), so the sidecar keeps every node a resumed run passed through."""
    import json

    with open(placement_path(config), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(where, sort_keys=True) + "\n")


# --- progress ------------------------------------------------------------------------------------
@dataclass
class _Tracker:
    """Collects outcomes and keeps the sweep's one progress bar: done / running / failed, ETA."""

    configs: list[Config]
    labels: list[str]
    progress: bool
    results: dict[int, RunResult] = field(default_factory=dict)
    failures: dict[int, RunFailure] = field(default_factory=dict)
    started: set[int] = field(default_factory=set)
    bar: Any = None
    logger: Any = None  # what every run hands its rounds to (fedlab.tracking): a name or a picklable logger

    def __post_init__(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=len(self.configs), desc="sweep", unit="run", disable=not self.progress,
                        file=sys.stderr, dynamic_ncols=True, leave=False)
        self.running(0)

    def start(self, k: int) -> None:
        """Note that run ``k`` was handed to a process (what an interruption reports as stopped)."""
        self.started.add(k)

    def running(self, n: int) -> None:
        self.bar.set_postfix_str(f"running {n}, failed {len(self.failures)}")

    def record(self, outcome: _Outcome) -> bool:
        """Store one outcome; True if it is a failure."""
        k = outcome.key
        if outcome.result is not None:
            self.results[k] = outcome.result
        else:
            self.failures[k] = RunFailure(self.configs[k], self.labels[k], outcome.error or "unknown error",
                                          Path(outcome.log_path))
        self.bar.update(1)
        return outcome.result is None

    def fail(self, k: int, error: str) -> None:
        self.record(_Outcome(k, None, error, str(log_path(self.configs[k]))))

    def close(self) -> None:
        self.bar.close()
