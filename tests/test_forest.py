"""The forest plot reads at a glance (issue 41): the axis fits the tested intervals, a diverged arm's −68 points
is an arrow at the edge, not the axis; each verdict class has its own marker; rows are labelled in words."""
from __future__ import annotations

import math

import pandas as pd

from lab.tools.forest import MARKERS, axis_limits, short_claim, verdict_style


def _rows(*rows: tuple[str, float, float, float]) -> pd.DataFrame:
    return pd.DataFrame([{"comparison_verdict": v, "mean": m, "low": lo, "high": hi, "bound": math.nan}
                         for v, m, lo, hi in rows])


def test_the_axis_fits_the_tested_intervals_and_ignores_untested_outliers():
    rows = _rows(("fails", -1.0, -1.5, -0.5), ("holds", 2.0, 1.5, 2.5), ("not tested — diverged", -68.0, -69.0, -67.0),
                 ("inconclusive", 0.1, -0.3, 0.5))
    lo, hi = axis_limits(rows)
    assert -2.0 < lo < -1.5 and 2.5 < hi < 3.0  # 12 % padding around [-1.5, 2.5]
    assert not lo <= -68.0  # FedGF's diverged mean would squeeze every other interval to a few pixels
    only_untested = _rows(("confounded", 5.0, 4.0, 6.0))
    assert axis_limits(only_untested)[0] < 0 < axis_limits(only_untested)[1]  # zero is always on the axis


def test_every_verdict_class_is_drawn_by_one_of_four_markers():
    assert {verdict_style(v) for v in ("holds", "fails", "inconclusive")} == {"holds", "fails", "inconclusive"}
    for v in ("not tested — degenerate arm", "not tested — diverged", "confounded", "not testable — headroom",
              "too few seeds"):
        assert verdict_style(v) == "not tested"
    assert len({(m, f) for m, f, _, _ in MARKERS.values()}) == len(MARKERS)


def test_rows_are_labelled_with_the_claims_words_not_ids():
    text = "FedSAM < FedAvg under high heterogeneity (Dir 0.1), at FedSAM's tuned ρ — FedSWA (ICML 2025), §2"
    label = short_claim(text)
    assert label.startswith("FedSAM < FedAvg") and "§2" not in label and len(label) <= 58 and "_" not in label
