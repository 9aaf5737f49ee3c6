"""The local backend's worker processes: fedlab's own loop in fresh interpreters, one run at a time.

Not ``ProcessPoolExecutor`` with ``spawn``: its workers re-import the caller's ``__main__``, which
restarts an unguarded script's sweep in every worker and kills every worker of a script read from
standard input. These run ``python -c "from fedlab.sweep.pool import worker_main; worker_main()"``,
import fedlab only, and receive everything with the run (a Config). How the pool stops: a run goes
only to an idle worker, so nothing queued can start after an interruption; then busy workers are
killed (their runs resume from checkpoints) and idle ones told to exit. Workers ignore SIGINT (the
caller decides) and die with their parent (``PR_SET_PDEATHSIG`` on Linux, else a watchdog thread),
so ``kill -9`` of the caller leaves none training. Pickles travel on each worker's stdin/stdout,
moved to private descriptors first so that stray native prints cannot corrupt a message."""
from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedlab.sweep.runs import _Tracker

__all__ = ["ORPHAN_EXIT", "run_pool", "worker_main"]

_PARENT_ENV = "FEDLAB_SWEEP_PARENT"
_BOOT = "from fedlab.sweep.pool import worker_main; worker_main()"
ORPHAN_EXIT = 75
"""Exit status of a worker whose watchdog found its parent gone (on Linux the kernel kills it first)."""
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_WATCH_SECONDS = 0.5
_EXIT_WAIT_SECONDS = 10.0  # how long an idle worker told to exit gets before it is killed


# --- the worker side -----------------------------------------------------------------------------
def _die_with_parent(parent: int) -> None:
    """Make this process end when ``parent`` does, however the parent ends (``kill -9`` included)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before the prctl took effect (then the kernel never signals us), and
    # other systems have no prctl: the watchdog covers both.
    if os.getppid() != parent:
        os._exit(ORPHAN_EXIT)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_SECONDS)
        os._exit(ORPHAN_EXIT)

    threading.Thread(target=watch, name="fedlab-sweep-watchdog", daemon=True).start()


def worker_main() -> None:
    """The loop of one worker: read a task, run it through :func:`~fedlab.sweep.runs.execute_one`,
    write its outcome; exit on ``None`` or when the parent closes the channel."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what a Ctrl-C stops
    _die_with_parent(int(os.environ[_PARENT_ENV]))
    tasks = os.fdopen(os.dup(0), "rb")
    outcomes = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # native prints now go to stderr, never into the channel

    from fedlab.sweep.runs import execute_one

    while True:
        try:
            task = pickle.load(tasks)
        except EOFError:
            return
        if task is None:
            return
        key, config, threads, logger = task
        pickle.dump(execute_one(key, config, threads, "local", logger), outcomes, protocol=pickle.HIGHEST_PROTOCOL)
        outcomes.flush()


# --- the parent side -----------------------------------------------------------------------------
@dataclass(eq=False)  # compared and hashed by identity: workers are dict keys
class _Worker:
    """One worker process and the two ends of its channel."""

    proc: subprocess.Popen
    tasks: IO[bytes]
    outcomes: IO[bytes]

    def fileno(self) -> int:
        """The descriptor ``select`` waits on: readable when an outcome arrives (or the worker died)."""
        return self.outcomes.fileno()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


def _child_env() -> dict[str, str]:
    """The worker's environment: the caller's, its ``sys.path`` (so fedlab imports from where the
    caller imported it, a notebook's ``sys.path.insert`` included) and the parent's pid."""
    env = dict(os.environ)
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env[_PARENT_ENV] = str(os.getpid())
    return env


def _start_worker(env: dict[str, str]) -> _Worker:
    # -u: unbuffered binary streams, so an outcome leaves the worker as soon as it is flushed
    proc = subprocess.Popen([sys.executable, "-u", "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, close_fds=True)
    assert proc.stdin is not None and proc.stdout is not None
    return _Worker(proc, proc.stdin, proc.stdout)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Ignore a second Ctrl-C while the pool is being taken down (only the main thread owns signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _take_down(idle: list[_Worker], busy: dict[_Worker, int]) -> None:
    """Kill the busy workers (their runs resume from checkpoints), let the idle ones exit, reap all."""
    with _sigint_held():
        for w in busy:
            w.kill()
        for w in idle:
            with contextlib.suppress(OSError, ValueError):
                pickle.dump(None, w.tasks)
                w.tasks.flush()
        for w in [*busy, *idle]:
            for stream in (w.tasks, w.outcomes):
                with contextlib.suppress(OSError):
                    stream.close()
            try:
                w.proc.wait(timeout=_EXIT_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                w.kill()
                w.proc.wait()


def run_pool(todo: list[int], tracker: _Tracker, threads: int, workers: int, fail_fast: bool) -> None:
    """Run the configs ``todo`` (indices into ``tracker.configs``) on ``workers`` processes. A dying worker
    fails only its run (and is replaced); ``fail_fast`` hands out nothing after a failure; any exception
    in the caller takes the pool down before it propagates."""
    env = _child_env()
    queue = deque(todo)
    idle: list[_Worker] = []
    busy: dict[_Worker, int] = {}
    stop = False
    try:
        while queue or busy:
            while queue and not stop and len(busy) < workers:
                w = idle[-1] if idle else _start_worker(env)
                k = queue[0]
                # registered as busy before the task is sent, so an interruption at any point here
                # kills a worker that may have received it; nothing can run that the pool lost track of
                busy[w] = k
                if idle and idle[-1] is w:
                    idle.pop()
                queue.popleft()
                tracker.start(k)
                try:
                    pickle.dump((k, tracker.configs[k], threads, tracker.logger), w.tasks,
                                protocol=pickle.HIGHEST_PROTOCOL)
                    w.tasks.flush()
                except (BrokenPipeError, OSError):
                    pass  # it died before reading: the outcome read below sees end-of-file and says so
            if not busy:
                break
            tracker.running(len(busy))
            ready, _, _ = select.select(list(busy), [], [])
            for w in ready:
                k = busy[w]  # stays busy (killed if interrupted) until its outcome is read whole
                try:
                    outcome: Any = pickle.load(w.outcomes)
                except (EOFError, OSError, pickle.UnpicklingError):
                    del busy[w]
                    code = w.proc.wait()
                    tracker.fail(k, f"the worker process died (pid {w.proc.pid}, exit status {code}: killed or "
                                    "crashed) while training this run; it resumes from its checkpoint when "
                                    "the sweep runs again")
                    failed = True
                    _take_down([], {w: k})  # reap it; the next run gets a fresh worker
                else:
                    del busy[w]
                    idle.append(w)
                    failed = tracker.record(outcome)
                if failed and fail_fast:
                    stop = True  # runs in other workers finish and are saved; queued ones never start
    finally:
        _take_down(idle, busy)
