"""The lab's accuracy-against-cost figure: the library's :func:`fedlab.analysis.plot_cost_accuracy` (three
panels: communication, gradient evaluations, wall time) in the house style, the methods' colours and
names of :mod:`lab.tools.plots`. The tables it draws are the library's :func:`cost_curves`."""
from __future__ import annotations

from collections.abc import Iterable

import matplotlib.pyplot as plt

from fedlab.analysis.costs import cost_curves, cost_frame
from fedlab.analysis.costs import plot_cost_accuracy as _plot_cost_accuracy
from fedlab.results import RunResult
from lab.tools.plots import method_label, method_style

__all__ = ["cost_curves", "cost_frame", "plot_cost_accuracy"]


def plot_cost_accuracy(results: Iterable[RunResult], *, target_pct: float | None = None,
                       title: str | None = None) -> plt.Figure:
    """:func:`fedlab.analysis.plot_cost_accuracy` with each method's house colour, line and marker."""
    return _plot_cost_accuracy(results, target_pct=target_pct, title=title, style=method_style, label=method_label)
