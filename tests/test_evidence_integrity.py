"""Fault injection for the committed evidence (issue 32): every damaged record, tuning file or claims
input is refused with the file named — each on a copy of a real committed file, never the original.

Rows of the table (one parametrised case each): edited number, edited config block, renamed record
(another run's record under this key, with and without its key rewritten), bogus status, missing
keys, truncated gzip, a record missing from the manifest, an out-of-grid tuning choice, ``{}`` as
the choice, the worst-scored or a collapsed point as the choice, malformed tuning values; then
duplicate seeds (counted once), racing writers (one record, the first one), orphan ``.tmp`` files and
the ``claims`` command on a damaged copy (non-zero exit, the file named, no traceback, no "not run").
"""
from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lab.evidence import integrity
from lab.evidence.integrity import MANIFEST_NAME, EvidenceError, problems
from lab.evidence.records import RecordError, load_record, record_path, write_record
from lab.evidence.tuning_files import TuningError, load_tuning
from lab.repro import FIGURES_DIR, REPO_ROOT

SIDECAR = "10_benchmarks_bars_fmnist"  # the figure behind "FedVSSAM > FedSAM (Dir 0.1)"


def _committed_keys() -> list[str]:
    """Two committed record keys of the claims' figure: FedVSSAM's Dir-0.1 seed-0 run (one of the three
    records the issue's tampering flipped "FedVSSAM > FedSAM" with) and a FedSAM run."""
    keys = json.loads((FIGURES_DIR / f"{SIDECAR}.json").read_text())["records"]

    def config(key: str) -> dict[str, Any]:
        return json.loads(gzip.decompress((FIGURES_DIR / "records" / f"{key}.json.gz").read_bytes()))["config"]["config"]

    vssam = sorted(k for k in keys if k.startswith("fedvssam-") and config(k)["alpha"] == 0.1 and config(k)["seed"] == 0)
    other = sorted(k for k in keys if k.startswith("fedsam-"))
    return [vssam[0], other[0]]


KEY, OTHER = _committed_keys()
TUNING = Path("tuning") / "dirichlet-0.5" / "fedsam.json"  # its table has a collapsed ρ


def _copy_evidence(dest: Path, rels: list[str]) -> Path:
    """Copy committed evidence files ``rels`` (relative to figures/) and their committed manifest lines."""
    lines = integrity.read_manifest(FIGURES_DIR)
    for rel in rels:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIGURES_DIR / rel, dest / rel)
    (dest / MANIFEST_NAME).write_text("".join(f"{lines[r]}  {r}\n" for r in sorted(rels)))
    return dest


@pytest.fixture
def figs(tmp_path: Path) -> Path:
    """figures/ in miniature: two committed records and one committed tuning choice, with their lines."""
    tuning = [TUNING.as_posix(), TUNING.with_suffix(".csv").as_posix()]
    return _copy_evidence(tmp_path / "figures", [f"records/{KEY}.json.gz", f"records/{OTHER}.json.gz", *tuning])


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a record's payload as valid gzip JSON (what a hand edit would produce)."""
    payload = json.loads(gzip.decompress(path.read_bytes()))
    change(payload)
    path.write_bytes(gzip.compress(json.dumps(payload).encode()))


def _set_last_acc(p: dict[str, Any]) -> None:
    col = p["metrics"]["columns"].index("test_acc")
    p["metrics"]["data"][-1][col] = 0.60


def _rename(figs: Path, rewrite_key: bool) -> None:
    recs = figs / "records"
    shutil.copyfile(recs / f"{OTHER}.json.gz", recs / f"{KEY}.json.gz")
    if rewrite_key:
        _edit(recs / f"{KEY}.json.gz", lambda p: p.update(key=KEY))


def _forge_line(figs: Path, path: Path) -> None:
    """Set ``path``'s manifest line to its current digest by hand: what no command does for an edited record
    (``--rerecord`` refuses it), so the load's own content checks are what must refuse it."""
    rel = path.relative_to(figs).as_posix()
    manifest = figs / MANIFEST_NAME
    manifest.write_text("".join((f"{integrity.file_digest(path.read_bytes())}  {rel}\n" if line.endswith(f"  {rel}")
                                 else line + "\n") for line in manifest.read_text().splitlines()))


def _drop_line(figs: Path) -> None:
    manifest = figs / MANIFEST_NAME
    manifest.write_text("".join(line + "\n" for line in manifest.read_text().splitlines() if KEY not in line))


RECORD_FAULTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "edited number": (lambda f: _edit(f / "records" / f"{KEY}.json.gz", _set_last_acc),
                      "was changed after it was recorded"),
    "edited config block": (lambda f: _edit(f / "records" / f"{KEY}.json.gz",
                                            lambda p: p["config"]["config"].update(lr=0.5)),
                            "was changed after it was recorded"),
    "renamed record": (lambda f: _rename(f, rewrite_key=False), "refusing to mix runs"),
    "renamed record, key rewritten": (lambda f: _rename(f, rewrite_key=True), "refusing to mix runs"),
    "bogus status": (lambda f: _edit(f / "records" / f"{KEY}.json.gz", lambda p: p["summary"].update(status="bogus")),
                     "status 'bogus'"),
    "missing status": (lambda f: _edit(f / "records" / f"{KEY}.json.gz", lambda p: p["summary"].pop("status")),
                       r"lacks required field\(s\) summary.status"),
    "missing metrics": (lambda f: _edit(f / "records" / f"{KEY}.json.gz", lambda p: p.pop("metrics")),
                        r"lacks required field\(s\) metrics"),
    "missing hash": (lambda f: _edit(f / "records" / f"{KEY}.json.gz", lambda p: p["config"].pop("hash")),
                     r"lacks required field\(s\) config.hash"),
    "truncated gzip": (lambda f: (f / "records" / f"{KEY}.json.gz").write_bytes(
        (f / "records" / f"{KEY}.json.gz").read_bytes()[:-40]), "corrupted"),
    "not gzip": (lambda f: (f / "records" / f"{KEY}.json.gz").write_bytes(b"\xff\xfe not a record"), "corrupted"),
    "not in the manifest": (_drop_line, "is not in the evidence manifest"),
    "manifest line mangled": (lambda f: (f / MANIFEST_NAME).write_text("deadbeef  records/x\n"), "line 1 is not"),
}


@pytest.mark.parametrize("fault", list(RECORD_FAULTS))
def test_a_damaged_record_is_refused_naming_the_file(figs: Path, fault: str) -> None:
    damage, message = RECORD_FAULTS[fault]
    assert load_record(KEY, figs / "records") is not None  # the intact copy loads
    damage(figs)
    with pytest.raises(RecordError, match=message) as err:
        load_record(KEY, figs / "records")
    assert str(figs / "records") in str(err.value) or str(figs / MANIFEST_NAME) in str(err.value)


def test_an_edited_config_is_refused_even_with_its_manifest_line_re_recorded(figs: Path) -> None:
    """Someone who edits lr cannot re-record the digest (``--rerecord`` runs the load's checks: the config block
    no longer hashes to the key, issue 46), and with the line forged by hand still cannot pass the record off for
    the run it was made for: loaded for a config, the config block must be that config's (runs_dir aside)."""
    path = figs / "records" / f"{KEY}.json.gz"
    wanted = load_record(KEY, figs / "records").config.replace(runs_dir="/elsewhere")  # type: ignore[union-attr]
    assert load_record(KEY, figs / "records", config=wanted) is not None
    _edit(path, lambda p: p["config"]["config"].update(lr=0.5))
    with pytest.raises(RecordError, match=rf"record {path}: its config block hashes to"):
        integrity.rerecord(path, figs)
    _forge_line(figs, path)
    with pytest.raises(RecordError, match=rf"{path}.*another config \(differs in: lr\)"):
        load_record(KEY, figs / "records", config=wanted)


def test_a_record_of_another_algorithm_under_this_key_is_refused(figs: Path) -> None:
    path = figs / "records" / f"{KEY}.json.gz"
    _edit(path, lambda p: p["config"]["config"].update(algorithm="fedavg", algorithm_params={}))
    _forge_line(figs, path)
    with pytest.raises(RecordError, match=rf"{path}.*algorithm 'fedavg'"):
        load_record(KEY, figs / "records")


def test_a_key_reaching_outside_the_records_folder_is_refused(figs: Path) -> None:
    with pytest.raises(RecordError, match="not a record key"):
        load_record(f"../records/{KEY}", figs / "records")


# --- tuning files ---------------------------------------------------------------------------------
def _choose(figs: Path, best: Any) -> None:
    path = figs / TUNING
    done = json.loads(path.read_text())
    done["best"] = best
    path.write_text(json.dumps(done))


def _table(figs: Path) -> list[dict[str, Any]]:
    import pandas as pd

    return pd.read_csv(figs / TUNING.with_suffix(".csv")).to_dict("records")


def _worst(figs: Path) -> None:
    rows = [r for r in _table(figs) if r["status"] == "finished"]
    _choose(figs, {"rho": min(rows, key=lambda r: r["score"])["rho"]})


def _collapsed(figs: Path) -> None:
    rows = [r for r in _table(figs) if r["status"] != "finished"]
    assert rows, "the committed FedSAM table of Dir 0.5 has a collapsed ρ"
    _choose(figs, {"rho": rows[0]["rho"]})


def _edit_table(figs: Path) -> None:
    """An edit that keeps the choice valid (a non-chosen point's final accuracy): only the digest sees it."""
    path = figs / TUNING.with_suffix(".csv")
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    last = lines[-1].split(",")
    last[header.index("final_val_acc")] = "0.99"
    path.write_text("\n".join([*lines[:-1], ",".join(last)]) + "\n")


TUNING_FAULTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "out-of-grid choice (rho 0.5)": (lambda f: _choose(f, {"rho": 0.5}), "not a point of its grid"),
    "empty choice {}": (lambda f: _choose(f, {}), r"the empty point \{\}"),
    "worst-scored point": (_worst, "best-scored finished point"),
    "collapsed point": (_collapsed, "its row is collapsed"),
    "choice of the wrong type": (lambda f: _choose(f, [0.02]), "lacks a 'best' point"),
    "value of the wrong type": (lambda f: _choose(f, {"rho": "0.02"}), "not a point of its grid"),
    "not utf-8": (lambda f: (f / TUNING).write_bytes(b"\xff\xfe{}"), "UnicodeDecodeError"),
    "not JSON": (lambda f: (f / TUNING).write_text("{best: "), "JSONDecodeError"),
    "table changed": (_edit_table, "was changed after it was recorded"),
    "table missing": (lambda f: (f / TUNING.with_suffix(".csv")).unlink(), "cannot be read"),
}


@pytest.mark.parametrize("fault", list(TUNING_FAULTS))
def test_a_bad_tuning_file_is_refused_naming_it(figs: Path, fault: str) -> None:
    from lab.evidence.protocol import profile_splits, tuned_params

    split = profile_splits("cpu")["dirichlet-0.5"]
    assert tuned_params("fedsam", split, directory=figs / "tuning").tuned  # the intact copy is used
    damage, message = TUNING_FAULTS[fault]
    damage(figs)
    with pytest.raises(TuningError, match=message) as err:
        tuned_params("fedsam", split, directory=figs / "tuning")
    assert str(figs / "tuning" / "dirichlet-0.5" / "fedsam.") in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, EvidenceError)


def test_tune_profile_does_not_skip_a_bad_tuning_file_as_done(figs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedlab.tuning as tuning_module
    from fedlab.config import Config
    from lab.evidence.protocol import TUNING as PROTOCOL, tune_splits

    def no_training(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a committed tuning file must be checked, not retrained")

    monkeypatch.setattr(tuning_module, "tune", no_training)
    committed = json.loads((figs / TUNING).read_text())
    grid = {"fedsam": committed["grid"]}
    # the K = 5 federation it was tuned on (the cpu parameter files now name the rerun's regime)
    splits = {"dirichlet-0.5": Config.from_dict({**committed["base"], "algorithm": "fedavg", "algorithm_params": {}})}
    kwargs = dict(methods=["fedsam"], grids=grid, directory=figs / "tuning", tuning=PROTOCOL, progress=False,
                  edges=None)  # the committed cpu tuning's protocol: no edge extension
    assert tune_splits(splits, **kwargs) == [figs / TUNING]  # intact: skipped as done
    _choose(figs, {"rho": 0.5})
    with pytest.raises(TuningError, match=rf"{figs / TUNING}.*not a point of its grid"):
        tune_splits(splits, **kwargs)


# --- the manifest ---------------------------------------------------------------------------------
def test_the_manifest_covers_exactly_the_committed_evidence() -> None:
    assert problems(FIGURES_DIR) == {"changed": [], "unlisted": [], "missing": []}
    listed = integrity.read_manifest(FIGURES_DIR)
    assert sum(r.startswith("records/") for r in listed) == len(list((FIGURES_DIR / "records").glob("*.json.gz")))
    assert "claims_cpu.csv" in listed and TUNING.as_posix() in listed


def test_changed_evidence_is_never_re_recorded_silently(figs: Path) -> None:
    path = figs / "records" / f"{KEY}.json.gz"
    _edit(path, _set_last_acc)
    with pytest.raises(EvidenceError, match=rf"{path} differs from the version recorded.*--rerecord"):
        integrity.add(path, figs)
    assert problems(figs)["changed"] == [f"records/{KEY}.json.gz"]
    (figs / "records" / f"{OTHER}.json.gz").unlink()
    assert problems(figs)["missing"] == [f"records/{OTHER}.json.gz"]
    with pytest.raises(RecordError, match=rf"record {path}: its summary disagrees with its metrics"):
        integrity.rerecord(path, figs)  # the explicit step still checks the content (issue 46)
    tuning = figs / TUNING.with_suffix(".csv")
    tuning.write_text(tuning.read_text() + "\n")  # a change that keeps the choice its table's best
    integrity.rerecord(tuning, figs)  # the explicit, named step
    assert problems(figs)["changed"] == [f"records/{KEY}.json.gz"]


def test_the_manifest_command_lists_changes_and_re_records_only_when_asked(figs: Path) -> None:
    path = figs / "records" / f"{KEY}.json.gz"
    _edit(path, _set_last_acc)
    command = [sys.executable, "-m", "lab.evidence.integrity", "--root", str(figs)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    check = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 1 and f"changed: records/{KEY}.json.gz" in check.stdout, check.stderr
    added = subprocess.run([*command, "--add", str(path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert added.returncode == 4 and "its summary disagrees with its metrics" in added.stderr
    refused = subprocess.run([*command, "--rerecord", str(path)], cwd=REPO_ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode == 4 and f"record {path}: its summary disagrees" in refused.stderr
    tuning = figs / TUNING.with_suffix(".csv")
    tuning.write_text(tuning.read_text() + "\n")
    again = subprocess.run([*command, "--rerecord", str(tuning)], cwd=REPO_ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0 and problems(figs)["changed"] == [f"records/{KEY}.json.gz"]


def test_a_figure_naming_a_missing_record_is_refused(figs: Path) -> None:
    from lab.evidence.records import figure_runs

    (figs / "f.json").write_text(json.dumps({"records": [KEY, "fedsam-0123456789ab"]}))
    integrity.add(figs / "f.json", figs)  # a sidecar is evidence: read only with its line
    with pytest.raises(RecordError, match="names record 'fedsam-0123456789ab', which is not in"):
        figure_runs("f", figs)


# --- duplicate seeds ------------------------------------------------------------------------------
def test_duplicate_seeds_are_counted_once(tmp_path: Path) -> None:
    """The same seed's record named three times is one sample (n = 1), with a note, not n = 3 with ci 0."""
    from lab.evidence.claims import evaluate_claim_paired, load_claims

    keys = json.loads((FIGURES_DIR / f"{SIDECAR}.json").read_text())["records"]
    fedsam = [k for k in keys if k.startswith("fedsam-")]
    figs = _copy_evidence(tmp_path / "figures", [f"records/{k}.json.gz" for k in [KEY, *fedsam]])
    (figs / f"{SIDECAR}.json").write_text(json.dumps({"records": [KEY, KEY, KEY, *fedsam]}))
    integrity.add(figs / f"{SIDECAR}.json", figs)
    import dataclasses

    claim = next(c for c in load_claims() if c.id == "fedvssam_above_best_baseline_dir01")
    claim = dataclasses.replace(claim, right=[{"algorithm": "fedsam"}])  # the arm whose records are copied
    v = evaluate_claim_paired(claim, figs)
    assert v.comparisons[0].difference.n == 1  # one pair, not three
    assert not v.tested and "FedVSSAM: 2 duplicate run(s)" in v.note


def test_identical_configs_in_a_figure_table_count_once(tmp_path: Path) -> None:
    import pandas as pd

    from lab.evidence.claims import Claim, evaluate_claim_paired

    rows = [{"method": m, "seed": s, "v": v} for m, s, v in
            [("a", 0, 1.0), ("a", 0, 1.0), ("a", 0, 1.0), ("a", 1, 1.2), ("b", 0, 0.1), ("b", 1, 0.2)]]
    pd.DataFrame(rows).to_csv(tmp_path / "fig.csv", index=False)
    integrity.add(tmp_path / "fig.csv", tmp_path)  # a figure's table is evidence: read only with its line
    claim = Claim.from_dict({"id": "t", "claim": "x", "source": {"paper": "P"}, "setting": {"notebook": "nb",
                             "figure": "fig"}, "metric": {"column": "v", "arm_column": "method"},
                             "left": {"algorithm": "a"}, "op": ">", "right": {"algorithm": "b"}})
    v = evaluate_claim_paired(claim, tmp_path)
    assert v.comparisons[0].difference.n == 2 and "2 duplicate run(s)" in v.note


# --- racing writers and orphans -------------------------------------------------------------------
def _variant(figs: Path, i: int) -> Any:
    """A run result to write under KEY whose bytes differ per writer (wall times, as a retrained run's)."""
    res = load_record(KEY, figs / "records")
    assert res is not None
    return type(res)(res.config, res.metrics.assign(wall_seconds=float(i)), None, res.status, res.run_dir,
                     res.summary, None)


def _write_in_process(figs: str, out: str, i: int, barrier: Any) -> None:
    res = _variant(Path(figs), i)
    barrier.wait()
    write_record(res, Path(out) / "records")


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_racing_writers_leave_exactly_the_first_record(figs: Path, tmp_path: Path, how: str) -> None:
    n = 6
    out = tmp_path / "race"
    if how == "threads":
        barrier: Any = threading.Barrier(n)
        workers: list[Any] = [threading.Thread(target=_write_in_process, args=(str(figs), str(out), i, barrier))
                              for i in range(n)]
    else:
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(n)
        workers = [ctx.Process(target=_write_in_process, args=(str(figs), str(out), i, barrier)) for i in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert all(getattr(w, "exitcode", 0) == 0 for w in workers)
    recs = out / "records"
    assert sorted(p.name for p in recs.iterdir()) == [f"{KEY}.json.gz"]  # one record, no .tmp left
    written = json.loads(gzip.decompress((recs / f"{KEY}.json.gz").read_bytes()))
    walls = {row[written["metrics"]["columns"].index("wall_seconds")] for row in written["metrics"]["data"]}
    assert len(walls) == 1 and walls.pop() in range(n)  # wholly one writer's bytes, never a mix
    assert load_record(KEY, recs) is not None  # the manifest line is that writer's
    assert integrity.read_manifest(out) == {f"records/{KEY}.json.gz": integrity.file_digest(
        (recs / f"{KEY}.json.gz").read_bytes())}
    before = (recs / f"{KEY}.json.gz").read_bytes()
    write_record(_variant(figs, 99), recs)  # a later writer keeps the first record
    assert (recs / f"{KEY}.json.gz").read_bytes() == before


def test_orphan_tmp_files_are_ignored_by_loads_and_cleaned_by_the_next_write(figs: Path, tmp_path: Path) -> None:
    recs = figs / "records"
    orphan = recs / f".{KEY}.json.gz.0123456789ab.tmp"
    orphan.write_bytes(b"half a record")
    assert load_record(KEY, recs) is not None and problems(figs) == {"changed": [], "unlisted": [], "missing": []}
    out = tmp_path / "elsewhere" / "records"
    shutil.copytree(recs, out)
    path = write_record(_variant(figs, 0), recs)  # exists: kept, but the orphan is swept first
    assert path == record_path(KEY, recs) and not orphan.exists()
    assert (out / orphan.name).exists()  # another folder's orphans are its own


def test_gitignore_ignores_evidence_tmp_and_lock_files() -> None:
    for name in (f"figures/records/.{KEY}.json.gz.0123456789ab.tmp", "figures/.MANIFEST.sha256.lock",
                 "figures/.records.lock", "figures/tuning/dirichlet-0.1/.fedsam.json.0123.tmp"):
        rc = subprocess.run(["git", "check-ignore", "-q", name], cwd=REPO_ROOT).returncode
        assert rc == 0, f"{name} is not ignored by .gitignore"


# --- the claims command -----------------------------------------------------------------------------
@pytest.mark.parametrize(("fault", "message"), [("edited number", "was changed after it was recorded"),
                                                ("truncated gzip", "corrupted"),
                                                ("missing status", "lacks required field")])
def test_claims_exits_non_zero_naming_a_damaged_record(tmp_path: Path, fault: str, message: str) -> None:
    figs = tmp_path / "figures"
    figs.mkdir()
    for pattern in ("*.json", "*.csv", "claims.yaml", MANIFEST_NAME):
        for f in FIGURES_DIR.glob(pattern):
            shutil.copyfile(f, figs / f.name)
    shutil.copytree(FIGURES_DIR / "records", figs / "records")
    RECORD_FAULTS[fault][0](figs)
    env = {**os.environ, "FEDLAB_FIGURES": str(figs), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "lab", "claims"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"{figs / 'records' / KEY}.json.gz" in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr and "not run" not in proc.stdout


def test_every_committed_manifest_agrees_with_its_evidence() -> None:
    """Not only figures/: the rerun's tuning (figures/rerun/) and the regime pilot (figures/regime/) keep their own
    manifests, which nothing checked (issue 46) — a re-key rewrote 34 tuning files behind figures/rerun's back."""
    import subprocess

    listed = subprocess.run(["git", "-C", str(FIGURES_DIR), "ls-files", "*MANIFEST.sha256"], capture_output=True,
                            text=True, check=True).stdout.split()
    roots = sorted((FIGURES_DIR / p).parent for p in listed)
    assert FIGURES_DIR in roots and FIGURES_DIR / "rerun" in roots and FIGURES_DIR / "regime" in roots
    for root in roots:
        assert problems(root) == {"changed": [], "unlisted": [], "missing": []}, root
