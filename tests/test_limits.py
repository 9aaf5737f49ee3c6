"""Limits before work and inputs that must never reach the command line as a traceback (issue 32).

* Declared bounds on rounds, K, E, B and one round's work (``fedlab.config.MAX_*``) and on a Flower
  simulation's SuperNodes: refused when the Config (or the simulation) is built, naming the field, the
  value and the limit; nothing written.
* Rounds are drawn lazily: building a run of 10⁵ rounds draws none of them.
* Corrupt, truncated or out-of-range dataset files: a DatasetError naming the file (exit 5).
* Ctrl-C of ``python -m fedlab run``: one line, exit 130, and the same command resumes to the result
  of an uninterrupted run.
* The smaller items: a finished run on a read-only runs_dir loads; ``runs_dir=""`` is refused and
  ``~`` expanded; a client listing an index twice in a partition file is refused; an unknown
  ``partition_params`` key names the allowed ones; ``flower-sim``'s help and defaults.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import fedlab
from fedlab.cli import INTERRUPTED, main
from fedlab.config import (MAX_BATCH_SIZE, MAX_CLIENT_EVAL_SIZE, MAX_CLIENT_THREADS, MAX_CROP_PADDING, MAX_LOCAL_EPOCHS,
                           MAX_LOCAL_STEPS, MAX_ROUNDS, MAX_SAMPLES_PER_ROUND)
from fedlab.data import DatasetError, from_file, load_dataset
from fedlab.data import datasets as ds_mod
from fedlab.engine import loop, setup
from _load import window
from test_datasets import _write_cifar10

REPO = Path(__file__).resolve().parent.parent
BASE: dict[str, Any] = dict(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=3, local_steps=2,
                            batch_size=16, lr=0.05, alpha=0.5, eval_every=1, checkpoint_every=1)
NUMBERS = ["round", "lr", "train_loss", "test_acc", "test_loss", "flatness_distance", "uplink_floats",
           "downlink_floats", "n_sampled"]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of ``python -m fedlab ARGV`` run in this process; stderr must be one line."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return code, err.strip()


def _run_args(values: dict[str, Any]) -> list[str]:
    return [a for k, v in values.items() for a in ("--" + k.replace("_", "-"), str(v))]


# --------------------------------------------------------------------------------------------- limits
LIMITS = [
    ("rounds", {"rounds": 10**9}, f"{MAX_ROUNDS:,}"),
    ("local_steps", {"local_steps": 10**9}, f"{MAX_LOCAL_STEPS:,}"),
    ("batch_size", {"batch_size": 10**9}, f"{MAX_BATCH_SIZE:,}"),
    ("local_epochs", {"local_steps": None, "local_epochs": 10**9}, f"{MAX_LOCAL_EPOCHS:,}"),
    # issue 46: 10⁶ threads spent 120 s deep-copying models; huge padding or client-eval sizes hit the allocator
    ("client_threads", {"client_threads": 10**6}, f"{MAX_CLIENT_THREADS:,}"),
    ("crop_padding", {"crop_padding": 10**6}, f"{MAX_CROP_PADDING:,}"),
    ("client_eval_size", {"client_eval_size": 10**9}, f"{MAX_CLIENT_EVAL_SIZE:,}"),
    # each within its own bound, together 10⁵ · 6·10⁴ · 4 clients: the round's batch stream
    ("local_steps", {"local_steps": MAX_LOCAL_STEPS, "batch_size": 60_000}, f"{MAX_SAMPLES_PER_ROUND:,}"),
]


@pytest.mark.parametrize("field, overrides, limit", LIMITS, ids=[f"{c[0]}-{i}" for i, c in enumerate(LIMITS)])
def test_limits_refused_before_anything_is_written(field, overrides, limit, tmp_path, capsys):
    runs = tmp_path / "runs"
    values = {**BASE, "runs_dir": str(runs), **overrides}
    with pytest.raises(fedlab.ConfigError) as err:
        fedlab.run(fedlab.Config(**values), progress=False)
    assert field in str(err.value) and limit in str(err.value)
    value = next(v for v in overrides.values() if v is not None and v > 10_000)
    assert str(value) in str(err.value)
    cli_values = {k: v for k, v in values.items() if v is not None}
    code, line = _cli(["run", *_run_args(cli_values), "--no-progress"], capsys)
    assert code == 2 and line.startswith("error: ") and field in line and limit in line
    assert not runs.exists()


def test_limits_admit_the_bound_itself():
    cfg = fedlab.Config(**{**BASE, "rounds": MAX_ROUNDS, "local_steps": 1000, "batch_size": 64})
    assert cfg.rounds == MAX_ROUNDS


def test_a_long_run_draws_no_round_ahead(tmp_path, monkeypatch):
    """rounds=10⁵ (within the bound): building draws no round, the first round is drawn when reached."""
    draws: list[int] = []
    real = loop.sample_clients

    def counting(t: int, *args: Any, **kwargs: Any) -> np.ndarray:
        draws.append(t)
        return real(t, *args, **kwargs)

    monkeypatch.setattr(loop, "sample_clients", counting)
    monkeypatch.setattr(setup, "sample_clients", counting)  # the build-time checks draw through setup
    for sampling in ("uniform", "bernoulli"):
        draws.clear()
        sim = loop.Simulation.build(fedlab.Config(**{**BASE, "rounds": 100_000, "sampling": sampling,
                                                     "runs_dir": str(tmp_path / "runs")}))
        assert draws == [], f"{sampling}: build drew {len(draws)} rounds ahead"
        assert sim.sample(0).size and draws == [0]  # the same draw the run makes, when round 0 starts
    assert not (tmp_path / "runs").exists()


def test_ahead_drawing_is_kept_only_where_a_round_can_fail():
    eligible = np.arange(8)
    plain = fedlab.Config(**{**BASE, "sampling": "bernoulli"})
    assert setup.undrawable_risk(plain, eligible) < setup.UNDRAWABLE_RISK
    assert setup.undrawable_risk(fedlab.Config(**BASE), eligible) == 0.0
    hopeless = plain.replace(participation=1e-9)
    assert setup.undrawable_risk(hopeless, eligible) >= setup.UNDRAWABLE_RISK
    with pytest.raises(fedlab.ConfigError, match="participation"):
        setup.check_rounds_drawable(hopeless, None, eligible)


# ------------------------------------------------------------------------------------ dataset files
def _idx_bytes(array: np.ndarray, magic: int) -> bytes:
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()


def _write_fmnist(raw: Path) -> None:
    """Tiny Fashion-MNIST IDX files in the real format (uncompressed, where torchvision reads them)."""
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("t10k", 20)):
        (raw / f"{split}-images-idx3-ubyte").write_bytes(
            _idx_bytes(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 0x0803))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx_bytes((np.arange(n) % 10).astype(np.uint8), 0x0801))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _bad_magic(path: Path) -> None:
    path.write_bytes(b"\x1f\x8b" + path.read_bytes()[2:])  # a gzip header where the IDX one belongs


def _label_12(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] = 12
    path.write_bytes(bytes(data))


def _fewer_labels(path: Path) -> None:
    labels = (np.arange(39) % 10).astype(np.uint8)
    path.write_bytes(_idx_bytes(labels, 0x0801))


FMNIST_DAMAGE = [
    ("truncated_images", "train-images-idx3-ubyte", _truncate, "truncated"),
    ("truncated_labels", "t10k-labels-idx1-ubyte", _truncate, "truncated"),
    ("not_idx", "train-images-idx3-ubyte", _bad_magic, "not an IDX file"),
    ("label_out_of_range", "t10k-labels-idx1-ubyte", _label_12, "label 12"),
    ("counts_differ", "train-labels-idx1-ubyte", _fewer_labels, "do not match"),
]


@pytest.fixture
def fresh_dataset_cache():
    setup._cached_dataset.cache_clear()  # an in-process cache must not hide the files of this test
    yield
    setup._cached_dataset.cache_clear()


def test_tiny_fmnist_files_load(tmp_path):
    _write_fmnist(tmp_path / "FashionMNIST" / "raw")
    d = load_dataset("fmnist", root=tmp_path, download=False)
    assert (d.n_train, d.n_test) == (40, 20)


@pytest.mark.parametrize("case, name, damage, says", FMNIST_DAMAGE, ids=[c[0] for c in FMNIST_DAMAGE])
def test_damaged_fmnist_named_in_one_line(case, name, damage, says, tmp_path, monkeypatch, capsys,
                                          fresh_dataset_cache):
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    _write_fmnist(raw)
    damage(raw / name)
    with pytest.raises(DatasetError, match=says) as err:
        load_dataset("fmnist", root=tmp_path / "data", download=False)
    assert name in str(err.value) and "delete" in str(err.value)
    monkeypatch.setenv("FEDLAB_DATA", str(tmp_path / "data"))
    runs = tmp_path / "runs"
    code, line = _cli(["run", "--dataset", "fmnist", "--rounds", "1", "--runs-dir", str(runs), "--no-progress"], capsys)
    assert code == 5 and line.startswith("error: ") and name in line and says in line
    assert not runs.exists()


def test_damaged_cifar_named(tmp_path):
    _write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    good = batch.read_bytes()
    batch.write_bytes(good[: len(good) // 2])
    with pytest.raises(DatasetError, match="cifar-10-batches-py") as err:
        load_dataset("cifar10", root=tmp_path, verify=False, download=False)
    assert "delete" in str(err.value)
    with pytest.raises(DatasetError, match="md5"):  # the official-release check, as before, but a DatasetError
        load_dataset("cifar10", root=tmp_path, download=False)
    batch.write_bytes(good)
    test_batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    import pickle

    with open(test_batch, "rb") as fh:
        content = pickle.load(fh, encoding="latin1")
    content["labels"][0] = 10
    with open(test_batch, "wb") as fh:
        pickle.dump(content, fh, protocol=2)
    with pytest.raises(DatasetError, match="label 10") as err:
        load_dataset("cifar10", root=tmp_path, verify=False, download=False)
    assert "test_batch" in str(err.value)


# ------------------------------------------------------------------------------------------- Ctrl-C
def _run_argv(runs: Path, rounds: int) -> list[str]:
    values = {**BASE, "rounds": rounds, "checkpoint_every": 5, "runs_dir": str(runs)}
    return [sys.executable, "-m", "fedlab", "run", *_run_args(values), "--no-progress"]


def test_ctrl_c_prints_one_line_exits_130_and_resumes(tmp_path):
    rounds = 60
    runs = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(_run_argv(runs, rounds), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + window(120)
    while not list(runs.glob("*/checkpoint.pt")):  # the first checkpoint: round 5 is done
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=window(60))
    assert proc.returncode == INTERRUPTED == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("interrupted: ") and "resume" in err
    [run_dir] = runs.iterdir()
    assert str(run_dir) in err
    stopped = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert stopped["status"] == "running" and 5 <= stopped["next_round"] < rounds  # stopped early, at a boundary
    assert len(stopped["rows"]) == stopped["next_round"]

    again = subprocess.run(_run_argv(runs, rounds), cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=window(300))
    assert again.returncode == 0, again.stderr
    assert f"finished after {rounds}/{rounds} rounds" in again.stdout
    resumed = fedlab.run(fedlab.Config(**{**BASE, "rounds": rounds, "checkpoint_every": 5, "runs_dir": str(runs)}),
                         progress=False)
    fresh = fedlab.run(fedlab.Config(**{**BASE, "rounds": rounds, "checkpoint_every": 5,
                                        "runs_dir": str(tmp_path / "uninterrupted")}), progress=False)
    assert resumed.run_dir == run_dir
    assert torch.equal(resumed.theta, fresh.theta)
    pd.testing.assert_frame_equal(resumed.metrics[NUMBERS], fresh.metrics[NUMBERS])


def test_stop_event_checkpoints_at_the_next_boundary(tmp_path):
    """The API behind Ctrl-C: a set ``stop`` ends the run at a round boundary with a checkpoint there."""
    import threading

    cfg = fedlab.Config(**{**BASE, "rounds": 6, "checkpoint_every": 4, "runs_dir": str(tmp_path)})
    stop = threading.Event()
    real = loop.Simulation.train_round

    def stop_after_two(self, state, t, clients=None):
        outcome = real(self, state, t, clients)
        if t == 1:
            stop.set()
        return outcome

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop.Simulation, "train_round", stop_after_two)
        with pytest.raises(loop.RunInterrupted) as err:
            fedlab.run(cfg, progress=False, stop=stop)
    assert err.value.rounds_done == 2 and "resume" in str(err.value)
    ckpt = torch.load(err.value.run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["next_round"] == 2  # saved at the boundary although checkpoint_every is 4
    assert fedlab.run(cfg, progress=False).status == "finished"


# ---------------------------------------------------------------------------------- smaller items
def test_finished_run_loads_from_a_read_only_runs_dir(tmp_path, monkeypatch):
    cfg = fedlab.Config(**{**BASE, "runs_dir": str(tmp_path / "runs")})
    done = fedlab.run(cfg, progress=False)
    files = {p: p.read_bytes() for p in done.run_dir.iterdir() if p.is_file()}

    def read_only(*args: Any, **kwargs: Any) -> None:
        raise OSError(30, "Read-only file system")

    # a read-only mount: os.statvfs reports it, and every attempt to create a file fails
    monkeypatch.setattr(setup, "_writable", lambda folder: False)
    monkeypatch.setattr("fedlab.store.atomic.os.open", read_only)
    monkeypatch.setattr("filelock.FileLock.acquire", read_only)
    again = fedlab.run(cfg, progress=False)
    assert again.status == "finished" and torch.equal(again.theta, done.theta)
    assert {p: p.read_bytes() for p in done.run_dir.iterdir() if p.is_file()} == files
    with pytest.raises(fedlab.ConfigError, match="runs_dir"):  # nothing stored for this one: it cannot train
        fedlab.run(cfg.replace(seed=1), progress=False)


def test_finished_run_loads_from_a_real_read_only_mount(tmp_path):
    """The same on a read-only bind mount, where the machine allows one (root with mount rights)."""
    runs, ro = tmp_path / "runs", tmp_path / "ro"
    cfg = fedlab.Config(**{**BASE, "runs_dir": str(runs)})
    done = fedlab.run(cfg, progress=False)
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(runs), str(ro)], capture_output=True,
                             timeout=window(30)).returncode == 0
    if not mounted:
        pytest.skip("cannot bind-mount here (needs root with mount rights)")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(ro)]
        if subprocess.run(remount, capture_output=True, timeout=window(30)).returncode != 0:
            pytest.skip("cannot remount read-only here")
        again = fedlab.run(cfg.replace(runs_dir=str(ro)), progress=False)
        assert again.status == "finished" and torch.equal(again.theta, done.theta)
        with pytest.raises(fedlab.ConfigError, match="not writable"):
            fedlab.run(cfg.replace(runs_dir=str(ro), seed=1), progress=False)
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True, timeout=window(30))


def test_runs_dir_empty_refused_and_home_expanded(tmp_path, monkeypatch, capsys):
    with pytest.raises(fedlab.ConfigError, match="runs_dir"):
        fedlab.Config(runs_dir="")
    code, line = _cli(["run", *_run_args(BASE), "--runs-dir", "", "--no-progress"], capsys)
    assert code == 2 and "runs_dir" in line
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = fedlab.Config(**{**BASE, "runs_dir": "~/fedlab-runs"})
    assert cfg.runs_dir == str(tmp_path / "fedlab-runs")
    assert loop.Simulation.build(cfg).store.dir.parent == tmp_path / "fedlab-runs"
    assert cfg.hash() == cfg.replace(runs_dir=None).hash()  # where runs live is not part of the key


def test_partition_file_with_a_repeated_index_refused(tmp_path):
    path = tmp_path / "split.json"
    path.write_text("[[0, 1, 0], [2, 3]]")
    labels = np.arange(4) % 2
    with pytest.raises(ValueError, match=r"client 0 lists index 0 2 times") as err:
        from_file(path, labels)
    assert str(path) in str(err.value) and "allow_duplicates" in str(err.value)
    assert from_file(path, labels, allow_duplicates=True).sizes.tolist() == [3, 2]
    cfg = fedlab.Config(**{**BASE, "n_clients": 2, "partition": "file", "partition_params": {"path": str(path)}})
    with pytest.raises(fedlab.ConfigError, match="split.json"):
        loop.Simulation.build(cfg)


def test_unknown_partition_option_names_the_allowed_ones():
    with pytest.raises(fedlab.ConfigError) as err:
        fedlab.Config(partition_params={"min_sise": 3})
    assert "'min_sise'" in str(err.value) and "min_size" in str(err.value) and "TypeError" not in str(err.value)


def test_flower_sim_help_and_limits(capsys, monkeypatch):
    pytest.importorskip("flwr")
    with pytest.raises(SystemExit):
        main(["flower-sim", "--help"])
    text = capsys.readouterr().out
    from fedlab.flower.simulation import NOT_SIMULATED

    # a flag for every Config field a Flower simulation honours, none for those it does not; no "custom" tensors
    for f in dataclasses.fields(fedlab.Config):
        flag = "--" + f.name.replace("_", "-")
        if f.name not in ("algorithm_params", "partition_params"):
            assert (re.search(rf"{flag}\b", text) is None) == (f.name in NOT_SIMULATED), flag
    assert "{fmnist,cifar10,cifar100,digits,synthetic}" in text and "--param" in text and "--log" in text
    t0 = time.monotonic()
    code, line = _cli(["flower-sim", "--n-clients", str(10**7)], capsys)
    assert code == 2 and "n_clients=10000000" in line and "--num-cpus" in line
    assert time.monotonic() - t0 < window(30)  # refused before Ray or Flower start
    seen: dict[str, fedlab.Config] = {}

    def fake(config: fedlab.Config, **kwargs: Any) -> Any:
        seen["config"] = config
        raise fedlab.ConfigError("stop here")  # the Config is what this test checks

    monkeypatch.setattr("fedlab.flower.run_flower_simulation", fake)
    code, _ = _cli(["flower-sim", "--dataset", "digits", "--lr", "0.05"], capsys)
    assert code == 2 and seen["config"] == fedlab.Config(dataset="digits", lr=0.05)
    code, _ = _cli(["flower-sim"], capsys)
    assert seen["config"] == fedlab.Config()  # the defaults are Config's, as for `run` (lr 0.1, 100 clients, ...)
