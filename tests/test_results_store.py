"""The results store (issue 12): one test per defect, each failing on the store before the fix.

1 stuck ``running`` · 2 truncated metrics.csv · 3 damaged checkpoint contents · 4 stale cache
(schedule contents, code) · 5 lock · 6 one atomic write (orphans, fsync, permissions) · 7 validation
before creation · 8 error messages (most cases: tests/test_bad_input.py) · 9 the CLI.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import fedlab
from fedlab import CheckpointError, ConfigError
from fedlab import results as results_mod
from fedlab.store.atomic import atomic_torch_save, atomic_write_bytes
from fedlab.store.code_digest import PACKAGE, code_digest, numeric_sources, statement_digests, package_digest
from fedlab.engine import Simulation
from _load import window

REPO = Path(__file__).resolve().parent.parent
NUMBERS = ["round", "lr", "train_loss", "test_acc", "test_loss", "flatness_distance", "uplink_floats",
           "downlink_floats", "n_sampled"]


@pytest.fixture
def small(tiny):
    def make(**overrides):
        values = dict(rounds=3, local_steps=2, checkpoint_every=1, eval_every=1)
        values.update(overrides)
        return tiny(**values)

    return make


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file() and p.name != ".lock"}


# --- 1. a finished run is never stuck "running" -----------------------------------------------------
@pytest.mark.parametrize("damage", ["summary_deleted", "summary_says_running"])
def test_finished_run_completes_its_bookkeeping_from_the_checkpoint(small, damage):
    first = fedlab.run(small(), progress=False)
    summary = first.run_dir / "summary.json"
    if damage == "summary_deleted":
        summary.unlink()
    else:  # what a kill between the final checkpoint write and the summary write leaves
        s = json.loads(summary.read_text())
        s.update(status="running", rounds_done=2)
        summary.write_text(json.dumps(s))
    again = fedlab.run(small(), progress=False)
    assert again.status == "finished"
    assert json.loads(summary.read_text())["status"] == "finished"
    assert torch.equal(again.theta, first.theta)


# --- 2. a truncated metrics.csv is repaired, never returned ------------------------------------------
def test_truncated_metrics_csv_is_repaired_from_the_checkpoint(small):
    first = fedlab.run(small(), progress=False)
    csv = first.run_dir / "metrics.csv"
    original = csv.read_bytes()
    csv.write_bytes(original[: len(original) // 2])
    again = fedlab.run(small(), progress=False)
    assert len(again.metrics) == 3 and again.final_accuracy == first.final_accuracy
    pd.testing.assert_frame_equal(again.metrics[NUMBERS], first.metrics[NUMBERS])
    assert csv.read_bytes() == original


# --- 3. damaged checkpoint contents are detected ------------------------------------------------------
@pytest.mark.parametrize("status", ["finished", "running"])
def test_flipped_bytes_inside_theta_are_refused(small, status):
    cut = None if status == "finished" else 2
    first = fedlab.run(small(), progress=False, stop_after_rounds=cut)
    ckpt = first.run_dir / "checkpoint.pt"
    raw = bytearray(ckpt.read_bytes())
    at = raw.find(first.theta.numpy().tobytes()[:256])
    assert at > 0  # θ's storage, stored uncompressed in the zip
    for i in range(at + 64, at + 128):
        raw[i] ^= 0x5A
    ckpt.write_bytes(bytes(raw))
    before = _files(first.run_dir)
    with pytest.raises(CheckpointError, match="checkpoint.pt.*(corrupted|digest)"):
        fedlab.run(small(), progress=False)
    assert _files(first.run_dir) == before  # nothing touched


def test_checkpoint_holds_a_digest_of_every_tensor_and_row(small):
    first = fedlab.run(small(), progress=False)
    ckpt = torch.load(first.run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["digest"] == results_mod.payload_digest(ckpt)
    rows = [dict(r) for r in ckpt["rows"]]
    rows[1]["test_acc"] += 1e-12  # one float of one metric row
    assert results_mod.payload_digest({**ckpt, "rows": rows}) != ckpt["digest"]
    server = {k: v.clone() for k, v in ckpt["server"].items()}
    server["theta"][0] = torch.nextafter(server["theta"][0], torch.tensor(1e9))  # one ulp of one weight
    assert results_mod.payload_digest({**ckpt, "server": server}) != ckpt["digest"]


def test_saved_state_is_the_state_training_reached(small):
    cfg = small(algorithm="scaffold", rounds=4)  # server and client vectors both in the checkpoint
    sim = Simulation.build(cfg)
    assert sim.saved_state() is None
    sim.run(progress=False, stop_after_rounds=2)
    saved = sim.saved_state()
    ref = Simulation.build(cfg)
    state = ref.initial_state()
    for t in range(2):
        ref.train_round(state, t)
    assert saved.next_round == state.next_round == 2
    assert torch.equal(saved.theta0, state.theta0)
    assert saved.server.keys() == state.server.keys()
    assert all(torch.equal(saved.server[k], state.server[k]) for k in state.server)
    assert sorted(saved.client_states) == sorted(state.client_states) and state.client_states
    for i, s in state.client_states.items():
        assert all(torch.equal(saved.client_states[i][k], v) for k, v in s.items())


def test_checkpoint_payload_round_trips(small):
    first = fedlab.run(small(), progress=False)
    ckpt = results_mod.RunStore(first.run_dir).load_checkpoint(first.summary["config_hash"])
    assert ckpt.next_round == 3 and ckpt.status == "finished" and len(ckpt.rows) == 3
    payload = ckpt.payload()
    assert list(payload["clients"]) == sorted(payload["clients"], key=int)  # ids as strings, ascending
    again = results_mod.Checkpoint.from_payload(payload)
    assert results_mod.payload_digest(again.payload()) == results_mod.payload_digest(payload)
    raw = torch.load(first.run_dir / "checkpoint.pt", weights_only=True)
    assert results_mod.payload_digest({**payload, "format": raw["format"]}) == raw["digest"]


# --- 4. the run key covers schedule contents and the code ---------------------------------------------
def test_rewritten_schedule_file_is_a_new_run(small, tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps([[0, 1], [2, 3], [4, 5]]))
    cfg = small(sampling="schedule", schedule_path=str(path))
    first = fedlab.run(cfg, progress=False)
    path.write_text(json.dumps([[0, 1, 2], [3], [4, 5, 6, 7]]))
    second = fedlab.run(cfg, progress=False)
    assert second.run_dir != first.run_dir
    assert second.metrics["n_sampled"].tolist() == [3, 1, 4]
    assert not torch.equal(second.theta, first.theta)


def test_rewritten_partition_file_is_a_new_run(small, tmp_path):
    path = tmp_path / "split.json"
    fedlab.run(small(), progress=False).partition.to_json(path)
    cfg = small(partition="file", partition_params={"path": str(path)})
    first = fedlab.run(cfg, progress=False)
    clients = json.loads(path.read_text())["clients"]
    clients[0], clients[1] = clients[0] + clients[1][:5], clients[1][5:]
    path.write_text(json.dumps({"clients": clients}))
    assert fedlab.run(cfg, progress=False).run_dir != first.run_dir


def _copy_package(tmp_path: Path) -> Path:
    dst = tmp_path / "fedlab"
    shutil.copytree(PACKAGE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_code_digest_changes_with_code_not_with_docs(tmp_path):
    copy = _copy_package(tmp_path)
    assert package_digest(copy) == code_digest()
    fedsam = copy / "algorithms" / "fedsam.py"
    _edit(fedsam, '"""', '"""A docstring edit. ')
    _edit(fedsam, "from __future__", "# a new comment\n\n\nfrom __future__")
    _edit(copy / "analysis" / "__init__.py", '"""', '"""Analysis code is not on the numeric path. ')
    _edit(copy / "_paths.py", "def data_root(", "def _unused():\n    return 1\n\n\ndef data_root(")
    _edit(copy / "cli.py", "def main(", "def _unused():\n    return 1\n\n\ndef main(")
    assert package_digest(copy) == code_digest()
    _edit(copy / "_rng.py", "int.from_bytes(", "1 + int.from_bytes(")  # the seed derivation
    assert package_digest(copy) != code_digest()
    copy = _copy_package(tmp_path / "b")
    _edit(copy / "algorithms" / "fedsam.py", "rho: float = ", "rho: float = 2 * ")  # an algorithm's default
    assert package_digest(copy) != code_digest()


def test_code_digest_survives_moves_splits_and_import_layout(tmp_path):
    """The key covers the numeric code's content, not where it lives: renaming a module (and the
    imports that name it), moving a function into a new module, and reordering a module's
    definitions keep the digest; a changed constant in the moved code does not."""
    copy = _copy_package(tmp_path)
    engine = copy / "engine"
    (engine / "round.py").rename(engine / "round_moved.py")
    for path in copy.rglob("*.py"):
        text = path.read_text()
        if "fedlab.engine.round import" in text:
            path.write_text(text.replace("fedlab.engine.round import", "fedlab.engine.round_moved import"))
    source = (copy / "store" / "collapse_probe.py")  # not on the numeric path: never counted
    source.write_text("x = 1\n")
    collapse = engine / "collapse.py"
    text = collapse.read_text()
    head, sep, rest = text.partition("def is_collapsed(")
    (engine / "collapse_split.py").write_text("import math\n\n\n" + sep + rest)
    collapse.write_text(head)
    assert package_digest(copy) == code_digest()
    _edit(engine / "collapse_split.py", "return all(", "return len(last_quarter) > 0 and all(")
    assert package_digest(copy) != code_digest()


def test_code_watch_sees_a_code_edit_not_a_docstring_edit(tmp_path):
    from fedlab.store.code_digest import CodeWatch

    copy = _copy_package(tmp_path)
    watch = CodeWatch(copy)
    assert watch.digest == code_digest() and watch.changed() is None
    _edit(copy / "algorithms" / "fedsam.py", '"""', '"""A docstring edit. ')
    assert watch.changed() is None  # the files moved, the code did not
    _edit(copy / "algorithms" / "fedsam.py", "rho: float = ", "rho: float = 2 * ")
    assert watch.changed() == package_digest(copy) != watch.digest


def test_a_run_whose_code_changes_on_disk_is_not_checkpointed_further(tiny, monkeypatch):
    """Rounds trained after the numeric code changed on disk may mix old and new code under the old
    key: the next checkpoint is refused, and the run resumes only from what was saved before."""
    import fedlab
    from fedlab.engine import loop

    cfg = tiny(rounds=4, checkpoint_every=1)
    saves = []  # the first two checkpoints see the code unchanged, the third a new digest
    monkeypatch.setattr(loop, "code_changed", lambda: "f" * 64 if len(saves) >= 2 else saves.append(1))
    with pytest.raises(CheckpointError, match="numeric-path code changed on disk"):
        fedlab.run(cfg, progress=False)
    sim = fedlab.Simulation.build(cfg)
    assert sim.store.load_checkpoint(sim.config_hash).next_round == 2
    monkeypatch.setattr(loop, "code_changed", lambda: None)
    resumed = fedlab.run(cfg, progress=False)
    fresh = fedlab.run(cfg.replace(runs_dir=cfg.runs_dir + "-fresh"), progress=False)
    assert resumed.status == fresh.status and torch.equal(resumed.theta, fresh.theta)


def test_code_digest_covers_the_numeric_path_only():
    names = {p.relative_to(PACKAGE).as_posix() for p in numeric_sources()}
    assert {"config.py", "algorithms/fedsam.py", "engine/loop.py", "models/functional.py",
            "data/partition.py"} <= names
    assert not any(n.startswith(("analysis/", "bench", "cli", "plots", "results", "sweep")) for n in names)
    assert statement_digests('"""doc"""\nimport os\nx = 1  # c\n') == statement_digests("x = 1\n")
    assert statement_digests("x = 1\n") != statement_digests("x = 2\n")


def test_run_key_includes_the_code_digest(monkeypatch, tiny):
    cfg = tiny()
    key = cfg.hash("fp")
    monkeypatch.setattr("fedlab.store.code_digest.code_digest", lambda: "another code base")
    assert cfg.hash("fp") != key


# --- 5. one process per run ---------------------------------------------------------------------------
_SECOND = """
import hashlib, sys, torch, fedlab
cfg = fedlab.Config.from_dict(__import__("json").loads(sys.argv[1]))
r = fedlab.run(cfg, progress=True)
print(r.status, hashlib.sha256(r.theta.numpy().tobytes()).hexdigest())
"""


def test_second_process_waits_for_the_lock_then_reads_the_result(small):
    cfg = small()
    sim = Simulation.build(cfg)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with sim.store.lock():
        other = subprocess.Popen([sys.executable, "-c", _SECOND, json.dumps(cfg.to_dict())], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = ""
            while "waiting for" not in line:  # blocks until the other process reports that it waits
                line = other.stderr.readline()
                assert line, "the second process ended without waiting for the lock"
            assert str(sim.store.dir) in line
            assert other.poll() is None
            mine = sim._run_locked(progress=False, stop_after_rounds=None)  # train while holding the lock
        except BaseException:
            other.kill()
            raise
        ckpt = sim.store.checkpoint_path.stat()
        files = _files(sim.store.dir)
    out, err = other.communicate(timeout=window(120))
    assert other.returncode == 0, err
    status, digest = out.split()
    import hashlib

    assert status == "finished" and digest == hashlib.sha256(mine.theta.numpy().tobytes()).hexdigest()
    after = sim.store.checkpoint_path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (ckpt.st_ino, ckpt.st_mtime_ns)  # read, never rewritten
    assert _files(sim.store.dir) == files


# --- 6. one atomic write ------------------------------------------------------------------------------
def test_orphan_tmp_files_are_removed_on_the_next_open(small):
    first = fedlab.run(small(), progress=False, stop_after_rounds=1)
    orphan = first.run_dir / ".checkpoint.pt.1a2b3c.tmp"
    orphan.write_bytes(b"half a checkpoint")
    fedlab.run(small(), progress=False)
    assert not orphan.exists()
    assert not list(first.run_dir.glob("*.tmp")) and not list(first.run_dir.glob(".*.tmp"))


@pytest.fixture
def umask027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_every_atomic_write_honours_the_umask(tmp_path, umask027, tiny):
    atomic_write_bytes(tmp_path / "a.bin", b"x")
    atomic_torch_save(tmp_path / "b.pt", {"x": torch.ones(2)})
    fedlab.make_partition("iid", [0, 1] * 10, 2, seed=0).to_json(tmp_path / "p.json")
    assert {_mode(tmp_path / n) for n in ("a.bin", "b.pt", "p.json")} == {0o640}


def test_dataset_unpacking_uses_the_atomic_write(tmp_path, umask027):
    from fedlab.data import _files

    source = tmp_path / "deb"
    source.mkdir()
    for f in _files.FMNIST_FILES:
        with gzip.open(source / (f + ".gz"), "wb") as fh:
            fh.write(f.encode() * 3)
    assert _files._gunzip_from_debian(tmp_path / "raw", source) == ""
    for f in _files.FMNIST_FILES:
        assert (tmp_path / "raw" / f).read_bytes() == f.encode() * 3
        assert _mode(tmp_path / "raw" / f) == 0o640
    assert not list((tmp_path / "raw").glob(".*"))


def test_checkpoint_write_is_fsynced(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    atomic_torch_save(tmp_path / "c.pt", {"x": torch.ones(3)})
    assert synced  # the data (and the folder) are flushed before the rename is relied on


# --- 7. validation before anything is created ---------------------------------------------------------
@pytest.mark.parametrize("case", ["bad_schedule", "bernoulli_tiny", "schedule_true_id"])
def test_late_validation_errors_leave_no_run_directory(small, tmp_path, case):
    path = tmp_path / "s.json"
    if case == "bad_schedule":
        path.write_text("[[0, 1], [2]]")  # 2 rounds for a 3-round run
        cfg = small(sampling="schedule", schedule_path=str(path))
    elif case == "schedule_true_id":
        path.write_text("[[0, true], [1], [2]]")
        cfg = small(sampling="schedule", schedule_path=str(path))
    else:
        cfg = small(sampling="bernoulli", participation=1e-9)
    with pytest.raises(ConfigError, match="schedule_path|participation"):
        fedlab.run(cfg, progress=False)
    assert not Path(cfg.runs_dir).exists()


# --- 8. error messages that name the field or file (the full table: tests/test_bad_input.py) -----------
def test_partition_file_overlap_is_counted(small, tmp_path):
    path = tmp_path / "overlap.json"
    clients = fedlab.run(small(), progress=False).partition.client_indices
    clients = [c.tolist() for c in clients]
    clients[0] = clients[0] + clients[1][:4]  # 4 samples held twice
    path.write_text(json.dumps(clients))
    run = fedlab.run(small(partition="file", partition_params={"path": str(path)}), progress=False)
    assert run.partition.stats.summary()["n_duplicated"] == 4
    record = json.loads((run.run_dir / "config.json").read_text())
    assert record["partition_summary"]["n_duplicated"] == 4


# --- 9. the CLI ---------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fedlab", *args], capture_output=True, text=True, env=env,
                          timeout=window(300))


def test_cli_corrupted_checkpoint_is_one_line_and_exit_4(small):
    cfg = small()
    first = fedlab.run(cfg, progress=False)
    (first.run_dir / "checkpoint.pt").write_bytes(b"garbage")
    args = ["run", "--dataset", "digits", "--n-clients", "8", "--participation", "0.5", "--rounds", "3",
            "--local-steps", "2", "--batch-size", "16", "--lr", "0.05", "--alpha", "0.5", "--eval-every", "1",
            "--checkpoint-every", "1", "--runs-dir", cfg.runs_dir, "--no-progress"]
    done = _cli(*args)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "checkpoint.pt" in done.stderr
    from fedlab.cli import main

    with pytest.raises(CheckpointError):  # --debug: the exception (and so its traceback) comes through
        main(["--debug", *args])


def test_cli_refuses_abbreviated_options(capsys, tmp_path):
    from fedlab.cli import main

    with pytest.raises(SystemExit) as exc:  # (if --alp were taken as --alpha, a one-round run would return 0)
        main(["run", "--dataset", "digits", "--n-clients", "4", "--rounds", "1", "--local-steps", "1",
              "--runs-dir", str(tmp_path), "--no-progress", "--alp", "0.5"])
    assert exc.value.code == 2 and "--alp" in capsys.readouterr().err


def test_cli_documents_its_exit_codes(capsys):
    from fedlab.cli import EXIT_CODES, main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code in EXIT_CODES:
        assert f"{code} = " in text
    guide = " ".join((REPO / "notebooks" / "book" / "guide" / "results.md").read_text().split())
    for code in EXIT_CODES:
        assert f"`{code}`" in guide


def test_run_result_carries_the_final_server_state(tiny):
    """RunResult.server is the final server state, the same whether trained now or loaded from disk."""
    cfg = tiny(algorithm="scaffold", rounds=2)
    trained = fedlab.run(cfg, progress=False)
    loaded = fedlab.run(cfg, progress=False)
    assert set(trained.server) == set(loaded.server) == {"theta", "c"}
    assert all(torch.equal(trained.server[k], loaded.server[k]) for k in trained.server)
    alg = fedlab.get_algorithm("scaffold")
    assert torch.equal(alg.global_model(trained.server), trained.theta.cpu())


def test_run_result_carries_its_key_and_config_record(small):
    """What the lab reads of a run without knowing the store's layout: the key the run was stored under, the
    run's name (its folder's) and its config record, the same whether trained now or loaded from disk."""
    cfg = small()
    trained = fedlab.run(cfg, progress=False)
    loaded = fedlab.run(cfg, progress=False)
    sim = Simulation.build(cfg)
    for res in (trained, loaded):
        assert res.key == sim.config_hash and res.run_id == sim.store.dir.name
        assert res.stored_config() == json.loads(sim.store.config_path.read_text())
        assert res.stored_config()["hash"] == res.key
    by_hand = results_mod.RunResult(cfg, trained.metrics, None, "finished", None, {})
    assert by_hand.key is by_hand.run_id is by_hand.stored_config() is None


def test_default_runs_dir_is_fedlab_runs_or_the_working_directory(tmp_path, monkeypatch):
    """Never a folder inside the installed package: ``$FEDLAB_RUNS`` if set, else ``./runs``."""
    from fedlab._paths import default_runs_dir

    monkeypatch.delenv("FEDLAB_RUNS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_runs_dir() == tmp_path / "runs"
    monkeypatch.setenv("FEDLAB_RUNS", str(tmp_path / "elsewhere"))
    assert default_runs_dir() == tmp_path / "elsewhere"
