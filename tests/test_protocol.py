"""The cpu profile's evidence protocol: tuning per split, resumable, and the notebooks' tuned choices."""
from __future__ import annotations

import json

import pytest

from lab.evidence.protocol import (PARTITION_SEED, profile_federation, profile_splits, split_key, tune_splits,
                                      tuned_params)
from lab.evidence.records import load_record

TINY_TUNING = {"rounds": 4, "eval_every": 2, "validation_size": 200, "seed": 0}
GRIDS = {"fedsam": {"rho": [0.01, 1.0]}, "fedprox": {"mu": [0.01, 0.1]}}


def test_profile_splits_follow_notebook_10_and_fix_the_partition():
    splits = profile_splits("cpu")
    assert set(splits) == {"dirichlet-0.5", "dirichlet-0.1", "pathological-3"}
    for key, cfg in splits.items():
        assert split_key(cfg) == key
        assert cfg.partition_seed == PARTITION_SEED and cfg.n_clients == 100 and cfg.dataset == "fmnist"
    assert profile_federation("cpu") == splits["dirichlet-0.1"]


def test_tune_splits_writes_choices_records_and_skips_what_is_done(tiny, tmp_path, one_thread):
    splits = {"dirichlet-0.5": tiny(alpha=0.5), "iid": tiny(partition="iid", alpha=None)}
    out = tmp_path / "tuning"
    recs = tmp_path / "records"
    paths = tune_splits(splits, grids=GRIDS, directory=out, records_directory=recs, tuning=TINY_TUNING,
                        progress=False)
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
    # a second call trains nothing: the records are not rewritten and the files stay
    stamps = {p: p.stat().st_mtime_ns for p in recs.iterdir()}
    again = tune_splits(splits, grids=GRIDS, directory=out, records_directory=recs, tuning=TINY_TUNING,
                        progress=False)
    assert again == paths and {p: p.stat().st_mtime_ns for p in recs.iterdir()} == stamps
    # a file made under another grid is refused, naming it, and left as it was
    before = paths[0].read_text()
    with pytest.raises(ValueError, match="fedsam.json was tuned under another"):
        tune_splits({"dirichlet-0.5": splits["dirichlet-0.5"]}, methods=["fedsam"],
                    grids={"fedsam": {"rho": [0.02, 1.0]}}, directory=out, records_directory=recs,
                    tuning=TINY_TUNING, progress=False)
    assert paths[0].read_text() == before


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
