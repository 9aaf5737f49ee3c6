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
