"""The cpu-profile budget dry run: run counts from sidecars, seeds scaled, committed runs subtracted."""
from __future__ import annotations

import json

import pytest

from fedlab.evidence.budget import ANALYSIS_ALLOWANCE_S, PARALLEL_EFFICIENCY, estimate, measure_costs

COSTS = {"cnn": {"grad_per_sample": 1e-3, "forward_per_sample": 2e-4}}


def _sidecar(d, name, nb, hashes, seeds=None):
    params = {"seeds": seeds} if seeds else {}
    (d / f"{name}.json").write_text(json.dumps({"figure": name, "notebook": f"notebooks/{nb}.ipynb",
                                                "config_hashes": hashes, "parameters": params}))


def test_estimate_counts_scales_and_subtracts(tmp_path):
    _sidecar(tmp_path, "04_a", "04_sam_baselines", ["h1", "h2"])
    _sidecar(tmp_path, "04_b", "04_sam_baselines", ["h2", "h3"])
    _sidecar(tmp_path, "05_a", "05_fedsmoo", ["h3", "h4"])  # h3 is shared with 04: trained once
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "fedavg-h1.json.gz").write_bytes(b"")
    est = estimate(seeds=3, cores=1, figures_dir=tmp_path, costs=COSTS, tune_splits=0)
    rows = {r.notebook: r for r in est["notebooks"]}
    assert set(rows) == {"04_sam_baselines", "05_fedsmoo"}
    assert rows["04_sam_baselines"].runs == 9 and rows["04_sam_baselines"].committed == 1
    assert rows["05_fedsmoo"].runs == 3  # h4 only, × 3 seeds
    # 04 cpu params: T = 40, K = 10, m = 10, B = 32, eval 2000 every 5; g = mean over all methods
    from fedlab.algorithms import algorithm_class, algorithm_names

    g = sum(algorithm_class(n).grad_evals_per_step for n in algorithm_names()) / len(algorithm_names())
    per_round = 10 * 10 * 32 * g * 1e-3 + 2000 * 2e-4 / 5
    assert rows["04_sam_baselines"].seconds == pytest.approx((9 - 1) * 40 * per_round + ANALYSIS_ALLOWANCE_S)
    two = estimate(seeds=3, cores=2, figures_dir=tmp_path, costs=COSTS, tune_splits=0)
    train = rows["04_sam_baselines"].seconds - ANALYSIS_ALLOWANCE_S
    assert two["notebooks"][0].seconds - ANALYSIS_ALLOWANCE_S == pytest.approx(train / (2 * PARALLEL_EFFICIENCY))
    assert est["tuning"]["seconds"] == 0


def test_measured_costs_are_positive_and_tuning_scales_with_splits(tmp_path):
    c = measure_costs("cnn", reps=2)
    assert c["grad_per_sample"] > 0 and c["forward_per_sample"] > 0
    one = estimate(figures_dir=tmp_path, costs=COSTS, tune_splits=1)["tuning"]
    three = estimate(figures_dir=tmp_path, costs=COSTS, tune_splits=3)["tuning"]
    assert three["seconds"] == pytest.approx(3 * one["seconds"]) and three["runs"] == 3 * one["runs"]
