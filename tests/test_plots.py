"""Seed-aware plot helpers (lab.tools.plots): means over finished seeds only, the others drawn and counted."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from lab.tools.plots import curves_table, draw_seeds, finished_runs, mean_curve  # noqa: E402
from test_claims import _fake  # noqa: E402


def test_mean_curve_averages_finished_seeds_and_draw_seeds_counts_the_rest():
    runs = [_fake("fedsam", 0, 0.6), _fake("fedsam", 1, 0.8), _fake("fedsam", 2, 0.1, status="collapsed")]
    assert [r.config.seed for r in finished_runs(runs)] == [0, 1]
    curve = mean_curve(runs, "test_acc")
    assert list(curve["round"]) == [1, 3, 4]  # round 2 has no evaluation
    assert curve.loc[curve["round"] == 4, "mean"].item() == pytest.approx(0.7)
    assert set(curve["n"]) == {2}
    fig, ax = plt.subplots()
    draw_seeds(ax, runs, "test_acc", label="FedSAM", style=("#ff7f0e", "--", "o"))
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["FedSAM (n=2)", "FedSAM (collapsed, 1 seed(s))"]
    plt.close(fig)
    tables = curves_table({"fedsam": runs}, "test_acc")
    assert len(tables["test_acc_per_seed"]) == 9 and len(tables["test_acc_mean"]) == 3
    assert set(tables["test_acc_per_seed"]["status"]) == {"finished", "collapsed"}


def test_final_estimate_uses_finished_seeds_only():
    from lab.tools.plots import final_estimate

    runs = [_fake("fedsam", 0, 0.6), _fake("fedsam", 1, 0.8), _fake("fedsam", 2, 0.1, status="collapsed")]
    est = final_estimate(runs)
    assert est.n == 2 and est.mean == pytest.approx(0.7)
    assert final_estimate(runs[2:]) is None


def test_seed_band_and_draw_band_plot_the_mean_and_the_95_interval():
    import numpy as np
    from scipy import stats

    from lab.tools.plots import draw_band, seed_band

    samples = [[1.0, 2.0, 4.0], [3.0], [0.5, 0.5, 2.0, 1.0]]
    mean, half = seed_band(samples)
    np.testing.assert_allclose(mean, [7 / 3, 3.0, 1.0])
    for j, v in enumerate(samples):  # Student-t half-width; a lone seed has none, drawn as 0
        expected = stats.t.ppf(0.975, len(v) - 1) * np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
        assert half[j] == pytest.approx(expected)
    fig, (a1, a2) = plt.subplots(1, 2)
    draw_band(a1, [0, 1, 2], samples, label="band", color="#123456")
    line = a1.get_lines()[0]
    np.testing.assert_allclose(line.get_ydata(), mean)
    band = a1.collections[0].get_paths()[0].vertices[:, 1]
    assert band.max() == pytest.approx((mean + half).max()) and band.min() == pytest.approx((mean - half).min())
    draw_band(a2, [0, 1, 2], samples, label="bars", errorbars=True, fmt="o")
    assert a2.get_legend_handles_labels()[1] == ["bars"]
    bars = a2.containers[0].lines[2][0].get_segments()  # one vertical segment per x: mean ± half
    np.testing.assert_allclose([seg[1][1] - seg[0][1] for seg in bars], 2 * half)
    plt.close(fig)


# --- issue 29: no interval past a bound, no jitter, ticks on the grid, one colour per method ----------
def _artists_y(ax) -> "list[float]":
    """Every y value any line, error bar or filled area on ``ax`` reaches."""
    import numpy as np

    ys = [float(y) for line in ax.get_lines() for y in np.asarray(line.get_ydata(), dtype=float)]
    for coll in ax.collections:
        for path in coll.get_paths():
            ys += [float(y) for y in path.vertices[:, 1]]
    return ys


def _runs_near_bounds():
    """Three finished seeds whose accuracies straddle a wide spread near 0 and near 1 (a t-interval
    of three seeds there reaches past 0 % and 100 %)."""
    import pandas as pd

    runs = [_fake("fedsam", s, acc) for s, acc in enumerate((0.99, 0.6, 0.97))]
    for r, first in zip(runs, (0.01, 0.3, 0.02)):
        r.metrics.loc[0, "test_acc"] = first
        r.metrics["train_loss"] = pd.Series([0.01, 0.02, 0.9, 0.03])
    return runs


def test_draw_seeds_draws_the_seeds_not_an_interval_and_stays_inside_the_bounds():
    import numpy as np

    from lab.tools.plots import draw_seeds, mean_curve

    runs = _runs_near_bounds()
    curve = mean_curve(runs, "test_acc")
    assert ((curve["mean"] - curve["half_width"]) < 0).any() and ((curve["mean"] + curve["half_width"]) > 1).any()
    for metric, scale, lo, hi in (("test_acc", 100.0, 0.0, 100.0), ("train_loss", 1.0, 0.0, np.inf)):
        fig, ax = plt.subplots()
        draw_seeds(ax, runs, metric, label="FedSAM", style=("#ff7f0e", "-", "o"), scale=scale)
        assert not ax.collections  # no shaded band
        ys = _artists_y(ax)
        assert min(ys) >= lo and max(ys) <= hi
        thin = [line for line in ax.get_lines() if line.get_label() == "_seed"]
        assert len(thin) == 3  # one per finished seed
        mean = next(line for line in ax.get_lines() if line.get_label() == "FedSAM (n=3)")
        np.testing.assert_allclose(mean.get_ydata(), scale * mean_curve(runs, metric)["mean"])
        plt.close(fig)


@pytest.mark.parametrize("errorbars", [False, True])
def test_draw_band_never_draws_an_interval_past_its_bounds(errorbars):
    import numpy as np

    from lab.tools.plots import draw_band, seed_band

    samples = [[0.02, 0.4], [0.5, 0.6], [0.97, 0.7]]  # two seeds: t(0.975, 1) ≈ 12.7, far past 0 and 1
    mean, half = seed_band(samples)
    assert (mean - half).min() < 0 and (mean + half).max() > 1
    fig, (a1, a2) = plt.subplots(1, 2)
    extra = {"fmt": "-o", "capsize": 3} if errorbars else {}
    draw_band(a1, [0, 1, 2], samples, label="rate", errorbars=errorbars, bounds=(0.0, 1.0), color="#555555", **extra)
    ys = _artists_y(a1)
    assert min(ys) >= 0.0 and max(ys) <= 1.0
    assert sorted(y for line in a1.get_lines() if line.get_label() == "_seed" for y in line.get_ydata()) == \
        sorted(v for s in samples for v in s)  # the seeds are what is drawn instead
    # inside wide bounds the interval is drawn (the check above is not vacuous)
    draw_band(a2, [0, 1, 2], samples, label="rate", errorbars=errorbars, bounds=(-20.0, 20.0), color="#555555",
              **extra)
    assert min(_artists_y(a2)) == pytest.approx((mean - half).min())
    plt.close(fig)


@pytest.mark.parametrize("grid", [list(range(5, 101, 5)) + [1], list(range(3, 60, 4)), [1, 2, 3], list(range(1, 41))])
def test_round_ticks_are_evaluated_rounds(grid):
    from lab.tools.plots import round_ticks

    fig, ax = plt.subplots()
    ticks = round_ticks(ax, grid)
    assert set(ticks) <= set(grid) and 2 <= len(ticks) <= 7
    assert [int(t) for t in ax.get_xticks()] == ticks
    plt.close(fig)


def _costed(algorithm, seed, acc_scale):
    """A run with the cost columns; two methods built from it share every cost (overlapping points)."""
    import pandas as pd

    run = _fake(algorithm, seed, 0.8)
    rounds = run.metrics["round"]
    run.metrics["test_acc"] = acc_scale * run.metrics["test_acc"]
    run.metrics["cum_uplink_bytes"] = 4000.0 * rounds
    run.metrics["cum_downlink_bytes"] = 4000.0 * rounds
    run.metrics["cum_grad_evals"] = pd.Series(20 * rounds, dtype=float)
    run.metrics["wall_seconds"] = 0.5 + 0.25 * seed  # a round's seconds: cumulated by cost_frame
    return run


def test_plot_cost_accuracy_draws_the_data_where_it_is():
    import numpy as np

    from lab.tools.costs import cost_curves, plot_cost_accuracy

    runs = [_costed("fedavg", 0, 1.0), _costed("fedavg", 1, 0.9), _costed("fedsam", 0, 0.95)]
    curves = cost_curves(runs)
    fig = plot_cost_accuracy(runs, target_pct=50.0)
    assert len(fig.axes) == 3
    for ax, x in zip(fig.axes, ("comm_mb", "grad_evals", "wall_s")):
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(lines) == 2
        for line, (_, df) in zip(lines, curves.groupby("label", sort=False)):
            np.testing.assert_array_equal(line.get_xdata(), df[x].to_numpy())  # no jitter, no offset
            np.testing.assert_array_equal(line.get_ydata(), df["acc_pct"].to_numpy())
    plt.close(fig)


def test_save_curves_small_multiples_with_a_grey_reference_in_percent(monkeypatch):
    import numpy as np

    import lab.tools.figures as figures
    from lab.tools.plots import REFERENCE_COLOR, mean_curve

    saved = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, name, **kw: saved.update(kw, name=name))
    runs = {m: [_fake(m, s, 0.5 + 0.1 * s) for s in range(2)] for m in ("fedavg", "fedsam", "scaffold", "fedgamma")}
    fig = figures.save_curves(runs, {"test_acc": ("accuracy", "test accuracy")}, "t", notebook="nb", profile="ci",
                              caption="c")
    shown = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    assert len(shown) == 4  # one panel per method
    ref = 100 * mean_curve(runs["fedavg"], "test_acc")["mean"].to_numpy()
    for ax in shown[1:]:
        grey = [line for line in ax.get_lines() if line.get_color() == REFERENCE_COLOR]
        assert len(grey) == 1
        np.testing.assert_allclose(grey[0].get_ydata(), ref)
    for ax in shown:
        assert "(%)" in shown[0].get_ylabel()
        ys = _artists_y(ax)
        assert 10.0 <= min(ys) and max(ys) <= 100.0  # % and no band past 0 or 100
        assert set(int(t) for t in ax.get_xticks()) <= {1, 3, 4}  # round 2 has no evaluation
    assert "test_acc_pct_per_seed" in saved["data"] and saved["name"] == "t"
    plt.close(fig)


def test_notebooks_draw_a_named_method_in_its_own_colour():
    """A plotting line that names a method in its label and sets a colour literal must use that method's
    colour from lab.style (or a neutral grey, the reference convention): FedAvg drawn in SCAFFOLD's blue
    reads as SCAFFOLD."""
    import re
    from pathlib import Path

    from lab.style import METHOD_COLORS, METHOD_LABELS

    found = []
    for path in sorted((Path(__file__).parents[1] / "notebooks").glob("[0-9][0-9]*_*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            label = re.search(r"label\s*=\s*f?r?([\"'])(.*?)\1", line)
            colours = re.findall(r"(?:color|edgecolor|mec|mfc)\s*=\s*[\"'](#[0-9a-fA-F]{6})[\"']", line)
            if not label or not colours:
                continue
            named = [k for k, v in METHOD_LABELS.items()
                     if re.search(rf"(?<![A-Za-z]){re.escape(v)}(?![A-Za-z])", label.group(2))]
            for c in colours:
                grey = c[1:3].lower() == c[3:5].lower() == c[5:7].lower()
                if named and not grey and c.lower() not in {METHOD_COLORS[k].lower() for k in named}:
                    found.append(f"{path.name}:{i} {c} for {', '.join(named)}")
    assert not found, found


def test_save_curves_labels_the_rounds_under_a_hidden_panel(monkeypatch):
    import lab.tools.figures as figures

    monkeypatch.setattr(figures, "save_figure", lambda fig, name, **kw: None)
    runs = {m: [_fake(m, 0, 0.6)] for m in ("fedavg", "fedsam", "scaffold", "fedgamma", "fedspeed")}
    fig = figures.save_curves(runs, {"test_acc": ("accuracy", "test accuracy")}, "t", notebook="nb", profile="ci",
                              caption="c")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 5 and len(fig.axes) == 8
    # the bottom panel of every column (the 5th method's, then the 1st row's over the hidden ones) says "round"
    assert sum(ax.get_xlabel() == "round" for ax in shown) == 4
    plt.close(fig)
