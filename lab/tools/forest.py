"""The forest plot of the claims: each paper's reported effect beside fedlab's paired difference.

One row per comparison of every claim (:func:`lab.evidence.claims.paired_table`): fedlab's mean paired
difference left − right with its 95 % paired t-interval (a bar; hollow when the comparison was not decided in
its Holm family: n below :data:`~lab.evidence.paired.MIN_SEEDS_TO_DECIDE`, or an arm that does not test the
claim), the claim's margin (a dashed tick: ±tol for ≈, −δ for ≥ with δ its smallest effect, +m for ≫), zero, and the paper's own effect where it is commensurable (an accuracy difference in
points: a diamond). Panels by unit (accuracy in points, Δ_D, λ_max, the sanity check's relative cross term), so
no axis mixes units. :func:`claims_forest` evaluates, draws and saves with the provenance of every figure.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["claims_forest", "evidence_records", "forest_table"]


def forest_table(figures_dir: Path | None = None, *, min_seeds_to_decide: int | None = None) -> pd.DataFrame:
    """The plotted numbers: :func:`~lab.evidence.claims.paired_table` of every claim plus ``panel`` and
    ``bound`` (the claim's margin line in the metric's unit, NaN for a plain > / <)."""
    from lab.evidence.claims import evaluate_claims_paired, paired_table
    from lab.evidence.paired import MIN_SEEDS_TO_DECIDE

    gate = MIN_SEEDS_TO_DECIDE if min_seeds_to_decide is None else min_seeds_to_decide
    table = paired_table(evaluate_claims_paired(figures_dir=figures_dir, min_seeds_to_decide=gate))
    panels = {"final_test_acc": "accuracy difference (points)", "mean_flatness_distance": "Δ_D difference",
              "lambda_max": "λ_max difference", "lambda_max_alpha_0.1": "λ_max difference",
              "lambda_max_alpha_1": "λ_max difference", "cross_relative": "sanity: relative cross term"}
    table["panel"] = [panels.get(m, str(m)) for m in table["metric"]]

    def bound(row: pd.Series) -> float:
        op = row["op"]
        if op == ">=":
            return -row["margin"]
        if op == "<=":
            return row["margin"]
        if op == "much_greater":
            return row["margin"]
        if op in ("approx", "abs_le"):
            return row["tol"]
        return float("nan")

    table["bound"] = table.apply(bound, axis=1)
    table["row_label"] = [f"{i} · vs {r}" if r else str(i) for i, r in zip(table["id"], table["right"])]
    return table


def evidence_records(figures_dir: Path | None = None) -> list[str]:
    """The keys of the committed run records the claims read: every record named by the sidecar of a figure that a
    claim of ``<figures>/claims.yaml`` sets (sorted, each once). The forest plot names them in its sidecar, so its
    evidence line counts the runs it reads instead of saying it trained none."""
    from lab.evidence.claims import figures_root, load_claims

    root = figures_root() if figures_dir is None else Path(figures_dir)
    keys: set[str] = set()
    for figure in sorted({c.figure for c in load_claims(root / "claims.yaml")}):
        sidecar = root / f"{figure}.json"
        if sidecar.is_file():  # a claim whose figure is not committed yet is "not run": it reads nothing
            keys |= set(json.loads(sidecar.read_text()).get("records") or [])
    return sorted(keys)


def _effect_row(row: pd.Series, rows: pd.DataFrame) -> bool:
    """Whether the paper's effect is drawn on this comparison: the one whose right arm the effect names
    (``"vs MoFedSAM"``), else the claim's first comparison."""
    same = rows[rows["id"] == row["id"]]
    named = [r for r in same["right"] if r and f"vs {r}" in str(row["paper_effect_where"])]
    return row["right"] == named[0] if named else row["comparison"] == 0


# how each verdict class is drawn: (marker, face colour, edge colour, legend text)
MARKERS: dict[str, tuple[str, str, str, str]] = {
    "holds": ("o", "#1b7837", "#1b7837", "holds (Holm-adjusted)"),
    "fails": ("o", "#b2182b", "#b2182b", "fails (Holm-adjusted)"),
    "inconclusive": ("o", "white", "#444444", "inconclusive"),
    "not tested": ("X", "#999999", "#999999", "not tested: degenerate arm, diverged, confounded, headroom, too few seeds"),
}


def verdict_style(verdict: str) -> str:
    """The class a comparison's verdict is drawn as (:data:`MARKERS`)."""
    return verdict if verdict in ("holds", "fails", "inconclusive") else "not tested"


def short_claim(text: str, width: int = 58) -> str:
    """A claim's sentence cut to its head (before the setting in parentheses or a dash) and to ``width``."""
    head = str(text).split(" — ")[0]
    return head if len(head) <= width else head[: width - 1].rstrip() + "…"


def axis_limits(rows: pd.DataFrame, pad: float = 0.12) -> tuple[float, float]:
    """The x-range of a panel: every tested interval (holds / fails / inconclusive) and zero, padded; points
    outside it are drawn as labelled arrows at its edge instead of stretching it."""
    import numpy as np

    tested = rows[rows["comparison_verdict"].isin(["holds", "fails", "inconclusive"])]
    values = [0.0] + [v for c in ("low", "high", "bound") for v in tested[c] if np.isfinite(v)]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return lo - pad * span, hi + pad * span


def _plot_value(ax, x: float, y: float, lims: tuple[float, float], **style) -> None:
    """A point at (x, y), or an arrow at the axis edge with the value written beside it when x is off-scale."""
    lo, hi = lims
    if lo <= x <= hi:
        ax.plot(x, y, ls="none", **style)
        return
    edge, sign = (hi, 1) if x > hi else (lo, -1)
    inset = 0.04 * (hi - lo)
    ax.annotate("", xy=(edge, y), xytext=(edge - sign * inset, y),
                arrowprops={"arrowstyle": "-|>", "color": style.get("color", "#555555"), "lw": 1.0})
    ax.text(edge - sign * 1.2 * inset, y, f"{x:+.3g}", fontsize=5.5, va="center",
            ha="right" if sign > 0 else "left", color=style.get("color", "#555555"))


def claims_forest(figures_dir: Path | None = None, *, profile: str = "cpu", notebook: str = "10_benchmarks",
                  out_dir: Path | None = None, min_seeds_to_decide: int | None = None) -> dict[str, Path]:
    """Draw and save ``claims_forest.{png,pdf,csv,json}`` (:func:`lab.tools.figures.save_figure`: citable
    profiles into ``figures/``, ``ci`` into ``figures/_scratch/``) from the committed evidence in
    ``figures_dir`` (default: the repository's ``figures/``). Returns the written paths.

    Rows are grouped by paper (a bold header per group), labelled with the claim's own words and the arm it is
    compared with; markers say the verdict class (:data:`MARKERS`); each panel's axis is fitted to its tested
    intervals, and anything beyond (a diverged arm's mean, a paper's effect far outside) is an arrow at the
    edge with its value."""
    import matplotlib.pyplot as plt
    import numpy as np

    from lab.tools.figures import save_figure
    from lab.tools.plots import use_house_style

    use_house_style()
    table = forest_table(figures_dir, min_seeds_to_decide=min_seeds_to_decide)
    shown = table[table["n"] > 0].copy()
    no_data = sorted(set(table.loc[table["comparison_verdict"] == "no data", "id"]))
    panels = list(dict.fromkeys(shown["panel"]))
    layouts = []
    for panel in panels:
        rows = shown[shown["panel"] == panel].reset_index(drop=True)
        items: list[tuple[str, pd.Series | None]] = []  # ("paper", None) headers, ("row", r) comparisons
        for paper, group in rows.groupby("paper", sort=False):
            items.append((str(paper), None))
            items += [("", r) for _, r in group.iterrows()]
        layouts.append((panel, rows, items))
    heights = [max(len(items), 1) for _, _, items in layouts] or [1]
    fig, axes = plt.subplots(len(heights), 1, figsize=(9.0, 1.2 + 0.2 * sum(heights) + 0.5 * len(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (panel, rows, items) in zip(axes[:, 0], layouts):
        lims = axis_limits(rows)
        ys = np.arange(len(items))[::-1]
        labels = []
        last_id = None
        for y, (header, r) in zip(ys, items):
            if r is None:
                labels.append(header)
                ax.axhline(y - 0.5, color="#dddddd", lw=0.6)
                continue
            first = r["id"] != last_id
            last_id = r["id"]
            vs = f"vs {r['right']}" if r["right"] else ""
            labels.append((short_claim(r["claim"]) + ("  " + vs if vs else "")) if first else vs)
            marker, face, edge, _ = MARKERS[verdict_style(str(r["comparison_verdict"]))]
            if np.isfinite(r["low"]) and lims[0] <= r["mean"] <= lims[1]:
                ax.plot([max(r["low"], lims[0]), min(r["high"], lims[1])], [y, y], color=edge, lw=1.1)
            _plot_value(ax, float(r["mean"]), y, lims, marker=marker, ms=4.5, mfc=face, mec=edge, color=edge)
            if np.isfinite(r["bound"]):
                for b in ([r["bound"], -r["bound"]] if r["op"] in ("approx", "abs_le") else [r["bound"]]):
                    if lims[0] <= b <= lims[1]:
                        ax.plot([b, b], [y - 0.35, y + 0.35], ls="--", lw=0.9, color="#8c510a")
            if panel.startswith("accuracy") and np.isfinite(r["paper_effect"]) and _effect_row(r, rows):
                _plot_value(ax, float(r["paper_effect"]), y, lims, marker="D", ms=4.5, color="#2166ac")
        ax.axvline(0.0, color="black", lw=0.6)
        ax.set_xlim(*lims)
        ax.set_ylim(-0.7, len(items) - 0.3)
        ax.set_yticks(ys, labels, fontsize=6.3)
        for tick, (header, _) in zip(ax.get_yticklabels(), items):
            if header:
                tick.set_fontweight("bold")
        ax.set_xlabel(panel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    handles = [plt.Line2D([], [], marker=m, mfc=f, mec=e, color=e, ls="none", label=t) for m, f, e, t in MARKERS.values()]
    handles += [plt.Line2D([], [], marker="D", color="#2166ac", ls="none", label="paper's effect (points)"),
                plt.Line2D([], [], ls="--", color="#8c510a", label="margin / tolerance"),
                plt.Line2D([], [], marker=r"$\rightarrow$", color="#555555", ls="none",
                           label="beyond the axis (value written)")]
    top = 1 - 0.75 / fig.get_figheight()  # room above the panels for the legend, whatever their height
    fig.legend(handles=handles, fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, top))
    n = int(shown["n"].max()) if len(shown) else 0
    caption = ("Every claim's comparison, grouped by paper: fedlab's paired difference left − right over the seeds both "
               f"arms share (mean ± 95 % paired t-interval, up to n = {n} seeds), marked by its verdict class (Holm-"
               "adjusted holds / fails, inconclusive, or not tested with its reason in the claims table), the claim's "
               "margin (dashed) and, for accuracy, the paper's own effect (diamond; other settings: CIFAR/ResNet, "
               "hundreds of rounds). Each axis fits the tested intervals; values beyond it are arrows with the value. "
               "Claims with no data yet: " + (", ".join(no_data) if no_data else "none") + ".")
    data = table.drop(columns=["note"])
    seeds = sorted({s for cell in shown["seeds"] for s in json.loads(cell)}, key=str) if len(shown) else []
    paths = save_figure(fig, "claims_forest", notebook=notebook, profile=profile, caption=caption, data=data,
                        out_dir=out_dir, kind="claims", read_records=evidence_records(figures_dir),
                        parameters={"min_seeds_to_decide": int(shown["min_seeds_to_decide"].max()) if len(shown) else 6,
                                    "seeds": seeds})
    plt.close(fig)
    return paths
