"""The end of `make run` (lab.tools.summary): three methods, tuned settings, their sources, the claims' counts."""
from __future__ import annotations

from lab.evidence.protocol import profile_federation, tuned_params
from lab.tools import summary


def test_quick_summary_prints_each_method_with_its_tuned_source(tmp_path, capsys, monkeypatch, one_thread,
                                                               fmnist_or_skip):
    monkeypatch.setenv("FEDLAB_RECORDS", str(tmp_path / "no-records"))  # train, do not load committed runs
    assert summary.main(["--rounds", "1", "--runs-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "1 rounds of K=" in out and "dirichlet-0.1" in out
    base = profile_federation("cpu")
    for method in summary.METHODS:
        assert tuned_params(method, base).source in out
    # the claims as the README reads them: paired, with the gate and the committed-seeds reading beside it
    assert "claims table (paired over seeds, a verdict from n ≥ 6 seed pairs)" in out
    assert "read at the committed seeds:" in out and " holds" in out
    assert len(list((tmp_path / "runs").glob("fed*-*"))) == len(summary.METHODS)


def test_the_summary_runs_on_the_committed_evidences_federation(tmp_path):
    """make run loads committed runs: its federation is the one notebook 10's committed records were measured on,
    whatever the cpu parameter files name for the next run; with none committed, the cpu profile's."""
    import json

    from lab.evidence.protocol import split_key
    from lab.evidence.records import load_record
    from lab.repro import FIGURES_DIR

    assert summary.evidence_federation(tmp_path) == profile_federation("cpu")
    base = summary.evidence_federation()
    assert (base.algorithm, base.seed, split_key(base)) == ("fedavg", 0, "dirichlet-0.1")
    keys = json.loads((FIGURES_DIR / f"{summary.BENCHMARK_FIGURE}.json").read_text())["records"]
    committed = [load_record(k, FIGURES_DIR / "records").config for k in keys if k.startswith("fedavg-")]
    assert any(c.hashed_fields() == base.hashed_fields() for c in committed)
