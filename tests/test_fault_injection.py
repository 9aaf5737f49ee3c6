"""Fault injection into the results store (issue 12): kills, damaged files, stale inputs.

For every case: either the rerun ends bit-identical to an uninterrupted run (θ and every metric), or
it raises an error that names the damaged file and leaves every file of the run as it was. Kills are
injected at the write points of :mod:`fedlab.results` by ``tests/faults.py`` — in this process by
raising (fast), and in subprocesses by a real ``os._exit`` (nothing unwinds) — never with sleeps. Two processes on one run directory: see
``tests/test_results_store.py::test_second_process_waits_for_the_lock_then_reads_the_result``.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import fedlab
from fedlab import CheckpointError
from fedlab import numpy_generator
import faults
from _load import window

REPO = Path(__file__).resolve().parent.parent
NUMBERS = ["round", "lr", "train_loss", "test_acc", "test_loss", "flatness_distance", "uplink_floats",
           "downlink_floats", "n_sampled"]
ROUNDS = 4
BASE = dict(algorithm="scaffold", dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=ROUNDS,
            local_steps=4, batch_size=16, lr=0.1, alpha=0.5, eval_every=1, checkpoint_every=1)  # trains above chance


class Killed(BaseException):
    """What the in-process hook raises at a write point (a BaseException: nothing catches it)."""


def config(runs_dir: Path, **overrides) -> fedlab.Config:
    return fedlab.Config(**{**BASE, "runs_dir": str(runs_dir), **overrides})


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: θ, metrics and the bytes of its derived files."""
    run = fedlab.run(config(tmp_path_factory.mktemp("reference")), progress=False)
    views = {n: (run.run_dir / n).read_bytes() for n in ("metrics.csv", "summary.json")}
    return run, views


def assert_same_as_reference(result, reference) -> None:
    ref, views = reference
    assert result.status == "finished"
    assert torch.equal(result.theta, ref.theta)
    pd.testing.assert_frame_equal(result.metrics[NUMBERS], ref.metrics[NUMBERS])
    stored = pd.read_csv(result.run_dir / "metrics.csv")
    pd.testing.assert_frame_equal(stored[NUMBERS], ref.metrics[NUMBERS], check_dtype=False)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_done"] == ROUNDS
    assert summary["final_test_acc"] == ref.summary["final_test_acc"]


def files_of(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file() and p.name != ".lock"}


# --- kills at every write point of a round --------------------------------------------------------
KILLS = [(point, r) for point in faults.POINTS for r in (2, ROUNDS)]


@pytest.mark.parametrize(("point", "at_round"), KILLS, ids=[f"{p}@{r}" for p, r in KILLS])
def test_kill_at_write_point_then_resume(tmp_path, reference, point, at_round):
    def hook(where: str, rounds_done: int) -> None:
        if (where, rounds_done) == (point, at_round):
            raise Killed(where)

    with faults.injected(hook), pytest.raises(Killed):
        fedlab.run(config(tmp_path), progress=False)
    assert_same_as_reference(fedlab.run(config(tmp_path), progress=False), reference)


_KILLED = """
import sys, faults, fedlab
faults.exit_at(sys.argv[2])
fedlab.run(fedlab.Config.from_dict(__import__("json").loads(sys.argv[1])), progress=False)
"""


@pytest.mark.parametrize("fault", ["after_checkpoint:4", "before_checkpoint:2"])
def test_os_exit_at_write_point_then_resume(tmp_path, reference, fault):
    cfg = config(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _KILLED, json.dumps(cfg.to_dict()), fault], env=env,
                          capture_output=True, text=True, timeout=window(300))
    assert done.returncode == faults.EXIT_CODE, done.stderr
    assert_same_as_reference(fedlab.run(cfg, progress=False), reference)


# --- each file truncated, garbled, bit-flipped ----------------------------------------------------
def _truncate(raw: bytes, run) -> bytes:
    return raw[: len(raw) // 2]


def _garble(raw: bytes, run) -> bytes:
    mid = len(raw) // 2
    noise = numpy_generator(0, "garble").integers(0, 256, 64, dtype="uint8").tobytes()
    return raw[:mid] + noise + raw[mid + 64:]


def _bitflip(raw: bytes, run) -> bytes:
    out = bytearray(raw)
    out[len(out) // 2] ^= 0x04
    return bytes(out)


def _bitflip_theta(raw: bytes, run) -> bytes:
    """One bit of the stored θ (found by its bytes: tensor storage is kept uncompressed)."""
    at = raw.find(run.theta.numpy().tobytes()[:256])
    assert at > 0
    out = bytearray(raw)
    out[at + 1001] ^= 0x01
    return bytes(out)


def _bitflip_metric_row(raw: bytes, run) -> bytes:
    """The last bit of one pickled metric value (pickle stores a float as 8 big-endian bytes)."""
    value = run.metrics["train_loss"].iloc[1]
    at = raw.find(struct.pack(">d", value))
    assert at > 0
    out = bytearray(raw)
    out[at + 7] ^= 0x01
    return bytes(out)


DAMAGE = {"truncated": _truncate, "garbled": _garble, "bitflip": _bitflip}
VIEWS = ["metrics.csv", "summary.json", "config.json"]
VIEW_CASES = [(f, d) for f in VIEWS for d in DAMAGE]
CKPT_DAMAGE = {**DAMAGE, "bitflip_theta": _bitflip_theta, "bitflip_metric_row": _bitflip_metric_row}
CKPT_CASES = [(status, d) for status in ("finished", "running") for d in CKPT_DAMAGE]


@pytest.mark.parametrize(("name", "damage"), VIEW_CASES, ids=[f"{f}-{d}" for f, d in VIEW_CASES])
def test_damaged_view_is_repaired_from_the_checkpoint(tmp_path, reference, name, damage):
    first = fedlab.run(config(tmp_path), progress=False)
    path = first.run_dir / name
    original = path.read_bytes()
    path.write_bytes(DAMAGE[damage](original, first))
    assert path.read_bytes() != original
    assert_same_as_reference(fedlab.run(config(tmp_path), progress=False), reference)
    assert path.read_bytes() == original


@pytest.mark.parametrize(("status", "damage"), CKPT_CASES, ids=[f"{s}-{d}" for s, d in CKPT_CASES])
def test_damaged_checkpoint_is_refused_and_nothing_is_touched(tmp_path, status, damage):
    cut = None if status == "finished" else 2
    first = fedlab.run(config(tmp_path), progress=False, stop_after_rounds=cut)
    path = first.run_dir / "checkpoint.pt"
    path.write_bytes(CKPT_DAMAGE[damage](path.read_bytes(), first))
    (first.run_dir / ".metrics.csv.0123.tmp").write_bytes(b"an orphan")  # must survive a refused open too
    before = files_of(first.run_dir)
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt") as err:
        fedlab.run(config(tmp_path), progress=False)
    assert str(first.run_dir) in str(err.value)
    assert files_of(first.run_dir) == before


# --- a stale schedule file ------------------------------------------------------------------------
def test_stale_schedule_file_gives_a_new_run_identical_to_a_fresh_one(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps([[0, 1], [2, 3], [4, 5], [6, 7]]))
    cfg = config(tmp_path / "runs", sampling="schedule", schedule_path=str(path))
    old = fedlab.run(cfg, progress=False, stop_after_rounds=2)  # interrupted under the old schedule
    old_files = files_of(old.run_dir)
    path.write_text(json.dumps([[1, 2, 3], [0], [4, 5, 6, 7], [2, 5]]))
    new = fedlab.run(cfg, progress=False)
    fresh = fedlab.run(cfg.replace(runs_dir=str(tmp_path / "fresh")), progress=False)
    assert new.run_dir != old.run_dir and files_of(old.run_dir) == old_files
    assert new.metrics["n_sampled"].tolist() == [3, 1, 4, 2]
    assert torch.equal(new.theta, fresh.theta)
    pd.testing.assert_frame_equal(new.metrics[NUMBERS], fresh.metrics[NUMBERS])
