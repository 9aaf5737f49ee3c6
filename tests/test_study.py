"""The study runner (lab/study): pre-registration enforced, a resumed study trains nothing twice, the failure
map's analysis on synthetic records (an interaction present / absent), bad study files refused by field."""
from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
import yaml

from lab.study.analysis import analyse, estimate_of, fails_anywhere
from lab.study.plan import committed_runs, planned_runs, run_config
from lab.study.report import decision_markdown, headline, lesson_markdown
from lab.study.runner import train
from lab.study.spec import StudyError, load_study, require_registered

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "lab" / "study" / "failure_map.yaml"

TINY = {
    "study": "tiny", "kind": "map",
    "federation": {"dataset": "fmnist", "model": "mlp", "train_size": 400, "test_size": 200, "n_clients": 4,
                   "participation": 0.5, "rounds": 2, "batch_size": 8, "lr": 0.05, "lr_schedule": "constant",
                   "eval_every": 1},
    "seeds": [0], "partition_seed": "seed",
    "splits": {"iid": {"partition": "iid", "alpha": None}},
    "reference_split": "iid", "local_steps": [2],
    "arms": {"fedavg": {"algorithm": "fedavg", "params": {}}}, "baseline_arm": "fedavg",
    "final_metric": {"last_fraction": 0.5},
    "estimands": {"gap": "none"}, "decision": {"smallest_effect_of_interest": 0.3}, "budget": {"hours": 1, "workers": 1},
}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def _repo_with(tmp_path: Path, design: dict, commit: bool) -> Path:
    root = tmp_path / "repo"
    (root / "lab").mkdir(parents=True)
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.org")
    _git(root, "config", "user.name", "t")
    path = root / "lab" / "tiny.yaml"
    path.write_text(yaml.safe_dump(design, sort_keys=False))
    if commit:
        _git(root, "add", "lab/tiny.yaml")
        _git(root, "commit", "-qm", "register")
    return path


def test_the_failure_map_loads_and_its_plan_covers_every_cell_arm_and_seed() -> None:
    study = load_study(MAP)
    runs = planned_runs(study, 1)
    assert len(study.cells) == 6
    assert len(runs) == len(study.cells) * len(study.arms) * len(study.seeds) + len(study.controls) * len(study.seeds)
    assert len({r.key for r in runs}) == len(runs)
    ks = [r.cell.local_steps for r in runs]
    assert ks == sorted(ks)  # cheapest local work first


def test_training_is_refused_until_the_study_file_is_committed_unchanged(tmp_path: Path) -> None:
    path = _repo_with(tmp_path, TINY, commit=False)
    study = load_study(path)
    with pytest.raises(StudyError, match="not pre-registered"):
        require_registered(study, path.parents[1])
    with pytest.raises(StudyError, match="not pre-registered"):
        train(study, workers=1, records=tmp_path / "records", repository=path.parents[1], out=io.StringIO())
    assert not (tmp_path / "records").exists()  # refused before anything was written
    _git(path.parents[1], "add", "lab/tiny.yaml")
    _git(path.parents[1], "commit", "-qm", "register")
    commit = require_registered(study, path.parents[1])
    assert commit == _git(path.parents[1], "rev-parse", "HEAD").strip()
    path.write_text(path.read_text() + "# edited after registration\n")
    with pytest.raises(StudyError, match="not pre-registered"):
        require_registered(load_study(path), path.parents[1])


def test_a_resumed_study_trains_nothing_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLAB_RUNS", str(tmp_path / "runs"))
    path = _repo_with(tmp_path, TINY, commit=True)
    study = load_study(path)
    records = tmp_path / "records"
    first = train(study, workers=1, records=records, repository=path.parents[1], out=io.StringIO())
    assert first == 1 and len(list(records.glob("*.json.gz"))) == 1
    from lab.evidence.records import record_meta
    from lab.repro import cpu_name

    meta = record_meta(next(records.glob("*.json.gz")).name.removesuffix(".json.gz"), records)
    assert meta["cpu"] == cpu_name() and meta["cpu"] != "unknown", "the record names the CPU its run ran on"
    # the run folder is gone too: only the committed record can say the run is done
    import shutil

    shutil.rmtree(tmp_path / "runs")
    log = io.StringIO()
    assert train(study, workers=1, records=records, repository=path.parents[1], out=log) == 0
    assert "1/1 recorded, 0 to train now" in log.getvalue()
    run = planned_runs(study)[0]
    assert committed_runs({run.key: run_config(study, run)}, records) == {
        run.key: next(records.glob("*.json.gz")).name.removesuffix(".json.gz")}


@pytest.mark.parametrize("change, field", [
    ({"arms": {"x": {"algorithm": "nosuchmethod"}}}, "arms.x.algorithm"),
    ({"federation": {"nosuchfield": 1}}, "nosuchfield"),
    ({"seeds": [0, 0]}, "seeds"),
    ({"baseline_arm": "x"}, "baseline_arm"),
    ({"final_metric": {"last_fraction": 2}}, "last_fraction"),
])
def test_a_bad_study_file_is_refused_naming_the_field(tmp_path: Path, change: dict, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**TINY, **change}))
    with pytest.raises(StudyError, match=field.replace(".", r"\.")):
        load_study(path)


def test_yaml_aliases_are_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump(TINY) + "extra: &a [1, 2]\nmore: *a\n"
    path = tmp_path / "alias.yaml"
    path.write_text(text)
    with pytest.raises(StudyError, match="aliases"):
        load_study(path)


def _synthetic(study, sam_effect: dict[tuple[str, int], float], noise: float = 0.05) -> dict:
    """Final metrics (points): FedAvg at 80, FedSAM_ρ at 80 + effect(split, K) + a small seed pattern."""
    values = {}
    for cell in study.cells:
        for seed in study.seeds:
            wiggle = noise * ((seed * 7) % 5 - 2)
            values[(cell.name, "fedavg", seed)] = 80.0 + wiggle
            for arm in ("fedsam-0.05", "fedsam-0.1"):
                values[(cell.name, arm, seed)] = 80.0 + sam_effect[(cell.split, cell.local_steps)] + 2 * wiggle
    return values


def test_the_map_finds_an_interaction_that_is_there() -> None:
    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    effect[("path2", 200)] = -2.0  # SAM loses 2 points where clients hold 2 classes and walk far
    cells = analyse(study, _synthetic(study, effect))
    failing = {(c.split, c.local_steps) for c in cells if c.verdict == "local SAM fails here"}
    assert failing == {("path2", 200)}
    assert fails_anywhere(cells)
    cell = next(c for c in cells if (c.split, c.local_steps, c.arm) == ("path2", 200, "fedsam-0.1"))
    assert cell.interaction.mean == pytest.approx(-2.3)  # the seeds' wiggle cancels in I
    assert cell.gap.mean == pytest.approx(-2.0, abs=0.05)  # and shifts G by its mean (−0.017)
    assert cell.gap.p_holm >= cell.gap.p  # Holm never lowers a p-value


def test_the_map_says_so_plainly_when_sam_never_fails() -> None:
    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    effect[("dir0.1", 50)] = 0.1  # smaller, still not below FedAvg
    cells = analyse(study, _synthetic(study, effect))
    assert not fails_anywhere(cells)
    verdicts = {(c.split, c.local_steps): c.verdict for c in cells}
    assert verdicts.pop(("dir0.1", 50)) == "failure not shown: G not decided"  # +0.1 within the seeds' spread
    assert set(verdicts.values()) == {"does not fail: SAM helps here"}
    text = decision_markdown(study, cells, [], {}, 132, 132)
    assert ("Local SAM does not fail anywhere on the failure map (in 2 of its 8 cells FedSAM − FedAvg is not "
            "decided either way).") in text


def test_sam_losing_everywhere_alike_is_not_a_heterogeneity_failure() -> None:
    study = load_study(MAP)
    effect = {(s, k): -1.0 for s in study.splits for k in study.local_steps}
    cells = analyse(study, _synthetic(study, effect))
    assert {c.verdict for c in cells} == {"SAM hurts here, as much in the IID federation"}


def test_an_undecided_loss_is_not_read_as_no_failure() -> None:
    """G = −0.4 with a seed spread wider than its mean is "failure not shown", never "does not fail"; the headline
    of a complete map with no failing cell counts such cells."""
    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    effect[("path2", 50)] = -0.4
    values = _synthetic(study, effect, noise=0.4)
    cells = analyse(study, values)
    cell = next(c for c in cells if (c.split, c.local_steps, c.arm) == ("path2", 50, "fedsam-0.1"))
    assert cell.gap.mean < 0 and cell.gap.p_holm >= 0.05
    assert cell.verdict == "failure not shown: G not decided"
    undecided = sum(c.verdict.startswith("failure not shown") for c in cells)
    assert undecided >= 1 and not fails_anywhere(cells)
    assert f"in {undecided} of its {len(cells)} cells" in headline(study, cells, 132, 132)
    lesson = lesson_markdown(study, cells, 132, 132)  # the course's paragraph names the interaction, not a failure
    assert "shows only as an interaction: with pathological, 2 classes at K = 50 and ρ = 0.1" in lesson
    assert "FedSAM − FedAvg is 0.70 points lower than in the IID federation" in lesson  # −0.4 − 0.3, wiggle cancels
    assert "Local SAM does not fail anywhere on the failure map" in lesson and "fails here" not in lesson


def test_the_budget_page_sets_measured_seconds_against_the_estimate() -> None:
    from lab.study.report import budget_markdown, busy_seconds

    study = load_study(MAP)
    # two workers: runs 1 and 2 overlap for 50 s, run 3 starts after a 1 h pause
    rows = [{"cell": "iid-K50", "arm": "fedavg", "seed": 0, "seconds": 100.0, "load": 2.0,
             "finished": "2026-12-06T10:00:00Z", "cpu_count": 2},
            {"cell": "iid-K50", "arm": "fedavg", "seed": 1, "seconds": 100.0, "load": 2.0,
             "finished": "2026-12-06T10:00:50Z", "cpu_count": 2},
            {"cell": "iid-K50", "arm": "fedsam-0.05", "seed": 0, "seconds": 300.0, "load": 3.0,
             "finished": "2026-12-06T11:05:00Z", "cpu_count": 2}]
    assert busy_seconds(rows) == 150.0 + 300.0
    est = {"parts": {"iid-K50 fedavg": {"runs": 6, "committed": 0, "seconds": 600.0},
                     "iid-K50 fedsam-0.05": {"runs": 6, "committed": 0, "seconds": 1200.0},
                     "dir0.1-K50 fedavg": {"runs": 6, "committed": 6, "seconds": 0.0}},
           "calibration_seconds": 0.0, "total_seconds": 1800.0, "workers": 2, "hours": 0.25, "budget_hours": 8.0}
    text = budget_markdown(study, est, rows)
    assert "| iid-K50 | fedavg | 2/6 | 100 | 100 | 1.00 |" in text
    assert "| iid-K50 | fedsam-0.05 | 1/6 | 200 | 300 | 1.50 |" in text
    assert "dir0.1-K50" not in text  # reused records are not the study's cost
    assert "ratio 1.25" in text  # 500 s measured against 400 s estimated for the same runs


def test_a_cell_with_missing_seeds_or_a_diverged_arm_is_not_tested() -> None:
    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    values = _synthetic(study, effect)
    del values[("path2-K50", "fedavg", 3)]
    cells = analyse(study, values, untested={("dir0.1-K200", "fedsam-0.1"): "seed 2 diverged (status)"})
    verdicts = {(c.split, c.local_steps, c.arm): c.verdict for c in cells}
    assert verdicts[("path2", 50, "fedsam-0.05")].startswith("not tested")
    assert "5/6 seeds recorded" in verdicts[("path2", 50, "fedsam-0.05")]
    assert "diverged" in verdicts[("dir0.1", 200, "fedsam-0.1")]
    assert verdicts[("dir0.1", 200, "fedsam-0.05")] == "does not fail: SAM helps here"


def test_the_interval_and_p_are_students() -> None:
    from scipy import stats

    est = estimate_of([0.1, 0.4, -0.2, 0.3, 0.5, 0.2])
    t = stats.ttest_1samp([0.1, 0.4, -0.2, 0.3, 0.5, 0.2], 0.0)
    assert est.p == pytest.approx(t.pvalue, rel=1e-12)
    assert est.mean == pytest.approx(0.21666666666666667)
    ci = t.confidence_interval(0.95)
    assert (est.low, est.high) == (pytest.approx(ci.low), pytest.approx(ci.high))


def test_a_calibration_is_evidence_an_edit_is_refused(tmp_path: Path) -> None:
    from lab.evidence.integrity import EvidenceError
    from lab.study.calibrate import load_calibration, round_sig, save_calibration

    path = tmp_path / "figs" / "study" / "calibration.json"
    save_calibration(path, "fedgf-calibrated", {"divergence_threshold": round_sig(0.812356, 3)}, {"raw": 0.812356})
    assert load_calibration(path) == {"fedgf-calibrated": {"divergence_threshold": 0.812}}
    with pytest.raises(ValueError, match="calibrated already"):
        save_calibration(path, "fedgf-calibrated", {"divergence_threshold": 9.0}, {})
    path.write_text(path.read_text().replace("0.812", "0.9"))
    with pytest.raises(EvidenceError, match="changed after it was recorded"):
        load_calibration(path)


def test_the_committed_calibration_is_the_median_of_its_own_series() -> None:
    import json
    import statistics

    from lab.study.calibrate import round_sig

    entry = json.loads((REPO / "figures" / "failure_map" / "calibration.json").read_text())["fedgf-calibrated"]
    assert len(entry["series"]) == load_study(MAP).federation["rounds"]
    assert entry["values"]["divergence_threshold"] == round_sig(statistics.median(entry["series"]), 3)
    assert entry["config"]["algorithm_params"]["divergence_threshold"] >= 1e30  # measured with the switch off


def test_readmes_map_headline_is_the_one_the_committed_records_give() -> None:
    """README's sentence on the failure map is generated (`study analyse --readme`), never typed."""
    from lab.study.report import README_END, README_START, headline, load_values

    study = load_study(MAP)
    values, untested, results = load_values(study)
    cells = analyse(study, values, untested=untested)
    text = (REPO / "README.md").read_text()
    block = text[text.index(README_START) + len(README_START):text.index(README_END)].strip()
    assert block == headline(study, cells, len(results), len(planned_runs(study, 1)))


def test_an_incomplete_map_is_adjusted_for_its_whole_declared_family() -> None:
    """Read before every cell has its seeds, a cell's Holm p is the one the whole family would give it with the
    missing cells at p = 1: m = 8 Gs, not the 4 cells tested so far (a verdict read early is never looser)."""
    from lab.evidence.paired import holm

    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    effect[("path2", 50)] = -0.6
    values = {key: v for key, v in _synthetic(study, effect, noise=0.2).items() if not key[0].endswith("K200")}
    cells = analyse(study, values)
    tested = [c for c in cells if not c.untested]
    assert len(cells) == 8 and len(tested) == 4
    whole = holm([c.gap.p for c in tested] + [1.0] * 4)
    assert [c.gap.p_holm for c in tested] == pytest.approx(whole[:4])
    assert [c.gap.p_holm for c in tested] != pytest.approx(holm([c.gap.p for c in tested]))  # not over 4


def test_an_unfinished_map_says_what_its_finished_local_work_already_decides() -> None:
    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    effect[("path2", 50)] = -2.0
    values = {k: v for k, v in _synthetic(study, effect).items() if not k[0].endswith("K200")}
    cells = analyse(study, values)
    text = headline(study, cells, 66, 132)
    assert text.startswith("The failure map is not decided yet: 66 of its 132")
    assert ("At K = 50, all 4 cells recorded, local SAM fails in pathological, 2 classes, K = 50, fedsam-0.05; "
            "pathological, 2 classes, K = 50, fedsam-0.1.") in text
    assert "K = 200" not in text  # nothing is said about a local work whose cells are still training


def test_the_claims_read_the_maps_decision(tmp_path: Path) -> None:
    """A claim tested by the map (``map: {arm}`` in figures/claims.yaml) prints the map's decision for its arm from
    the table the analysis writes: the failing cells by name, "not reproduced anywhere" when none fails, the
    incompleteness while seeds are missing."""
    from lab.evidence.map_table import map_reading
    from lab.study.report import write_table

    study = load_study(MAP)
    effect = {(s, k): 0.3 for s in study.splits for k in study.local_steps}
    effect[("path2", 200)] = -2.0
    table = tmp_path / "map.csv"
    write_table(analyse(study, _synthetic(study, effect)), table)
    text = map_reading("fedsam-0.1", table)
    assert "local SAM fails in pathological, 2 classes, K = 200 (SAM helps, decided, in 3)" in text
    assert "not reproduced" not in text

    effect[("path2", 200)] = 0.3
    write_table(analyse(study, _synthetic(study, effect)), table)
    assert "not reproduced anywhere on the map — local SAM fails in none of its cells (SAM helps, decided, in 4)" \
        in map_reading("fedsam-0.05", table)

    values = _synthetic(study, effect)
    del values[("dir0.1-K200", "fedavg", 5)]
    write_table(analyse(study, values), table)
    text = map_reading("fedsam-0.05", table)
    assert "not complete, 3 of 4 cells tested" in text and "not reproduced" not in text

    with pytest.raises(ValueError, match="fedsam-0.3"):
        map_reading("fedsam-0.3", table)
    with pytest.raises(ValueError, match="no failure-map table"):
        map_reading("fedsam-0.05", tmp_path / "absent.csv")


def test_every_claim_on_the_map_names_one_of_its_arms() -> None:
    from lab.evidence.claims import load_claims

    arms = {a.name for a in load_study(MAP).arms} - {load_study(MAP).baseline_arm}
    on_map = {c.id: c.map_arm for c in load_claims() if c.map_arm}
    assert on_map and set(on_map.values()) <= arms
