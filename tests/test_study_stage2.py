"""The failure map's stage 2 (lab/study/failure_map_amendment1.yaml): an amendment is read only for the file and
digest it names, stage 2 trains only in the cells the map's records decide, and its table's reading on synthetic
values (a fix that recovers more than drift correction, one that does not, a missing seed)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from lab.evidence.tuning_files import load_tuning
from lab.study.analysis import BELOW_DRIFT, NOT_MORE, RECOVERS, analyse, failing, stage2_rows
from lab.study.plan import planned_runs
from lab.study.stage2 import stage2_markdown
from lab.study.spec import Cell, StudyError, load_study

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "lab" / "study" / "failure_map.yaml"
AMENDMENT = MAP.with_name("failure_map_amendment1.yaml")
FIXES = ("fedvssam", "fedgmt", "fedsmoo", "fednsam")
REFERENCES = ("scaffold", "feddyn")


def test_the_amendment_adds_each_fix_and_reference_at_its_tuned_hyperparameters() -> None:
    study = load_study(MAP)
    assert study.designs == (MAP, AMENDMENT)  # training requires both committed unchanged
    assert [a.name for a in study.stage2] == [*FIXES, *REFERENCES]
    assert {a.cell for a in study.stage2} == {Cell("path2", 50)}
    tuning = REPO / "figures" / "rerun" / "tuning" / "dirichlet-0.1"
    for arm in study.stage2:
        file = tuning / f"{arm.algorithm}.json"
        assert dict(arm.params) == (load_tuning(file)["best"] if file.exists() else {}), arm.name
    assert dict(next(a for a in study.stage2 if a.name == "fednsam").params) == {"rho": 0.2}
    runs = planned_runs(study, 2)
    assert len(runs) == 6 * len(study.seeds)
    assert [r.seed for r in runs] == sorted(r.seed for r in runs)  # seed-major: whole seeds if a session stops
    assert not {r.key for r in runs} & {r.key for r in planned_runs(study, 1)}


def _copy(tmp_path: Path, amendment: dict) -> Path:
    folder = tmp_path / "study"
    folder.mkdir()
    shutil.copy(MAP, folder / MAP.name)
    (folder / AMENDMENT.name).write_text(yaml.safe_dump(amendment, sort_keys=False))
    return folder / MAP.name


@pytest.mark.parametrize("change, words", [
    ({"amends": {"file": "failure_map.yaml", "sha256": "0" * 64}}, "does not name failure_map.yaml at its digest"),
    ({"amends": {"file": "other.yaml"}}, "does not name failure_map.yaml"),
    ({"stage2": {"cells": [{"split": "path2", "local_steps": 8}], "tuning": "figures/rerun/tuning/dirichlet-0.1",
                 "budget_hours": 1}}, "not a cell of the map"),
    ({"stage2": {"cells": [{"split": "path2", "local_steps": 50}], "tuning": "figures/rerun/tuning/dirichlet-0.1",
                 "budget_hours": 0}}, "budget_hours"),
    ({"stage2": {"cells": [{"split": "path2", "local_steps": 50}], "tuning": "figures/nowhere",
                 "budget_hours": 1}}, "has no fedvssam.json"),
])
def test_a_bad_amendment_is_refused_naming_the_field(tmp_path: Path, change: dict, words: str) -> None:
    raw = yaml.safe_load(AMENDMENT.read_text())
    if "amends" in change and "sha256" not in change["amends"]:
        change = {"amends": {**change["amends"], "sha256": raw["amends"]["sha256"]}}
    with pytest.raises(StudyError, match=words):
        load_study(_copy(tmp_path, {**raw, **change}))


def test_the_committed_amendment_amends_the_committed_map() -> None:
    import hashlib

    raw = yaml.safe_load(AMENDMENT.read_text())
    assert raw["amends"] == {"file": MAP.name, "sha256": hashlib.sha256(MAP.read_bytes()).hexdigest()}


def _map_values(study, path2_k50: float) -> dict:
    """Final metrics of the map's arms: SAM +0.3 everywhere but the pathological K = 50 cell (``path2_k50``)."""
    values = {}
    for cell in study.cells:
        for seed in study.seeds:
            wiggle = 0.05 * ((seed * 7) % 5 - 2)
            values[(cell.name, "fedavg", seed)] = 80.0 + wiggle
            effect = path2_k50 if cell.name == "path2-K50" else 0.3
            for arm in ("fedsam-0.05", "fedsam-0.1"):
                values[(cell.name, arm, seed)] = 80.0 + effect + 2 * wiggle
    return values


def test_stage_two_trains_only_where_the_records_decide_that_local_sam_fails(monkeypatch) -> None:
    import lab.study.report as report
    from lab.study.runner import check_stage2

    study = load_study(MAP)
    for effect, allowed in ((-2.0, True), (0.3, False)):
        values = _map_values(study, effect)
        monkeypatch.setattr(report, "load_values", lambda *a, v=values, **k: (v, {}, {}))
        if allowed:
            check_stage2(study)
        else:  # SAM helps in every cell: nothing qualifies, and the amendment's cell is refused
            with pytest.raises(StudyError, match="not the cells where the map's records decide"):
                check_stage2(study)


def _stage2_values(study, means: dict[str, float], noise: float = 0.1) -> dict:
    values = _map_values(study, -2.0)
    for seed in study.seeds:
        for arm, mean in means.items():  # each arm its own seed pattern: no difference is exact
            values[("path2-K50", arm, seed)] = 80.0 + mean + noise * (((seed + len(arm)) * 3) % 5 - 2)
    return values


def test_a_fix_recovers_more_than_drift_correction_only_when_it_beats_the_better_reference() -> None:
    study = load_study(MAP)
    # FedDyn is the better reference (+1.0); FedVSSAM +2.0 recovers more, FedGMT equals FedDyn, FedNSAM is below
    means = {"scaffold": 0.5, "feddyn": 1.0, "fedvssam": 2.0, "fedgmt": 1.0, "fedsmoo": 1.05, "fednsam": 0.0}
    values = _stage2_values(study, means)
    cells = analyse(study, {k: v for k, v in values.items() if k[1] in ("fedavg", "fedsam-0.05", "fedsam-0.1")})
    rows = {r.fix: r for r in stage2_rows(study, values, failing(cells))}
    assert {r.reference for r in rows.values()} == {"feddyn"}
    assert rows["fedvssam"].verdict == RECOVERS
    assert rows["fedvssam"].over_reference.mean == pytest.approx(1.0, abs=0.1)
    assert rows["fedvssam"].over_fedavg.mean == pytest.approx(2.0, abs=0.1)
    assert rows["fedvssam"].over_sam.mean == pytest.approx(4.0, abs=0.1)  # against FedSAM at the failing ρ (−2)
    assert rows["fedgmt"].verdict == NOT_MORE and rows["fedsmoo"].verdict == NOT_MORE
    assert rows["fednsam"].verdict == BELOW_DRIFT
    assert all(r.over_reference.p_holm >= r.over_reference.p for r in rows.values())  # Holm across the fixes
    page = stage2_markdown(study, list(rows.values()), 36)
    assert "| path2-K50 | fedvssam |" in page and RECOVERS in page and "36 of 36 runs recorded" in page


def test_a_fix_missing_a_seed_is_not_tested() -> None:
    study = load_study(MAP)
    means = {"scaffold": 0.5, "feddyn": 1.0, "fedvssam": 2.0, "fedgmt": 1.0, "fedsmoo": 1.0, "fednsam": 0.0}
    values = _stage2_values(study, means)
    del values[("path2-K50", "fedgmt", 4)]
    del values[("path2-K50", "scaffold", 1)]  # the weaker reference: the better one is still FedDyn
    cells = analyse(study, {k: v for k, v in values.items() if k[1] in ("fedavg", "fedsam-0.05", "fedsam-0.1")})
    rows = {r.fix: r for r in stage2_rows(study, values, failing(cells))}
    assert rows["fedgmt"].verdict.startswith("not tested") and "5/6 seeds" in rows["fedgmt"].verdict
    assert rows["fedvssam"].verdict == RECOVERS and rows["fedvssam"].reference == "feddyn"


def test_the_course_reads_stage_two_from_its_table_and_says_when_it_is_incomplete() -> None:
    from lab.study.stage2 import stage2_lesson

    study = load_study(MAP)
    means = {"scaffold": 0.5, "feddyn": 1.0, "fedvssam": 2.0, "fedgmt": 1.0, "fedsmoo": 1.0, "fednsam": 0.0}
    values = _stage2_values(study, means)
    cells = analyse(study, {k: v for k, v in values.items() if k[1] in ("fedavg", "fedsam-0.05", "fedsam-0.1")})
    rows = stage2_rows(study, values, failing(cells))
    text = stage2_lesson(study, rows, 36)
    assert "FedVSSAM recovers more than drift correction alone (1 of 4 fixes)." in text
    assert "over FedDyn" in text and "pathological, 2 classes, K = 50" in text
    none = _stage2_values(study, {**means, "fedvssam": 1.0})
    text = stage2_lesson(study, stage2_rows(study, none, failing(cells)), 36)
    assert "No fix is decided above FedDyn" in text
    assert "12 of its 36 runs recorded" in stage2_lesson(study, rows, 12)  # never read on a part of its seeds
