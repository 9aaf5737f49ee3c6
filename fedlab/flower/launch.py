"""``flwr run`` on a SuperLink this process starts and stops: a failed run exits non-zero, no daemon stays.

``flwr run . local`` (Flower 1.42) starts a SuperLink in the background when none answers on
127.0.0.1:39091 and leaves it running after it returns, and it returns 0 once the run is *submitted*,
``--stream`` or not, whatever the run then does: a fedlab run that failed looked like a success, and
each first try left a daemon behind (the book's guide ``flower.md`` says how to stop one).
:func:`run_local` instead starts ``flower-superlink --simulation`` itself on a free port with a Flower
home of its own (a temporary folder: ``~/.flwr`` is neither read nor written), submits the App with
``flwr run --stream`` (the run's log streams here until the run ends), reads the run's final status with
``flwr ls``, and stops the SuperLink and every process under it however the run ended, Ctrl-C included.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from flwr.common.config import parse_config_args

from fedlab.config import Config, ConfigError
from fedlab.flower.protocol import config_from_run_config

DEPLOY_APP = Path(__file__).resolve().parent / "deploy"
"""fedlab's Flower App (its pyproject.toml names fedlab's ServerApp and ClientApp)."""
STARTUP_SECONDS = 120.0
"""How long the SuperLink may take to answer (it imports Flower's stack; slower on a loaded machine)."""
GRACE_SECONDS = 10.0
"""How long the SuperLink and the processes under it get to end on SIGTERM before SIGKILL."""


@dataclass
class LocalRun:
    """How a :func:`run_local` ended: Flower's final status of the run (``finished:completed`` is success)."""

    status: str
    details: str = ""
    run_id: str | None = None
    processes: list[int] = field(default_factory=list)  # the SuperLink and what ran under it: all stopped

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "finished:completed" else 1


def run_local(app: Path = DEPLOY_APP, run_config: str | None = None, num_supernodes: int | None = None) -> LocalRun:
    """Run the Flower App ``app`` in Flower's simulation runtime on a private SuperLink (see the module
    docstring); ``run_config`` as ``flwr run --run-config`` takes it ("rounds=3 algorithm='fedsam'"),
    ``num_supernodes`` by default the run's ``n_clients``. The fedlab Config the run will read is built
    first: a ConfigError names a bad value before anything starts."""
    config = app_config(app, run_config)
    bin_dir = Path(sys.executable).parent  # flwr and flower-superlink come with the [flower] extra, here
    with tempfile.TemporaryDirectory(prefix="fedlab-flwr-") as home:
        port = _free_port()
        Path(home, "config.toml").write_text(f'[superlink]\ndefault = "fedlab"\n\n[superlink.fedlab]\n'
                                             f'address = "127.0.0.1:{port}"\ninsecure = true\n')
        env = {**os.environ, "FLWR_HOME": home, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        with open(Path(home, "superlink.log"), "wb") as log:
            superlink = subprocess.Popen(  # no app venv: the apps are fedlab's, installed in this one
                [bin_dir / "flower-superlink", "--insecure", "--simulation", "--host", "127.0.0.1", "--port",
                 str(port), "--disable-runtime-dependency-installation"], env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
            run = LocalRun("not started", processes=[superlink.pid])
            try:
                _wait_for(port, superlink, Path(home, "superlink.log"))
                _submit(run, [bin_dir / "flwr", "run", str(app), "fedlab", "--stream"]
                        + (["--run-config", run_config] if run_config else [])
                        + ["--federation-config", f"num-supernodes={num_supernodes or config.n_clients}"], env)
                if run.run_id is not None:
                    run.status, run.details = _final_status(bin_dir, env, run.run_id)
            finally:
                run.processes += _stop(superlink)
    return run


def app_config(app: Path, run_config: str | None) -> Config:
    """The fedlab Config a run of Flower App ``app`` reads: its ``[tool.flwr.app.config]`` with ``run_config``'s
    overrides (parsed as ``flwr run`` parses them); ConfigError naming what is wrong."""
    try:
        values = tomllib.loads(Path(app, "pyproject.toml").read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]
        values = {**values, **parse_config_args([run_config] if run_config else None)}
    except Exception as err:  # noqa: BLE001 — a missing file, bad TOML, a malformed override (click's own error)
        raise ConfigError(f"app {app} with --run-config {run_config!r}: {type(err).__name__}: {err}") from None
    return config_from_run_config(values)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, superlink: subprocess.Popen, log: Path) -> None:
    """Until the SuperLink accepts connections; RuntimeError with its log's tail if it exits or takes too long."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while superlink.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    raise RuntimeError(f"flower-superlink did not start within {STARTUP_SECONDS:g} s "
                       f"(exit code {superlink.poll()}): {' | '.join(tail)}")


def _submit(run: LocalRun, command: list, env: dict[str, str]) -> None:
    """``flwr run --stream``: its output echoed here as it comes, the run id read from it."""
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as flwr:
        for line in flwr.stdout or ():
            print(line, end="", flush=True)
            found = re.search(r"started run (\d+)", line)
            run.run_id = found.group(1) if found and run.run_id is None else run.run_id
    if run.run_id is None:
        run.status = f"not started (flwr run exited with {flwr.returncode})"


def _final_status(bin_dir: Path, env: dict[str, str], run_id: str) -> tuple[str, str]:
    """Flower's status of the run once it is finished (``flwr ls --format json``), and its details."""
    row: dict = {}
    for _ in range(int(STARTUP_SECONDS)):  # the stream ends with the run; its status may lag a moment
        out = subprocess.run([bin_dir / "flwr", "ls", "fedlab", "--run-id", run_id, "--format", "json"], env=env,
                             capture_output=True, text=True).stdout
        with contextlib.suppress(ValueError, KeyError, IndexError):
            row = json.loads(out)["runs"][0]
        if row.get("status", "").startswith("finished"):
            break
        time.sleep(1.0)
    return row.get("status", "unknown"), row.get("status-details", "")


def _stop(superlink: subprocess.Popen) -> list[int]:
    """SIGTERM the SuperLink and every process under it (SuperExec, the simulation, Ray), SIGKILL what is
    left after :data:`GRACE_SECONDS`; the ids of those under it. They are found before the SuperLink
    ends (then they are orphans no tree leads to), through Linux's /proc (elsewhere: the SuperLink's own)."""
    family = _descendants(superlink.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if superlink.poll() is None:
            superlink.send_signal(sig)
        for pid in filter(alive, family):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            superlink.wait(timeout=GRACE_SECONDS)
        deadline = time.monotonic() + GRACE_SECONDS
        while any(alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.2)
    return family


def _descendants(root: int) -> list[int]:
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier}
        found += sorted(frontier)
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
