"""A sweep stops when told and starts from any entry point (fedlab.sweep.pool, backends).

Each test starts a real sweep in a subprocess: 3 learning rates × 2 seeds of a small digits CNN on
the local pool's 2 workers. The test hook ``FEDLAB_SWEEP_TEST_HOLD`` (tests/sweep_hooks) holds every run at the
start of its round index 2 (two rounds checkpointed) and marks it with a file holding the worker's pid, so the
signal lands while exactly two runs are mid-run and four are queued — no race with a timer. Then:

* Ctrl-C of ``python -m fedlab sweep`` (SIGINT to the whole process group, as a terminal sends it):
  exit status 130, one line on stderr, no traceback, no run started after the signal, no worker left;
* Ctrl-C of ``sweep()`` in a ``python -c`` script: :class:`SweepInterrupted` (a KeyboardInterrupt)
  naming the two stopped and four unstarted runs;
* ``kill -9`` of a sweep read from standard input: both workers gone within seconds;
* the same two signals to a Ray driver: its tasks' workers end with it;

and after each, running the sweep again finishes it with the bits of an uninterrupted sequential
sweep. A last test runs a local sweep from a script without a ``__main__`` guard.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import torch
from _load import window
from _ray_procs import raylet_log_tail, stop_cluster

from fedlab import Config
from fedlab.sweep import sweep

GRID = {"lr": [0.05, 0.1, 0.2]}
SEEDS = [0, 1]
HOLD_ROUND = 2
HOOKS = Path(__file__).parent / "sweep_hooks"
BASE = dict(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=4, local_steps=3, batch_size=16,
            lr=0.05, checkpoint_every=1)


CATCH = """
    try:
        SWEEP
    except SweepInterrupted as err:
        assert isinstance(err, KeyboardInterrupt)
        print("caught", sum(r is not None for r in err.results), len(err.stopped), len(err.not_started))
        sys.exit(130)
    """
"""The body of a script that reports how a sweep was interrupted (finished, stopped, not started)."""


def _base(runs_dir: Path) -> Config:
    return Config(**BASE, runs_dir=str(runs_dir))


def _script(runs_dir: Path, body: str) -> str:
    """A sweep script as a user would type it (no __main__ guard): the grid on the local pool."""
    return textwrap.dedent(f"""
        import sys
        from fedlab import Config
        from fedlab.sweep import SweepInterrupted, sweep
        base = Config(**{BASE!r}, runs_dir={str(runs_dir)!r})
        """) + textwrap.dedent(body).replace("SWEEP", f"sweep(base, {GRID!r}, {SEEDS!r}, max_workers=2, progress=False)")


def _env(hold: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("FEDLAB_SWEEP_TEST_HOLD", None)
    if hold is not None:  # every process of the sweep loads tests/sweep_hooks/sitecustomize.py, which holds the run
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
        env["FEDLAB_SWEEP_TEST_HOLD"] = f"{HOLD_ROUND}:{hold}"
    return env


def _takes_ctrl_c() -> None:
    """Run in the child before exec: SIGINT back to its default. A suite started as a background job of a
    shell inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so the child
    would sleep through every Ctrl-C below; a terminal's foreground job takes it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], cwd: Path, hold: Path | None, stdin: str | None = None) -> subprocess.Popen:
    # a session of its own: a signal to its process group is what a terminal's Ctrl-C sends
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=_env(hold), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_takes_ctrl_c)
    assert proc.stdin is not None
    if stdin is not None:
        proc.stdin.write(stdin)
    proc.stdin.close()
    proc.stdin = None  # so that communicate() does not flush the closed pipe
    return proc


def _held_workers(hold: Path, proc: subprocess.Popen, n: int = 2, why: Callable[[], str] = str) -> list[int]:
    """Wait until ``n`` runs are held mid-run; the pids of their workers (``why()``: more to show on failure)."""
    deadline = time.monotonic() + window(120)
    while time.monotonic() < deadline:
        marks = list(hold.glob("*.held"))
        pids = [int(text) for p in marks if (text := p.read_text())]
        if len(pids) == n:
            return pids
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before its runs were held: {proc.communicate()}\n{why()}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"{n} runs were not held within the window: {proc.communicate()}\n{why()}")


def _run_dirs(runs_dir: Path) -> set[str]:
    return {p.name for p in runs_dir.iterdir() if p.is_dir() and p.name != "sweep-logs"}


def _gone(pids: list[int], seconds: float) -> bool:
    """True once no process of ``pids`` runs any more (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + window(seconds)
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _assert_same(results, reference) -> None:
    assert len(results) == len(reference)
    for res, ref in zip(results, reference):
        assert res.config.hash() == ref.config.hash()
        assert res.status == ref.status
        assert torch.equal(res.theta, ref.theta), res.config
        cols = [c for c in ref.metrics.columns if c != "wall_seconds"]  # timings are the only difference
        assert res.metrics[cols].equals(ref.metrics[cols])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The grid trained without interruption, one run after another in this process."""
    return sweep(_base(tmp_path_factory.mktemp("reference")), GRID, SEEDS, backend="sequential", progress=False)


def test_ctrl_c_of_the_cli_stops_at_once_and_a_rerun_finishes_bit_identically(reference, tmp_path):
    runs, hold = tmp_path / "runs", tmp_path / "hold"
    hold.mkdir()
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"base: {dict(BASE, runs_dir=str(runs))!r}\ngrid: {GRID!r}\nseeds: {SEEDS!r}\n".replace("'", ""))
    proc = _start(["-m", "fedlab", "sweep", str(grid), "--max-workers", "2", "--no-progress"], tmp_path, hold)
    workers = _held_workers(hold, proc)
    assert sorted(c.pid for c in psutil.Process(proc.pid).children()) == sorted(workers)
    before = _run_dirs(runs)
    assert len(before) == 2

    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    out, err = proc.communicate(timeout=window(30))
    took = time.monotonic() - sent
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines() == [
        "interrupted: the sweep stopped: 0 of 6 runs done, 2 stopped mid-run, 4 not started; run the sweep again to finish "
        "it (finished runs load, stopped ones resume from their checkpoints)"], err
    assert "Traceback" not in out + err
    assert _gone(workers, 1)  # the parent reaped them before it exited
    time.sleep(1)
    assert _run_dirs(runs) == before, "a queued run started after the signal"
    print(f"Ctrl-C to exit: {took:.2f} s")

    # the same command finishes the sweep: two runs resume from round 2, four start
    again = _start(["-m", "fedlab", "sweep", str(grid), "--max-workers", "2", "--no-progress"], tmp_path, None)
    out, err = again.communicate(timeout=window(300))
    assert again.returncode == 0, (out, err)
    _assert_same(sweep(_base(runs), GRID, SEEDS, backend="sequential", progress=False), reference)


@pytest.mark.parametrize("backend, running", [("local", 2), ("sequential", 1)])
def test_ctrl_c_of_sweep_in_python_c_raises_sweep_interrupted(tmp_path, backend, running):
    runs, hold = tmp_path / "runs", tmp_path / "hold"
    hold.mkdir()
    script = _script(runs, CATCH).replace("max_workers=2", "max_workers=2, backend=" + repr(backend))
    proc = _start(["-c", script], tmp_path, hold)
    workers = _held_workers(hold, proc, n=running)
    assert backend == "local" or workers == [proc.pid]  # sequential: the run is in the caller's process
    before = _run_dirs(runs)
    os.kill(proc.pid, signal.SIGINT)  # only the caller, as a notebook's "interrupt kernel" does
    out, err = proc.communicate(timeout=window(30))
    assert proc.returncode == 130, (out, err)
    assert out.split() == ["caught", "0", str(running), str(6 - running)], (out, err)
    assert _gone(workers, 1)
    assert _run_dirs(runs) == before


def test_kill_9_of_a_sweep_from_stdin_takes_its_workers_down(reference, tmp_path):
    runs, hold = tmp_path / "runs", tmp_path / "hold"
    hold.mkdir()
    proc = _start(["-"], tmp_path, hold, stdin=_script(runs, "SWEEP\n"))
    workers = _held_workers(hold, proc)
    before = _run_dirs(runs)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=window(10))
    killed = time.monotonic()
    assert _gone(workers, 5), "a worker outlived its parent"
    print(f"workers gone {time.monotonic() - killed:.2f} s after kill -9 of the parent")
    time.sleep(1)
    assert _run_dirs(runs) == before

    # the same script from standard input finishes the sweep on the local pool
    body = "print(' '.join(r.status for r in SWEEP))\n"
    again = _start(["-"], tmp_path, None, stdin=_script(runs, body))
    out, err = again.communicate(timeout=window(300))
    assert again.returncode == 0, (out, err)
    assert len(out.split()) == 6
    logs = (runs / "sweep-logs").glob("*.log")
    assert sum(p.read_text().count("backend local") for p in logs) == 6 + 2  # 6 runs, 2 of them twice
    _assert_same(sweep(_base(runs), GRID, SEEDS, backend="sequential", progress=False), reference)


@pytest.mark.usefixtures("ray_turn")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_ray_tasks_end_with_their_driver(tmp_path, signum):
    pytest.importorskip("ray")
    runs, hold = tmp_path / "runs", tmp_path / "hold"
    hold.mkdir()
    # a lean cluster of 2 CPUs, started by the script itself as a user would; the sweep joins it. Its session
    # folder is this test's, so that the head a killed driver leaves behind is ended here, not left to load the
    # next test's start (short: Ray's socket paths live under it)
    temp = tempfile.mkdtemp(prefix="rays")
    body = textwrap.dedent(f"""
        import ray
        from fedlab.sweep.backends import ray_init
        ray_init(ray, num_cpus=2, num_gpus=0, include_dashboard=False, object_store_memory=100 * 2**20,
                  _temp_dir={temp!r})
        """) + textwrap.dedent(CATCH)
    try:
        proc = _start(["-"], tmp_path, hold, stdin=_script(runs, body).replace("max_workers=2", "backend='ray'"))
        workers = _held_workers(hold, proc, why=lambda: raylet_log_tail(temp))
        before = _run_dirs(runs)
        os.killpg(proc.pid, signum) if signum == signal.SIGINT else os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=window(60))
        assert _gone(workers, 10), "a Ray task outlived its driver"
        if signum == signal.SIGINT:
            assert proc.returncode == 130, (out, err)
            assert out.split() == ["caught", "0", "2", "4"], (out, err)
        time.sleep(1)
        assert _run_dirs(runs) == before
    finally:
        left = stop_cluster(temp)
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"Ray processes of this test's cluster survived SIGKILL: {left}"


def test_a_script_without_a_main_guard_runs_a_local_sweep(tmp_path):
    runs = tmp_path / "runs"
    script = tmp_path / "my_sweep.py"
    # two runs of two rounds: what matters is that the workers never re-run this script
    script.write_text(_script(runs, "print('statuses', *(r.status for r in SWEEP))\n")
                      .replace(f"{GRID!r}", "{'lr': [0.05, 0.1]}").replace(f"{SEEDS!r}", "[0]")
                      .replace("'rounds': 4", "'rounds': 2"))
    proc = _start([str(script)], tmp_path, None)
    out, err = proc.communicate(timeout=window(120))
    assert proc.returncode == 0, (out, err)
    assert out.count("statuses") == 1 and len(out.split()) == 3, out
    assert all("backend local" in p.read_text() for p in (runs / "sweep-logs").glob("*.log"))
