"""Issue 46, items 1 and 2: everything a verdict reads is under the manifest, a record is checked against its
own config, and a record write killed between its steps is repaired.

Every case works on copies in ``tmp_path`` (never the committed ``figures/``), and each one shows the check
fails for the damaged copy and passes for the intact one, so none of them can pass by not checking.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_evidence_integrity import _copy_evidence
from lab.evidence import integrity
from lab.evidence.integrity import MANIFEST_NAME, EvidenceError, problems
from lab.evidence.records import OLDER_CODE_NAME, RecordError, figure_data, figure_runs, load_record, write_record
from lab.repro import FIGURES_DIR, REPO_ROOT

SIDECAR = "10_benchmarks_bars_fmnist"  # the figure whose records the FedVSSAM/FedSAM claims read
CSV_FIGURE = "09_curvature"  # a figure CSV a claim is computed from (λ_max)


_copy = _copy_evidence  # committed evidence files and their manifest lines, copied to a test folder


def _sidecar_keys() -> list[str]:
    return json.loads((FIGURES_DIR / f"{SIDECAR}.json").read_text())["records"]


def _current_key() -> str:
    """A committed record of the sidecar that this code's run key reproduces (not one keyed by older code)."""
    listed = (FIGURES_DIR / OLDER_CODE_NAME).read_text()
    return next(k for k in _sidecar_keys() if k.startswith("fedsam-") and f"records/{k}.json.gz" not in listed)


def _payload(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write_payload(path: Path, payload: dict[str, Any]) -> None:
    from lab.evidence.records import encode_payload

    path.write_bytes(encode_payload(payload))


# --- sidecars, figure CSVs, tuning files: edited or deleted, refused naming the file ----------------------
def test_the_committed_sidecars_and_figure_csvs_are_listed() -> None:
    listed = integrity.read_manifest(FIGURES_DIR)
    for name in (SIDECAR, CSV_FIGURE, "02_sharpness_vs_alpha", "03_decomposition"):
        assert f"{name}.json" in listed and f"{name}.csv" in listed, name
    pngs = sorted(FIGURES_DIR.glob("*.png"))
    assert pngs and all(p.with_suffix(".json").name in listed for p in pngs)


def test_a_tampered_sidecar_is_refused_naming_it(tmp_path: Path) -> None:
    key = _current_key()
    figs = _copy(tmp_path / "figures", [f"{SIDECAR}.json", f"records/{key}.json.gz"])
    sidecar = figs / f"{SIDECAR}.json"
    meta = json.loads(sidecar.read_text())
    meta["records"] = [key]  # one record of the claim's arm kept, the others dropped: the edit
    original = sidecar.read_bytes()
    sidecar.write_text(json.dumps(meta))
    with pytest.raises(EvidenceError, match=rf"{sidecar} was changed after it was recorded"):
        figure_runs(SIDECAR, figs)
    sidecar.unlink()  # deleted: an error naming it, not "no sidecar, not run"
    with pytest.raises(EvidenceError, match=rf"{sidecar} is listed in .* but is missing"):
        figure_runs(SIDECAR, figs)
    sidecar.write_bytes(original)
    with pytest.raises(RecordError, match="names record"):  # intact: read, and its missing records named
        figure_runs(SIDECAR, figs)


def test_swapped_csv_values_are_refused_naming_the_file(tmp_path: Path) -> None:
    import pandas as pd

    figs = _copy(tmp_path / "figures", [f"{CSV_FIGURE}.csv"])
    intact = figure_data(CSV_FIGURE, figs)
    assert len(intact) > 1
    column = next(c for c in intact.columns if pd.api.types.is_float_dtype(intact[c]) and intact[c].nunique() > 1)
    swapped = intact.copy()
    values = swapped[column].to_numpy().copy()
    first, other = 0, int(next(i for i, v in enumerate(values) if v != values[0]))
    values[first], values[other] = values[other], values[first]
    swapped[column] = values
    swapped.to_csv(figs / f"{CSV_FIGURE}.csv", index=False)
    with pytest.raises(EvidenceError, match=rf"{figs / CSV_FIGURE}.csv was changed after it was recorded"):
        figure_data(CSV_FIGURE, figs)


def test_a_claim_on_a_tampered_table_is_refused_by_the_claims_command(tmp_path: Path) -> None:
    figs = _copy(tmp_path / "figures", [f"{CSV_FIGURE}.csv"])
    shutil.copyfile(FIGURES_DIR / "claims.yaml", figs / "claims.yaml")
    from lab.evidence.claims import evaluate_claim_paired, load_claims

    claim = next(c for c in load_claims() if c.figure == CSV_FIGURE)
    assert evaluate_claim_paired(claim, figs).verdict != "not run"  # intact: read
    path = figs / f"{CSV_FIGURE}.csv"
    path.write_text(path.read_text().replace("\n", "\n ", 1))  # a one-byte edit
    with pytest.raises(EvidenceError, match=rf"{path} was changed after it was recorded"):
        evaluate_claim_paired(claim, figs)
    path.unlink()
    with pytest.raises(EvidenceError, match=rf"{path} is listed in .* but is missing"):
        evaluate_claim_paired(claim, figs)


def test_a_deleted_tuning_file_is_an_error_not_the_defaults(tmp_path: Path) -> None:
    from lab.evidence.protocol import profile_federation, tuned_params
    from lab.evidence.tuning_files import TuningError

    rel = "tuning/dirichlet-0.1/fedsam"
    figs = _copy(tmp_path / "figures", [f"{rel}.json", f"{rel}.csv"])
    cfg = profile_federation("cpu").replace(partition="dirichlet", alpha=0.1)
    assert tuned_params("fedsam", cfg, figs / "tuning").tuned  # intact: the choice
    (figs / f"{rel}.json").unlink()
    with pytest.raises(TuningError, match=rf"{figs / rel}.json is listed in .* but is missing"):
        tuned_params("fedsam", cfg, figs / "tuning")


def test_a_tampered_tuning_file_is_refused_by_rerecord(tmp_path: Path) -> None:
    from lab.evidence.tuning_files import TuningError

    rel = "tuning/dirichlet-0.1/fedsam"
    figs = _copy(tmp_path / "figures", [f"{rel}.json", f"{rel}.csv"])
    path = figs / f"{rel}.json"
    done = json.loads(path.read_text())
    key = next(iter(done["grid"]))
    other = next(v for v in done["grid"][key] if v != done["best"][key])
    done["best"][key] = other  # not its table's best point any more
    path.write_text(json.dumps(done))
    with pytest.raises(TuningError, match=rf"{path}"):
        integrity.rerecord([path], figs)
    assert problems(figs)["changed"] == [f"{rel}.json"]  # nothing re-recorded


# --- a record against its own config and metrics ----------------------------------------------------------
@pytest.mark.parametrize(("what", "change", "message"), [
    ("another seed", lambda p: p["config"]["config"].update(seed=p["config"]["config"]["seed"] + 7),
     "its config block hashes to"),
    ("another hyperparameter", lambda p: p["config"]["config"].update(lr=0.5), "its config block hashes to"),
    ("a final accuracy", lambda p: p["summary"].update(final_test_acc=0.6), "final_test_acc 0.6"),
    ("collapsed, not finished", lambda p: p["summary"].update(status="collapsed"), "status 'collapsed'"),
])
def test_an_edited_record_is_refused_even_after_rerecord(tmp_path: Path, what: str, change: Any,
                                                         message: str) -> None:
    key = _current_key()
    figs = _copy(tmp_path / "figures", [f"records/{key}.json.gz"])
    recs = figs / "records"
    assert load_record(key, recs) is not None  # intact: loads
    path = recs / f"{key}.json.gz"
    payload = _payload(path)
    change(payload)
    _write_payload(path, payload)
    with pytest.raises(RecordError, match=rf"record {path}: .*{message}"):
        integrity.rerecord([path], figs)  # --rerecord runs the load's checks first
    lines = (figs / MANIFEST_NAME).read_text()
    digest = integrity.file_digest(path.read_bytes())
    (figs / MANIFEST_NAME).write_text(lines.replace(lines.split()[0], digest))  # a line forged by hand
    with pytest.raises(RecordError, match=rf"record {path}: .*{message}"):
        load_record(key, recs)


def test_a_record_of_older_code_is_accepted_only_as_listed(tmp_path: Path) -> None:
    listed = integrity.read_manifest(FIGURES_DIR)  # same format
    older = (FIGURES_DIR / OLDER_CODE_NAME).read_text().splitlines()
    rel = older[0].split("  ", 1)[1]
    key = Path(rel).name.removesuffix(".json.gz")
    figs = _copy(tmp_path / "figures", [rel])
    assert listed[rel]
    with pytest.raises(RecordError, match=rf"not to its key {key}.*is not listed there"):
        load_record(key, figs / "records")  # no older-code list: its key cannot be reproduced
    (figs / OLDER_CODE_NAME).write_text(older[0] + "\n")
    assert load_record(key, figs / "records") is not None


def test_a_record_without_test_acc_is_one_line_in_claims_and_summary(tmp_path: Path) -> None:
    figs = tmp_path / "figures"
    figs.mkdir()
    for pattern in ("*.json", "*.csv", "*.png", "claims.yaml", "findings.yaml", MANIFEST_NAME, OLDER_CODE_NAME):
        for f in FIGURES_DIR.glob(pattern):
            shutil.copyfile(f, figs / f.name)
    shutil.copytree(FIGURES_DIR / "records", figs / "records")
    shutil.copytree(FIGURES_DIR / "tuning", figs / "tuning")
    key = _current_key()
    path = figs / "records" / f"{key}.json.gz"
    payload = _payload(path)
    col = payload["metrics"]["columns"].index("test_acc")
    payload["metrics"]["columns"].pop(col)
    for row in payload["metrics"]["data"]:
        row.pop(col)
    _write_payload(path, payload)
    # the digest forged by hand (what --rerecord refuses to do), so the content check is what refuses it
    manifest = figs / MANIFEST_NAME
    manifest.write_text("".join(
        (f"{integrity.file_digest(path.read_bytes())}  records/{key}.json.gz\n" if line.endswith(f"{key}.json.gz")
         else line + "\n") for line in manifest.read_text().splitlines()))
    env = {**os.environ, "FEDLAB_FIGURES": str(figs), "FEDLAB_RECORDS": str(figs / "records"),
           "OMP_NUM_THREADS": "1"}
    for command in (["-m", "lab", "claims"], ["-m", "lab.tools.summary"]):
        proc = subprocess.run([sys.executable, *command], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 4, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(path) in errors[0] and "no test_acc column" in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr


# --- a killed record write ----------------------------------------------------------------------------------
def _result(figs: Path, key: str) -> Any:
    res = load_record(key, figs / "records")
    assert res is not None
    return res


def test_a_write_killed_between_record_and_manifest_line_is_repaired(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import lab.evidence.records as records

    first = _current_key()
    keys = [first, next(k for k in _sidecar_keys() if k.startswith("fedavg-"))]
    src = _copy(tmp_path / "src", [f"records/{k}.json.gz" for k in keys])
    out = tmp_path / "out" / "records"

    class Killed(BaseException):
        """The process dies here: nothing after this step runs."""

    def die(*_: Any, **__: Any) -> None:
        raise Killed

    monkeypatch.setattr(records, "add", die)  # the kill: after the record's link, before its manifest line
    with pytest.raises(Killed):
        write_record(_result(src, keys[0]), out)
    monkeypatch.undo()
    path = out / f"{keys[0]}.json.gz"
    assert path.exists() and integrity.read_manifest(out.parent) == {}
    with pytest.raises(RecordError, match=rf"{path} is not in the evidence manifest"):
        load_record(keys[0], out)  # what blocked its run
    write_record(_result(src, keys[1]), out)  # the next write, of any run, repairs it
    assert load_record(keys[0], out) is not None and load_record(keys[1], out) is not None
    assert problems(out.parent) == {"changed": [], "unlisted": [], "missing": []}


def test_an_unsound_unlisted_record_is_not_repaired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = _current_key()
    src = _copy(tmp_path / "src", [f"records/{key}.json.gz"])
    out = tmp_path / "out" / "records"
    out.mkdir(parents=True)
    forged = out / f"{key}.json.gz"
    payload = _payload(src / "records" / f"{key}.json.gz")
    payload["config"]["config"]["seed"] += 1
    _write_payload(forged, payload)  # unlisted, and not the run its key names
    from lab.evidence.records import repair_unlisted

    assert repair_unlisted(out) == []
    assert f"unlisted record {forged} is not repaired" in capsys.readouterr().err
    assert integrity.read_manifest(out.parent) == {}


# --- the default integrity command and save_figure ----------------------------------------------------------
def test_the_default_integrity_command_checks_every_manifest(tmp_path: Path) -> None:
    figs = _copy(tmp_path / "figures", [f"{SIDECAR}.json"])
    _copy(figs / "rerun", ["tuning/dirichlet-0.1/fedsam.json"])
    command = [sys.executable, "-m", "lab.evidence.integrity", "--root", str(figs)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ok = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (figs / "rerun" / "tuning" / "dirichlet-0.1" / "fedsam.json").unlink()
    gone = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert gone.returncode == 1 and "missing: rerun/tuning/dirichlet-0.1/fedsam.json" in gone.stdout


def test_save_figure_records_its_sidecar_and_csv(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from lab.tools.figures import save_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    for value in (1.0, 2.0):  # made twice: the second version replaces the first's lines
        paths = save_figure(fig, "t", notebook="x", profile="ci", caption="c", out_dir=tmp_path,
                            data=pd.DataFrame({"v": [value]}), kind="analysis")
        assert problems(tmp_path) == {"changed": [], "unlisted": [], "missing": []}
        assert set(integrity.read_manifest(tmp_path)) == {"t.json", "t.csv"}
    plt.close(fig)
    paths["csv"].write_text("v\n3.0\n")
    assert problems(tmp_path)["changed"] == ["t.csv"]


def test_the_scratch_folder_is_not_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ci profile's figures go to an ignored scratch folder: save_figure lists nothing there, and the
    default integrity command does not read a manifest someone left in it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    import lab.repro
    import lab.tools.figures as figures

    scratch = tmp_path / "_scratch"
    monkeypatch.setattr(lab.repro, "SCRATCH_DIR", scratch)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    figures.save_figure(fig, "t", notebook="x", profile="ci", caption="c", out_dir=scratch,
                        data=pd.DataFrame({"v": [1.0]}), kind="analysis")
    plt.close(fig)
    assert (scratch / "t.csv").is_file() and not (scratch / integrity.MANIFEST_NAME).exists()
    (scratch / integrity.MANIFEST_NAME).write_text("0" * 64 + "  gone.csv\n")
    (tmp_path / integrity.MANIFEST_NAME).write_text("")
    assert integrity.manifest_roots(tmp_path) == [tmp_path]


# --- the book publishes only verified evidence --------------------------------------------------------------
def test_the_book_refuses_to_publish_an_unlisted_or_edited_claims_table(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("fedlab_book_build_46", REPO_ROOT / "notebooks" / "book" / "build.py")
    assert spec is not None and spec.loader is not None
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    figs = _copy(tmp_path / "figures", ["claims_cpu.md", f"{SIDECAR}.json"])
    records = [{"json": figs / f"{SIDECAR}.json", "data": []}]
    book.verify_published(records, figs, figs / "claims_cpu.md")  # intact: published
    claims = figs / "claims_cpu.md"
    claims.write_text(claims.read_text().replace("holds", "fails", 1))
    with pytest.raises(book.BookError, match=rf"{claims} was changed after it was recorded"):
        book.verify_published(records, figs, claims)
    (figs / MANIFEST_NAME).write_text("".join(line + "\n" for line in (figs / MANIFEST_NAME).read_text().splitlines()
                                              if not line.endswith("claims_cpu.md")))
    with pytest.raises(book.BookError, match=rf"{claims} is not in the evidence manifest"):
        book.verify_published(records, figs, claims)


def test_a_study_figure_names_records_kept_in_the_figures_folder(tmp_path: Path) -> None:
    """A figure saved in a study's sub-folder (figures/failure_map/) reads the committed records of figures/records
    without copying them: its sidecar's ``records_dir`` says where they are, and both readers follow it."""
    key = _current_key()
    figs = _copy(tmp_path / "figures", [f"records/{key}.json.gz"])
    study = figs / "study"
    study.mkdir()
    sidecar = study / "map.json"
    sidecar.write_text(json.dumps({"records": [key], "records_dir": "../records"}))
    integrity.rerecord([sidecar], study)
    assert [r.config.algorithm for r in figure_runs("map", study)] == ["fedsam"]
    integrity.check_content([sidecar], study)
    sidecar.write_text(json.dumps({"records": [key]}))  # without it, the records are looked for beside it
    with pytest.raises(EvidenceError, match="names record"):
        integrity.rerecord([sidecar], study)


@pytest.mark.parametrize(("profile", "marked"), [("ci", True), ("cpu", False)])
def test_a_ci_figure_says_smoke_test_in_the_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   profile: str, marked: bool) -> None:
    """Issue 47: a reader skimming outputs sees on the ci figure itself that it is a smoke test; a citable one
    carries no such mark (saving twice marks once)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lab.tools.figures import SMOKE_TEST_MARK, save_figure

    monkeypatch.setenv("FEDLAB_ALLOW_DIRTY_FIGURES", "1")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    for _ in range(2):
        save_figure(fig, "t", notebook="x", profile=profile, caption="c", out_dir=tmp_path, kind="analysis")
    marks = [t for t in fig.texts if t.get_text() == SMOKE_TEST_MARK]
    plt.close(fig)
    assert len(marks) == (1 if marked else 0)
