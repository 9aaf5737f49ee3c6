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
    committed = summary.evidence_runs()
    for method in summary.METHODS:  # the committed evidence's settings, else the tuning's
        assert (f"committed record {committed[method][1]}" if method in committed
                else tuned_params(method, profile_federation("cpu")).source) in out
    # the claims as the README reads them: paired, with the gate and the committed-seeds reading beside it
    assert "claims table (paired over seeds, a verdict from n ≥ 6 seed pairs, Holm-adjusted" in out
    assert "read at the committed seeds:" in out and " holds" in out and "not tested, each with its reason:" in out
    assert "final test acc: " in out and "(lab.evidence.protocol.final_metric)" in out  # the claims' final metric
    assert len(list((tmp_path / "runs").glob("fed*-*"))) == len(summary.METHODS)


def test_the_summary_runs_the_committed_evidences_own_runs(tmp_path):
    """make run loads committed runs: each method's config is that of notebook 10's committed seed-0 record on
    Dirichlet 0.1, whatever the cpu parameter files name for the next run; with none committed, none is taken."""
    from lab.evidence.protocol import split_key

    assert summary.evidence_runs(tmp_path) == {}
    runs = summary.evidence_runs()
    assert set(runs) == set(summary.METHODS)
    for method, (cfg, key) in runs.items():
        assert (cfg.algorithm, cfg.seed, split_key(cfg)) == (method, 0, "dirichlet-0.1") and key.startswith(method)
    assert len({(c.model, c.rounds, c.local_steps, c.lr) for c, _ in runs.values()}) == 1  # one federation


def test_the_summary_shows_each_comparison_of_the_three_with_its_paired_verdict():
    """Beside the one-seed demonstration, every claims-table comparison between two of the three methods as tuned
    (Dirichlet 0.1) with its paired interval and verdict, columns aligned (issue 41)."""
    from lab.evidence.claims import evaluate_claims_paired, load_claims
    from lab.repro import FIGURES_DIR

    wanted = {"fedsam_below_fedavg_dir01", "fedvssam_above_best_baseline_dir01", "fedvssam_above_fedsam_small_step"}
    claims = [c for c in load_claims(FIGURES_DIR / "claims.yaml") if c.id in wanted]
    verdicts = evaluate_claims_paired(claims)
    lines = summary.shown_comparisons(verdicts)
    assert lines[0].startswith("comparison") and len(lines) == 4  # FedSAM − FedAvg; FedVSSAM − FedAvg, − FedSAM
    column = lines[0].index("this comparison")
    by_pair = {ln.split("  ")[0].strip(): ln for ln in lines[1:]}
    assert set(by_pair) == {"FedSAM − FedAvg", "FedVSSAM − FedAvg", "FedVSSAM − FedSAM"}
    sam = next(v for v in verdicts if v.claim.id == "fedsam_below_fedavg_dir01")
    assert by_pair["FedSAM − FedAvg"][column:].startswith(sam.comparisons[0].verdict)
    assert sam.comparisons[0].difference.format(scale=100) in by_pair["FedSAM − FedAvg"]
    assert "small_step" not in "".join(lines)  # FedSAM at another step size is not 'FedSAM as tuned'
