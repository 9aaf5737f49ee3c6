"""The processes of one Ray cluster that a test started, found and ended by its session folder.

``ray stop`` would end every Ray process of this user on the machine — the cluster of another test running
beside one included — and a driver killed with SIGKILL leaves its head (GCS, raylet, agents) behind for a
minute or more, loading the machine while the next test's raylet has a fixed 30 s to register. So a test
that starts a cluster gives it a temporary folder of its own (every process of the cluster names it on its
command line) and ends exactly those processes afterwards, whatever happened.
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from _load import window


def cluster_pids(temp: str) -> list[int]:
    """Processes of the cluster under ``temp``, this process excluded: those whose command line names it (every
    process Ray starts passes its session folder below it) or that hold a file open below it (Ray's agents
    retitle themselves, ``ray::DashboardAgent``, and their command line then names nothing; their logs stay open)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp in cmdline or _holds_open_below(proc, temp):
            pids.append(int(proc.name))
    return pids


def _holds_open_below(proc: Path, temp: str) -> bool:
    try:
        for fd in (proc / "fd").iterdir():
            try:
                if os.readlink(fd).startswith(temp):
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def stop_cluster(temp: str) -> list[int]:
    """SIGTERM, then SIGKILL after a grace period, to the processes of the cluster under ``temp``; the ones
    still alive after both (an empty list when the cluster is gone)."""
    pids = cluster_pids(temp)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + window(5)
        while time.monotonic() < deadline and cluster_pids(temp):
            time.sleep(0.2)
        pids = cluster_pids(temp)
        if not pids:
            break
    return pids


def raylet_log_tail(temp: str, chars: int = 2000) -> str:
    """The end of the raylet's and GCS's logs of the newest session under ``temp``: why a start timed out."""
    logs = Path(temp) / "session_latest" / "logs"
    parts = []
    for name in ("raylet.err", "raylet.out", "gcs_server.err", "gcs_server.out"):
        path = logs / name
        if path.is_file():
            parts.append(f"--- {name}\n{path.read_text(errors='replace')[-chars:]}")
    return "\n".join(parts) or f"(no raylet or GCS log under {logs})"


@contextmanager
def one_ray_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the suite's Ray lock (a real file lock, shared by the pytest-xdist workers of one session) while a
    test starts and uses a Ray cluster: two clusters starting at once on 2 cores miss Ray's fixed start-up
    deadline. pytest-xdist's ``xdist_group`` cannot say this here: under pytest 9 its ``--dist loadgroup``
    no longer renames the items it groups, and the grouped tests ran on both workers at once."""
    from filelock import FileLock

    # the workers' base folders (popen-gw0, ...) share their parent, the session's folder
    lock = FileLock(str(tmp_path_factory.getbasetemp().parent / "fedlab-ray.lock"))
    with lock.acquire(timeout=window(900)):
        yield
