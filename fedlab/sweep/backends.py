"""Where the runs of a sweep execute: in this process (``sequential``), on a pool of local
processes (``local``, :mod:`fedlab.sweep.pool`) or on Ray (``ray``, the optional extra
``distributed``, imported only when chosen).

The results store is the only meeting point: every worker calls :func:`fedlab.run` on the config's
``runs_dir``, so a killed sweep on any backend is finished by running it again on any backend, and
every run computes at ``torch.set_num_threads(cpus_per_run)``, so all backends give the same bits.
The user-facing account (logs, Ctrl-C, clusters) is the book's guides ``sweeps.md`` and ``cluster.md``."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedlab.config import Config, ConfigError
from fedlab.results import RunResult
from fedlab.engine.hardware import usable_cores
from fedlab.tracking import get_logger
from fedlab.sweep.runs import LOG_DIR_NAME, RunFailure, _Tracker, execute_one, log_path, runs_root

__all__ = ["BACKENDS", "LOG_DIR_NAME", "MissingExtraError", "RunFailure", "SweepError",
           "SweepInterrupted", "execute", "log_path", "ray_init", "usable_cores"]

BACKENDS = ("local", "ray", "sequential")
RAY_EXTRA = "distributed"



class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C, raised once no run is left running (a ``KeyboardInterrupt``).

    ``results``: per config in sweep order, the :class:`RunResult` of a run that finished, else ``None``;
    ``stopped``: the configs that were running (they resume); ``not_started``: the others."""

    def __init__(self, message: str, results: list[RunResult | None], stopped: list[Config],
                 not_started: list[Config]) -> None:
        super().__init__(message)
        self.results, self.stopped, self.not_started = results, stopped, not_started

    def __str__(self) -> str:
        return str(self.args[0])


class SweepError(RuntimeError):
    """Some runs of a sweep failed (the others finished and are in the results store).

    ``results``: per config, the :class:`RunResult` or ``None`` (failed, or not started under
    ``fail_fast``); ``failures`` describes the failed runs, ``skipped`` the configs never started."""

    def __init__(self, message: str, results: list[RunResult | None], failures: list[RunFailure],
                 skipped: list[Config]) -> None:
        super().__init__(message)
        self.results, self.failures, self.skipped = results, failures, skipped


# --- backends ------------------------------------------------------------------------------------
def _run_sequential(todo: list[int], tracker: _Tracker, threads: int, fail_fast: bool) -> None:
    for k in todo:
        tracker.running(1)
        tracker.start(k)
        if tracker.record(execute_one(k, tracker.configs[k], threads, "sequential", tracker.logger)) and fail_fast:
            return
    tracker.running(0)


def _run_local(todo: list[int], tracker: _Tracker, threads: int, workers: int, fail_fast: bool) -> None:
    from fedlab.sweep.pool import run_pool

    run_pool(todo, tracker, threads, workers, fail_fast)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtraError(
            f"backend='ray' needs Ray, the optional extra {RAY_EXTRA!r}: pip install -e '.[{RAY_EXTRA}]' "
            "(or pip install ray==2.55.1); the 'local' backend needs nothing extra") from None
    return ray


RAY_START_ATTEMPTS = 3


def ray_init(ray: Any, **kwargs: Any) -> None:
    """``ray.init`` without its start-up chatter, tried ``RAY_START_ATTEMPTS`` times (a busy machine can
    miss the fixed 30 s a starting raylet has to register with its GCS)."""
    import logging
    import warnings

    options = {"log_to_driver": False, "logging_level": logging.WARNING, **kwargs}
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # about accelerator env vars of a future Ray
                ray.init(**options)
            return
        except Exception as err:  # Ray raises a bare Exception for this timeout
            if attempt == RAY_START_ATTEMPTS or "timed out during startup" not in str(err):
                raise
            ray.shutdown()


def _run_ray(todo: list[int], tracker: _Tracker, threads: int, cpus: int, gpus: float,
             address: str | None, fail_fast: bool) -> None:
    ray = _import_ray()
    owned = not ray.is_initialized()
    if owned:
        # Worker output goes to the per-run log files; Ray's own logs stay in its session folder.
        ray_init(ray, address=address)
    try:
        resources = ray.cluster_resources()
        for name, need in (("CPU", cpus), ("GPU", gpus)):
            if need > resources.get(name, 0):  # Ray would queue such a task forever
                what = "cpus_per_run (or client_threads)" if name == "CPU" else "gpus_per_run"
                raise ConfigError(f"{what} asks for {need:g} {name}s per run but the Ray cluster has "
                                  f"{resources.get(name, 0):g} in all")
        slots = int(resources["CPU"] // cpus)
        if gpus:
            slots = min(slots, int(resources["GPU"] // gpus))
        task = ray.remote(num_cpus=cpus, num_gpus=gpus)(execute_one)
        submitted = time.time()
        refs = {task.remote(k, tracker.configs[k], threads, "ray", tracker.logger): k for k in todo}
        pending = list(refs)
        try:
            _wait_ray(ray, refs, pending, tracker, slots, fail_fast)
        except BaseException:
            # Ctrl-C (or any error) here: no task may start or run on. force=True kills the worker of
            # a running task (its run resumes from its checkpoint); a queued one is dropped.
            for ref in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            # Ray decides when a task starts; a run's log file, written as it starts, tells which did
            for k in todo:
                with contextlib.suppress(OSError):
                    if log_path(tracker.configs[k]).stat().st_mtime >= submitted:
                        tracker.start(k)
            raise
    finally:
        if owned:
            ray.shutdown()


def _wait_ray(ray: Any, refs: dict[Any, int], pending: list[Any], tracker: _Tracker, slots: int,
              fail_fast: bool) -> None:
    """Collect the outcomes of the Ray tasks ``pending`` as they finish (``fail_fast``: cancel the rest)."""
    cancelled = False
    while pending:
        tracker.running(min(max(slots, 1), len(pending)))
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                failed = tracker.record(ray.get(ref))
            except ray.exceptions.TaskCancelledError:
                continue
            except ray.exceptions.RayError as err:  # the worker or its node died
                tracker.fail(refs[ref], f"{type(err).__name__}: {err}".splitlines()[0] +
                             "; run the sweep again to resume it from its checkpoint")
                failed = True
            if failed and fail_fast and not cancelled:
                cancelled = True
                for other in pending:  # a running task is interrupted; its checkpoint survives
                    ray.cancel(other)


# --- entry point ---------------------------------------------------------------------------------
def _check_resources(backend: str, cpus_per_run: Any, gpus_per_run: Any, configs: Sequence[Config],
                     max_workers: Any) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is invalid; allowed: {', '.join(BACKENDS)}")
    if isinstance(cpus_per_run, bool) or not isinstance(cpus_per_run, int) or cpus_per_run < 1:
        raise ConfigError(f"cpus_per_run={cpus_per_run!r} is invalid; allowed: an integer ≥ 1")
    if isinstance(gpus_per_run, bool) or not isinstance(gpus_per_run, (int, float)) or not 0 <= gpus_per_run:
        raise ConfigError(f"gpus_per_run={gpus_per_run!r} is invalid; allowed: a number ≥ 0 (fractions share a GPU)")
    if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)
                                    or max_workers < 1):
        raise ConfigError(f"max_workers={max_workers!r} is invalid; allowed: None (as many as fit) or an integer ≥ 1")
    if gpus_per_run and backend != "ray":
        raise ConfigError(f"gpus_per_run={gpus_per_run} places runs on GPUs, which only backend='ray' does; "
                          f"with backend={backend!r} set the device in the configs")
    if backend == "ray":
        on_gpu = sorted({c.device for c in configs if c.device != "cpu"})
        if on_gpu and not gpus_per_run:
            raise ConfigError(f"device {on_gpu[0]!r} needs gpus_per_run > 0 with backend='ray' (Ray hides the "
                              "GPUs from tasks that hold none)")
        if gpus_per_run and len(on_gpu) < len({c.device for c in configs}):
            raise ConfigError(f"gpus_per_run={gpus_per_run} but some configs have device='cpu'; set device "
                              "to 'cuda' (Ray shows each task only its own GPU) or gpus_per_run=0")


def _check_runs_dirs(configs: Sequence[Config]) -> None:
    """Refuse, naming it, a ``runs_dir`` whose log folder cannot be created, before any run starts and
    without creating anything."""
    for root in sorted({runs_root(c) for c in configs}):
        folder = root / LOG_DIR_NAME
        try:
            while not folder.exists() and folder.parent != folder:
                folder = folder.parent  # the nearest existing ancestor is where the first mkdir happens
            problem = (f"{folder} is not a folder" if not folder.is_dir() else
                       f"{folder} is not writable" if not os.access(folder, os.W_OK | os.X_OK) else None)
        except OSError as err:
            problem = f"{err.strerror or err} ({err.filename or folder})"
        if problem:
            raise ConfigError(f"runs_dir {root} cannot hold the sweep's runs: {problem}; choose a writable "
                              "folder with runs_dir= (python -m fedlab sweep: --runs-dir)")


def execute(configs: Sequence[Config], *, labels: Sequence[str] | None = None, backend: str = "local",
            address: str | None = None, cpus_per_run: int = 1, gpus_per_run: float = 0,
            max_workers: int | None = None, fail_fast: bool = False, progress: bool = True,
            logger: Any = None) -> list[RunResult]:
    """Run (or load, or resume) every config on ``backend``; the results in the order of ``configs``.

    Configs that name the same run run once and share the result; relative ``runs_dir`` are made
    absolute (Ray's workers have another working directory). A run's cores are
    ``max(cpus_per_run, config.client_threads)``; Ray retries a task whose worker died (3 times), each
    retry resuming from the checkpoint. Raises :class:`SweepError` after the other runs finished,
    :class:`SweepInterrupted` on Ctrl-C, :class:`MissingExtraError` without Ray, and ConfigError for bad
    resources or an unwritable ``runs_dir`` before anything runs. ``logger`` (:mod:`fedlab.tracking`) is
    handed every trained run's rounds (a logger object is pickled to each worker)."""
    _check_resources(backend, cpus_per_run, gpus_per_run, configs, max_workers)
    get_logger(logger)  # ConfigError naming logger before anything runs
    configs = [c.replace(runs_dir=str(Path(c.runs_dir).resolve()))
               if c.runs_dir and not Path(c.runs_dir).is_absolute() else c for c in configs]
    labels = list(labels) if labels is not None else [f"{c.algorithm} seed {c.seed}" for c in configs]
    if backend == "ray":
        _import_ray()  # fail before any run starts
    _check_runs_dirs(configs)
    first: dict[tuple[str, str], int] = {}
    alias = [first.setdefault((c.hash(), str(runs_root(c))), k) for k, c in enumerate(configs)]
    todo = sorted(set(alias))
    repeats = [(k, a) for k, a in enumerate(alias) if a != k]
    if repeats:
        k, a = repeats[0]
        print(f"note: {len(repeats)} of the {len(configs)} configs name a run an earlier one already names "
              f"(e.g. {labels[k]!r} is {labels[a]!r}: what differs does not change the run); each such run "
              "trains once and counts once (summary_table), not as independent evidence", file=sys.stderr)
    cores = max([cpus_per_run] + [c.client_threads for c in configs])
    workers = max_workers or max(1, usable_cores() // cores)
    workers = min(workers, len(todo))
    if backend == "local" and workers <= 1:
        backend = "sequential"  # nothing to run in parallel: skip the pool's start-up
    tracker = _Tracker(configs, labels, progress, logger=logger)
    interrupted = False
    try:
        if backend == "sequential":
            _run_sequential(todo, tracker, cpus_per_run, fail_fast)
        elif backend == "local":
            _run_local(todo, tracker, cpus_per_run, workers, fail_fast)
        else:
            _run_ray(todo, tracker, cpus_per_run, cores, float(gpus_per_run), address, fail_fast)
    except KeyboardInterrupt:
        interrupted = True  # every backend has stopped its runs by now; say what is left
    finally:
        tracker.close()
    results: list[RunResult | None] = []
    for k, a in enumerate(alias):
        res = tracker.results.get(a)
        # a repeat of an earlier config gets the shared result under its own (unhashed) fields
        results.append(dataclasses.replace(res, config=configs[k]) if res is not None and a != k else res)
    if interrupted:
        done = set(tracker.results) | set(tracker.failures)
        stopped = [configs[k] for k in todo if k in tracker.started and k not in done]
        not_started = [configs[k] for k in todo if k not in tracker.started]
        raise SweepInterrupted(
            f"the sweep stopped: {len(done)} of {len(todo)} runs done, {len(stopped)} stopped mid-run, "
            f"{len(not_started)} not started; run the sweep again to finish it (finished runs load, stopped "
            "ones resume from their checkpoints)", results, stopped, not_started) from None
    if not tracker.failures and all(r is not None for r in results):
        return results  # type: ignore[return-value]
    failures = [tracker.failures[k] for k in todo if k in tracker.failures]
    skipped = [configs[k] for k in todo if k not in tracker.failures and k not in tracker.results]
    lines = [f"{len(failures)} of {len(todo)} runs failed" + (f", {len(skipped)} not started (fail_fast)"
                                                              if skipped else "") + ":"]
    lines += [f"  {f.label}: {f.error}\n    log: {f.log_path}" for f in failures]
    lines.append("The other runs are saved; run the sweep again to retry (finished runs load from the store).")
    raise SweepError("\n".join(lines), results, failures, skipped)
