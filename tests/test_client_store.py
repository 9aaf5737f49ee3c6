"""Client states on disk (issue 43): the same numbers as in RAM, resumable, integrity-checked.

Every stateful method of the case table runs a small federation with partial participation twice,
client states in memory and on disk (:class:`fedlab.store.client_states.DiskClientStates`); θ, every
metric and every client's stored state must be equal bit for bit. Runs killed at each write point, and
after rounds whose states were written but never checkpointed, resume to the uninterrupted run.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

import fedlab
from fedlab import CheckpointError
from fedlab.results import RunStore
from fedlab.store.client_states import ClientStateError, DiskClientStates, Layout, use_disk
import faults
from cases import CASES

NUMBERS = ["round", "train_loss", "test_acc", "test_loss", "flatness_distance", "uplink_floats"]
BASE = dict(dataset="digits", model="mlp", n_clients=8, participation=0.5, rounds=4, local_steps=3,
            batch_size=16, lr=0.1, alpha=0.5, checkpoint_every=1)


def _stateful(case) -> bool:
    alg = fedlab.Config(algorithm=case.method, algorithm_params=case.params).built_algorithm
    return bool(alg.client_init(torch.zeros(4)))


STATEFUL = [c for c in CASES if _stateful(c)]


def cfg(runs_dir: Path, **overrides) -> fedlab.Config:
    return fedlab.Config(**{**BASE, "runs_dir": str(runs_dir), **overrides})


def stored_client_states(result: fedlab.RunResult) -> dict[int, dict[str, torch.Tensor]]:
    """Every client's state as the run's last checkpoint keeps it (in the checkpoint or on disk)."""
    ckpt = RunStore(result.run_dir).load_checkpoint(result.key)
    if ckpt.client_store is None:
        return ckpt.client_states
    return dict(DiskClientStates.resume(result.run_dir, ckpt.client_store).items())


def assert_same_run(a: fedlab.RunResult, b: fedlab.RunResult) -> None:
    assert a.status == b.status == "finished"
    assert torch.equal(a.theta, b.theta)
    pd.testing.assert_frame_equal(a.metrics[NUMBERS], b.metrics[NUMBERS])
    sa, sb = stored_client_states(a), stored_client_states(b)
    assert sorted(sa) == sorted(sb) and sa
    for i in sa:
        assert sa[i].keys() == sb[i].keys()
        for k in sa[i]:
            assert torch.equal(sa[i][k], sb[i][k]), (i, k)


def test_the_case_table_has_stateful_methods():
    assert {"scaffold", "feddyn", "fedsmoo"} <= {c.method for c in STATEFUL}


@pytest.mark.parametrize("case", STATEFUL, ids=[c.label for c in STATEFUL])
def test_disk_store_equals_memory_store(tmp_path, case):
    kw = dict(algorithm=case.method, algorithm_params=case.params)
    mem = fedlab.run(cfg(tmp_path / "mem", client_store="memory", **kw), progress=False)
    disk = fedlab.run(cfg(tmp_path / "disk", client_store="disk", **kw), progress=False)
    assert (disk.run_dir / "client_states.bin").is_file() and not (mem.run_dir / "client_states.bin").exists()
    assert RunStore(disk.run_dir).load_checkpoint(disk.key).client_states == {}
    assert_same_run(mem, disk)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return fedlab.run(cfg(tmp_path_factory.mktemp("ref"), algorithm="scaffold", client_store="memory"),
                      progress=False)


class Killed(BaseException):
    pass


@pytest.mark.parametrize("every", [1, 2])
@pytest.mark.parametrize("point", faults.POINTS)
def test_killed_disk_run_resumes_bit_identically(tmp_path, reference, point, every):
    # with checkpoint_every 2, a kill before round 4's checkpoint leaves rounds 3 and 4's states
    # written but uncommitted: the resumed run must read round 2's
    def hook(where: str, rounds_done: int) -> None:
        if (where, rounds_done) == (point, 4):
            raise Killed(where)

    c = cfg(tmp_path, algorithm="scaffold", client_store="disk", checkpoint_every=every)
    with faults.injected(hook), pytest.raises(Killed):
        fedlab.run(c, progress=False)
    assert_same_run(fedlab.run(c, progress=False), reference)


@pytest.mark.parametrize(("first", "then"), [("memory", "disk"), ("disk", "memory")])
def test_a_run_resumes_with_the_other_store(tmp_path, reference, first, then):
    c = cfg(tmp_path, algorithm="scaffold", client_store=first)
    fedlab.run(c, progress=False, stop_after_rounds=2)
    assert_same_run(fedlab.run(c.replace(client_store=then), progress=False), reference)


def test_auto_keeps_states_on_disk_above_the_budget(tmp_path, reference):
    small = fedlab.run(cfg(tmp_path, algorithm="scaffold", client_store="auto", client_state_budget_mb=1e-3),
                       progress=False)
    assert (small.run_dir / "client_states.bin").is_file()
    assert small.key == reference.key  # where states live is not part of the run key
    assert_same_run(small, reference)


def _stopped_disk_run(tmp_path: Path) -> tuple[fedlab.Config, fedlab.RunResult]:
    c = cfg(tmp_path, algorithm="scaffold", client_store="disk")
    return c, fedlab.run(c, progress=False, stop_after_rounds=2)


def test_a_changed_index_is_refused_before_training(tmp_path):
    c, stopped = _stopped_disk_run(tmp_path)
    run_dir = stopped.run_dir
    (idx,) = run_dir.glob("client_states.*.idx")
    raw = bytearray(idx.read_bytes())
    raw[0] ^= 1
    idx.write_bytes(bytes(raw))
    before = (run_dir / "checkpoint.pt").read_bytes()
    with pytest.raises(CheckpointError, match=r"client_states\.\d+\.idx"):
        fedlab.run(c, progress=False)
    assert (run_dir / "checkpoint.pt").read_bytes() == before


def test_a_damaged_record_is_named_when_read(tmp_path):
    _, stopped = _stopped_disk_run(tmp_path)
    run_dir = stopped.run_dir
    ckpt = RunStore(run_dir).load_checkpoint(stopped.key)
    store = DiskClientStates.resume(run_dir, ckpt.client_store)
    i = next(iter(store))
    s = int(store.index["generation"][i].argmax())
    data = run_dir / "client_states.bin"
    with open(data, "r+b") as fh:
        at = (2 * i + s) * store.layout.record_bytes + 5
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(ClientStateError, match=f"client {i}'s record"):
        DiskClientStates.resume(run_dir, ckpt.client_store)[i]


def test_store_refuses_foreign_states_and_ids(tmp_path):
    template = {"c": torch.zeros(3), "n": torch.zeros((), dtype=torch.float64)}
    store = DiskClientStates.create(tmp_path, 4, template)
    assert len(store) == 0 and 2 not in store and list(store) == []
    with pytest.raises(ValueError, match="layout"):
        store[0] = {"c": torch.zeros(4), "n": torch.zeros((), dtype=torch.float64)}
    with pytest.raises(KeyError):
        store[4] = template
    with pytest.raises(KeyError):
        store[1]
    state = {"c": torch.tensor([1.0, -2.0, 3.5]), "n": torch.tensor(7.0, dtype=torch.float64)}
    store[2] = state
    assert list(store) == [2] and torch.equal(store[2]["c"], state["c"]) and store[2]["n"].dtype == torch.float64
    assert Layout.of(store[2]) == store.layout


def test_use_disk_rule():
    t = {"c": torch.zeros(256)}  # 1 KiB
    assert use_disk("auto", 2048, t, budget_mb=1.0) and not use_disk("auto", 1024, t, budget_mb=1.0)
    assert use_disk("disk", 1, t, 1e9) and not use_disk("memory", 10**9, t, 1.0)
    assert not use_disk("disk", 10**9, {}, 1.0)  # a stateless method keeps nothing


@pytest.mark.parametrize(("field", "value"), [("client_store", "ssd"), ("client_state_budget_mb", 0),
                                              ("client_state_budget_mb", float("nan"))])
def test_bad_store_settings_name_the_field(field, value):
    with pytest.raises(fedlab.ConfigError, match=field):
        fedlab.Config(**{field: value})
