"""A sweep on a real two-node Ray cluster: ``ray start --head`` and ``ray start --address=…`` on this
machine, the sweep joining it with ``address=``, as on a cluster of machines.

What a single ``ray.init()`` (``tests/test_sweep_backends.py``) cannot show: that the runs of one
sweep are placed on *different* raylets (each node advertises one CPU and its own custom resource,
``node_head`` / ``node_b``), that each run says where it executed (:func:`fedlab.sweep.executed_on`:
the Ray node id of every attempt), and that runs trained on either node give the sequential sweep's
bits. The nodes run as separate processes started by the ``ray`` command line, like on a cluster;
they share this machine's filesystem, which stands in for the shared ``runs_dir`` a real cluster needs.

Cleanup: ``ray stop`` would stop every Ray process of this user on the machine — including the
cluster of another test running beside this one — so the finalizer ends only this cluster's
processes, found by the temporary folder each of them names on its command line (its session
folder), by their process ids; it runs whatever happened, also when the start failed half-way.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from _load import window
from _ray_procs import one_ray_at_a_time, stop_cluster
from fedlab import Config
from fedlab.sweep import executed_on, sweep
from test_sweep_backends import _assert_same  # the bit-for-bit comparison of two sweeps

REPO = Path(__file__).resolve().parent.parent
GRID = {"algorithm": ["fedavg", "scaffold"]}
SEEDS = [0, 1]
RAY_START_ATTEMPTS = 3
NODES = ("node_head", "node_b")
"""The custom resource each node advertises: how a node id is told apart from the other."""


def _base(runs_dir: Path) -> Config:
    # long enough (a few seconds a run) that the second node's worker starts before the head has
    # worked through the queue alone; tiny otherwise
    return Config(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=6, local_steps=5,
                  batch_size=16, lr=0.1, partition="dirichlet", alpha=0.5, eval_every=3, checkpoint_every=3,
                  runs_dir=str(runs_dir))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cli: Path, temp: str, address: str, env: dict[str, str]) -> str | None:
    """``ray start`` the head at ``address`` (session under ``temp``), then the second node; None, or
    the failed command with its output."""
    common = ["--num-cpus=1", "--num-gpus=0", f"--object-store-memory={80 * 2**20}", "--disable-usage-stats",
              "--node-ip-address=127.0.0.1"]
    head = ["--head", f"--port={address.split(':')[1]}", f"--temp-dir={temp}", "--include-dashboard=false"]
    for resource, role in zip(NODES, (head, [f"--address={address}"])):
        cmd = [str(cli), "start", *role, *common, f"--resources={json.dumps({resource: 1})}"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=window(90))
        if done.returncode != 0:
            return f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return None


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """``address`` of a running two-node cluster (one CPU per node) and ``{node id: custom resource}``, started
    and used under the suite's Ray lock."""
    with one_ray_at_a_time(tmp_path_factory):
        yield from _two_nodes()


def _two_nodes():
    ray = pytest.importorskip("ray")
    cli = Path(sys.executable).with_name("ray")
    if not cli.exists():
        pytest.skip(f"the ray command line is not installed beside {sys.executable}")
    if ray.is_initialized():
        pytest.skip("this process is attached to another Ray session")
    if not sys.platform.startswith("linux"):
        pytest.skip("the finalizer finds the cluster's processes in /proc")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0",
           # the workers import fedlab from this checkout, as the test process does
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    temps: list[str] = []
    try:
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            temps.append(tempfile.mkdtemp(prefix="rayc"))  # short: Ray's socket paths live under it
            address = f"127.0.0.1:{_free_port()}"
            failure = _start(cli, temps[-1], address, env)
            if failure is None:
                break
            stop_cluster(temps[-1])
            # Ray gives a starting raylet a fixed 30 s to register (what ray_init retries too), and the
            # head's first node-info RPC a fixed deadline (it missed it at a load of 6 on 2 cores);
            # anything else is a real failure
            if attempt == RAY_START_ATTEMPTS or not any(
                    s in failure for s in ("timed out during startup", "RPC error: Deadline Exceeded")):
                pytest.fail(failure)
        from fedlab.sweep.backends import ray_init

        ray_init(ray, address=address)  # only to read the cluster's layout; the sweep attaches itself
        try:
            deadline = time.monotonic() + window(30)
            while True:
                alive = [n for n in ray.nodes() if n["Alive"]]
                if len(alive) == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            nodes = {n["NodeID"]: next(r for r in NODES if r in n["Resources"]) for n in alive}
        finally:
            ray.shutdown()
        assert sorted(nodes.values()) == sorted(NODES), f"nodes alive: {alive}"
        yield address, nodes
    finally:
        left = [pid for temp in temps for pid in stop_cluster(temp)]
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes of this test's cluster survived SIGKILL: {left}"


def test_sweep_runs_on_both_nodes_with_the_sequential_bits(two_nodes, tmp_path):
    address, nodes = two_nodes
    results = sweep(_base(tmp_path / "cluster"), GRID, SEEDS, backend="ray", address=address, progress=False)
    reference = sweep(_base(tmp_path / "sequential"), GRID, SEEDS, backend="sequential", progress=False)

    placed = {}
    for res in results:
        attempts = executed_on(res.config)
        assert len(attempts) == 1 and attempts[0]["backend"] == "ray", attempts
        assert attempts[0]["ray_node_id"] in nodes, (attempts, nodes)  # a node of *this* cluster
        placed[res.config.hash()] = nodes[attempts[0]["ray_node_id"]]
        assert Path(res.run_dir).parent == tmp_path / "cluster"  # trained there, not loaded from elsewhere
    assert sorted(set(placed.values())) == sorted(NODES), f"every run on one node: {placed}"
    assert all(a["ray_node_id"] is None for r in reference for a in executed_on(r.config))

    _assert_same(results, reference)
    counts = {r: sum(v == r for v in placed.values()) for r in NODES}
    print(f"runs per node: {counts}")
