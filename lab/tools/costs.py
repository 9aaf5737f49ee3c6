"""Accuracy against what it cost: cumulative communication and cumulative gradient evaluations.

Per-round cost (notebook 04) hides that a method may need fewer rounds; per-round accuracy hides
that FedSAM's rounds cost two gradients a step and SCAFFOLD's twice the traffic. Here each run's
test accuracy (in %) is drawn against the cumulative cost columns of its metrics
(:mod:`fedlab.engine.costs`): uplink + downlink payload in MB, and minibatch gradient evaluations.

Runs recorded before those columns existed are read too: communication from the per-round
``uplink_floats``/``downlink_floats`` at 4 bytes a float (every committed run is float32), gradient
evaluations from K × clients sampled × the method's ``grad_evals_per_step`` (fixed-K runs only: an
epoch-mode run's K_i are not in its old rows, and a ValueError says so).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from lab.tools.plots import method_label, method_style

FLOAT32_BYTES = 4


def cost_frame(result: Any) -> pd.DataFrame:
    """One row per evaluated round of ``result``: ``round``, ``acc_pct``, ``comm_mb``, ``grad_evals``."""
    from fedlab.algorithms import algorithm_class

    m = result.metrics
    if "cum_grad_evals" in m:
        comm = m["cum_uplink_bytes"] + m["cum_downlink_bytes"]
        grads = m["cum_grad_evals"]
    else:  # a run recorded before the cost columns: derived from what its rows and config do say
        cfg = result.config
        if cfg.local_steps is None:
            raise ValueError(f"run {result.run_dir}: an epoch-mode run without cum_grad_evals in its metrics; "
                             "its clients' local steps are not recorded, retrain it to get the cost columns")
        comm = (m["uplink_floats"] + m["downlink_floats"]).cumsum() * FLOAT32_BYTES
        grads = (m["n_sampled"] * cfg.local_steps * algorithm_class(cfg.algorithm).grad_evals_per_step).cumsum()
    out = pd.DataFrame({"round": m["round"], "acc_pct": 100.0 * m["test_acc"], "comm_mb": comm / 1e6,
                        "grad_evals": grads})
    return out.dropna(subset=["acc_pct"]).reset_index(drop=True)


def cost_curves(results: Iterable[Any]) -> pd.DataFrame:
    """The tidy table :func:`plot_cost_accuracy` draws: per label (method) and evaluated round, the
    mean over its runs (seeds) of accuracy and of both cumulative costs, and how many runs it averages."""
    frames = [cost_frame(r).assign(label=r.label, algorithm=r.config.algorithm) for r in results]
    tidy = pd.concat(frames, ignore_index=True)
    means = tidy.groupby(["label", "algorithm", "round"], sort=False).agg(
        acc_pct=("acc_pct", "mean"), comm_mb=("comm_mb", "mean"), grad_evals=("grad_evals", "mean"),
        n=("acc_pct", "size"))
    return means.reset_index()


def plot_cost_accuracy(results: Iterable[Any], *, target_pct: float | None = None,
                       title: str | None = None) -> plt.Figure:
    """Two panels, one call: test accuracy (%) against cumulative communication (MB, up + down) and
    against cumulative gradient evaluations, one line per method (mean over its seeds, house style).

    ``target_pct`` draws a horizontal line at a target accuracy (in %), the level a rounds-to-target
    comparison reads; the numbers drawn are :func:`cost_curves` (save them with the figure).
    """
    curves = cost_curves(results)
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.8), sharey=True)
    for (label, alg), df in curves.groupby(["label", "algorithm"], sort=False):
        style = {**method_style(alg), "markersize": 3, "markevery": max(1, len(df) // 8)}
        for ax, x in zip(axes, ("comm_mb", "grad_evals")):
            ax.plot(df[x], df["acc_pct"], label=f"{method_label(label)} (n={int(df['n'].max())})", **style)
    axes[0].set_xlabel("cumulative communication (MB, uplink + downlink)")
    axes[1].set_xlabel("cumulative gradient evaluations")
    axes[0].set_ylabel("test accuracy (%)")
    for ax in axes:
        if target_pct is not None:
            ax.axhline(target_pct, color="#555555", linestyle=":", linewidth=1.0)
    axes[1].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
