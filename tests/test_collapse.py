"""Collapse as a status: the rule, a constructed collapsed run, tables and plots that keep it apart."""
from __future__ import annotations

import dataclasses
import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import fedlab  # noqa: E402
from lab.evidence.collapse import chance_threshold, is_collapsed  # noqa: E402
from fedlab.engine import build_dataset  # noqa: E402
from lab.tools.plots import plot_curves, status_note  # noqa: E402
from fedlab.results import TERMINAL_STATUSES  # noqa: E402
from fedlab.sweep import summary_table  # noqa: E402

NAN = float("nan")


def test_rule_last_quarter_at_most_chance_plus_margin():
    assert chance_threshold(10) == pytest.approx(0.15)
    rounds = list(range(1, 21))
    flat = [0.1] * 20
    assert is_collapsed(rounds, flat, 20, 10)
    # one evaluation of the last quarter (rounds 16-20) above 0.15 is enough to be a normal run
    assert not is_collapsed(rounds, flat[:17] + [0.16] + flat[18:], 20, 10)
    # a run that was good early and fell to chance in the last quarter is collapsed
    assert is_collapsed(rounds, [0.8] * 15 + [0.1] * 5, 20, 10)
    # evaluations only every 5 rounds: rounds 20 (> 15) judged; NaN rounds ignored; none at all → no
    sparse = [NAN if r % 5 else 0.12 for r in rounds]
    assert is_collapsed(rounds, sparse, 20, 10)
    assert not is_collapsed(rounds, [NAN] * 20, 20, 10)
    assert "collapsed" in TERMINAL_STATUSES


def test_rule_for_two_classes_is_about_chance_not_absolute_accuracy():
    # with 2 classes, 0.52 is chance level (≤ 0.55): collapsed; 0.6 is not
    assert is_collapsed([1, 2, 3, 4], [0.5, 0.52, 0.51, 0.52], 4, 2)
    assert not is_collapsed([1, 2, 3, 4], [0.5, 0.52, 0.51, 0.6], 4, 2)


def test_an_input_independent_model_is_recorded_collapsed(tiny, tmp_path):
    """All-zero inputs: the network cannot depend on them, so it predicts one class (1/C accuracy)."""
    cfg = tiny(algorithm="fedavg", rounds=8, lr=0.1)
    full = build_dataset(cfg)
    blank = dataclasses.replace(full, x_train=torch.zeros_like(full.x_train), x_test=torch.zeros_like(full.x_test))
    good = fedlab.run(cfg, dataset=full, progress=False)
    bad = fedlab.run(cfg.replace(runs_dir=str(tmp_path / "blank")), dataset=blank, progress=False)
    assert good.status == "finished"
    assert bad.status == "collapsed"
    assert json.loads((bad.run_dir / "summary.json").read_text())["status"] == "collapsed"
    # a second call loads the collapsed run instead of retraining it
    again = fedlab.run(cfg.replace(runs_dir=str(tmp_path / "blank")), dataset=blank, progress=False)
    assert again.status == "collapsed" and again.metrics.equals(bad.metrics)

    # tables: the collapsed seed is counted, listed, and not averaged into the mean
    good1 = fedlab.run(cfg.replace(seed=1), dataset=full, progress=False)
    bad_as_seed2 = dataclasses.replace(bad, config=bad.config.replace(seed=2, runs_dir=cfg.runs_dir))
    table = summary_table([good, good1, bad_as_seed2])
    row = table.iloc[0]
    assert row["n_seeds"] == 3 and row["n_collapsed"] == 1
    assert row["final_acc_mean"] == pytest.approx((good.final_accuracy + good1.final_accuracy) / 2)
    assert not math.isnan(row["final_acc_ci95"])
    assert "collapsed" in row["status"] and "2:" in row["final_acc_seeds"]

    # plots: drawn dotted, labelled, and named in the caption note
    fig, ax = plt.subplots()
    plot_curves(ax, [good, bad])
    styles = [line.get_linestyle() for line in ax.get_lines()]
    labels = [line.get_label() for line in ax.get_lines()]
    assert styles[0] == "-" and styles[1] == ":"
    assert labels[1].endswith("(collapsed)") and not labels[0].endswith("(collapsed)")
    assert "collapsed" in status_note([good, bad]) and status_note([good]) == ""
    plt.close(fig)
