"""Sweep backends: a local process pool and Ray give the sequential sweep's bits; a killed worker's
sweep finishes on restart without retraining finished runs; failures are reported; Ray is optional.

Ray starts for each test that asks for it (``ray_cluster``), lean (2 CPUs, no dashboard, logs in a temporary
folder), under the suite's Ray lock (``ray_turn``): never beside another test's cluster, and whatever it
started is ended afterwards.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from _ray_procs import stop_cluster
from fedlab import Config
from fedlab.sweep import MissingExtraError, SweepError, executed_on, expand_grid, sweep

GRID = {"algorithm": ["fedavg", "scaffold"], "lr": [0.05, 0.1]}
SEEDS = [0, 1]
HOOKS = Path(__file__).parent / "sweep_hooks"  # a sitecustomize that arms the crash in worker processes


def _base(runs_dir: Path, **overrides) -> Config:
    values = dict(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=4, local_steps=4,
                  batch_size=16, lr=0.1, partition="dirichlet", alpha=0.5, eval_every=2, checkpoint_every=2,
                  runs_dir=str(runs_dir))
    values.update(overrides)
    return Config(**values)


def _assert_same(results, reference):
    assert len(results) == len(reference)
    for res, ref in zip(results, reference):
        assert res.config.hash() == ref.config.hash()
        assert res.status == ref.status == "finished"
        assert torch.equal(res.theta, ref.theta), res.config.algorithm
        cols = [c for c in ref.metrics.columns if c != "wall_seconds"]  # timings are the only difference
        assert res.metrics[cols].equals(ref.metrics[cols])


def _files(run_dir: Path) -> dict[str, int]:
    """Modification times of a run's result files (a lock file may come and go; it is not a result)."""
    names = ("config.json", "metrics.csv", "summary.json", "checkpoint.pt")
    return {n: (run_dir / n).stat().st_mtime_ns for n in names if (run_dir / n).exists()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The 2×2 grid × 2 seeds, trained one after another in this process."""
    return sweep(_base(tmp_path_factory.mktemp("sequential")), GRID, SEEDS, backend="sequential", progress=False)


@pytest.fixture
def ray_cluster(ray_turn):
    ray = pytest.importorskip("ray")
    from fedlab.sweep.backends import ray_init

    temp = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths live under it
    options = dict(num_cpus=2, num_gpus=0, include_dashboard=False, object_store_memory=100 * 2**20, _temp_dir=temp)
    try:
        ray_init(ray, **options)  # retries a start-up that a loaded machine made time out
        yield ray
    finally:
        ray.shutdown()
        left = stop_cluster(temp)  # what a failed start left behind, too
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"Ray processes of this test's cluster survived SIGKILL: {left}"


def test_sequential_sweep_writes_one_log_per_run(reference):
    logs = Path(reference[0].config.runs_dir) / "sweep-logs"
    texts = [p.read_text() for p in sorted(logs.glob("*.log"))]
    assert len(texts) == len(reference) == 8
    assert all("start:" in t and "== finished after" in t for t in texts)


def test_local_pool_matches_sequential_bit_for_bit(reference, tmp_path):
    results = sweep(_base(tmp_path), GRID, SEEDS, backend="local", max_workers=2, progress=False)
    assert all(Path(r.run_dir).parent == tmp_path for r in results)  # trained here, not loaded
    _assert_same(results, reference)
    logs = (tmp_path / "sweep-logs").glob("*.log")
    assert sum("backend local" in p.read_text() for p in logs) == 8  # ran in the pool's workers
    # where each run executed: one attempt each, in a worker process, never in this one
    places = [executed_on(r.config) for r in results]
    assert all(len(p) == 1 and p[0]["backend"] == "local" and p[0]["ray_node_id"] is None for p in places)
    assert os.getpid() not in {p[0]["pid"] for p in places}
    assert {p[0]["host"] for p in places} == {platform.node()}


def test_executed_on_lists_every_attempt_of_a_run(reference):
    import fedlab

    first = [executed_on(r.config) for r in reference]
    assert all(len(p) >= 1 and p[0]["backend"] == "sequential" and p[0]["pid"] == os.getpid() for p in first)
    fedlab.sweep.sweep(reference[0].config, {}, [reference[0].config.seed], backend="sequential", progress=False)
    again = executed_on(reference[0].config)  # loaded from the store this time: still an attempt, appended
    assert again[:len(first[0])] == first[0] and len(again) == len(first[0]) + 1
    assert executed_on(reference[0].config.replace(seed=99)) == []  # never started


def test_ray_matches_sequential_and_its_store_loads_anywhere(reference, ray_cluster, tmp_path):
    results = sweep(_base(tmp_path), GRID, SEEDS, backend="ray", progress=False)
    assert all(Path(r.run_dir).parent == tmp_path for r in results)
    _assert_same(results, reference)
    assert all("backend ray" in p.read_text() for p in (tmp_path / "sweep-logs").glob("*.log"))
    # the same store under another backend: every run loads, none is touched
    before = {r.run_dir: _files(Path(r.run_dir)) for r in results}
    again = sweep(_base(tmp_path), GRID, SEEDS, backend="sequential", progress=False)
    _assert_same(again, reference)
    assert {r.run_dir: _files(Path(r.run_dir)) for r in again} == before


def test_killed_worker_then_restart_finishes_without_retraining(reference, tmp_path, monkeypatch):
    base = _base(tmp_path)
    configs = expand_grid(base, GRID, SEEDS)
    victim = configs[-1]  # the last config: by the time it starts at least 6 others have finished
    # its worker dies at the start of round index 3; the checkpoint of rounds 1–2 survives
    # the pool's workers start on this process's sys.path: they load tests/sweep_hooks/sitecustomize.py (the library
    # has no hook), which arms the crash
    monkeypatch.syspath_prepend(str(HOOKS))
    monkeypatch.setenv("FEDLAB_SWEEP_TEST_CRASH", f"{victim.hash()}:3")
    with pytest.raises(SweepError) as info:
        sweep(base, GRID, SEEDS, backend="local", max_workers=2, progress=False)
    err = info.value
    assert err.results[-1] is None
    assert any(f.config.hash() == victim.hash() and "worker process died" in f.error for f in err.failures)
    finished = [r for r in err.results if r is not None]
    assert len(finished) >= 5
    before = {r.run_dir: _files(Path(r.run_dir)) for r in finished}
    victim_dir = next(p for p in tmp_path.iterdir() if (p / "config.json").exists() and _is_run_of(p, victim))
    ckpt = torch.load(victim_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["next_round"] == 2
    saved_walls = [row["wall_seconds"] for row in ckpt["rows"]]

    monkeypatch.delenv("FEDLAB_SWEEP_TEST_CRASH")
    results = sweep(base, GRID, SEEDS, backend="local", max_workers=2, progress=False)
    _assert_same(results, reference)
    # no work repeated: finished runs untouched, the killed one resumed from its checkpoint
    assert {d: _files(Path(d)) for d in before} == before
    resumed = results[-1]
    assert resumed.run_dir == victim_dir
    assert resumed.metrics["wall_seconds"].tolist()[:2] == saved_walls


def _is_run_of(run_dir: Path, config: Config) -> bool:
    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    return Config.from_dict(cfg).hash() == config.hash()


def test_a_failing_run_is_reported_while_the_others_finish(tmp_path):
    base = _base(tmp_path, partition="pathological", alpha=None, classes_per_client=2, rounds=2)
    with pytest.raises(SweepError) as info:  # digits has 10 classes: c = 11 fails when it partitions
        sweep(base, {"classes_per_client": [11, 2]}, SEEDS, backend="local", max_workers=2, progress=False)
    err = info.value
    assert [r is None for r in err.results] == [True, True, False, False]
    # completed runs (two rounds of a 2-class pathological split may end at chance: "collapsed")
    assert all(r.status in ("finished", "collapsed") for r in err.results[2:])
    assert [f.label for f in err.failures] == ["classes_per_client=11, seed=0", "classes_per_client=11, seed=1"]
    for f in err.failures:
        assert "exceeds the number of classes" in f.error
        assert "Traceback" in f.log_path.read_text()
        assert str(f.log_path) in str(err)


def test_fail_fast_starts_nothing_after_the_first_failure(tmp_path):
    base = _base(tmp_path, partition="pathological", alpha=None, classes_per_client=2, rounds=2)
    with pytest.raises(SweepError, match="1 not started") as info:
        sweep(base, {"classes_per_client": [11, 2]}, [0], backend="sequential", fail_fast=True, progress=False)
    assert info.value.results == [None, None]
    assert [c.classes_per_client for c in info.value.skipped] == [2]
    assert not any(p.is_dir() and p.name.startswith("fedavg-") for p in tmp_path.iterdir())


def test_missing_ray_names_the_extra_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where it is not installed
    with pytest.raises(MissingExtraError, match=r"\[distributed\]"):
        sweep(_base(tmp_path / "runs"), GRID, SEEDS, backend="ray", progress=False)
    assert not (tmp_path / "runs").exists()
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"base: {{dataset: digits, model: cnn, n_clients: 8, runs_dir: {tmp_path / 'runs'}}}\n"
                    "grid: {algorithm: [fedavg]}\n")
    from fedlab.cli import main

    assert main(["sweep", str(grid), "--backend", "ray", "--no-progress"]) == 2
    assert "distributed" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("kwargs, field", [
    ({"backend": "dask"}, "backend"),
    ({"cpus_per_run": 0}, "cpus_per_run"),
    ({"gpus_per_run": -1}, "gpus_per_run"),
    ({"gpus_per_run": 0.5, "backend": "local"}, "gpus_per_run"),
    ({"max_workers": 0}, "max_workers"),
])
def test_bad_resources_are_named_before_anything_runs(tmp_path, kwargs, field):
    from fedlab.config import ConfigError

    with pytest.raises(ConfigError, match=field):
        sweep(_base(tmp_path / "runs"), GRID, SEEDS, progress=False, **kwargs)
    assert not (tmp_path / "runs").exists()


def test_ray_refuses_resources_the_cluster_lacks(ray_cluster, tmp_path):
    from fedlab.config import ConfigError

    with pytest.raises(ConfigError, match="gpus_per_run asks for 0.25 GPUs per run but the Ray cluster has 0"):
        sweep(_base(tmp_path / "runs", device="cuda"), GRID, SEEDS, backend="ray", gpus_per_run=0.25,
              progress=False)
    with pytest.raises(ConfigError, match="cpus_per_run"):
        sweep(_base(tmp_path / "runs"), GRID, SEEDS, backend="ray", cpus_per_run=3, progress=False)
    assert not (tmp_path / "runs").exists()


def test_bench_sweep_quick_prints_every_backend(ray_cluster, capsys):
    from lab.bench.sweep import main

    assert main(["--quick", "--no-progress"]) == 0
    out = capsys.readouterr().out
    table = out.split("backend", 1)[1].splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:] if line.strip()}
    assert set(rows) == {"sequential", "local", "ray"}
    for name, cells in rows.items():
        assert cells[5] == "yes", name  # identical to the sequential bits
        assert float(cells[2]) > 0  # wall seconds
