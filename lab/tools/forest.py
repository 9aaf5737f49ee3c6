"""The forest plot of the claims: each paper's reported effect beside fedlab's paired difference.

One row per comparison of every claim (:func:`lab.evidence.claims.paired_table`): fedlab's mean paired
difference left − right with its 95 % paired t-interval (a bar; hollow when the comparison was not decided in
its Holm family: n below :data:`~lab.evidence.paired.MIN_SEEDS_TO_DECIDE`, or an arm that does not test the
claim), the claim's margin (a dashed tick: ±tol for ≈, −δ for ≥ with δ its smallest effect, +m for ≫), zero, and the paper's own effect where it is commensurable (an accuracy difference in
points: a diamond). Panels by unit (accuracy in points, Δ_D, λ_max, the sanity check's relative cross term), so
no axis mixes units. :func:`claims_forest` evaluates, draws and saves with the provenance of every figure.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["claims_forest", "forest_table"]


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


def _effect_row(row: pd.Series, rows: pd.DataFrame) -> bool:
    """Whether the paper's effect is drawn on this comparison: the one whose right arm the effect names
    (``"vs MoFedSAM"``), else the claim's first comparison."""
    same = rows[rows["id"] == row["id"]]
    named = [r for r in same["right"] if r and f"vs {r}" in str(row["paper_effect_where"])]
    return row["right"] == named[0] if named else row["comparison"] == 0


def claims_forest(figures_dir: Path | None = None, *, profile: str = "cpu", notebook: str = "10_benchmarks",
                  out_dir: Path | None = None, min_seeds_to_decide: int | None = None) -> dict[str, Path]:
    """Draw and save ``claims_forest.{png,pdf,csv,json}`` (:func:`lab.tools.figures.save_figure`: citable
    profiles into ``figures/``, ``ci`` into ``figures/_scratch/``) from the committed evidence in
    ``figures_dir`` (default: the repository's ``figures/``). Returns the written paths."""
    import matplotlib.pyplot as plt
    import numpy as np

    from lab.tools.figures import save_figure
    from lab.tools.plots import use_house_style

    use_house_style()
    table = forest_table(figures_dir, min_seeds_to_decide=min_seeds_to_decide)
    shown = table[table["n"] > 0]
    no_data = sorted(set(table.loc[table["comparison_verdict"] == "no data", "id"]))
    panels = list(dict.fromkeys(shown["panel"]))
    heights = [max(len(shown[shown["panel"] == p]), 1) for p in panels] or [1]
    fig, axes = plt.subplots(len(heights), 1, figsize=(8.5, 1.0 + 0.24 * sum(heights) + 0.4 * len(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    colours = {"holds": "#1b7837", "fails": "#b2182b"}
    for ax, panel in zip(axes[:, 0], panels):
        rows = shown[shown["panel"] == panel].reset_index(drop=True)
        ys = np.arange(len(rows))[::-1]
        for y, (_, r) in zip(ys, rows.iterrows()):
            reading = r["comparison_as_if"]
            colour = colours.get(reading, "#555555")
            filled = bool(r["decided"])
            ax.errorbar(r["mean"], y, xerr=[[r["mean"] - r["low"]], [r["high"] - r["mean"]]]
                        if np.isfinite(r["low"]) else None, fmt="o", ms=4, lw=1.2, color=colour,
                        mfc=colour if filled else "white", capsize=2)
            if np.isfinite(r["bound"]):
                ax.plot([r["bound"]] * 2, [y - 0.35, y + 0.35], ls="--", lw=0.9, color="#8c510a")
                if r["op"] in ("approx", "abs_le"):
                    ax.plot([-r["bound"]] * 2, [y - 0.35, y + 0.35], ls="--", lw=0.9, color="#8c510a")
            if panel.startswith("accuracy") and np.isfinite(r["paper_effect"]) and _effect_row(r, rows):
                ax.plot(r["paper_effect"], y, marker="D", ms=5, color="#2166ac", ls="none")
        ax.axvline(0.0, color="black", lw=0.6)
        ax.set_yticks(ys, [str(x) for x in rows["row_label"]], fontsize=6.5)
        ax.set_xlabel(panel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    handles = [plt.Line2D([], [], marker="o", color="#555555", mfc="white", ls="none",
                          label="fedlab paired Δ ± 95 % (hollow: not decided, or not tested)"),
               plt.Line2D([], [], marker="o", color="#1b7837", ls="none", label="holds (Holm-adjusted)"),
               plt.Line2D([], [], marker="o", color="#b2182b", ls="none", label="fails (Holm-adjusted)"),
               plt.Line2D([], [], marker="D", color="#2166ac", ls="none", label="paper's effect (points)"),
               plt.Line2D([], [], ls="--", color="#8c510a", label="margin / tolerance")]
    axes[0, 0].legend(handles=handles, fontsize=6.5, loc="lower right", framealpha=0.9)
    fig.tight_layout()
    n = int(shown["n"].max()) if len(shown) else 0
    caption = ("Every claim's comparison: fedlab's paired difference left − right over the seeds both arms share "
               f"(mean ± 95 % paired t-interval, n = {n} seeds; coloured by the verdict decided on the Holm-adjusted p "
               "in the claim's family; hollow below the 6 pairs a verdict needs, coloured by what the interval says; "
               "grey where an arm does not test the claim), the claim's margin (dashed) and, for accuracy, the "
               "paper's own effect "
               "(diamond; other settings: CIFAR/ResNet, hundreds of rounds). Claims with no data yet: "
               + (", ".join(no_data) if no_data else "none") + ".")
    data = table.drop(columns=["note"])
    paths = save_figure(fig, "claims_forest", notebook=notebook, profile=profile, caption=caption, data=data,
                        out_dir=out_dir, kind="results",
                        parameters={"min_seeds_to_decide": int(shown["min_seeds_to_decide"].max()) if len(shown) else 6})
    plt.close(fig)
    return paths
