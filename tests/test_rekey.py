"""Re-keying committed records (lab.evidence.rekey): names and references change, numbers never."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from lab.evidence import integrity
from lab.evidence import rekey
from lab.repro import FIGURES_DIR

RECORDS = sorted((FIGURES_DIR / "records").glob("*.json.gz"))


def _payload(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.fixture
def figures(tmp_path):
    """A figures/ copy with three committed records, their manifest lines and a sidecar naming them."""
    root = tmp_path / "figures"
    (root / "records").mkdir(parents=True)
    chosen = RECORDS[:3]
    for path in chosen:
        shutil.copy(path, root / "records" / path.name)
    integrity.add([root / "records" / p.name for p in chosen], root)
    keys = [p.name.removesuffix(".json.gz") for p in chosen]
    (root / "fig.json").write_text(json.dumps({"records": keys}))
    return root, keys


def test_rekey_renames_rewrites_the_key_fields_and_keeps_every_number(figures, monkeypatch):
    root, keys = figures
    old = {str(root / "records" / f"{k}.json.gz"): k for k in keys}
    # keyed by older code (a key its file name does not have): kept
    old[str(root / "records" / f"{keys[2]}.json.gz")] = keys[2][:-1] + ("1" if keys[2].endswith("0") else "0")
    new = {path: key.rsplit("-", 1)[0] + "-" + "abcdef%06d" % i for i, (path, key) in enumerate(old.items())}
    calls = iter([old, new])  # first the old code's keys, then this checkout's
    monkeypatch.setattr(rekey, "keys_under", lambda code_root, paths: next(calls))
    monkeypatch.setattr(rekey, "extract", lambda commit, dest: dest)
    before = {k: _payload(root / "records" / f"{k}.json.gz") for k in keys}
    renames = rekey.rekey("HEAD", directory=root / "records")
    assert set(renames) == set(keys[:2])
    for old_key, new_key in renames.items():
        assert not (root / "records" / f"{old_key}.json.gz").exists()
        after = _payload(root / "records" / f"{new_key}.json.gz")
        digest = new_key.rsplit("-", 1)[1]
        assert after["key"] == new_key and after["config"]["hash"] == digest == after["summary"]["config_hash"]
        assert after["metrics"] == before[old_key]["metrics"]  # the numbers are carried over untouched
        assert {k: v for k, v in after["summary"].items() if k != "config_hash"} == \
            {k: v for k, v in before[old_key]["summary"].items() if k != "config_hash"}
    assert (root / "records" / f"{keys[2]}.json.gz").exists()  # historical key kept
    assert integrity.problems(root) == {"changed": [], "unlisted": [], "missing": []}
    assert json.loads((root / "fig.json").read_text())["records"] == [renames[keys[0]], renames[keys[1]], keys[2]]


def test_rekey_refuses_a_tampered_record(figures, monkeypatch):
    root, keys = figures
    path = root / "records" / f"{keys[2]}.json.gz"
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)  # the last of three to be re-keyed is damaged
    maps = iter([{str(root / "records" / f"{k}.json.gz"): k for k in keys},
                 {str(root / "records" / f"{k}.json.gz"): k + "x" for k in keys}])
    monkeypatch.setattr(rekey, "keys_under", lambda code_root, paths: next(maps))
    monkeypatch.setattr(rekey, "extract", lambda commit, dest: dest)
    with pytest.raises(integrity.EvidenceError, match=keys[2]):
        rekey.rekey("HEAD", directory=root / "records")
    assert sorted(p.name for p in (root / "records").glob("*.json.gz")) == sorted(f"{k}.json.gz" for k in keys)


def test_rekey_re_records_a_rewritten_file_that_another_manifest_lists(figures, monkeypatch):
    """A tuning file under figures/rerun/ names its grid points' records; the rewrite of those names must leave
    figures/rerun/MANIFEST.sha256 agreeing with it (it did not: 34 tuning files were refused after a re-key)."""
    root, keys = figures
    tuning = root / "rerun" / "tuning" / "dirichlet-0.1"
    tuning.mkdir(parents=True)
    # a tuning file as fedlab.tune writes it (a choice that is its table's best point: the re-record checks it)
    (tuning / "fedacg.json").write_text(json.dumps({"best": {"beta": 0.1}, "grid": {"beta": [0.1]},
                                                    "scores": [{"run": keys[0]}]}))
    (tuning / "fedacg.csv").write_text("beta,score,status\n0.1,0.5,finished\n")
    integrity.add([tuning / "fedacg.json", tuning / "fedacg.csv"], root / "rerun")
    old = {str(root / "records" / f"{k}.json.gz"): k for k in keys}
    new = {path: key.rsplit("-", 1)[0] + "-" + "fedcba%06d" % i for i, (path, key) in enumerate(old.items())}
    calls = iter([old, new])
    monkeypatch.setattr(rekey, "keys_under", lambda code_root, paths: next(calls))
    monkeypatch.setattr(rekey, "extract", lambda commit, dest: dest)
    renames = rekey.rekey("HEAD", directory=root / "records")
    assert json.loads((tuning / "fedacg.json").read_text())["scores"][0]["run"] == renames[keys[0]]
    assert integrity.problems(root / "rerun") == {"changed": [], "unlisted": [], "missing": []}
