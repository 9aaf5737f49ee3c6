"""The house plot style and a few plotting helpers shared by the notebooks.

One colour per method, fixed across every figure, so a reader can follow FedVSSAM from notebook to
notebook; light grid, no top/right spines, labelled axes; accuracy in % (:func:`metric_scale`); round
axes ticked at evaluated rounds (:func:`round_ticks`); the spread over seeds shown by the seeds
themselves, or by an interval only where it stays inside the quantity's bounds (:func:`draw_seeds`,
:func:`draw_band`); many methods as small multiples against a grey reference
(:func:`draw_small_multiples`). Collapsed runs (:mod:`lab.evidence.collapse`) are drawn
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
from lab.style import PALETTE, METHOD_COLORS, METHOD_LABELS, METHOD_ORDER, method_color, method_label

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
    return {"color": METHOD_COLORS.get(name, PALETTE[i % len(PALETTE)]),
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
    """Final test accuracy over the finished runs (:func:`lab.evidence.protocol.final_metric`, the claims
    table's): an :class:`~fedlab.uncertainty.Estimate` (mean ± 95 % interval), or None when no run
    finished."""
    from fedlab.uncertainty import mean_interval
    from lab.evidence.protocol import final_metric

    ok = finished_runs(results)
    return mean_interval(final_metric(r).value for r in ok) if ok else None


def mean_curve(results: Iterable[Any], metric: str) -> pd.DataFrame:
    """Per evaluated round: mean ± 95 % interval of ``metric`` over the finished runs (columns
    ``round, mean, half_width, n``; :func:`fedlab.uncertainty.mean_interval`)."""
    from fedlab.uncertainty import mean_interval

    ok = finished_runs(results)
    tidy = curve_data(ok, metric) if ok else pd.DataFrame(columns=["round", metric])
    rows = [{"round": r, "mean": e.mean, "half_width": e.half_width, "n": e.n}
            for r, e in ((r, mean_interval(v)) for r, v in tidy.groupby("round")[metric])]
    return pd.DataFrame(rows, columns=["round", "mean", "half_width", "n"])


def seed_band(samples: Iterable[Iterable[float]]) -> tuple[np.ndarray, np.ndarray]:
    """For each group of per-seed values: the mean and the half-width of its 95 % interval
    (:func:`fedlab.uncertainty.mean_interval`), the half-width 0 where it is undefined (one seed)."""
    from fedlab.uncertainty import mean_interval

    est = [mean_interval(v) for v in samples]
    return (np.array([e.mean for e in est], dtype=float),
            np.array([e.half_width if np.isfinite(e.half_width) else 0.0 for e in est], dtype=float))


def _bounds_hold(lo: np.ndarray, hi: np.ndarray, bounds: tuple[float, float] | None) -> bool:
    """Whether every interval [lo, hi] lies inside ``bounds`` (always, when there are none)."""
    if bounds is None:
        return True
    return bool(np.all(lo >= bounds[0]) and np.all(hi <= bounds[1]))


def _draw_samples(ax: plt.Axes, xs: Sequence[float], samples: Sequence[Sequence[float]], color: Any,
                  alpha: float) -> None:
    """Every seed's own values, unlabelled: one thin line per seed when every x has the same number of
    seeds (``samples[j][s]`` is seed ``s`` at ``xs[j]``), a small dot per value otherwise."""
    if samples and len({len(v) for v in samples}) == 1:
        arr = np.asarray([list(v) for v in samples], dtype=float)
        for s in range(arr.shape[1]):
            ax.plot(xs, arr[:, s], color=color, linewidth=SEED_LINEWIDTH, alpha=alpha, label="_seed")
        return
    for x, v in zip(xs, samples):
        vals = np.asarray(list(v), dtype=float)
        ax.plot(np.full(len(vals), x), vals, ".", color=color, markersize=3, alpha=alpha, label="_seed")


def draw_band(ax: plt.Axes, xs: Sequence[float], samples: Iterable[Iterable[float]], *, label: str | None,
              errorbars: bool = False, band_alpha: float = 0.15, bounds: tuple[float, float] | None = None,
              **style: Any) -> None:
    """The mean over seeds at each x with its 95 % interval (:func:`seed_band`; ``samples[j]`` are
    the seeds' values at ``xs[j]``): a line with a shaded band, or points with error bars when
    ``errorbars``. ``style`` goes to ``ax.plot`` / ``ax.errorbar`` (``color`` also colours the band).

    ``bounds`` = (low, high) is the range the quantity can take (a rate: (0, 1); a loss: (0, inf)).
    The Student-t interval mean ± t·s/√n is symmetric and knows no bounds, so with few seeds it can
    reach past them (a rate band below 0): then no interval is drawn at all — not clipped, which
    would hide that it is meaningless there — and the seeds themselves are drawn instead (thin lines,
    or dots when the x's have different seeds), the mean still the thick line or marker."""
    groups = [list(v) for v in samples]
    mean, half = seed_band(groups)
    color = style.get("color")
    if not _bounds_hold(mean - half, mean + half, bounds):
        # the mean alone, as the caller styled it (errorbar without yerr takes the same keywords)
        if errorbars:
            ax.errorbar(xs, mean, label=label, **style)
        else:
            ax.plot(xs, mean, label=label, **style)
        _draw_samples(ax, xs, groups, color, max(band_alpha, 0.35))
        return
    if errorbars:
        ax.errorbar(xs, mean, yerr=half, label=label, **style)
        return
    ax.plot(xs, mean, label=label, **style)
    ax.fill_between(xs, mean - half, mean + half, color=color, alpha=band_alpha, linewidth=0)


SEED_LINEWIDTH = 0.7
"""Line width of one seed's own curve (the mean over seeds is drawn at the house width or more)."""


def draw_seeds(ax: plt.Axes, results: Sequence[Any], metric: str, *, label: str,
               style: tuple[str, Any, str], linewidth: float = 1.8, scale: float = 1.0) -> None:
    """One method on ``ax``: the mean over its finished seeds as the thick line (``style`` = colour,
    line style, marker), every finished seed as its own thin line of the same colour, and every
    collapsed or diverged seed as its own thin dotted line with ✕, counted in the legend.

    No shaded interval: with the few seeds a run has, the Student-t band mean ± t·s/√n is wide and
    symmetric and crosses the metric's bounds (an accuracy band below 0 %, a loss band below 0); the
    seeds themselves show the spread and stay inside them. ``scale`` multiplies the values (100 for an
    accuracy in %, :func:`metric_scale`)."""
    color, ls, marker = style
    curve = mean_curve(results, metric)
    if len(curve):
        for r in finished_runs(results):
            df = r.metrics[["round", metric]].dropna()
            ax.plot(df["round"], scale * df[metric], color=color, linewidth=SEED_LINEWIDTH, alpha=0.45,
                    label="_seed")
        ax.plot(curve["round"], scale * curve["mean"], color=color, linestyle=ls, marker=marker, markersize=4,
                markevery=max(1, len(curve) // 8), linewidth=linewidth,
                label=f"{label} (n={int(curve['n'].max())})")
    for status in ("collapsed", "diverged"):
        bad = [r for r in results if r.status == status]
        for j, r in enumerate(bad):
            df = r.metrics[["round", metric]].dropna()
            ax.plot(df["round"], scale * df[metric], color=color, linestyle=":", linewidth=1.0, marker="x",
                    markevery=max(1, len(df) // 8), label=f"{label} ({status}, {len(bad)} seed(s))" if j == 0 else None)


def metric_scale(metric: str) -> float:
    """The factor a metric is shown with: 100 for an accuracy (``test_acc``, ``*_acc``, ``*_acc_*``:
    a fraction in the metrics, a percentage in every figure), 1 otherwise."""
    return 100.0 if metric == "acc" or metric.endswith("_acc") or "_acc_" in metric else 1.0


def round_ticks(ax: plt.Axes, rounds: Iterable[float], max_ticks: int = 7) -> list[int]:
    """Tick the round axis of ``ax`` at evaluated rounds only, and returns them.

    A curve has points only at the evaluated rounds (every ``eval_every``-th, plus the last), so a
    tick at a round without an evaluation points at nothing. The ticks are the evaluated rounds that
    are multiples of the smallest "round" step (1, 2, 5 × 10^k) leaving at most ``max_ticks`` of them;
    when no step leaves two, evenly spaced evaluated rounds (first and last included)."""
    grid = np.unique(np.asarray([int(r) for r in rounds], dtype=int))
    if len(grid) == 0:
        return []
    ticks = grid
    if len(grid) > max_ticks:
        ticks = np.array([], dtype=int)
        for step in (m * 10 ** k for k in range(7) for m in (1, 2, 5)):
            on = grid[grid % step == 0]
            if len(on) <= max_ticks:
                ticks = on
                break
        if len(ticks) < 2:
            ticks = grid[np.unique(np.round(np.linspace(0, len(grid) - 1, max_ticks)).astype(int))]
    out = [int(t) for t in ticks]
    ax.set_xticks(out, [str(t) for t in out])
    return out


def curves_table(runs: dict[str, Sequence[Any]], metric: str, scale: float = 1.0) -> dict[str, pd.DataFrame]:
    """The numbers a curve figure plots: every seed's rows (with status) and the per-method means,
    multiplied by ``scale`` (100: an accuracy in %, the column then named ``<metric>_pct``)."""
    name = f"{metric}_pct" if scale == 100.0 else metric
    per_seed = pd.concat([curve_data(rs, metric).assign(method=n) for n, rs in runs.items()], ignore_index=True)
    per_seed[metric] = scale * per_seed[metric]
    means = pd.concat([mean_curve(rs, metric).assign(method=n) for n, rs in runs.items()], ignore_index=True)
    means[["mean", "half_width"]] = scale * means[["mean", "half_width"]]
    return {f"{name}_per_seed": per_seed.rename(columns={metric: name}), f"{name}_mean": means}


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


def draw_runs(ax: plt.Axes, runs: dict[str, Sequence[Any]], metric: str, scale: float = 1.0) -> None:
    """Every method (or labelled variant) of ``runs`` on ``ax`` with :func:`draw_seeds`, in its
    :func:`run_styles` style, labelled :func:`method_label`."""
    styles = run_styles(runs)
    for key, rs in runs.items():
        draw_seeds(ax, rs, metric, label=method_label(key), style=styles[key], scale=scale)


REFERENCE_COLOR = "#a0a0a0"
"""The grey of the reference method's mean in every panel of a small-multiples figure."""


def draw_small_multiples(axes: Sequence[plt.Axes], runs: dict[str, Sequence[Any]], metric: str, *,
                         reference: str | None = None, scale: float = 1.0) -> None:
    """One method (or labelled variant) of ``runs`` per panel of ``axes`` (in order), each with
    :func:`draw_seeds`, and the ``reference`` method's mean over its finished seeds as a grey line
    behind it in every other panel, so that each method is read against the same baseline without
    six other methods' seeds crossing it. ``reference`` defaults to FedAvg when ``runs`` has it (none
    otherwise; a key whose runs are FedAvg's counts, e.g. a label "FedAvg"); panels beyond the methods are
    hidden. Each panel's title is the method's label."""
    if len(axes) < len(runs):
        raise ValueError(f"axes: {len(axes)} panels for {len(runs)} methods")
    if reference is None:
        reference = next((k for k, rs in runs.items()
                          if k == "fedavg" or (len(rs) and rs[0].config.algorithm == "fedavg")), None)
    if reference is not None and reference not in runs:
        raise ValueError(f"reference: {reference!r} is not one of the methods drawn ({', '.join(runs)})")
    styles = run_styles(runs)
    ref = mean_curve(runs[reference], metric) if reference is not None else None
    for ax, (key, rs) in zip(axes, runs.items()):
        if ref is not None and key != reference and len(ref):
            ax.plot(ref["round"], scale * ref["mean"], color=REFERENCE_COLOR, linewidth=1.4, zorder=1,
                    label=f"{method_label(reference)} (reference, mean)")
        draw_seeds(ax, rs, metric, label=method_label(key), style=styles[key], scale=scale)
        ax.set_title(method_label(key))
    for ax in axes[len(runs):]:
        ax.set_visible(False)
