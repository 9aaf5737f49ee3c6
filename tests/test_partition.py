"""Tests for fedlab.data.partition: coverage, shape of the label skew, determinism, files, errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _load import window

from fedlab.data import partition as P
from fedlab.data._partition_stats import gini
from fedlab.data.partition import (
    PARTITIONERS,
    Partition,
    dirichlet,
    dirichlet_client,
    from_file,
    iid,
    make_partition,
    natural,
    pathological,
    shards,
)

REPO = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------- label sets


def _balanced(per_class: int = 600, n_classes: int = 10) -> np.ndarray:
    return np.random.default_rng(0).permutation(np.repeat(np.arange(n_classes), per_class))


def _unbalanced() -> np.ndarray:
    # class k has 100 + 80k samples: 100 … 820, 4 600 in all
    sizes = 100 + 80 * np.arange(10)
    return np.random.default_rng(1).permutation(np.repeat(np.arange(10), sizes))


def _digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().target.astype(np.int64)


LABELS = {"balanced": _balanced(), "unbalanced": _unbalanced(), "digits": _digits()}
BALANCED = LABELS["balanced"]

# Disjoint schemes, as make_partition keyword sets (each must use every index exactly once).
DISJOINT = {
    "iid": dict(scheme="iid"),
    "dirichlet": dict(scheme="dirichlet", alpha=0.5),
    "dirichlet_capped": dict(scheme="dirichlet", alpha=0.1, min_size=5, balance_cap=True),
    "dirichlet_client_disjoint": dict(scheme="dirichlet_client", alpha=0.3, reuse_on_exhaustion=False),
    "dirichlet_client_total_disjoint": dict(
        scheme="dirichlet_client", alpha=1.0, concentration="total", reuse_on_exhaustion=False
    ),
    "pathological": dict(scheme="pathological", classes_per_client=2),
    "shards": dict(scheme="shards", shards_per_client=2),
}
GENERATED = {**DISJOINT, "dirichlet_client_reuse": dict(scheme="dirichlet_client", alpha=0.1)}


def _make(case: str, labels: np.ndarray = BALANCED, n_clients: int = 20, seed: int = 0) -> Partition:
    kw = dict(GENERATED[case])
    return make_partition(kw.pop("scheme"), labels, n_clients, seed=seed, **kw)


# ---------------------------------------------------------------------------- coverage and sizes


@pytest.mark.parametrize("labels_name", sorted(LABELS))
@pytest.mark.parametrize("case", sorted(DISJOINT))
def test_disjoint_schemes_use_every_index_exactly_once(case: str, labels_name: str) -> None:
    y = LABELS[labels_name]
    part = _make(case, y)
    flat = np.concatenate(part.client_indices)
    assert part.is_disjoint()
    np.testing.assert_array_equal(np.sort(flat), np.arange(len(y)))
    assert part.n_clients == 20 and part.sizes.sum() == len(y)
    assert all(ix.dtype == np.int64 for ix in part.client_indices)
    assert part.n_classes == int(y.max()) + 1
    json.dumps(part.params)  # params must be JSON-serialisable


@pytest.mark.parametrize("n_clients", [7, 10, 100])
def test_iid_sizes_differ_by_at_most_one(n_clients: int) -> None:
    sizes = iid(LABELS["digits"], n_clients, seed=3).sizes  # 1 797 samples: never divisible here
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 1797


@pytest.mark.parametrize("reuse", [True, False])
def test_dirichlet_client_sizes_equal_and_remainder_goes_to_client_0(reuse: bool) -> None:
    even = dirichlet_client(BALANCED, 20, 0.3, seed=0, reuse_on_exhaustion=reuse)
    assert set(even.sizes.tolist()) == {300}
    odd = dirichlet_client(LABELS["digits"], 10, 0.3, seed=0, reuse_on_exhaustion=reuse)
    assert odd.sizes[0] == 179 + 7 and set(odd.sizes[1:].tolist()) == {179}


def test_dirichlet_client_reuse_duplicates_images_like_fl_simulator() -> None:
    part = dirichlet_client(BALANCED, 50, 0.05, seed=0, reuse_on_exhaustion=True)
    assert not part.is_disjoint()
    assert part.stats.n_unique < len(BALANCED) == part.sizes.sum()
    assert part.stats.summary()["n_duplicated"] == len(BALANCED) - part.stats.n_unique > 0


def test_dirichlet_client_is_fast_on_60k_labels() -> None:
    y = np.random.default_rng(0).integers(0, 10, 60_000)
    for reuse in (True, False):
        t0 = time.perf_counter()
        part = dirichlet_client(y, 100, 0.1, seed=0, reuse_on_exhaustion=reuse)
        assert time.perf_counter() - t0 < 2.0
        assert part.sizes.sum() == 60_000


# ---------------------------------------------------------------------------- shape of the skew


def test_huge_alpha_approaches_iid_for_both_dirichlet_schemes() -> None:
    y = _balanced(per_class=1000)
    assert dirichlet(y, 10, 1e4, seed=0).stats.summary()["mean_tv_distance"] < 0.05
    for reuse in (True, False):
        part = dirichlet_client(y, 5, 1e4, seed=0, reuse_on_exhaustion=reuse)
        assert part.stats.summary()["mean_tv_distance"] < 0.05


def test_small_alpha_gives_few_effective_classes() -> None:
    assert dirichlet(BALANCED, 50, 0.1, seed=0).stats.summary()["mean_effective_classes"] < 3
    assert dirichlet_client(BALANCED, 50, 0.1, seed=0).stats.summary()["mean_effective_classes"] < 3
    total = dirichlet_client(BALANCED, 50, 0.1, seed=0, concentration="total")
    assert total.stats.summary()["mean_effective_classes"] < 1.5
    # and a large α is clearly less skewed than a small one
    assert dirichlet(BALANCED, 50, 10.0, seed=0).stats.summary()["mean_effective_classes"] > 8


def test_total_concentration_is_alpha_over_C() -> None:
    a = dirichlet_client(BALANCED, 20, 1.0, seed=4, concentration="total")
    b = dirichlet_client(BALANCED, 20, 0.1, seed=4, concentration="per_class")
    assert a.fingerprint == b.fingerprint
    assert a.params["per_class_alpha"] == pytest.approx(0.1)


@pytest.mark.parametrize("n_clients, c", [(20, 1), (20, 2), (7, 3), (13, 4), (20, 5), (6, 10)])
def test_pathological_gives_exactly_c_classes_with_balanced_holders(n_clients: int, c: int) -> None:
    part = pathological(_unbalanced(), n_clients, c, seed=2)
    assert (part.stats.classes_present == c).all()
    holders = (part.stats.counts > 0).sum(axis=0)
    assert holders.max() - holders.min() <= 1
    if c == 1:
        assert (part.stats.effective_classes == 1.0).all()


def test_pathological_rejects_class_smaller_than_its_holders() -> None:
    y = np.concatenate([np.repeat(np.arange(9), 100), [9, 9]])  # class 9 has 2 samples
    with pytest.raises(ValueError, match="class 9 has 2 samples"):
        pathological(y, 50, 2, seed=0)


@pytest.mark.parametrize("spc", [1, 2, 3])
def test_shards_give_at_most_shards_per_client_classes(spc: int) -> None:
    part = shards(BALANCED, 100, spc, seed=0)  # shard size divides the class size 600
    assert part.stats.classes_present.max() <= spc
    assert set(part.sizes.tolist()) == {6000 // 100}


def test_min_size_resampling() -> None:
    plain = dirichlet(BALANCED, 20, 0.1, seed=4)
    assert plain.sizes.min() < 20  # so the constraint below really forces a redraw
    part = dirichlet(BALANCED, 20, 0.1, seed=4, min_size=20)
    assert part.sizes.min() >= 20 and part.is_disjoint()
    with pytest.raises(ValueError, match="min_size=290"):
        dirichlet(BALANCED, 20, 0.1, seed=0, min_size=290, max_tries=3)  # possible, not reachable
    with pytest.raises(ValueError, match="min_size=301"):
        dirichlet(BALANCED, 20, 0.1, seed=0, min_size=301)  # 20·301 > 6000: impossible


def test_balance_cap_bounds_client_size() -> None:
    y = np.repeat(np.arange(100), 60)  # many small classes make greedy clients possible
    bound = len(y) / 10 + 60  # n/N plus one class chunk
    for seed in range(3):
        assert dirichlet(y, 10, 0.01, seed=seed, balance_cap=True).sizes.max() <= bound
    assert dirichlet(y, 10, 0.01, seed=0).sizes.max() > bound  # the cap is what keeps it there


# ---------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("case", sorted(GENERATED))
def test_same_seed_same_partition_different_seed_different(case: str) -> None:
    a, b, c = _make(case, seed=5), _make(case, seed=5), _make(case, seed=6)
    assert a.fingerprint == b.fingerprint
    assert all(np.array_equal(x, z) for x, z in zip(a.client_indices, b.client_indices))
    assert a.fingerprint != c.fingerprint


def test_make_partition_matches_direct_calls() -> None:
    y = BALANCED
    assert make_partition("iid", y, 9, seed=1).fingerprint == iid(y, 9, seed=1).fingerprint
    assert (make_partition("dirichlet", y, 9, seed=1, alpha=0.3).fingerprint
            == dirichlet(y, 9, 0.3, seed=1).fingerprint)
    assert (make_partition("shards", y, 9, seed=1, shards_per_client=3).fingerprint
            == shards(y, 9, 3, seed=1).fingerprint)


def test_fingerprint_encodes_lengths_and_order() -> None:
    y = np.zeros(3, dtype=np.int64)
    fp = lambda clients: Partition(tuple(clients), "file", {}, 1, y).fingerprint  # noqa: E731
    assert fp([[1], [2]]) != fp([[1, 2], []])
    assert fp([[1], [2]]) != fp([[2], [1]])
    assert fp([[1], [2]]) == fp([np.array([1], dtype=np.int32), [2]])


_FP_SCRIPT = """
import numpy as np
from fedlab.data.partition import make_partition
y = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 600))
kw = {kw!r}
print(" ".join(make_partition(k.pop("scheme"), y, 20, seed=0, **k).fingerprint for k in kw))
"""


def test_fingerprint_stable_across_processes_and_hash_seeds() -> None:
    cases = sorted(GENERATED)
    script = _FP_SCRIPT.format(kw=[dict(GENERATED[c]) for c in cases])
    procs = []
    for hash_seed in ("0", "123"):  # run both at once: importing torch dominates the cost
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        procs.append(subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=window(120))
        assert proc.returncode == 0, err
        outputs.append(out.split())
    here = [_make(c).fingerprint for c in cases]
    assert outputs[0] == outputs[1] == here


# ---------------------------------------------------------------------------- files


@pytest.mark.parametrize("case", sorted(GENERATED))
def test_json_round_trip_keeps_fingerprint(case: str, tmp_path: Path) -> None:
    part = _make(case)
    path = tmp_path / "sub" / "split.json"
    part.to_json(path)
    loaded = from_file(path, BALANCED)
    assert loaded.fingerprint == part.fingerprint
    assert loaded.scheme == "file" and loaded.params["source_scheme"] == part.scheme
    assert loaded.params["source_params"] == part.params
    pd.testing.assert_frame_equal(loaded.stats.counts, part.stats.counts)
    raw = json.loads(path.read_text())
    assert set(raw) == {"scheme", "params", "n_classes", "clients"} and raw["n_classes"] == 10
    assert [p.name for p in path.parent.iterdir()] == ["split.json"]  # no temporary left behind


def test_from_file_without_labels(tmp_path: Path) -> None:
    part = iid(BALANCED, 4, seed=0)
    part.to_json(tmp_path / "p.json")
    loaded = from_file(tmp_path / "p.json")
    assert loaded.fingerprint == part.fingerprint and loaded.n_classes == 10 and loaded.labels is None
    with pytest.raises(ValueError, match="labels"):
        loaded.stats  # noqa: B018


def test_to_json_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.json"
    iid(BALANCED, 4, seed=0).to_json(path)
    before = path.read_bytes()

    def crash(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(P.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        iid(BALANCED, 5, seed=1).to_json(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_bare_list_and_client_id_map_accepted(tmp_path: Path) -> None:
    y = np.array([0, 1, 2, 0, 1, 2])
    (tmp_path / "bare.json").write_text("[[0, 3], [1, 4], [5, 2]]")
    bare = from_file(tmp_path / "bare.json", y)
    assert bare.scheme == "file" and bare.n_clients == 3 and bare.n_classes == 3
    np.testing.assert_array_equal(bare.client_indices[2], [5, 2])  # stored order is kept
    assert bare.stats.classes_present.tolist() == [1, 1, 1]
    (tmp_path / "map.json").write_text('{"1": [1, 4], "0": [0, 3], "2": [5, 2]}')
    assert from_file(tmp_path / "map.json", y).fingerprint == bare.fingerprint
    assert make_partition("file", y, 3, seed=0, path=tmp_path / "bare.json").fingerprint == bare.fingerprint
    with pytest.raises(ValueError, match="n_clients=4"):
        make_partition("file", y, 4, seed=0, path=tmp_path / "bare.json")


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"clients": [[0, 1], [2', "not valid JSON"),
        ("[[0, 1], [2, 99]]", "index 99 out of range"),
        ("[[0, 1], [2, -1]]", ">= 0"),
        ("[[0, 1.5], [2]]", "must be an integer"),
        ("[[0, true], [2]]", "must be an integer"),
        ("[[0, 1], []]", "non-empty"),
        ("[]", "non-empty list"),
        ("42", "expected a JSON object"),
        ('{"scheme": "iid"}', "expected a JSON object"),
        ('{"clients": [[0], [1]], "n_classes": 7}', "does not match"),
        ('{"0": [0], "2": [1]}', "client ids"),
        ("[[0], 5]", "client 1 must be a list"),
    ],
)
def test_corrupted_files_rejected(text: str, match: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        from_file(path, np.arange(6) % 3)


def test_allow_empty_clients(tmp_path: Path) -> None:
    (tmp_path / "e.json").write_text("[[0, 1], []]")
    part = from_file(tmp_path / "e.json", np.array([0, 1]), allow_empty=True)
    assert part.sizes.tolist() == [2, 0] and np.isnan(part.stats.tv_distance[1])


# ---------------------------------------------------------------------------- bad input


Y500 = np.arange(500) % 10
DRAWN_SCHEMES = [s for s in PARTITIONERS if s not in ("file", "natural")]  # drawn from labels and a seed


@pytest.mark.parametrize("scheme", DRAWN_SCHEMES)
@pytest.mark.parametrize("n_clients, match", [
    (0, "n_clients must be >= 1"),
    (-3, "n_clients must be >= 1"),
    (1000, r"n_clients=1000 exceeds the number of samples \(500\)"),
    (2.5, "n_clients must be an integer"),
])
def test_bad_n_clients(scheme: str, n_clients: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_partition(scheme, Y500, n_clients, seed=0, alpha=1.0, classes_per_client=2)


@pytest.mark.parametrize("labels, match", [
    (np.zeros((10, 2), dtype=int), "labels must be a 1-D"),
    (np.linspace(0, 9, 100), "labels must have an integer dtype"),
    (np.array([0, 1, -1, 2]), "labels must be >= 0"),
    (np.array([], dtype=int), "labels must be non-empty"),
])
@pytest.mark.parametrize("scheme", DRAWN_SCHEMES)
def test_bad_labels(scheme: str, labels: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_partition(scheme, labels, 2, seed=0, alpha=1.0, classes_per_client=1)


@pytest.mark.parametrize("call, match", [
    (lambda: dirichlet(Y500, 5, -1.0, seed=0), r"alpha must be > 0 \(got -1.0\)"),
    (lambda: dirichlet(Y500, 5, 0, seed=0), r"alpha must be > 0"),
    (lambda: dirichlet_client(Y500, 5, 0.0, seed=0), r"alpha must be > 0"),
    (lambda: dirichlet(Y500, 5, float("nan"), seed=0), "alpha must be finite"),
    (lambda: dirichlet_client(Y500, 5, float("inf"), seed=0), "alpha must be finite"),
    (lambda: dirichlet(Y500, 5, "0.5", seed=0), "alpha must be a number"),
    (lambda: make_partition("dirichlet", Y500, 5, seed=0), "alpha is required for scheme 'dirichlet'"),
    (lambda: make_partition("dirichlet_client", Y500, 5, seed=0), "alpha is required"),
    (lambda: pathological(Y500, 5, 12, seed=0), r"classes_per_client=12 exceeds the number of classes \(10\)"),
    (lambda: pathological(Y500, 5, 0, seed=0), "classes_per_client must be >= 1"),
    (lambda: make_partition("pathological", Y500, 5, seed=0), "classes_per_client is required"),
    (lambda: shards(Y500, 300, 2, seed=0), r"shards_per_client\*n_clients=600 exceeds the number of samples \(500\)"),
    (lambda: shards(Y500, 5, 0, seed=0), "shards_per_client must be >= 1"),
    (lambda: make_partition("foo", Y500, 5, seed=0),
     "unknown partition scheme 'foo'; allowed: iid, dirichlet, dirichlet_client, pathological, shards, file"),
    (lambda: dirichlet_client(Y500, 5, 1.0, seed=0, concentration="bogus"),
     "concentration must be one of per_class, total"),
    (lambda: dirichlet(Y500, 5, 1.0, seed=0, min_size=-1), "min_size must be >= 0"),
    (lambda: dirichlet(Y500, 5, 1.0, seed=0, max_tries=0), "max_tries must be >= 1"),
    (lambda: iid(Y500, 5, seed="x"), "seed must be an integer"),
    (lambda: iid(Y500, 5, seed=True), "seed must be an integer"),
    (lambda: make_partition("file", Y500, 5, seed=0), "path is required"),
])
def test_bad_parameters(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------------- stats


def test_counts_match_sizes_and_class_totals() -> None:
    part = dirichlet(_unbalanced(), 15, 0.3, seed=0)
    counts = part.stats.counts
    assert counts.index.name == "client" and list(counts.columns) == list(range(10))
    assert counts.dtypes.map(pd.api.types.is_integer_dtype).all()
    np.testing.assert_array_equal(counts.sum(axis=1).to_numpy(), part.sizes)
    np.testing.assert_array_equal(counts.sum(axis=0).to_numpy(), np.bincount(_unbalanced()))


def test_stats_on_hand_made_partitions() -> None:
    y = np.array([0, 0, 1, 1])
    sorted_split = Partition(([0, 1], [2, 3]), "file", {}, 2, y).stats
    assert sorted_split.tv_distance.tolist() == [0.5, 0.5]
    assert sorted_split.effective_classes.tolist() == [1.0, 1.0]
    mixed = Partition(([0, 2], [1, 3]), "file", {}, 2, y).stats
    assert mixed.tv_distance.tolist() == [0.0, 0.0]
    assert mixed.effective_classes == pytest.approx([2.0, 2.0])
    assert mixed.size_gini == 0.0
    # the global distribution is over the union of client samples: index 3 unused here
    partial = Partition(([0], [2]), "file", {}, 2, y).stats
    assert partial.tv_distance.tolist() == [0.5, 0.5] and partial.n_unique == 2


def test_gini() -> None:
    assert gini(np.array([5, 5, 5])) == 0.0
    assert gini(np.array([0, 0, 0, 10])) == pytest.approx(0.75)
    assert iid(BALANCED, 10, seed=0).stats.size_gini == 0.0
    assert dirichlet(BALANCED, 10, 0.1, seed=0).stats.size_gini > 0.2


def test_iid_tv_small_and_summary() -> None:
    part = iid(_balanced(per_class=1000), 5, seed=0)
    summary = part.stats.summary()
    assert set(summary) == {
        "n_clients", "n_empty", "n_samples", "n_unique", "n_duplicated", "min_size", "max_size", "size_gini",
        "mean_effective_classes", "min_effective_classes", "max_effective_classes",
        "mean_classes_present", "mean_tv_distance",
    }
    assert summary["mean_tv_distance"] < 0.05
    assert summary["n_clients"] == 5 and summary["n_samples"] == summary["n_unique"] == 10_000
    assert summary["n_duplicated"] == 0
    assert summary["mean_classes_present"] == 10 and summary["mean_effective_classes"] > 9.9
    table = part.stats.table()
    assert list(table.columns) == ["size", "classes_present", "effective_classes", "tv_distance"]
    assert table.index.name == "client" and table["size"].tolist() == part.sizes.tolist()


def test_partition_is_immutable() -> None:
    part = iid(BALANCED, 4, seed=0)
    with pytest.raises(ValueError):
        part.client_indices[0][0] = 7
    with pytest.raises(ValueError):
        part.labels[0] = 3
    with pytest.raises(ValueError, match="out of range"):
        Partition(([0, 5],), "file", {}, 1, np.zeros(3, dtype=np.int64))


def test_partition_seed_fixes_the_split_across_training_seeds():
    """``partition_seed`` alone draws the split: seeds 0 and 1 share it, another partition seed moves it,
    and None falls back to ``seed`` (so a single-seed config keeps its old split)."""
    from fedlab import Config
    from fedlab.config import ConfigError
    from fedlab.engine.loop import build_dataset, build_partition

    base = Config(dataset="digits", partition="dirichlet", alpha=0.3, n_clients=10)
    data = build_dataset(base)

    def split(**kw):
        return [c.tolist() for c in build_partition(base.replace(**kw), data).client_indices]

    assert split(seed=0, partition_seed=5) == split(seed=1, partition_seed=5)
    assert split(seed=0, partition_seed=5) != split(seed=0, partition_seed=6)
    assert split(seed=3) == split(seed=0, partition_seed=3)
    assert split(seed=0) != split(seed=1)
    with pytest.raises(ConfigError, match="partition_seed"):
        base.replace(partition_seed=-1)


# ---------------------------------------------------------------------------- natural


def test_natural_keeps_the_datasets_clients_as_given() -> None:
    own = [np.array([4, 0, 2]), np.array([1]), np.array([3, 5])]
    part = make_partition("natural", np.array([0, 1, 0, 1, 2, 2]), 3, seed=7, natural_clients=own)
    assert part.scheme == "natural" and part.n_classes == 3 and part.params == {}
    assert [c.tolist() for c in part.client_indices] == [[4, 0, 2], [1], [3, 5]]
    again = make_partition("natural", np.array([0, 1, 0, 1, 2, 2]), 3, seed=8, natural_clients=own)
    assert again.fingerprint == part.fingerprint  # no randomness: the seed is not used


@pytest.mark.parametrize("call, match", [
    (lambda: natural(Y500, None, 5), "this dataset has no natural clients"),
    (lambda: make_partition("natural", Y500, 5, seed=0), "this dataset has no natural clients"),
    (lambda: natural(Y500, [np.arange(3), np.arange(3, 9)], 5), "n_clients=5 must equal the dataset's 2 natural"),
    (lambda: natural(Y500, [np.arange(3)], 0), "n_clients must be >= 1"),
    (lambda: natural(Y500, [np.array([500])], 1), "out of range for 500 labels"),
])
def test_natural_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
