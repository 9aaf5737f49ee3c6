"""Committed run records: figures re-plotted without training, reruns that skip committed runs."""
from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import fedlab  # noqa: E402
from lab.tools.plots import curve_data, plot_curves  # noqa: E402
from lab.evidence.records import RecordError, figure_data, figure_runs, load_record, run_or_load  # noqa: E402
from lab.tools.figures import save_figure  # noqa: E402
from fedlab.sweep import summary_table  # noqa: E402


@pytest.fixture
def two_runs(tiny):
    base = tiny(rounds=6, lr=0.1)
    return [fedlab.run(base.replace(algorithm=a), progress=False) for a in ("fedavg", "fedsam")]


def test_figure_writes_data_records_and_full_provenance(two_runs, tmp_path):
    fig, ax = plt.subplots()
    plot_curves(ax, two_runs)
    out = tmp_path / "figs"
    paths = save_figure(fig, "t_curves", notebook="00_quickstart", profile="cpu", caption="c", out_dir=out,
                        data=curve_data(two_runs), runs=two_runs)
    plt.close(fig)
    meta = json.loads(paths["json"].read_text())
    keys = [r.run_dir.name for r in two_runs]
    assert meta["records"] == keys and meta["data"] == "t_curves.csv"
    assert set(meta["configs"]) == set(keys)
    assert meta["configs"][keys[1]]["algorithm"] == "fedsam" and meta["configs"][keys[1]]["lr"] == 0.1
    assert meta["config_hashes"] == [r.summary["config_hash"] for r in two_runs]
    env = meta["environment"]
    assert env["python"] and env["os"] and env["cpu_count"] >= 1 and env["torch_threads"] >= 1
    assert meta["packages"]["fedlab"] == fedlab.__version__ and meta["git_commit"]
    assert meta["argv"] and "papermill" in meta["command"]
    assert len(meta["dataset_checksums"]["digits"]) >= 1
    for key in keys:  # small, and readable with zcat
        path = out / "records" / f"{key}.json.gz"
        assert path.stat().st_size < 20_000
        assert json.loads(gzip.decompress(path.read_bytes()))["key"] == key


def test_replot_from_committed_data_without_training(two_runs, tmp_path, monkeypatch):
    out = tmp_path / "figs"
    fig, ax = plt.subplots()
    plot_curves(ax, two_runs)
    save_figure(fig, "t_curves", notebook="00_quickstart", profile="cpu", caption="c", out_dir=out,
                data=curve_data(two_runs), runs=two_runs)
    plt.close(fig)
    shutil.rmtree(two_runs[0].run_dir.parent)  # the machine's runs/ is gone

    def no_training(*args, **kwargs):
        raise AssertionError("re-plotting must not train")

    monkeypatch.setattr(fedlab.engine.loop.Simulation, "train_round", no_training)
    t0 = time.perf_counter()
    runs = figure_runs("t_curves", out)
    fig, ax = plt.subplots()
    plot_curves(ax, runs)
    plt.close(fig)
    assert time.perf_counter() - t0 < 5
    replotted = curve_data(runs)
    committed = figure_data("t_curves", out)
    pd.testing.assert_frame_equal(replotted.reset_index(drop=True), committed, check_dtype=False, atol=1e-6)
    # every number is checkable: tables from records equal the tables from the live runs
    pd.testing.assert_frame_equal(summary_table(runs).drop(columns="sec_per_round"),
                                  summary_table(two_runs).drop(columns="sec_per_round"), check_dtype=False)
    assert all(r.theta is None for r in runs)


def test_rerun_on_a_new_machine_skips_committed_runs(two_runs, tiny, tmp_path, monkeypatch):
    records = tmp_path / "records"
    from lab.evidence.records import write_record

    for r in two_runs:
        write_record(r, records)
    monkeypatch.setenv("FEDLAB_RECORDS", str(records))
    fresh = tmp_path / "new_machine_runs"
    calls = []
    original = fedlab.engine.loop.Simulation.train_round
    monkeypatch.setattr(fedlab.engine.loop.Simulation, "train_round",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    cfg = two_runs[1].config.replace(runs_dir=str(fresh))
    got = run_or_load(cfg)
    assert calls == [] and not fresh.exists()
    assert got.theta is None and got.status == two_runs[1].status
    pd.testing.assert_frame_equal(got.metrics, two_runs[1].metrics, check_dtype=False)
    # the caller's label (not in the key, so not in the record) names the loaded run, as a figure shows it
    assert run_or_load(cfg.replace(name="my label")).config.name == "my label" and calls == []
    # where θ is analysed, need_theta=True trains (identically)
    trained = run_or_load(cfg, need_theta=True)
    assert calls and trained.theta is not None
    pd.testing.assert_frame_equal(trained.metrics.drop(columns="wall_seconds"),
                                  two_runs[1].metrics.drop(columns="wall_seconds"))


def test_a_committed_record_wins_over_a_differing_copy_in_runs(two_runs, tmp_path, monkeypatch):
    """A run trained again (here, or on another CPU) can differ from its committed record in its last bits; the
    figures read the record, never the local copy (which stays for the analyses that need θ)."""
    import dataclasses

    from lab.evidence.records import write_record

    records = tmp_path / "records"
    monkeypatch.setenv("FEDLAB_RECORDS", str(records))
    run = two_runs[0]
    shifted = run.metrics.copy()
    shifted["test_acc"] = shifted["test_acc"] + 0.001  # what another CPU's rounding might have made of it
    accs = shifted["test_acc"].dropna()  # its summary is the one such a run writes: derived from its rows
    summary = {**run.summary, "final_test_acc": float(accs.iloc[-1]), "best_test_acc": float(accs.max())}
    write_record(dataclasses.replace(run, metrics=shifted, summary=summary), records)
    assert run.run_dir.is_dir()  # the local copy exists
    got = run_or_load(run.config)
    assert got.theta is None
    pd.testing.assert_series_equal(got.metrics["test_acc"], shifted["test_acc"], check_dtype=False)
    local = run_or_load(run.config, need_theta=True)  # the analyses' model: the local copy
    assert local.theta is not None
    pd.testing.assert_series_equal(local.metrics["test_acc"], run.metrics["test_acc"], check_dtype=False)


def test_fedlab_run_never_reads_committed_records(two_runs, tmp_path, monkeypatch):
    """A library call trains (or loads from its runs_dir) even when the run's record is committed: the
    result always has θ, and the numbers are the record's. Loading records is the lab's explicit act."""
    from lab.evidence.records import load_record, write_record

    records = tmp_path / "records"
    path = write_record(two_runs[1], records)
    monkeypatch.setenv("FEDLAB_RECORDS", str(records))
    assert load_record(path.name.removesuffix(".json.gz")) is not None  # the record is there, and valid
    got = fedlab.run(two_runs[1].config.replace(runs_dir=str(tmp_path / "elsewhere")), progress=False)
    assert isinstance(got.theta, torch.Tensor) and got.server is not None
    assert (tmp_path / "elsewhere").is_dir()  # trained there, not read from figures/records
    pd.testing.assert_frame_equal(got.metrics.drop(columns="wall_seconds"),
                                  two_runs[1].metrics.drop(columns="wall_seconds"))
    swept = fedlab.sweep.sweep(two_runs[1].config.replace(runs_dir=str(tmp_path / "elsewhere")),
                               {"algorithm": [two_runs[1].config.algorithm]}, progress=False)
    assert all(isinstance(r.theta, torch.Tensor) for r in swept)


def test_corrupted_or_foreign_record_is_refused(two_runs, tmp_path):
    from lab.evidence.records import record_path, write_record

    path = write_record(two_runs[0], tmp_path)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(RecordError, match="corrupted"):
        load_record(two_runs[0].run_dir.name, tmp_path)
    good = write_record(two_runs[1], tmp_path)
    shutil.copy(good, record_path("fedsam-000000000000", tmp_path))
    with pytest.raises(RecordError, match="refusing to mix"):
        load_record("fedsam-000000000000", tmp_path)
    assert load_record("fedavg-ffffffffffff", tmp_path) is None


def test_a_committed_record_is_never_replaced(two_runs, tmp_path, monkeypatch):
    """Writing the record of a run loaded from that record (what run_seeds(record=True) does on a rerun)
    or of a retrained run with other wall times leaves the committed bytes as they are."""
    from lab.evidence.records import write_record

    path = write_record(two_runs[0], tmp_path)
    before = path.read_bytes()
    loaded = load_record(two_runs[0].run_dir.name, tmp_path)
    assert write_record(loaded, tmp_path) == path and path.read_bytes() == before
    retrained = dataclasses.replace(two_runs[0], metrics=two_runs[0].metrics.assign(wall_seconds=123.0))
    assert write_record(retrained, tmp_path) == path and path.read_bytes() == before
