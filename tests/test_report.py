"""Each notebook's "What the cpu run shows" section, from committed data (lab.evidence.report)."""
from __future__ import annotations

import json

import yaml

from lab.evidence.integrity import rerecord
from lab.evidence.paired import MIN_SEEDS_TO_DECIDE
from lab.evidence.report import cpu_report, figure_from_sidecar
from test_claims import _fake  # the synthetic-run builder of the claims tests

CLAIM = {"id": "vs_above_sam", "claim": "FedVSSAM > FedSAM", "source": {"paper": "P", "where": "T1"},
         "setting": {"notebook": "08_fedvssam", "figure": "08_fig"}, "metric": "final_test_acc",
         "left": {"algorithm": "fedvssam"}, "op": ">", "right": {"algorithm": "fedsam"},
         "reasons": {"fails": "a small model on an easy dataset"}}


def _setup(tmp_path, left, right, seeds=(0, 1, 2)):
    from lab.evidence.records import write_record

    runs = [_fake("fedvssam", s, a) for s, a in zip(seeds, left)] + [_fake("fedsam", s, a) for s, a in zip(seeds, right)]
    for r in runs:
        write_record(r, tmp_path / "records")
    meta = {"figure": "08_fig", "notebook": "notebooks/08_fedvssam.ipynb", "profile": "cpu", "caption": "cap",
            "parameters": {"seeds": list(seeds)}, "records": [r.run_dir.name for r in runs]}
    (tmp_path / "08_fig.json").write_text(json.dumps(meta))
    (tmp_path / "08_toy.json").write_text(json.dumps({"figure": "08_toy", "notebook": "08_fedvssam", "profile": "cpu"}))
    (tmp_path / "09_other.json").write_text(json.dumps({**meta, "notebook": "09_x"}))
    from lab.evidence import integrity

    # sidecars are evidence (issue 46): a claim reads one only with its manifest line
    integrity.add([tmp_path / n for n in ("08_fig.json", "08_toy.json", "09_other.json")], tmp_path)
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump({"claims": [CLAIM]}))


SIX = tuple(range(6))


def test_the_section_reports_verdict_numbers_and_the_reason_only_when_it_fails(tmp_path):
    _setup(tmp_path, [0.60, 0.61, 0.62, 0.60, 0.61, 0.62], [0.70, 0.71, 0.72, 0.71, 0.70, 0.72], seeds=SIX)
    rep = cpu_report("08_fedvssam", tmp_path)
    assert [f.name for f in rep.figures] == ["08_fig", "08_toy"]  # only this notebook's figures
    assert rep.figures[0].protocol and not rep.figures[1].trains
    text = rep.text()
    # the claims table's paired reading: left − right per seed, its mean and interval over the 6 pairs
    assert "verdict: fails" in text and "paired difference vs FedSAM -10.00 ± 0.66 % (n=6)" in text
    assert "claims tested here: 1 (1 fails)" in text
    assert "likely reason: a small model on an easy dataset" in text
    assert "08_toy: no federated training" in text and "under the protocol" in text
    assert f"in short, the claims that do not hold here: {CLAIM['claim']}" in text
    assert "claims that hold on" not in text
    # the setting is the committed records' (digits, 4 rounds), not the parameter files' next run
    assert "setting: digits with the cnn model" in text and " 4 rounds of " in text and "seeds 0, 1, 2, 3, 4, 5" in text

    other = tmp_path / "holds"  # its own folder: a committed record is never replaced
    other.mkdir()
    _setup(other, [0.80, 0.81, 0.82, 0.80, 0.81, 0.82], [0.70, 0.71, 0.72, 0.71, 0.70, 0.72], seeds=SIX)
    text = cpu_report("08_fedvssam", other).text()
    assert "verdict: holds" in text and "likely reason" not in text
    assert f"in short, the claims that hold on Fashion-MNIST here: {CLAIM['claim']}" in text


def test_too_few_seeds_is_said(tmp_path):
    _setup(tmp_path, [0.80], [0.70], seeds=(0,))
    rep = cpu_report("08_fedvssam", tmp_path)
    assert not rep.figures[0].protocol
    assert f"1 seed(s), fewer than the {MIN_SEEDS_TO_DECIDE} paired seeds a verdict needs" in rep.text()
    assert "verdict: too few seeds; paired difference vs FedSAM – (too few seeds: n=1)" in rep.text()


def test_an_undecided_claim_says_which_way_the_paired_differences_point(tmp_path):
    _setup(tmp_path, [0.60, 0.70, 0.80], [0.70, 0.72, 0.74])  # FedVSSAM below FedSAM; 3 pairs decide nothing
    text = cpu_report("08_fedvssam", tmp_path).text()
    assert "verdict: inconclusive (n < 6)" in text and "the paired differences point against the claim" in text
    other = tmp_path / "up"
    other.mkdir()
    _setup(other, [0.70, 0.76, 0.82], [0.70, 0.72, 0.74])
    assert "the paired differences point the claimed way" in cpu_report("08_fedvssam", other).text()


def test_an_inline_figure_names_its_own_evidence_and_setting(tmp_path):
    _setup(tmp_path, [0.60, 0.61, 0.62], [0.70, 0.71, 0.72])
    rep = cpu_report("08_fedvssam", tmp_path)
    line = rep.figure_line("08_fig")
    assert line.startswith("08_fig (cpu profile, committed): 6 run records, 3 seed(s)")
    assert "digits with the cnn model" in line and " 4 rounds of " in line and "seeds 0, 1, 2" in line
    assert "no federated training" in rep.figure_line("08_toy")
    assert rep.figure_line("08_missing") == "08_missing: no committed cpu figure yet (make figures writes it)"


def test_a_committed_table_is_the_cpu_figures_data_and_names_what_is_missing(tmp_path):
    import pandas as pd
    import pytest

    from lab.evidence.report import committed_parameters, committed_table

    pd.DataFrame({"a": [1, 2, 3], "panel": ["x", "y", "x"], "b": [None, 5.0, None]}).to_csv(tmp_path / "f.csv",
                                                                                           index=False)
    (tmp_path / "f.json").write_text(json.dumps({"profile": "cpu"}))
    assert committed_table("f", figures_dir=tmp_path)["a"].tolist() == [1, 2, 3]
    x = committed_table("f", "x", figures_dir=tmp_path)
    assert x["a"].tolist() == [1, 3] and "b" not in x  # the panel's own columns
    with pytest.raises(KeyError, match="no panel 'z' \\(panels: x, y\\)"):
        committed_table("f", "z", figures_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="g: no committed cpu figure"):
        committed_table("g", figures_dir=tmp_path)
    (tmp_path / "f.json").write_text(json.dumps({"profile": "cpu", "parameters": {"k": [1, 2]}}))
    assert committed_parameters("f", figures_dir=tmp_path) == {"k": [1, 2]}
    (tmp_path / "f.json").write_text(json.dumps({"profile": "ci"}))
    with pytest.raises(ValueError, match="profile is 'ci', not 'cpu'"):
        committed_table("f", figures_dir=tmp_path)


def test_the_committed_final_accuracy_is_the_mean_of_the_final_window_and_refuses_short_runs(tmp_path):
    """Through lab.evidence.protocol.final_metric (issue 41: the last 20 % of rounds, 3 of 15 here)."""
    import pandas as pd
    import pytest

    from lab.evidence.protocol import final_rounds
    from lab.evidence.report import committed_final_accuracy

    rounds = 15
    k = len(final_rounds(rounds))
    assert k == 3
    rows = [{"panel": "test_acc_pct_per_seed", "seed": s, "method": m, "round": r, "test_acc_pct": 10.0 * s + r + (m == "b")}
            for s in (0, 1) for m in ("a", "b") for r in range(1, rounds + 1)]
    pd.DataFrame(rows).to_csv(tmp_path / "f.csv", index=False)
    (tmp_path / "f.json").write_text(json.dumps({"figure": "f", "profile": "cpu"}))
    got = committed_final_accuracy("f", figures_dir=tmp_path)
    last = sum(range(rounds - k + 1, rounds + 1)) / k  # the mean of the last k rounds of a run whose acc is its round
    assert got.loc[1, "a"] == 10.0 + last and got.loc[0, "b"] == last + 1 and got.shape == (2, 2)
    pd.DataFrame([r for r in rows if not (r["seed"] == 1 and r["method"] == "a" and r["round"] == rounds)]).to_csv(
        tmp_path / "f.csv", index=False)
    with pytest.raises(ValueError, match=r"without their last"):
        committed_final_accuracy("f", figures_dir=tmp_path)


def test_a_figure_below_the_verdicts_seeds_says_the_number_a_verdict_needs(tmp_path):
    """Three seeds were the old protocol's count; a verdict needs MIN_SEEDS_TO_DECIDE paired seeds (the rerun
    protocol), so a 3-seed figure is not "under the protocol" and its line names that number."""
    assert MIN_SEEDS_TO_DECIDE > 3
    _setup(tmp_path, [0.80, 0.81, 0.82], [0.70, 0.71, 0.72], seeds=(0, 1, 2))
    rep = cpu_report("08_fedvssam", tmp_path)
    assert not rep.figures[0].protocol
    assert f"3 seed(s), fewer than the {MIN_SEEDS_TO_DECIDE} paired seeds a verdict needs" in rep.text()
    assert "under the protocol" not in rep.text().split("claims tested here")[0]


def test_the_claims_figure_says_it_reads_records_not_that_it_trains_nothing(tmp_path):
    """The forest plot (kind "claims") reads the committed records of the claims' figures: its line counts them."""
    meta = {"figure": "claims_forest", "kind": "claims", "caption": "c", "records": ["a-1", "b-2", "c-3"],
            "parameters": {"seeds": [0, 1, 2, 3, 4, 5]}}
    (tmp_path / "claims_forest.json").write_text(json.dumps(meta))
    line = figure_from_sidecar(tmp_path / "claims_forest.json").evidence()
    assert line == "the claims table's paired comparisons, read from the committed records of 3 runs over 6 seed(s)"
    assert "no federated training" not in line


def test_the_committed_forest_names_the_records_the_claims_read():
    """figures/claims_forest.json (written by `python -m lab claims --write`) names every record of the claims'
    figures, and the README row says so."""
    from lab.repro import FIGURES_DIR
    from lab.tools.forest import evidence_records

    meta = json.loads((FIGURES_DIR / "claims_forest.json").read_text())
    assert meta["kind"] == "claims" and meta["records"] == evidence_records()
    line = figure_from_sidecar(FIGURES_DIR / "claims_forest.json").evidence()
    assert f"records of {len(evidence_records())} runs" in line
    row = next(r for r in (FIGURES_DIR / "README.md").read_text().splitlines() if r.startswith("| [claims_forest]"))
    assert f"| {line} |" in row


def test_the_inline_figure_line_states_the_partition_rule_of_its_records_configs(tmp_path):
    """cpu.show's line reads the partition rule from the full configs in the sidecar (lab.evidence.facts), so the
    paragraphs need not type it; a sidecar without configs states none."""
    import fedlab

    _setup(tmp_path, [0.60, 0.61, 0.62], [0.70, 0.71, 0.72])
    sidecar = tmp_path / "08_fig.json"
    meta = json.loads(sidecar.read_text())
    assert "partition" not in cpu_report("08_fedvssam", tmp_path).figure_line("08_fig")
    base = fedlab.Config(dataset="digits", rounds=4)
    for paired, words in ((True, "partition drawn per seed"), (False, "partition fixed per split")):
        meta["configs"] = {f"k{s}": base.replace(seed=s, partition_seed=s if paired else 0).to_dict() for s in (0, 1, 2)}
        sidecar.write_text(json.dumps(meta))
        rerecord([sidecar], tmp_path)  # the sidecar is evidence: a remade one is re-recorded, as save_figure does
        assert cpu_report("08_fedvssam", tmp_path).figure_line("08_fig").endswith(words)


def test_the_evidence_setting_names_seeds_only_when_the_sidecar_does():
    """An older sidecar without ``parameters.seeds`` gives no dangling "seeds ;" in the evidence line."""
    from lab.evidence.report import evidence_setting
    from lab.repro import FIGURES_DIR

    keys = json.loads((FIGURES_DIR / "10_benchmarks_bars_fmnist.json").read_text())["records"][:1]
    named = evidence_setting(keys, [0, 1], FIGURES_DIR / "records")
    bare = evidence_setting(keys, [], FIGURES_DIR / "records")
    assert "seeds 0, 1;" in named and "seeds" not in bare and "local steps (B = " in bare
    assert evidence_setting(["no-such-record"], [0], FIGURES_DIR / "records") is None
