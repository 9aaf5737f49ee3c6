"""The vectorised client executor, parallel_clients="auto", the conventional baseline, `bench --quick`.

The vectorised path must give the sequential reference path's numbers (to float rounding) for every
registered algorithm: the list is read from the registry when the tests are collected, so a newly
added algorithm is covered without editing this file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import fedlab
from fedlab import Config, ConfigError
from fedlab.algorithms import algorithm_names
from fedlab.engine import Simulation
from fedlab.engine import chunking
from fedlab.engine import vectorised as vec
from fedlab.engine.clients import ClientJob, LocalData, RoundWork
from _load import window

REPO = Path(__file__).resolve().parent.parent
RTOL = 1e-5


def _numeric_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c != "wall_seconds" and pd.api.types.is_numeric_dtype(df[c])]


def assert_same_run(ref: fedlab.RunResult, other: fedlab.RunResult) -> None:
    """Metrics (all numeric columns but wall_seconds) and final θ equal within 1e-5 relative."""
    a, b = ref.metrics, other.metrics
    cols = _numeric_columns(a)
    assert cols == _numeric_columns(b) and len(a) == len(b)
    for col in cols:
        x, y = a[col].to_numpy(dtype=float), b[col].to_numpy(dtype=float)
        assert np.array_equal(np.isnan(x), np.isnan(y)), col
        ok = ~np.isnan(x)
        np.testing.assert_allclose(y[ok], x[ok], rtol=RTOL, atol=1e-7, err_msg=f"metric {col}")
    scale = ref.theta.abs().max()
    assert (ref.theta - other.theta).abs().max() <= RTOL * scale


@pytest.fixture
def vmap_calls(monkeypatch):
    """Counts calls of run_clients_vectorised (the engine imports it from the module at call time)."""
    calls = []
    real = vec.run_clients_vectorised

    def spy(*args, **kwargs):
        calls.append(kwargs.get("chunk"))
        return real(*args, **kwargs)

    monkeypatch.setattr(vec, "run_clients_vectorised", spy)
    return calls


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_vectorised_equals_sequential_for_every_algorithm(tiny, tmp_path, algorithm, vmap_calls):
    base = dict(algorithm=algorithm, rounds=2, eval_every=1)
    ref = fedlab.run(tiny(**base, runs_dir=str(tmp_path / "seq")), progress=False)
    assert vmap_calls == []
    for chunk in (2, 4):  # m = 4: two chunks of 2, one chunk of 4
        got = fedlab.run(tiny(**base, parallel_clients=chunk, runs_dir=str(tmp_path / f"p{chunk}")),
                         progress=False)
        assert_same_run(ref, got)
    assert vmap_calls == [2, 2, 4, 4]  # two rounds each
    assert ref.status in ("finished", "collapsed")  # two rounds may stay at chance; never diverged


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_chunk_not_dividing_m(tiny, tmp_path, algorithm, vmap_calls):
    if algorithm not in algorithm_names():
        pytest.skip(f"{algorithm} not registered")
    cfg = dict(algorithm=algorithm, n_clients=10, participation=0.5, rounds=3)  # m = 5 = 3 + 2
    ref = fedlab.run(tiny(**cfg, runs_dir=str(tmp_path / "a")), progress=False)
    got = fedlab.run(tiny(**cfg, parallel_clients=3, runs_dir=str(tmp_path / "b")), progress=False)
    assert vmap_calls == [3, 3, 3]
    assert_same_run(ref, got)


def test_augmentation_path_identical(tiny, tmp_path):
    cfg = dict(algorithm="fedsam", rounds=2, augment=True)
    ref = fedlab.run(tiny(**cfg, runs_dir=str(tmp_path / "a")), progress=False)
    got = fedlab.run(tiny(**cfg, parallel_clients=4, runs_dir=str(tmp_path / "b")), progress=False)
    assert_same_run(ref, got)
    plain = fedlab.run(tiny(algorithm="fedsam", rounds=2, augment=False, runs_dir=str(tmp_path / "c")),
                       progress=False)
    assert not torch.allclose(plain.theta, ref.theta)  # augmentation really was on


def _round_inputs(sim: Simulation, t: int = 0):
    from fedlab.engine.sampling import sample_clients

    c = sim.config
    clients = sample_clients(t, c.n_clients, c.participation, seed=c.seed)
    idx = [torch.tensor(ix, dtype=torch.long) for ix in sim.partition.client_indices]
    jobs = sim.client_jobs(t, clients, idx)
    info = sim.round_info(t, tuple(len(job.batches) for job in jobs))
    theta0 = sim.model.theta0()
    msg = sim.algorithm.broadcast(sim.algorithm.server_init(theta0), info)
    states = [sim.algorithm.client_init(theta0) for _ in jobs]
    data = LocalData(sim.dataset.x_train, sim.dataset.y_train, sim.augment_kind)
    return msg, jobs, states, data, info


def test_unequal_local_steps_rejected(tiny):
    sim = Simulation.build(tiny())
    msg, jobs, states, data, info = _round_inputs(sim)
    jobs[1] = ClientJob(jobs[1].client, jobs[1].batches[:2], None)
    with pytest.raises(ValueError, match="same number of local steps"):
        vec.run_clients_vectorised(RoundWork(sim.algorithm, msg, jobs, states, data, sim.model.grad_fn, info),
                                   chunk=2)
    with pytest.raises(ValueError, match="chunk must be an integer"):
        vec.run_clients_vectorised(RoundWork(sim.algorithm, msg, jobs, states, data, sim.model.grad_fn, info),
                                   chunk=0)


def test_auto_picks_a_measured_chunk_once_per_simulation(tiny, tmp_path, monkeypatch):
    calls = []
    real = chunking.choose_chunk

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(chunking, "choose_chunk", spy)
    ref = fedlab.run(tiny(algorithm="scaffold" if "scaffold" in algorithm_names() else "fedavg", rounds=3,
                          runs_dir=str(tmp_path / "a")), progress=False)
    sim = Simulation.build(tiny(algorithm=ref.config.algorithm, rounds=3, parallel_clients="auto",
                                runs_dir=str(tmp_path / "b")))
    got = sim.run(progress=False)
    assert len(calls) == 1  # cached on the Simulation
    choice = sim.chunk_choice
    assert choice.chunk in chunking.candidate_chunks(4) and 1 <= choice.chunk <= 4
    assert [c.chunk for c in choice.measurements] == [1, 2, 4]
    assert all(c.status == "ok" and c.peak_bytes > 0 and c.seconds_per_step > 0 for c in choice.measurements)
    assert choice.measurements[2].peak_bytes > choice.measurements[0].peak_bytes  # more clients, more memory
    assert_same_run(ref, got)  # probing left generators and states untouched


def test_auto_respects_memory_budget(tiny, tmp_path):
    sim = Simulation.build(tiny(algorithm="fedsam"))
    msg, jobs, states, data, info = _round_inputs(sim)
    work = RoundWork(sim.algorithm, msg, jobs, states, data, sim.model.grad_fn, info)
    free = chunking.choose_chunk(work, budget_mb=1e6)
    peaks = {c.chunk: c.peak_bytes for c in free.measurements}
    assert peaks[1] < peaks[2] < peaks[4]
    between = (peaks[1] + peaks[2]) / 2 / chunking.MIB  # only chunk 1 fits
    tight = chunking.choose_chunk(work, budget_mb=between)
    assert tight.chunk == 1
    assert {c.chunk: c.status for c in tight.measurements} == {
        1: "ok", 2: "over budget", 4: "predicted over budget"}
    with pytest.warns(RuntimeWarning, match="below even one client"):
        assert chunking.choose_chunk(work, budget_mb=1e-3).chunk == 1
    # through the engine: a tiny budget makes "auto" fall back to the sequential path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run_sim = Simulation.build(tiny(algorithm="fedsam", rounds=1, parallel_clients="auto",
                                        memory_budget_mb=1e-3, runs_dir=str(tmp_path / "tiny-budget")))
        run_sim.run(progress=False)
    assert run_sim.chunk_choice.chunk == 1


def test_live_tensor_bytes_tracks_peak_and_frees():
    with chunking.LiveTensorBytes() as tracker:
        a = torch.ones(1000)  # 4000 bytes
        b = a * 2  # 4000 more
        del b
        c = a + 1
    assert tracker.peak >= 8000
    del a, c
    assert tracker.current == 0


def test_config_accepts_auto_and_budget_and_rejects_bad_values():
    assert Config(parallel_clients="auto", memory_budget_mb=256).parallel_clients == "auto"
    assert Config().hash() == Config(memory_budget_mb=64).hash()  # the budget is not hashed
    with pytest.raises(ConfigError, match="parallel_clients"):
        Config(parallel_clients="fast")
    with pytest.raises(ConfigError, match="parallel_clients"):
        Config(parallel_clients=0)
    with pytest.raises(ConfigError, match="memory_budget_mb"):
        Config(memory_budget_mb=0)
    with pytest.raises(ConfigError, match="amp"):
        Config(amp="yes")
    assert Config(amp=True).hash() != Config().hash()  # bf16 changes the numbers
    with pytest.raises(ConfigError, match="fixed number of local steps"):
        Config(parallel_clients="auto", local_steps=None, local_epochs=1)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedsam"])
def test_conventional_baseline_matches_fedlab(tiny, tmp_path, algorithm):
    """Same init, sampling, batch order (clients hold ≥ K·B samples) and hyperparameters → same θ."""
    from lab.bench.conventional import ConventionalFL
    from fedlab.models.functional import flatten_params

    for n_clients, participation in ((1, 1.0), (4, 0.5)):
        cfg = tiny(algorithm=algorithm, n_clients=n_clients, participation=participation, partition="iid",
                   rounds=3, runs_dir=str(tmp_path / f"{algorithm}{n_clients}"),
                   algorithm_params={"rho": 0.05} if algorithm == "fedsam" else {})
        sim = Simulation.build(cfg)
        assert min(len(ix) for ix in sim.partition.client_indices) >= cfg.local_steps * cfg.batch_size
        conv = ConventionalFL.from_simulation(sim)
        losses = [conv.run_round(t) for t in range(cfg.rounds)]
        ours = sim.run(progress=False)
        theta = flatten_params(conv.model)
        assert (theta - ours.theta).abs().max() <= RTOL * ours.theta.abs().max()
        np.testing.assert_allclose(losses, ours.metrics["train_loss"], rtol=RTOL)
        assert losses[-1] < losses[0]


def test_bench_quick_prints_the_tables(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "lab", "bench", "--quick", "--json", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=window(240))
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    for line in ("speed comparison (quick)", "float32 matmul reference", "ms/round", "rounds/s", "% matmul",
                 "SAM / FedAvg cost ratio", "Speed-up of fedlab's best mode over the conventional loop",
                 "Peak memory of the vectorised path per chunk size", "<- chosen"):
        assert line in text, line
    modes = {"conventional", "sequential", "vectorised", "auto", "threads", "threads_cl", "conventional_bf16",
             "threads_cl_bf16"}  # auto_bf16 is in the default list on CUDA only
    for mode in modes:
        assert f"fedavg     {mode} " in text, mode
    for label in ("float32", "bf16 vs bf16", "bf16 vs float32"):
        assert f"fedsam   {label}" in text, label
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert {r["mode"] for r in rows} == modes
    conventional = {"conventional", "conventional_bf16"}
    n_threads = report["settings"]["client_threads"]
    assert n_threads == len(os.sched_getaffinity(0))
    assert all(r["client_threads"] == (n_threads if r["mode"].startswith("threads") else 1)
               for r in rows if r["mode"] not in conventional)
    assert all(r["channels_last"] == r["mode"].startswith("threads_cl") for r in rows if r["mode"] not in conventional)
    assert all(r["amp"] == r["mode"].endswith("_bf16") for r in rows)
    assert {(s["precision"], s["baseline_mode"]) for s in report["speedup_over_conventional"]} == {
        ("float32", "conventional"), ("bf16 vs bf16", "conventional_bf16"), ("bf16 vs float32", "conventional")}
    assert {r["algorithm"] for r in rows} >= {"fedavg", "fedsam"}
    assert all(r["rounds_timed"] >= 3 and r["ms_per_round"] > 0 and 0 < r["matmul_fraction"] for r in rows)
    assert not any(r["mode"] == "conventional" and r["algorithm"] not in ("fedavg", "fedsam") for r in rows)
    assert report["speedup_over_conventional"] and report["sam_fedavg_ratio"]
