"""Train many runs on a few worker processes, writing each one's record as it finishes.

The pool of every pre-registered study: the study runner (:func:`lab.study.runner.train`: the failure map and
the regime pilot's stages) and the rerun (:func:`lab.regime.rerun.train`), each
writing its records through :func:`write_run`. Each worker is a spawned process with one intra-op thread that trains
one :class:`fedlab.Config` at a time through :func:`fedlab.run` (resuming from its checkpoint under
``runs/``); the parent alone writes records, so a record is never half written by a worker being stopped.
Ctrl-C (or SIGTERM) ends the workers at once and keeps every record already written; a second Ctrl-C
raises. A run that fails is reported and not retried in this session.
"""
from __future__ import annotations

import concurrent.futures as cf
import datetime
import os
import platform
import signal
import sys
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TextIO, TypeVar

from fedlab.config import Config
from lab.repro import cpu_name

__all__ = ["Progress", "bar", "clock", "session", "train_many", "write_run"]

T = TypeVar("T")


def worker_init() -> None:
    """Each worker: one intra-op thread (the machine's cores are shared), Ctrl-C left to the parent."""
    os.environ["OMP_NUM_THREADS"] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    import lab  # noqa: F401  (sets $FEDLAB_RUNS to the repository's runs/ and the allocator thresholds)

    torch.set_num_threads(1)


def train_config(config: Config) -> dict[str, Any]:
    """Train (or resume, or load from ``runs/``) one run in a worker; what the parent needs for its record."""
    import fedlab

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = fedlab.run(config, progress=False)
    wall = time.perf_counter() - t0
    return {"config": res.config, "metrics": res.metrics, "status": res.status, "run_dir": str(res.run_dir),
            "summary": res.summary, "wall_seconds": wall, "load_at_start": load}


def write_run(result: Mapping[str, Any], meta: Mapping[str, Any],
              directory: Path | None = None) -> tuple[Any, Path, dict[str, Any]]:
    """Write the record of a run :func:`train_config` finished to ``directory`` (default ``figures/records``):
    ``meta`` (what the study planned it as) plus what it cost where it ran — wall seconds, load at start, host,
    CPU model (a run trained again matches its record's last bits only on the same kind of CPU), cores, when it
    finished — since the next plan's budget is estimated from measured seconds, not guessed.
    Returns the run as a :class:`fedlab.results.RunResult`, the record's path and the meta written."""
    from fedlab.results import RunResult
    from lab.evidence.records import write_record

    full = {**meta, "wall_seconds": float(result["wall_seconds"]), "load_at_start": float(result["load_at_start"]),
            "host": platform.node(), "cpu": cpu_name(), "cpu_count": os.cpu_count(),
            "finished_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    res = RunResult(result["config"], result["metrics"], None, result["status"], Path(result["run_dir"]),
                    result["summary"], None)
    return res, write_record(res, directory, meta=full), full


def clock(seconds: float) -> str:
    if seconds != seconds:  # NaN: nothing to estimate from
        return "?"
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def bar(done: int, total: int, width: int = 24) -> str:
    filled = 0 if total == 0 else int(width * done / total)
    return "#" * filled + "." * (width - filled)


@dataclass
class Progress(Generic[T]):
    """What :func:`train_many` asks of its caller after every finished run: the runs still to train (in
    order), how many are done and planned in all, and the expected seconds left (``running``: the runs in
    flight, counted whole)."""

    todo: Callable[[], Sequence[T]]
    done_total: Callable[[], tuple[int, int]]
    eta: Callable[[Sequence[T]], float]


def train_many(progress: Progress[T], *, config_of: Callable[[T], Config], key_of: Callable[[T], Hashable],
               label_of: Callable[[T], str], write: Callable[[T, dict[str, Any]], str], workers: int = 2,
               out: TextIO | None = None, max_runs: int | None = None) -> tuple[int, int, bool]:
    """Train ``progress.todo()`` on ``workers`` processes; ``write(run, result)`` records each finished run
    (in this process) and returns a short summary for the progress line. ``todo`` is asked again after
    every record, so a run it could not plan before (one that waits for others) starts as soon as it can.
    Returns (records written, runs failed, stopped by a signal)."""
    out = sys.stdout if out is None else out
    stop = {"asked": False}

    def ask_stop(signum: int, frame: Any) -> None:
        if stop["asked"]:
            raise KeyboardInterrupt
        stop["asked"] = True
        print(f"\nstopping ({signal.Signals(signum).name}): workers are ended, finished records kept", file=out,
              flush=True)

    old = {s: signal.signal(s, ask_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    import multiprocessing

    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=worker_init)
    running: dict[cf.Future[dict[str, Any]], T] = {}
    failed: set[Hashable] = set()
    written = 0
    t_start = time.perf_counter()
    todo = list(progress.todo())
    try:
        while not stop["asked"]:
            busy = {key_of(r) for r in running.values()}
            queue = [r for r in todo if key_of(r) not in busy and key_of(r) not in failed]
            while len(running) < workers and queue and (max_runs is None or written + len(running) < max_runs):
                run = queue.pop(0)
                running[pool.submit(train_config, config_of(run))] = run
                print(f"start  {label_of(run)}", file=out, flush=True)
            if not running:
                break
            # a short wait, so that a stop request is seen within a second
            finished, _ = cf.wait(list(running), timeout=1.0, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                run = running.pop(fut)
                try:
                    summary = write(run, fut.result())
                except Exception as err:  # one failed run must not stop the others
                    failed.add(key_of(run))
                    print(f"FAILED {label_of(run)}: {type(err).__name__}: {err}", file=out, flush=True)
                    continue
                written += 1
                todo = list(progress.todo())
                n_done, total = progress.done_total()
                eta = progress.eta(list(running.values()))
                print(f"[{bar(n_done, total)}] {n_done:3d}/{total} done  {label_of(run)}: {summary} | elapsed "
                      f"{clock(time.perf_counter() - t_start)} | ETA {clock(eta)}", file=out, flush=True)
    finally:
        if stop["asked"] or sys.exc_info()[0] is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):  # our own workers, by handle
                if proc.is_alive():
                    proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        for s, handler in old.items():
            signal.signal(s, handler)
    return written, len(failed), stop["asked"]


def session(name: str, progress: Progress[T], *, note: str = "", out: TextIO | None = None,
            **pool: Any) -> tuple[int, int, bool]:
    """One training session of a study: what is on record and what trains now (``note``: what waits), the runs
    (:func:`train_many` with ``pool``'s arguments), and what the session wrote — the same lines for every
    study, so that a log says alike how far any study is."""
    out = sys.stdout if out is None else out
    done, total = progress.done_total()
    print(f"{name}: {done}/{total} recorded, {len(progress.todo())} to train now{note} (ETA {clock(progress.eta([]))})",
          file=out, flush=True)
    written, failed, stopped = train_many(progress, out=out, **pool)
    done, total = progress.done_total()
    print(f"{name}: {written} record(s) written this session, {done}/{total} in all"
          + (f", {failed} failed" if failed else "") + (" (stopped)" if stopped else ""), file=out, flush=True)
    return written, failed, stopped
