"""fedlab.sweep: grid expansion, caching through fedlab.run, the summary table, rounds to target."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

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
