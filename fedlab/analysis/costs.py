"""Accuracy against what it cost: bytes communicated, gradient evaluations and wall time.

Per-round accuracy hides that FedSAM's rounds cost two gradients a step and SCAFFOLD's twice the
traffic; per-round cost hides that a method may need fewer rounds. Here each run's test accuracy (%)
is drawn against the cumulative cost columns of its metrics (:mod:`fedlab.engine.costs`): uplink +
downlink payload in MB, minibatch gradient evaluations, and the seconds its rounds took
(``wall_seconds`` summed: a measurement of one machine, where the other two are counts).

Runs recorded before the cost columns existed are read too: communication from the per-round
``uplink_floats``/``downlink_floats`` at 4 bytes a float (float32), gradient evaluations from K ×
clients sampled × the method's ``grad_evals_per_step`` (fixed-K runs only: an epoch-mode run's K_i are
not in its old rows, and a ValueError says so).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from fedlab.algorithms import algorithm_class
from fedlab.results import RunResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FLOAT32_BYTES = 4
COST_AXES = {"comm_mb": "cumulative communication (MB, uplink + downlink)",
             "grad_evals": "cumulative gradient evaluations", "wall_s": "cumulative wall time (s)"}
"""The x-axes of :func:`plot_cost_accuracy`, in panel order: column of :func:`cost_frame` → axis label."""


def cost_frame(result: RunResult) -> pd.DataFrame:
    """One row per evaluated round of ``result``: ``round``, ``acc_pct`` and the :data:`COST_AXES` columns,
    each the cost of rounds 1..round (rounds without an evaluation still count)."""
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
                        "grad_evals": grads, "wall_s": m["wall_seconds"].cumsum()})
    return out.dropna(subset=["acc_pct"]).reset_index(drop=True)


def cost_curves(results: Iterable[RunResult]) -> pd.DataFrame:
    """What :func:`plot_cost_accuracy` draws: per label (method) and evaluated round, the mean over its
    runs (seeds) of accuracy and of each cumulative cost, and how many runs it averages (``n``)."""
    frames = [cost_frame(r).assign(label=r.label, algorithm=r.config.algorithm) for r in results]
    means = pd.concat(frames, ignore_index=True).groupby(["label", "algorithm", "round"], sort=False).agg(
        acc_pct=("acc_pct", "mean"), **{x: (x, "mean") for x in COST_AXES}, n=("acc_pct", "size"))
    return means.reset_index()


def plot_cost_accuracy(results: Iterable[RunResult], *, target_pct: float | None = None, title: str | None = None,
                       style: Callable[[str], dict[str, Any]] | None = None,
                       label: Callable[[str], str] = str) -> Figure:
    """Three panels, one call: test accuracy (%) against cumulative communication, gradient evaluations
    and wall time, one line per label (mean over its seeds, :func:`cost_curves`: save it with the figure).

    ``target_pct`` draws a dotted line at a target accuracy (%), the level a rounds-to-target comparison
    reads; ``style(algorithm)`` gives a line's matplotlib keywords and ``label(name)`` its legend text
    (a house style: the lab passes its method colours and names)."""
    import matplotlib.pyplot as plt  # here: the tables above need no plotting library

    curves = cost_curves(results)
    fig, axes = plt.subplots(1, len(COST_AXES), figsize=(14.0, 3.8), sharey=True)
    for (name, alg), df in curves.groupby(["label", "algorithm"], sort=False):
        kw = {"marker": "o", **(style(alg) if style else {}), "markersize": 3, "markevery": max(1, len(df) // 8)}
        for ax, x in zip(axes, COST_AXES):
            ax.plot(df[x], df["acc_pct"], label=f"{label(name)} (n={int(df['n'].max())})", **kw)
    for ax, text in zip(axes, COST_AXES.values()):
        ax.set_xlabel(text)
        if target_pct is not None:
            ax.axhline(target_pct, color="#555555", linestyle=":", linewidth=1.0)
    axes[0].set_ylabel("test accuracy (%)")
    axes[-1].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
