"""The cpu-profile budget dry run: runs from the plan, shared runs counted once, committed ones subtracted."""
from __future__ import annotations

import gzip
import json

import pytest

from lab.evidence.budget import (ANALYSIS_S_PER_MODEL, PARALLEL_EFFICIENCY, PLAN, Family, estimate,
                                    measure_costs)
from lab.evidence.protocol import notebook_params

COSTS = {m: {"grad_per_sample": 1e-3, "forward_per_sample": 2e-4} for m in ("cnn", "mlp")}  # no timing in a test


def _record(d, name, **cfg):
    d.mkdir(exist_ok=True)
    payload = {"config": {"config": {"validation_size": None, **cfg}}}
    (d / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps(payload).encode()))


def _per_round(p, grads):
    m = round(p["participation"] * p["n_clients"])
    return m * p["local_steps"] * p["batch_size"] * grads * 1e-3 + (p["eval_subsample"] or 10000) * 2e-4 / p["eval_every"]


def test_shared_runs_are_counted_once_and_committed_ones_subtracted(tmp_path):
    plan = {"10_benchmarks": [Family("all", ("fedavg", "fedsam"), splits=("dirichlet-0.1", "dirichlet-0.5"))],
            "09_sharpness_and_landscapes": [Family("curv", ("fedavg", "fedsam"), analysed=True)]}
    p10, p09 = notebook_params("10_benchmarks"), notebook_params("09_sharpness_and_landscapes")
    same = all(p09.get(k) == p10.get(k) for k in ("rounds", "local_steps"))
    n = max(3, int(p10.get("n_seeds", 1)))  # the seeds each run trains on
    _record(tmp_path / "records", "fedavg-x", algorithm="fedavg", partition="dirichlet", alpha=0.1, seed=0,
            rounds=p10["rounds"], local_steps=p10["local_steps"])
    _record(tmp_path / "records", "fedavg-t", algorithm="fedavg", partition="dirichlet", alpha=0.1, seed=1,
            rounds=p10["rounds"], local_steps=p10["local_steps"], validation_size=100)  # a tuning run: not counted
    est = estimate(seeds=3, cores=1, figures_dir=tmp_path, costs=COSTS, plan=plan, tune=False)
    rows = {r.notebook: r for r in est["notebooks"]}
    assert list(rows) == ["10_benchmarks", "09_sharpness_and_landscapes"]  # 10 runs first
    r10 = rows["10_benchmarks"]
    assert (r10.runs, r10.committed, r10.shared) == (2 * 2 * n, 1, 0)
    expect = sum(p10["rounds"] * _per_round(p10, g) for g in (1, 2)) * 2 * n - p10["rounds"] * _per_round(p10, 1)
    assert r10.seconds == pytest.approx(expect)
    r09 = rows["09_sharpness_and_landscapes"]
    if same:  # 09 trains on 10's federation: its runs are 10's, only the analysis is its own
        assert (r09.runs, r09.shared) == (0, 2 * n) and r09.seconds == pytest.approx(2 * n * ANALYSIS_S_PER_MODEL)
    else:
        assert (r09.runs, r09.shared) == (2 * n, 0)
    two = estimate(seeds=3, cores=2, figures_dir=tmp_path, costs=COSTS, plan=plan, tune=False)
    assert two["notebooks"][0].seconds == pytest.approx(r10.seconds / (2 * PARALLEL_EFFICIENCY))


def test_tuning_counts_every_grid_point_per_split_and_skips_committed(tmp_path):
    from lab.evidence.protocol import profile_splits
    from fedlab.tuning import DEFAULT_GRIDS

    import math

    points = sum(math.prod(len(v) for v in g.values()) for g in DEFAULT_GRIDS.values()
                 if g and math.prod(len(v) for v in g.values()) > 1)
    full = estimate(figures_dir=tmp_path, costs=COSTS, plan={})["tuning"]
    assert full["runs"] == points * len(profile_splits("cpu")) and full["committed"] == 0
    split = next(iter(profile_splits("cpu")))
    (tmp_path / "tuning" / split).mkdir(parents=True)
    (tmp_path / "tuning" / split / "fedsam.json").write_text("{}")
    part = estimate(figures_dir=tmp_path, costs=COSTS, plan={})["tuning"]
    n_sam = len(DEFAULT_GRIDS["fedsam"]["rho"])
    assert part["committed"] == n_sam and part["seconds"] < full["seconds"]


def test_measured_costs_are_positive():
    c = measure_costs("cnn", reps=2)
    assert c["grad_per_sample"] > 0 and c["forward_per_sample"] > 0


def test_the_plan_names_real_methods_and_notebooks():
    from fedlab.algorithms import algorithm_names
    from lab.repro import REPO_ROOT

    for nb, families in PLAN.items():
        assert (REPO_ROOT / "notebooks" / f"{nb}.py").exists(), nb
        for fam in families:
            assert set(fam.methods) <= set(algorithm_names()), (nb, fam.label)


def test_make_figures_runs_every_notebook_once_with_10_first():
    from lab.evidence.budget import RUN_ORDER
    from lab.repro import REPO_ROOT

    notebooks = sorted(p.stem for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    assert sorted(RUN_ORDER) == notebooks and RUN_ORDER[0] == "10_benchmarks"
