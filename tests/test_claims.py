"""Claims as data: the claims file, the evidence a claim reads, the unpaired finding's interval rules on synthetic
results (holds, fails, inconclusive, not run), and the written table and pages."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

import fedlab
import lab.repro
from lab.evidence import integrity
from lab.evidence.claims import Claim, evaluate_claims_paired, load_claims, write_claims
from lab.evidence.claims.unpaired import compare, evaluate_unpaired
from lab.evidence.records import write_record
from lab.evidence.validity import NOT_TESTABLE_SCOPE
from fedlab.results import RunResult
from fedlab.uncertainty import mean_interval


def _fake(algorithm: str, seed: int, acc: float, status: str = "finished", **params) -> RunResult:
    cfg = fedlab.Config(algorithm=algorithm, algorithm_params=params, dataset="digits", rounds=4, seed=seed)
    h = cfg.hash()
    metrics = pd.DataFrame({"round": [1, 2, 3, 4], "test_acc": [0.1, float("nan"), 0.5, acc],
                            "flatness_distance": [1.0, 1.0, 1.0, 1.0]})
    return RunResult(cfg, metrics, None, status, Path(f"{algorithm}-{h}"),  # type: ignore[arg-type]
                     {"status": status, "config_hash": h, "n_params": 10})


def _figure(tmp: Path, name: str, runs: list[RunResult]) -> None:
    tmp.mkdir(parents=True, exist_ok=True)
    for r in runs:
        write_record(r, tmp / "records")
    (tmp / f"{name}.json").write_text(json.dumps({"figure": name, "records": [r.run_dir.name for r in runs]}))
    integrity.rerecord(tmp / f"{name}.json", tmp)  # a sidecar is evidence: read only with its manifest line


def _claim(op: str, **extra) -> Claim:
    return Claim.from_dict({"id": f"c{op}", "claim": "x", "source": {"paper": "P", "where": "T1"},
                            "setting": {"notebook": "nb", "figure": "fig"}, "metric": "final_test_acc",
                            "left": {"algorithm": "fedvssam"}, "op": op, "right": {"algorithm": "fedsam"},
                            **extra})


@pytest.mark.parametrize(("left", "right", "op", "expected"), [
    ([0.80, 0.81, 0.82], [0.70, 0.71, 0.72], ">", "holds"),
    ([0.60, 0.61, 0.62], [0.70, 0.71, 0.72], ">", "fails"),
    ([0.70, 0.75, 0.80], [0.71, 0.72, 0.73], ">", "inconclusive"),
    ([0.60, 0.61, 0.62], [0.70, 0.71, 0.72], "<", "holds"),
    ([0.70, 0.75, 0.80], [0.71, 0.72, 0.73], ">=", "holds"),  # overlap, means in order
    ([0.60, 0.61, 0.62], [0.70, 0.71, 0.72], ">=", "fails"),
    ([0.710, 0.711, 0.712], [0.709, 0.710, 0.711], "approx", "holds"),  # Δ = 0.1 ± 0.23 points
    ([0.65, 0.70, 0.75], [0.68, 0.70, 0.72], "approx", "inconclusive"),  # equal means, ± 6 points wide
    ([0.710, 0.712, 0.714], [0.705, 0.710, 0.715], "approx", "inconclusive"),  # Δ's interval reaches 1.3
    ([0.80, 0.81, 0.82], [0.70, 0.71, 0.72], "approx", "fails"),
    ([0.90, 0.91, 0.92], [0.70, 0.71, 0.72], "much_greater", "holds"),
    ([0.71, 0.715, 0.72], [0.70, 0.705, 0.71], "much_greater", "fails"),  # above, but by 1 point, not 5
    ([0.74, 0.75, 0.76], [0.70, 0.71, 0.72], "much_greater", "inconclusive"),  # by 4 ± 3.5 points
])
def test_verdicts_from_synthetic_records(tmp_path, left, right, op, expected):
    runs = [_fake("fedvssam", s, a) for s, a in enumerate(left)] + [_fake("fedsam", s, a) for s, a in enumerate(right)]
    _figure(tmp_path, "fig", runs)
    extra = {"tol": 0.01} if op == "approx" else {"margin": 0.05} if op == "much_greater" else {}
    v = evaluate_unpaired(_claim(op, **extra), tmp_path)
    assert v.verdict == expected, (v.verdict, v.left, v.right, v.note)
    assert v.left.n == v.right[0].n == 3 and v.left.mean == pytest.approx(sum(left) / 3)


def test_not_run_collapsed_and_single_seed(tmp_path):
    # each scenario in its own folder: a record is never replaced, and these fakes share their keys
    assert evaluate_unpaired(_claim(">"), tmp_path).verdict == "not run"  # no figure yet
    runs = [_fake("fedvssam", s, 0.8) for s in range(3)] + [_fake("fedsam", s, 0.1, "collapsed") for s in range(3)]
    _figure(tmp_path / "a", "fig", runs)
    v = evaluate_unpaired(_claim(">"), tmp_path / "a")
    assert v.verdict == "inconclusive" and "3 collapsed" in v.note  # never averaged in as 0.1
    # one collapsed seed out of three: the other two decide, the collapse is reported
    runs = ([_fake("fedvssam", s, 0.80 + s / 100) for s in range(3)]
            + [_fake("fedsam", 0, 0.1, "collapsed"), _fake("fedsam", 1, 0.70), _fake("fedsam", 2, 0.71)])
    _figure(tmp_path / "b", "fig", runs)
    v = evaluate_unpaired(_claim(">"), tmp_path / "b")
    assert v.verdict == "holds" and v.right[0].n == 2 and "1 collapsed" in v.note
    _figure(tmp_path / "c", "fig", [_fake("fedvssam", 0, 0.9), _fake("fedsam", 0, 0.1)])
    assert evaluate_unpaired(_claim(">"), tmp_path / "c").verdict == "inconclusive"  # one seed is not evidence


def test_params_select_arms_and_cost_check(tmp_path):
    runs = ([_fake("fedvssam", s, 0.8 + s / 100) for s in range(3)]
            + [_fake("fedvssam", s, 0.7 + s / 100, gu=False) for s in range(3)])
    _figure(tmp_path, "fig", runs)
    c = dataclasses.replace(_claim(">"), left={"algorithm": "fedvssam", "params": {"gu": True}},
                            right=[{"algorithm": "fedvssam", "params": {"gu": False}}])
    assert evaluate_unpaired(c, tmp_path).verdict == "holds"
    runs = [_fake("fedlesam", s, 0.7 + s / 1000) for s in range(3)] + [_fake("fedsam", s, 0.7 + s / 1000) for s in range(3)]
    _figure(tmp_path, "fig", runs)
    c = dataclasses.replace(_claim("approx", tol=0.01), left={"algorithm": "fedlesam"}, cost={"left_over_right": 0.5})
    v = evaluate_unpaired(c, tmp_path)
    assert v.verdict == "holds" and "ratio 0.5" in v.note
    wrong = dataclasses.replace(c, cost={"left_over_right": 1.0})
    assert evaluate_unpaired(wrong, tmp_path).verdict == "fails"


def test_csv_metric_and_abs_le(tmp_path):
    pd.DataFrame({"method": ["fedvssam"] * 3 + ["fedsam"] * 3, "lambda_max": [1.0, 1.1, 1.2, 3.0, 3.1, 3.2],
                  "cross_relative": [0.01, -0.01, 0.0, 0.01, 0.02, 0.0]}).to_csv(tmp_path / "fig.csv", index=False)
    integrity.add(tmp_path / "fig.csv", tmp_path)  # a figure's table is evidence: read only with its line
    c = dataclasses.replace(_claim("<"), metric={"column": "lambda_max", "arm_column": "method"})
    assert evaluate_unpaired(c, tmp_path).verdict == "holds"
    z = dataclasses.replace(_claim("abs_le", tol=0.05), metric={"column": "cross_relative", "arm_column": None},
                            left={}, right=[])
    assert evaluate_unpaired(z, tmp_path).verdict == "holds"
    assert compare(mean_interval([0.3, 0.31, 0.32]), None, "abs_le", tol=0.05) == "fails"


def test_repository_claims_file_is_valid_and_written(tmp_path):
    from fedlab.algorithms import algorithm_class

    claims = load_claims()
    assert len(claims) >= 12 and len({c.id for c in claims}) == len(claims)
    for c in claims:
        for arm in [c.left, *c.right]:
            if arm.get("planned"):  # declared for an algorithm not implemented yet: no data until it is
                with pytest.raises(ValueError, match="unknown algorithm"):
                    algorithm_class(arm["algorithm"])
                continue
            assert set(arm.get("config", {})) <= set(fedlab.Config.__dataclass_fields__), (c.id, arm)
            if arm.get("algorithm"):
                cls = algorithm_class(arm["algorithm"])
                names = {f.name for f in dataclasses.fields(cls.hparams_cls)}
                assert set(arm.get("params", {})) <= names, (c.id, arm)
        assert (lab.repro.REPO_ROOT / "notebooks" / f"{c.notebook}.py").exists(), c.id
    verdicts = evaluate_claims_paired(claims, tmp_path)  # an empty figures dir: nothing run yet
    assert {v.verdict for v in verdicts if not v.claim.not_testable} == {"not run"}
    assert {v.verdict for v in verdicts if v.claim.not_testable} == {NOT_TESTABLE_SCOPE}  # declared, read from nothing
    paths = write_claims(verdicts, tmp_path / "claims_cpu")
    md = paths["md"].read_text()
    kinds = {c.kind for c in claims}  # one table per kind, its header a row too
    assert md.count("\n| ") == len(claims) + len(kinds) and "| verdict |" in md
    assert len(pd.read_csv(paths["csv"])) == len(claims)  # one row per claim: no comparison was read
    with pytest.raises(ValueError, match="op='=='"):
        Claim.from_dict({**{"id": "x", "claim": "x", "source": {"paper": "p"}, "setting": {"notebook": "n",
                         "figure": "f"}, "metric": "final_test_acc", "left": {}, "op": "=="}})
    with pytest.raises(ValueError, match="map=.*allowed: {arm: <a SAM arm"):
        Claim.from_dict({"id": "x", "claim": "x", "source": {"paper": "p"}, "setting": {"notebook": "n", "figure": "f"},
                         "metric": "final_test_acc", "left": {}, "op": ">", "right": {"algorithm": "fedavg"},
                         "map": "fedsam-0.05"})


def test_the_claims_block_of_a_page_is_regenerated_and_the_rest_kept(tmp_path):
    from lab.evidence.claims import BLOCK_END, BLOCK_START, replace_claims_block

    runs = [_fake("fedvssam", s, a) for s, a in enumerate([0.8, 0.81, 0.82])]
    runs += [_fake("fedsam", s, a) for s, a in enumerate([0.7, 0.71, 0.72])]
    _figure(tmp_path, "fig", runs)
    page = tmp_path / "README.md"
    page.write_text(f"# Title\n\nbefore\n{BLOCK_START}\nstale table\n{BLOCK_END}\nafter\n")
    v = evaluate_claims_paired([_claim(">")], tmp_path)
    write_claims(v, stem=tmp_path / "claims_cpu", pages=[page])
    text = page.read_text()
    assert "stale table" not in text and "| x — P, T1 |" in text and "holds" in text
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{BLOCK_END}\nafter\n")
    with pytest.raises(ValueError, match="no <!-- fedlab:claims:start -->"):
        replace_claims_block("no block here", "t", "X.md")


def test_the_committed_claims_files_are_what_the_data_say(tmp_path):
    """figures/claims_cpu.csv and .md, written again from the committed data, are the committed bytes: the one
    (paired) reading, the unpaired finding's column and the writer's format stand as committed (after committing
    records, rerun `python -m lab claims --write`)."""
    from lab.evidence.findings import evaluate_findings

    paths = write_claims(evaluate_claims_paired(), tmp_path / "claims_cpu", pages=[], findings=evaluate_findings())
    for kind in ("csv", "md"):
        committed = lab.repro.FIGURES_DIR / f"claims_cpu.{kind}"
        assert paths[kind].read_bytes() == committed.read_bytes(), \
            f"{committed} is not what the committed data say; run `python -m lab claims --write`"


def test_the_committed_pages_show_the_claims_as_the_data_say():
    """README.md and figures/README.md carry the claims table generated from the committed data
    (rerun `python -m lab claims --write` after committing records). Changed evidence is reported as
    such first: rewriting the table would publish the changed numbers."""
    from lab.evidence.claims import BLOCK_END, BLOCK_START
    from lab.evidence.findings import claims_block
    from lab.evidence.integrity import MANIFEST_NAME, problems
    from lab.repro import FIGURES_DIR, REPO_ROOT

    found = problems(FIGURES_DIR)
    assert not any(found.values()), (
        "evidence changed (not a stale table; do NOT run `claims --write`): "
        + "; ".join(f"{kind}: {', '.join(paths)}" for kind, paths in found.items() if paths)
        + f" — differ from figures/{MANIFEST_NAME}; restore them from git, or re-record an intended change "
          "with `python -m lab.evidence.integrity --rerecord <file>`")
    for page in (REPO_ROOT / "README.md", FIGURES_DIR / "README.md"):
        block = claims_block(FIGURES_DIR, page.parent)  # paired, with the findings; the plot linked from the page
        text = page.read_text()
        assert BLOCK_START in text, f"{page} lacks the claims block"
        assert text[text.index(BLOCK_START) + len(BLOCK_START):text.index(BLOCK_END)].strip() == block.strip(), \
            f"{page}: the claims table is stale; run `python -m lab claims --write`"


def test_a_study_figure_in_its_own_folder_is_read_with_its_own_manifest(tmp_path):
    """``setting.figure: study/fig`` reads ``study/fig.json`` and the records it names, checked against the manifest
    of ``study/`` (a study keeps its figures, and their manifest, in a folder of its own)."""
    runs = [_fake("fedvssam", s, 0.8 + s / 100) for s in range(6)] + [_fake("fedsam", s, 0.7) for s in range(6)]
    _figure(tmp_path / "study", "fig", runs)
    nested = Claim.from_dict({"id": "nested", "claim": "x", "source": {"paper": "P", "where": "T1"},
                              "setting": {"notebook": "nb", "figure": "study/fig"}, "metric": "final_test_acc",
                              "left": {"algorithm": "fedvssam"}, "op": ">", "right": {"algorithm": "fedsam"}})
    [verdict] = evaluate_claims_paired([nested], tmp_path / "study")
    assert verdict.verdict == "not run"  # the figure is study/fig under figures_dir, not under study/ itself
    [verdict] = evaluate_claims_paired([nested], tmp_path)
    assert verdict.verdict == "holds" and verdict.comparisons[0].difference.n == 6


def test_a_collapsed_arm_of_a_figure_table_is_counted_not_dropped(tmp_path):
    pd.DataFrame({"method": ["fedvssam"] * 3 + ["fedsam"] * 3, "lambda_max": [1.0, 1.1, 1.2, 0.1, 0.1, 0.1],
                  "status": ["finished"] * 3 + ["collapsed"] * 3}).to_csv(tmp_path / "fig.csv", index=False)
    integrity.add(tmp_path / "fig.csv", tmp_path)  # a figure's table is evidence: read only with its line
    claim = Claim.from_dict({"id": "t", "claim": "x", "source": {"paper": "P"}, "setting": {"notebook": "nb",
                             "figure": "fig"}, "metric": {"column": "lambda_max", "arm_column": "method"},
                             "left": {"algorithm": "fedvssam"}, "op": "<", "right": {"algorithm": "fedsam"}})
    v = evaluate_unpaired(claim, tmp_path)
    assert v.verdict == "inconclusive" and "3 collapsed" in v.note


def test_every_claim_with_data_reads_the_reruns_records_only():
    """README's "Read this first" says every row is read from the rerun's regime (K = 50, six paired seeds): each
    claim with data rests on rerun records only (``meta.rerun``), and is read at six pairs unless a seed of an arm
    collapsed (FedGF: counted, never averaged) or an estimate did not converge (09's λ_max: its ``valid`` column)."""
    from lab.evidence.records import load_record, record_meta
    from lab.study.spec import load_study

    map_study = load_study(lab.repro.REPO_ROOT / "lab" / "study" / "failure_map.yaml").name
    table = pd.read_csv(lab.repro.FIGURES_DIR / "claims_cpu.csv")
    claims = {c.id: c for c in load_claims(lab.repro.FIGURES_DIR / "claims.yaml")}
    records = lab.repro.FIGURES_DIR / "records"
    read = table[table["n"] > 0].groupby("id")["n"].max()
    assert len(read) >= 20, f"only {len(read)} claims have data"
    for claim_id, n in read.items():
        claim = claims[claim_id]
        sidecar = lab.repro.FIGURES_DIR / f"{claim.figure}.json"
        keys = sorted(set(json.loads(sidecar.read_text()).get("records") or []))
        assert keys, f"{claim_id}: its figure names no records"
        # a study's figure (the failure map's) holds other cells too: the claim reads those its setting selects
        runs = {k: load_record(k, records) for k in keys}
        keys = [k for k, r in runs.items() if all(getattr(r.config, f) == v for f, v in claim.select.items())]
        assert keys, f"{claim_id}: its setting selects none of its figure's records"
        # the rerun's records, or the failure map's, whose registered federation is the rerun's (lab/study)
        assert all(record_meta(k, records).get("rerun") or record_meta(k, records).get("study") == map_study
                   for k in keys), f"{claim_id}: its figure reads records neither the rerun nor the map wrote"
        assert {runs[k].config.local_steps for k in keys} == {50}, f"{claim_id}: not K = 50"
        if int(n) < 6:
            notes = " ".join(table.loc[table["id"] == claim_id, "note"].fillna("").astype(str)) if "note" in table \
                else ""
            metric = claims[claim_id].metric
            assert "collapsed" in notes or (isinstance(metric, dict) and "valid" in metric), \
                f"{claim_id}: read at n = {n} with no collapsed seed and no validity column to explain it"

def test_an_arm_that_matches_two_runs_of_a_seed_reads_the_first_the_figure_names():
    """FedNSAM's code-variant arm ({variant: code, bug: false}) also matches its ρ = 0 control in 07's figure; the
    evaluator keeps the first run of each seed, so the figure names the tuned run before the control. Were the order
    to flip, every FedNSAM claim would silently read the control: the claims' left mean must be the tuned run's."""
    import csv

    rows = {}
    with open(lab.repro.FIGURES_DIR / "07_fednsam_accuracy_flatness.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if r.get("panel") == "flatness_distance_per_seed" and r["flatness_distance"]:
                rows.setdefault(r["method"], {}).setdefault(r["seed"], []).append((int(r["round"]),
                                                                                    float(r["flatness_distance"])))
    last = max(t for s in rows["FedNSAM (code)"].values() for t, _ in s)
    tail = -(-last // 4)

    def dd(method):
        per_seed = [sum(v for t, v in s if t > last - tail) / tail for s in rows[method].values()]
        return sum(per_seed) / len(per_seed)

    table = pd.read_csv(lab.repro.FIGURES_DIR / "claims_cpu.csv")
    for claim_id in ("fednsam_dd_below_rho0", "fednsam_dd_below_momentum_only", "fednsam_smaller_flatness_distance"):
        left = float(table.loc[table["id"] == claim_id, "left_mean"].iloc[0])
        assert abs(left - dd("FedNSAM (code)")) < 1e-6 and abs(left - dd("FedNSAM (code), ρ = 0")) > 0.1, claim_id
