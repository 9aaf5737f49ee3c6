"""The cpu profile's evidence protocol: tuning per split, resumable, and the notebooks' tuned choices."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from lab.evidence.protocol import (PARTITION_SEED, notebook_params, profile_federation, profile_splits, split_key,
                                      tune_splits, tuned_params)
from lab.evidence.records import load_record

TINY_TUNING = {"rounds": 4, "eval_every": 2, "validation_size": 200, "seed": 0}
GRIDS = {"fedsam": {"rho": [0.01, 1.0]}, "fedprox": {"mu": [0.01, 0.1]}}


def test_profile_splits_follow_notebook_10_and_fix_the_partition():
    splits = profile_splits("cpu")
    p = notebook_params("10_benchmarks", "cpu")
    assert set(splits) == {f"dirichlet-{a:g}" for a in p["dirichlet_alphas"]} | {
        f"pathological-{c}" for c in p["pathological_classes"] if c is not None}
    assert "dirichlet-0.1" in splits and "pathological-3" not in splits  # the rerun trains no pathological split
    for key, cfg in splits.items():
        assert split_key(cfg) == key
        assert cfg.partition_seed == PARTITION_SEED and cfg.n_clients == 100 and cfg.dataset == "fmnist"
    assert profile_federation("cpu") == splits["dirichlet-0.1"]


def test_tune_splits_writes_choices_records_and_skips_what_is_done(tiny, tmp_path, one_thread):
    splits = {"dirichlet-0.5": tiny(alpha=0.5), "iid": tiny(partition="iid", alpha=None)}
    out = tmp_path / "tuning"
    recs = tmp_path / "records"
    paths = tune_splits(splits, grids=GRIDS, directory=out, records_directory=recs, tuning=TINY_TUNING,
                        progress=False, edges=None)  # the declared grid only (edge extension: its own test)
    assert [p.relative_to(out).as_posix() for p in paths] == [
        "dirichlet-0.5/fedsam.json", "dirichlet-0.5/fedprox.json", "iid/fedsam.json", "iid/fedprox.json"]
    done = json.loads(paths[0].read_text())
    assert done["protocol"] == {"rounds": 4, "seed": 0, "validation_size": 200}
    assert [r["rho"] for r in done["scores"]] == [0.01, 1.0]
    for row in done["scores"]:  # every grid point's run is committed and is a validation run
        rec = load_record(row["run"], recs)
        assert rec is not None and rec.config.validation_size == 200 and rec.config.rounds == 4
    # the notebooks' lookup returns the choice for the split of any config on it
    t = tuned_params("fedsam", tiny(alpha=0.5, algorithm="fedavg"), directory=out)
    assert t.tuned and t.params == done["best"]
    assert not tuned_params("fedsam", tiny(alpha=0.1), directory=out).tuned
    assert tuned_params("fedavg", tiny(alpha=0.5), directory=out).params == {}
    # the default folder (the rerun's tuning) reuses the tuning split's choice on a split without its own file
    reused = tuned_params("fedsam", tiny(alpha=0.7))
    assert reused.tuned and "(tuned on dirichlet-0.1, reused on dirichlet-0.7)" in reused.source
    assert reused.params == tuned_params("fedsam", tiny(alpha=0.1)).params
    # a second call trains nothing: the records are not rewritten and the files stay
    stamps = {p: p.stat().st_mtime_ns for p in recs.iterdir()}
    again = tune_splits(splits, grids=GRIDS, directory=out, records_directory=recs, tuning=TINY_TUNING,
                        progress=False, edges=None)
    assert again == paths and {p: p.stat().st_mtime_ns for p in recs.iterdir()} == stamps
    # a file made under another grid is refused, naming it, and left as it was
    before = paths[0].read_text()
    with pytest.raises(ValueError, match="fedsam.json was tuned under another"):
        tune_splits({"dirichlet-0.5": splits["dirichlet-0.5"]}, methods=["fedsam"],
                    grids={"fedsam": {"rho": [0.02, 1.0]}}, directory=out, records_directory=recs,
                    tuning=TINY_TUNING, progress=False, edges=None)
    assert paths[0].read_text() == before


def test_a_grid_point_is_recorded_as_it_finishes(tiny, tmp_path, one_thread, monkeypatch):
    import lab.evidence.records as records

    calls = []
    real = records.run_or_load

    def second_fails(config, **kwargs):  # the session stops during the grid's second point
        calls.append(config.algorithm_params["mu"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(config, **kwargs)

    monkeypatch.setattr(records, "run_or_load", second_fails)
    recs = tmp_path / "records"
    with pytest.raises(KeyboardInterrupt):
        tune_splits({"iid": tiny(partition="iid", alpha=None)}, methods=["fedprox"], grids=GRIDS,
                    directory=tmp_path / "tuning", records_directory=recs, tuning=TINY_TUNING, progress=False,
                    edges=None)
    assert calls == [0.01, 0.1] and len(list(recs.glob("fedprox-*"))) == 1  # the first point is committed
    assert not (tmp_path / "tuning" / "iid" / "fedprox.json").exists()


def test_unknown_methods_are_refused_before_training(tiny, tmp_path):
    with pytest.raises(ValueError, match="no declared grid"):
        tune_splits({"iid": tiny(partition="iid", alpha=None)}, methods=["nosuch"], directory=tmp_path,
                    tuning=TINY_TUNING, progress=False)
    assert not any(tmp_path.iterdir())


def test_run_seeds_fixes_the_partition_and_records_each_run(tiny, tmp_path, monkeypatch, one_thread):
    from lab.evidence.protocol import run_seeds

    monkeypatch.setenv("FEDLAB_RECORDS", str(tmp_path / "records"))
    runs = run_seeds(tiny(rounds=2), seeds=[0, 1], record=True)
    assert [r.config.seed for r in runs] == [0, 1]
    assert {r.config.partition_seed for r in runs} == {PARTITION_SEED}
    assert [c.tolist() for c in runs[0].partition.client_indices] == [c.tolist() for c in runs[1].partition.client_indices]
    assert runs[0].final_accuracy != runs[1].final_accuracy or not runs[0].metrics.equals(runs[1].metrics)
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == sorted(
        f"{r.run_dir.name}.json.gz" for r in runs)
    with pytest.raises(ValueError, match="distinct"):
        run_seeds(tiny(), seeds=[0, 0])



def test_paired_run_seeds_draws_one_partition_per_seed_with_the_rerun_keys(tiny, tmp_path, monkeypatch, one_thread):
    from lab.evidence.protocol import FINAL_METRIC, rerun_config, run_seeds

    monkeypatch.setenv("FEDLAB_RECORDS", str(tmp_path / "records"))
    base = tiny(rounds=2, partition_seed=PARTITION_SEED, eval_every=2)
    runs = run_seeds(base, seeds=[1, 2], record=True, paired=True)
    assert [(r.config.seed, r.config.partition_seed) for r in runs] == [(1, 1), (2, 2)]
    assert {r.config.eval_every for r in runs} == {FINAL_METRIC["eval_every"]}
    assert [c.tolist() for c in runs[0].partition.client_indices] != [c.tolist() for c in runs[1].partition.client_indices]
    # the configs (so the run keys) are rerun_config's: a record the regime rerun wrote is what a notebook reads
    assert all(r.config == rerun_config(base, s) for s, r in zip([1, 2], runs))
    # a second call reads the committed records back (not runs/), the same numbers
    again = run_seeds(base, seeds=[1, 2], paired=True)
    assert all(r.theta is None for r in again)
    for a, b in zip(runs, again):
        pd.testing.assert_frame_equal(a.metrics, b.metrics, check_dtype=False)

# --- issue 26: the final metric, the rerun's partition per seed, grids extended at their edges -------------
def test_final_metric_averages_the_last_fifth_of_the_rounds_or_says_it_could_not(tiny):
    """Issue 41 changed the final metric from the last 5 evaluations to the last 20 % of the rounds: a 10-round
    run averages rounds 9 and 10; the fallback (a subsample, a gap in the window) is the last evaluation."""
    import pandas as pd

    from fedlab.results import RunResult
    from lab.evidence.protocol import FINAL_METRIC, final_metric, rerun_config

    assert FINAL_METRIC["last_fraction"] == 0.2
    cfg = tiny(rounds=10, eval_every=1, eval_subsample=None)
    accs = [0.1 * r for r in range(1, 11)]
    res = RunResult(cfg, pd.DataFrame({"round": range(1, 11), "test_acc": accs}), None, "finished", None, {})
    got = final_metric(res)
    assert got.protocol and got.value == pytest.approx((accs[8] + accs[9]) / 2)
    assert got.how == "mean of the last 20 % of rounds (rounds 9–10 of 10), full test set"
    sub = RunResult(cfg.replace(eval_subsample=50), res.metrics, None, "finished", None, {})
    fallback = final_metric(sub)  # a subsample is not the full test set: the last evaluation, labelled
    assert not fallback.protocol and fallback.value == accs[-1] and "not the protocol's mean" in fallback.how
    gaps = res.metrics.assign(test_acc=[a if r % 5 == 0 else float("nan") for r, a in zip(range(1, 11), accs)])
    assert not final_metric(RunResult(cfg, gaps, None, "finished", None, {})).protocol
    assert final_metric(res, {"last_fraction": 1.0, "eval_every": 5, "eval_subsample": None}).value == pytest.approx(
        (accs[4] + accs[9]) / 2)
    r3 = rerun_config(tiny(), 3)  # each seed draws its own partition, shared by every method of that seed
    assert (r3.seed, r3.partition_seed, r3.eval_subsample) == (3, 3, None)


class _Tuned:
    def __init__(self, best: dict) -> None:
        self.best = best


def _fake_tuner(score, calls):
    """A stand-in for fedlab.tune on a synthetic objective: the best grid point by ``score``."""
    def tune_once(grid):
        calls.append({k: list(v) for k, v in grid.items()})
        (key, values), = grid.items()
        return _Tuned({key: max(values, key=score)})
    return tune_once


def test_a_grid_whose_optimum_is_outside_is_extended_geometrically_up_to_the_cap():
    from lab.evidence.protocol import EdgeRule, extend_edges

    calls: list = []
    rule = EdgeRule(factor=2.0, max_steps=5, cap={"rho": 1.0})
    # the objective peaks at ρ = 0.3, above the declared grid's top 0.05
    result, ext = extend_edges(_fake_tuner(lambda r: -abs(math.log(r / 0.3)) if r > 0 else -99, calls),
                               {"rho": [0.0, 0.01, 0.02, 0.05]}, rule)
    assert ext["added"] == {"rho": [0.1, 0.2, 0.4, 0.8]} and result.best == {"rho": 0.4}  # 0.8 brackets it
    assert ext["on_edge"] == [] and len(calls) == 5 and ext["declared_grid"] == {"rho": [0.0, 0.01, 0.02, 0.05]}
    # the optimum between 0 and the smallest positive radius: halved below it; 0 itself is never extended
    calls.clear()
    result, ext = extend_edges(_fake_tuner(lambda r: -abs(r - 0.006), calls), {"rho": [0.0, 0.01, 0.02]}, rule)
    assert ext["added"]["rho"] == [0.005, 0.0025] and result.best == {"rho": 0.005}
    calls.clear()
    result, ext = extend_edges(_fake_tuner(lambda r: -r, calls), {"rho": [0.0, 0.01, 0.02]}, rule)
    assert ext["added"] == {} and result.best == {"rho": 0.0} and ext["on_edge"] == ["rho"] and len(calls) == 1
    # the cap stops the extension, and the file says the choice is still on the edge
    calls.clear()
    result, ext = extend_edges(_fake_tuner(lambda r: r, calls), {"rho": [0.0, 0.3]}, rule)
    assert ext["added"] == {"rho": [0.6]} and ext["on_edge"] == ["rho"]
    # keys outside the rule (a preset, FedSWA's α) are never extended
    calls.clear()
    result, ext = extend_edges(_fake_tuner(lambda a: a, calls), {"alpha": [1.0, 1.5]}, rule)
    assert ext["added"] == {} and len(calls) == 1


def test_every_sam_grid_holds_zero_and_the_papers_radius():
    import dataclasses

    from fedlab.algorithms import algorithm_class
    from fedlab.tuning import DEFAULT_GRIDS

    for name, grid in DEFAULT_GRIDS.items():
        if "rho" not in grid or name in ("fedswa", "fedmoswa"):  # their ρ is an lr fraction, not a radius
            continue
        default = {f.name: f.default for f in dataclasses.fields(algorithm_class(name).hparams_cls)}["rho"]
        assert 0.0 in grid["rho"] and default in grid["rho"], name
