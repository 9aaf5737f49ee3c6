"""fedlab.sweep: grid expansion, caching through fedlab.run, the summary table, rounds to target."""
from __future__ import annotations

import math
import os
import re

import numpy as np
import pandas as pd
import pytest
import torch

from fedlab import run as fedlab_run
from fedlab.config import ConfigError
from fedlab.sweep import expand_grid, rounds_to_target, summary_table, sweep


def test_sweep_two_algorithms_two_seeds(tiny):
    base = tiny(rounds=6, eval_every=1, lr=0.1)  # long enough to leave chance (else "collapsed")
    runs = sweep(base, {"algorithm": ["fedavg", "scaffold"]}, seeds=[0, 1], progress=False)
    assert [(r.config.algorithm, r.config.seed) for r in runs] == [
        ("fedavg", 0), ("fedavg", 1), ("scaffold", 0), ("scaffold", 1)]
    assert all(r.status == "finished" for r in runs)

    table = summary_table(runs, target=0.0)
    assert list(table["algorithm"]) == ["fedavg", "scaffold"]
    assert list(table["n_seeds"]) == [2, 2]
    for name, grp in zip(table["algorithm"], [runs[:2], runs[2:]]):
        row = table[table["algorithm"] == name].iloc[0]
        finals = [r.final_accuracy for r in grp]
        assert row["final_acc_mean"] == pytest.approx(np.mean(finals))
        assert row["final_acc_std"] == pytest.approx(np.std(finals, ddof=1))
        assert row["best_acc"] == pytest.approx(np.mean([r.metrics["test_acc"].max() for r in grp]))
        assert row["rounds_to_target"] == 1.0 and row["reached"] == 2  # every accuracy is ≥ 0
        assert row["status"] == "finished"
    # communication per client and round in units of d: FedAvg 1/1, SCAFFOLD 2/2
    assert table["uplink_x_d"].tolist() == [1.0, 2.0]
    assert table["downlink_x_d"].tolist() == [1.0, 2.0]
    assert (table["sec_per_round"] > 0).all()

    # a second sweep loads the same runs from runs/ instead of training again
    again = sweep(base, {"algorithm": ["fedavg"]}, seeds=[1], progress=False)
    assert again[0].run_dir == runs[1].run_dir
    assert again[0].metrics["wall_seconds"].tolist() == runs[1].metrics["wall_seconds"].tolist()


def test_expand_grid_product_and_dict_values(tiny):
    base = tiny(algorithm="fedvssam")
    configs = expand_grid(base, {"algorithm_params": [{}, {"preset": "base"}], "lr": [0.05, 0.1]}, seeds=[3])
    assert [(c.algorithm_params, c.lr, c.seed) for c in configs] == [
        ({}, 0.05, 3), ({}, 0.1, 3), ({"preset": "base"}, 0.05, 3), ({"preset": "base"}, 0.1, 3)]


@pytest.mark.parametrize("grid, field", [
    ({"algorithms": ["fedavg"]}, "algorithms"),
    ({"seed": [0, 1]}, "seed"),
    ({"lr": 0.1}, "lr"),
    ({"lr": []}, "lr"),
])
def test_bad_grid_keys_are_named(tiny, grid, field):
    with pytest.raises(ConfigError, match=repr(field) if field != "seed" else "seed"):
        expand_grid(tiny(), grid)


def test_invalid_combination_fails_before_running(tiny):
    with pytest.raises(ConfigError, match="lr"):
        sweep(tiny(), {"algorithm": ["fedavg"], "lr": [0.1, -1.0]}, progress=False)


def test_rounds_to_target_on_a_hand_made_frame():
    metrics = pd.DataFrame({"round": [1, 2, 3, 4, 5, 6],
                            "test_acc": [float("nan"), 0.40, float("nan"), 0.74, 0.76, 0.75]})
    assert rounds_to_target(metrics, 0.40) == 2.0
    assert rounds_to_target(metrics, 0.75) == 5.0  # the first round ≥ target, not the last
    assert rounds_to_target(metrics, 0.0) == 2.0  # unevaluated rounds never count
    assert math.isnan(rounds_to_target(metrics, 0.8))
    with pytest.raises(ValueError, match="target"):
        rounds_to_target(metrics, 75)


def test_summary_table_groups_seeds_and_marks_unreached(tiny):
    base = tiny(rounds=6, eval_every=1, lr=0.1)  # long enough to leave chance (else "collapsed")
    runs = sweep(base, {"algorithm": ["fedavg"]}, seeds=[0], progress=False)
    table = summary_table(runs, target=1.0)
    assert len(table) == 1 and table["n_seeds"].iloc[0] == 1
    assert math.isnan(table["final_acc_std"].iloc[0])  # one seed: no spread
    assert math.isnan(table["rounds_to_target"].iloc[0]) and table["reached"].iloc[0] == 0
    assert "rounds_to_target" not in summary_table(runs).columns
    with pytest.raises(ValueError):
        summary_table([])


def test_summary_table_never_splits_on_unhashed_fields(tiny):
    # client_threads changes no number (config._NOT_HASHED): runs differing in it and the seed are one group
    runs = [fedlab_run(tiny(rounds=2, seed=0, client_threads=1)), fedlab_run(tiny(rounds=2, seed=1, client_threads=2))]
    table = summary_table(runs)
    assert len(table) == 1 and table["n_seeds"].iloc[0] == 2
    assert "client_threads" not in table.columns


def test_summary_table_paired_counts_the_partition_seed_as_part_of_the_seed(tiny):
    # the paired protocol: each seed draws its own partition (partition_seed = seed)
    runs = [fedlab_run(tiny(rounds=2, seed=s, partition_seed=s)) for s in (0, 1)]
    assert summary_table(runs)["n_seeds"].tolist() == [1, 1]  # two partitions: two groups unless paired
    table = summary_table(runs, paired=True)
    assert len(table) == 1 and table["n_seeds"].iloc[0] == 2
    assert "partition_seed" not in table.columns


def test_repeated_configs_run_once_and_keep_their_own_fields(tiny, capsys):
    runs = sweep(tiny(rounds=2), {"client_threads": [1, 2]}, seeds=[0], backend="local", progress=False)
    assert runs[0].run_dir == runs[1].run_dir  # one run directory, trained once (in-process: one to do)
    assert [r.config.client_threads for r in runs] == [1, 2]
    assert torch.equal(runs[0].theta, runs[1].theta)
    assert len(list((runs[0].run_dir.parent / "sweep-logs").glob("*.log"))) == 1
    # said, and counted once: one run is one measurement, never n = 2
    assert "note: 1 of the 2 configs name a run an earlier one already names" in capsys.readouterr().err
    assert summary_table(runs)["n_seeds"].tolist() == [1]
    assert summary_table(runs + runs)["n_seeds"].tolist() == [1]


def test_repeated_seeds_and_values_are_refused_before_anything_runs(tiny, tmp_path):
    with pytest.raises(ConfigError, match=r"seeds \[0, 0, 0\] list seed 0 twice"):
        sweep(tiny(), {"algorithm": ["fedavg"]}, seeds=[0, 0, 0], progress=False)
    with pytest.raises(ConfigError, match=r"grid\['lr'\] lists 0.1 twice"):
        sweep(tiny(), {"lr": [0.1, 0.05, 0.1]}, seeds=[0], progress=False)
    with pytest.raises(ConfigError, match="twice"):
        expand_grid(tiny(), {"algorithm_params": [{"rho": 0.05}, {"rho": 0.05}]})
    assert not (tmp_path / "runs").exists()


def test_a_huge_grid_is_refused_from_its_shape_alone(tiny, tmp_path):
    import time

    values = [round(0.001 * (i + 1), 3) for i in range(100)]
    grid = {"lr": values, "weight_decay": [v / 10 for v in values], "local_steps": list(range(1, 101))}
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"1,000,000 runs \(100 lr × 100 weight_decay × 100 local_steps × 1 "
                                          r"seeds\), more than max_runs=1000.*pass max_runs=1000000"):
        sweep(tiny(), grid, seeds=[0], progress=False)
    assert time.perf_counter() - t0 < 0.5  # counted from the list lengths: no config was built
    assert not (tmp_path / "runs").exists()
    # declared, it expands
    assert len(expand_grid(tiny(), {"lr": values[:3]}, seeds=[0, 1], max_runs=6)) == 6
    with pytest.raises(ConfigError, match="max_runs=5"):
        expand_grid(tiny(), {"lr": values[:3]}, seeds=[0, 1], max_runs=5)


def test_an_unusable_runs_dir_is_named_before_anything_runs(tiny, tmp_path, capsys):
    from fedlab.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=f"runs_dir {re.escape(str(blocker))} cannot hold the sweep's runs: "
                                          f"{re.escape(str(blocker))} is not a folder"):
        sweep(tiny(runs_dir=str(blocker)), {"lr": [0.05, 0.1]}, progress=False)
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"base: {{dataset: digits, model: cnn, n_clients: 8, runs_dir: {blocker}}}\ngrid: {{}}\n")
    assert main(["sweep", str(grid), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: runs_dir {blocker} cannot hold the sweep's runs") and len(err.splitlines()) == 1
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match=f"{re.escape(str(locked))} is not writable"):
            sweep(tiny(runs_dir=str(locked / "runs")), {"lr": [0.05, 0.1]}, progress=False)


# --- grid files (fedlab.sweep.gridfile) and `python -m fedlab sweep` ---------------------------------------
def test_the_documented_example_grid_file_is_valid(tmp_path):
    from fedlab.sweep.gridfile import EXAMPLE, load_grid_file

    path = tmp_path / "example.yaml"
    path.write_text(EXAMPLE)
    spec = load_grid_file(path, runs_dir=str(tmp_path / "runs"))
    assert len(spec.configs) == 12 and spec.seeds == [0, 1, 2] and spec.target == 0.7
    assert {(c.algorithm, c.alpha) for c in spec.configs} == {
        (a, al) for a in ("fedavg", "fedsam") for al in (0.5, 0.1)}
    assert all(c.runs_dir == str(tmp_path / "runs") for c in spec.configs)


@pytest.mark.parametrize("text, key", [
    ("grid: {algorithm: [fedavg]}\nbase: {}\nseed: [0]\n", "'seed'"),  # a top-level typo
    ("base: {dataset: digits}\n", "'grid'"),
    ("base: {algorithms: fedavg}\ngrid: {}\n", "algorithms"),
    ("base: {seed: 3}\ngrid: {}\n", "seeds"),
    ("base: {dataset: digits, lr: -1}\ngrid: {}\n", "lr"),
    ("grid: {lr: 0.1}\n", "'lr'"),
    ("grid: {optimizer: [sgd]}\n", "'optimizer'"),
    ("grid: {lr: [0.1, -1]}\n", "lr"),
    ("grid: {}\nseeds: [0, -1]\n", "seeds"),
    ("grid: {}\nseeds: 3\n", "seeds"),
    ("grid: {}\nseeds: [0, 1, 0]\n", "'seeds' lists seed 0 more than once"),
    ("grid: {lr: [0.1, 0.1]}\n", "twice"),
    ("grid: {lr: [0.1, 0.05]}\nmax_runs: 1\n", "2 runs (2 lr × 1 seeds), more than max_runs=1"),
    ("grid: {}\nmax_runs: 0\n", "'max_runs' must be an integer"),
    ("grid: {}\ntarget: 70\n", "target"),
    ("- a list\n", "mapping"),
    ("grid: {algorithm: [fedavg\n", "YAML"),
])
def test_bad_grid_files_name_the_file_and_key(tmp_path, text, key):
    from fedlab.sweep.gridfile import load_grid_file

    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(key)) as info:
        load_grid_file(path)
    assert str(info.value).startswith(f"{path}: ")
    with pytest.raises(ConfigError, match="no such grid file"):
        load_grid_file(tmp_path / "missing.yaml")


def test_cli_sweep_runs_a_grid_file_and_prints_the_summary(tmp_path, capsys):
    from fedlab.cli import main

    path = tmp_path / "grid.yaml"
    path.write_text(f"""
base: {{dataset: digits, model: cnn, n_clients: 8, participation: 0.5, rounds: 4, local_steps: 4, lr: 0.1, partition: iid,
        batch_size: 16, eval_every: 1, runs_dir: {tmp_path / 'runs'}}}
grid: {{algorithm: [fedavg, scaffold]}}
seeds: [0, 1]
target: 0.0
""")
    assert main(["sweep", str(path), "--backend", "sequential", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "4 runs (2 combinations x 2 seeds) on backend sequential" in out
    lines = [line.split() for line in out.splitlines()]
    header = next(line for line in lines if line[:2] == ["algorithm", "n_seeds"])
    rows = {line[0]: line for line in lines if line[:1] in (["fedavg"], ["scaffold"])}
    assert set(rows) == {"fedavg", "scaffold"}
    # the per-seed column holds a list with spaces: read the columns before it and check the rest by value
    head = header[:header.index("final_acc_seeds")]
    for line in rows.values():
        r = dict(zip(head, line))
        assert (r["n_seeds"], r["n_collapsed"], r["n_diverged"]) == ("2", "0", "0")
        tail = header[header.index("final_acc_seeds") + 1:]  # the columns after it, read from the end
        r = dict(zip(reversed(tail), reversed(line)))
        assert (r["status"], r["reached"]) == ("finished", "2")
    assert len(list((tmp_path / "runs" / "sweep-logs").glob("*.log"))) == 4
    # bad input: exit code 2 and the file named, nothing run
    path.write_text("grid: {algorithm: [fedavgg]}\n")
    assert main(["sweep", str(path), "--no-progress"]) == 2
    assert str(path) in capsys.readouterr().err


def test_a_grid_file_with_yaml_aliases_is_refused_before_expansion(tmp_path):
    """A 1 KB alias bomb (each level refers to the one below nine times) would expand to 10^9 nodes."""
    from fedlab.config import ConfigError
    from fedlab.sweep.gridfile import load_grid_file

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\ngrid: {algorithm: [fedavg]}\n")
    with pytest.raises(ConfigError, match="aliases"):
        load_grid_file(path)
