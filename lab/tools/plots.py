"""The house plot style and a few plotting helpers shared by the notebooks.

One colour per method, fixed across every figure, so a reader can follow FedVSSAM from notebook to
notebook; light grid, no top/right spines, labelled axes. Collapsed runs (:mod:`lab.evidence.collapse`) are drawn
distinctly — thin dotted line, "(collapsed)" in the legend — and :func:`status_note` names them for
the caption, so a run at chance never passes for a flat, well-trained model.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

# the method facts are lab.style's; re-exported here, where the notebooks draw with them
from lab.style import _PALETTE, METHOD_COLORS, METHOD_LABELS, METHOD_ORDER, method_color, method_label

# line styles and markers cycle with a different period than the colours, so that no two methods share
# all three; dotted is kept for collapsed runs (COLLAPSED_STYLE)
_LINESTYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def use_house_style() -> None:
    """Apply fedlab's matplotlib defaults (call once at the top of a notebook)."""
    mpl.rcParams.update({
        "figure.figsize": (6.4, 4.0), "figure.dpi": 100, "savefig.dpi": 150,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
        "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.titlesize": 11, "axes.labelsize": 10,
        "legend.fontsize": 8, "legend.frameon": False, "xtick.labelsize": 9, "ytick.labelsize": 9,
        "lines.linewidth": 1.6, "font.family": "DejaVu Sans",
    })


def method_style(name: str, index: int | None = None) -> dict[str, Any]:
    """Colour, line style and marker of a method's line (matplotlib keywords), distinct for every method.

    ``index`` picks the style for a variant that is not a registered method (e.g. an ablation row)."""
    i = METHOD_ORDER.index(name) if index is None and name in METHOD_ORDER else (index or 0)
    return {"color": METHOD_COLORS.get(name, _PALETTE[i % len(_PALETTE)]),
            "linestyle": _LINESTYLES[i % len(_LINESTYLES)], "marker": _MARKERS[i % len(_MARKERS)]}


COLLAPSED_STYLE = {"linestyle": ":", "linewidth": 1.0, "alpha": 0.8}
"""How a collapsed run's line differs from a finished one's (same method colour)."""
DIVERGED_STYLE = {"linestyle": "-.", "linewidth": 1.0, "alpha": 0.8}


def status_style(status: str) -> dict[str, Any]:
    """Extra line properties for a run's status (empty for ``finished``)."""
    return {"collapsed": COLLAPSED_STYLE, "diverged": DIVERGED_STYLE}.get(status, {})


def status_label(label: str, status: str) -> str:
    """``label`` with ``" (collapsed)"`` / ``" (diverged)"`` appended when the run did not finish normally."""
    return label if status in ("finished", "running") else f"{label} ({status})"


def status_note(results: Iterable[Any]) -> str:
    """A caption sentence naming the collapsed and diverged runs (``""`` when there are none)."""
    parts = []
    for status in ("collapsed", "diverged"):
        names = sorted({method_label(r.label) for r in results if r.status == status}, key=str)
        if names:
            parts.append(f"{status} ({'stayed at chance' if status == 'collapsed' else 'non-finite loss'}, "
                         f"dotted): {', '.join(names)}")
    return ("Not comparable — " + "; ".join(parts) + ".") if parts else ""


def curve_data(results: Iterable[Any], metric: str = "test_acc") -> pd.DataFrame:
    """The tidy table a curve figure plots: one row per (run, evaluated round), with the run's status."""
    frames = []
    for res in results:
        df = res.metrics[["round", metric]].dropna()
        frames.append(df.assign(label=res.label, algorithm=res.config.algorithm, seed=res.config.seed,
                                status=res.status))
    return pd.concat(frames, ignore_index=True)[["label", "algorithm", "seed", "status", "round", metric]]


def plot_curves(ax: plt.Axes, results: Iterable[Any], metric: str = "test_acc", *,
                labels: Sequence[str] | None = None, smooth: int = 1) -> plt.Axes:
    """One line per RunResult of ``metric`` against round (NaN rows, i.e. rounds without eval, dropped).

    Each method has its :func:`method_style`; a second run of the same method (a variant) keeps the
    colour and takes the next line style and marker. Collapsed and diverged runs get
    :func:`status_style` and a status suffix in the legend.
    """
    seen: dict[str, int] = {}
    for j, res in enumerate(results):
        df = res.metrics[["round", metric]].dropna()
        y = df[metric].rolling(smooth, min_periods=1).mean() if smooth > 1 else df[metric]
        label = status_label(labels[j] if labels else method_label(res.label), res.status)
        alg = res.config.algorithm
        k = seen[alg] = seen.get(alg, -1) + 1
        style = method_style(alg)
        if k:
            i = METHOD_ORDER.index(alg) if alg in METHOD_ORDER else 0
            style |= {"linestyle": _LINESTYLES[(i + k) % len(_LINESTYLES)], "marker": _MARKERS[(i + k) % len(_MARKERS)]}
        ax.plot(df["round"], y, label=label, **{**style, "markersize": 3, **status_style(res.status)})
    ax.set_xlabel("round")
    ax.set_ylabel(metric.replace("_", " "))
    ax.legend()
    return ax


def heatmap(ax: plt.Axes, table: pd.DataFrame, *, cmap: str = "viridis", label: str = "",
            annotate: bool = False, fmt: str = "{:.0f}") -> plt.Axes:
    """A labelled heatmap of a DataFrame (rows × columns) with a colour bar."""
    values = table.to_numpy(dtype=float)
    im = ax.imshow(values, aspect="auto", cmap=cmap, interpolation="nearest")
    ax.set_xticks(range(values.shape[1]), [str(c) for c in table.columns])
    step = max(1, values.shape[0] // 20)
    ax.set_yticks(range(0, values.shape[0], step), [str(i) for i in table.index[::step]])
    ax.grid(False)
    ax.figure.colorbar(im, ax=ax, label=label)
    if annotate:
        for (r, c), v in np.ndenumerate(values):
            ax.text(c, r, fmt.format(v), ha="center", va="center", fontsize=7,
                    color="white" if v < values.mean() else "black")
    return ax


# --- runs over seeds: means, bands and the seeds that did not finish ---------------------------------
def finished_runs(results: Iterable[Any]) -> list[Any]:
    """The runs whose status is ``finished`` (collapsed and diverged ones are shown, never averaged)."""
    return [r for r in results if r.status == "finished"]


def final_estimate(results: Iterable[Any]) -> Any:
    """Final test accuracy over the finished runs: an :class:`~fedlab.evidence.uncertainty.Estimate`
    (mean ± 95 % interval), or None when no run finished."""
    from fedlab.evidence.uncertainty import mean_interval

    ok = finished_runs(results)
    return mean_interval(r.final_accuracy for r in ok) if ok else None


def mean_curve(results: Iterable[Any], metric: str) -> pd.DataFrame:
    """Per evaluated round: mean ± 95 % interval of ``metric`` over the finished runs (columns
    ``round, mean, half_width, n``; :func:`fedlab.evidence.uncertainty.mean_interval`)."""
    from fedlab.evidence.uncertainty import mean_interval

    ok = finished_runs(results)
    tidy = curve_data(ok, metric) if ok else pd.DataFrame(columns=["round", metric])
    rows = [{"round": r, "mean": e.mean, "half_width": e.half_width, "n": e.n}
            for r, e in ((r, mean_interval(v)) for r, v in tidy.groupby("round")[metric])]
    return pd.DataFrame(rows, columns=["round", "mean", "half_width", "n"])


def seed_band(samples: Iterable[Iterable[float]]) -> tuple[np.ndarray, np.ndarray]:
    """For each group of per-seed values: the mean and the half-width of its 95 % interval
    (:func:`fedlab.evidence.uncertainty.mean_interval`), the half-width 0 where it is undefined (one seed)."""
    from fedlab.evidence.uncertainty import mean_interval

    est = [mean_interval(v) for v in samples]
    return (np.array([e.mean for e in est], dtype=float),
            np.array([e.half_width if np.isfinite(e.half_width) else 0.0 for e in est], dtype=float))


def _shade(ax: plt.Axes, xs: Any, mean: Any, half: Any, color: Any, alpha: float) -> None:
    ax.fill_between(xs, np.asarray(mean) - half, np.asarray(mean) + half, color=color, alpha=alpha, linewidth=0)


def draw_band(ax: plt.Axes, xs: Sequence[float], samples: Iterable[Iterable[float]], *, label: str | None,
              errorbars: bool = False, band_alpha: float = 0.15, **style: Any) -> None:
    """The mean over seeds at each x with its 95 % interval (:func:`seed_band`; ``samples[j]`` are
    the seeds' values at ``xs[j]``): a line with a shaded band, or points with error bars when
    ``errorbars``. ``style`` goes to ``ax.plot`` / ``ax.errorbar`` (``color`` also colours the band)."""
    mean, half = seed_band(samples)
    if errorbars:
        ax.errorbar(xs, mean, yerr=half, label=label, **style)
        return
    ax.plot(xs, mean, label=label, **style)
    _shade(ax, xs, mean, half, style.get("color"), band_alpha)


def draw_seeds(ax: plt.Axes, results: Sequence[Any], metric: str, *, label: str,
               style: tuple[str, Any, str], linewidth: float = 1.8) -> None:
    """One method on ``ax``: the mean over its finished seeds with a 95 % band (``style`` = colour,
    line style, marker), and every collapsed or diverged seed as its own thin dotted line with ✕,
    counted in the legend."""
    color, ls, marker = style
    curve = mean_curve(results, metric)
    if len(curve):
        ax.plot(curve["round"], curve["mean"], color=color, linestyle=ls, marker=marker, markersize=4,
                markevery=max(1, len(curve) // 8), linewidth=linewidth,
                label=f"{label} (n={int(curve['n'].max())})")
        _shade(ax, curve["round"], curve["mean"], curve["half_width"].fillna(0.0), color, 0.15)
    for status in ("collapsed", "diverged"):
        bad = [r for r in results if r.status == status]
        for j, r in enumerate(bad):
            df = r.metrics[["round", metric]].dropna()
            ax.plot(df["round"], df[metric], color=color, linestyle=":", linewidth=1.0, marker="x",
                    markevery=max(1, len(df) // 8), label=f"{label} ({status}, {len(bad)} seed(s))" if j == 0 else None)


def curves_table(runs: dict[str, Sequence[Any]], metric: str) -> dict[str, pd.DataFrame]:
    """The numbers a curve figure plots: every seed's rows (with status) and the per-method means."""
    per_seed = pd.concat([curve_data(rs, metric).assign(method=n) for n, rs in runs.items()], ignore_index=True)
    means = pd.concat([mean_curve(rs, metric).assign(method=n) for n, rs in runs.items()], ignore_index=True)
    return {f"{metric}_per_seed": per_seed, f"{metric}_mean": means}


def all_runs(runs: dict[str, Sequence[Any]]) -> list[Any]:
    """Every run of a ``{method or label: [runs over seeds]}`` table, in order."""
    return [r for rs in runs.values() for r in rs]


def run_styles(runs: dict[str, Sequence[Any] | str]) -> dict[str, tuple[Any, Any, str]]:
    """(colour, line style, marker) of each key of ``runs`` (values: the key's runs, or its algorithm's
    name): the method's own (:func:`method_style`) for a method name; a variant (a label of an algorithm
    that an earlier key has too) keeps that algorithm's colour and takes the next line style and marker."""
    seen: dict[str, int] = {}
    out = {}
    for key, rs in runs.items():
        alg = key if key in METHOD_ORDER or not rs else rs if isinstance(rs, str) else rs[0].config.algorithm
        k = seen[alg] = seen.get(alg, -1) + 1
        i = METHOD_ORDER.index(alg) + k if alg in METHOD_ORDER else k
        out[key] = (method_color(alg), _LINESTYLES[i % len(_LINESTYLES)], _MARKERS[i % len(_MARKERS)])
    return out


def draw_runs(ax: plt.Axes, runs: dict[str, Sequence[Any]], metric: str) -> None:
    """Every method (or labelled variant) of ``runs`` on ``ax`` with :func:`draw_seeds`, in its
    :func:`run_styles` style, labelled :func:`method_label`."""
    styles = run_styles(runs)
    for key, rs in runs.items():
        draw_seeds(ax, rs, metric, label=method_label(key), style=styles[key])
