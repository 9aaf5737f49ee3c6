"""Re-key the committed run records after the run key's definition changed (a one-off, explicit act).

A record's name is its run key (``<algorithm>-<hash>``, :meth:`fedlab.config.Config.hash`), which
covers the numeric-path code digest. When that code changes *without changing a number* (a move, a
validation added, the digest's own definition), every committed record would stop matching its
config, and ``make figures`` would retrain 339 runs to find the same numbers. This script renames
them instead, after proving both ends:

1. **old keys reproduced**: in a subprocess on the code of ``--from`` (a commit, extracted with
   ``git archive``), each record's key is recomputed from its own payload (config, partition
   fingerprint, dataset digest, θ₀ digest, schedule); only records whose file name equals it are
   that code's runs and are re-keyed. The others were keyed by older code (e.g. tuning runs made
   before a later numeric change): nothing shows that newer code gives their numbers, so they keep
   their historical names, and anything that refers to them still finds them;
2. **new keys** are computed by this checkout's code from the same payload fields;
3. the payload's ``key``, ``config.hash`` and ``summary.config_hash`` are rewritten, the file is
   renamed, every reference to an old key under ``figures/`` (sidecars, CSV, Markdown) is replaced,
   and the evidence manifest is updated for exactly these files.

Numbers are never touched: the metrics and summaries are copied as they are. That the code change
moved no number is for the test suite to show (``tests/test_numbers_fixed.py``, the contract suite).

    python -m lab.evidence.rekey --from aa1bc9c --dry-run   # what would change
    python -m lab.evidence.rekey --from aa1bc9c             # do it
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from lab.evidence import integrity
from lab.evidence.records import SUFFIX, encode_payload, records_dir
from lab.repro import FIGURES_DIR, REPO_ROOT

# Runs on the old code and on this checkout's: only APIs that have existed since records were first committed.
_KEYS_SCRIPT = r"""
import gzip, json, sys
from fedlab.config import Config
from fedlab.engine.sampling import schedule_digest

def key(payload):
    info = payload["config"]
    cfg = Config.from_dict(info["config"])
    extra = info["partition_fingerprint"] + "|data:" + info["dataset_digest"]
    if info.get("theta0_digest"):
        extra += "|theta0:" + info["theta0_digest"]
    schedule = None
    if cfg.sampling == "schedule":
        from fedlab.engine.loop import load_run_schedule
        schedule = load_run_schedule(cfg)
    return cfg.algorithm + "-" + cfg.hash(extra, schedule_digest(schedule))

out = {}
for path in sys.argv[1:]:
    out[path] = key(json.loads(gzip.decompress(open(path, "rb").read())))
print(json.dumps(out))
"""


def keys_under(code_root: Path, paths: list[Path]) -> dict[str, str]:
    """Each record's key as the fedlab package under ``code_root`` computes it (a subprocess)."""
    proc = subprocess.run([sys.executable, "-c", _KEYS_SCRIPT, *map(str, paths)], cwd=code_root, capture_output=True,
                          text=True, env={"PYTHONPATH": str(code_root), "PATH": "/usr/bin:/bin",
                                          "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    if proc.returncode != 0:
        raise RuntimeError(f"computing keys under {code_root} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def extract(commit: str, dest: Path) -> Path:
    """``fedlab/`` of ``commit`` unpacked under ``dest`` (``git archive``)."""
    archive = dest / "src.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "archive", commit, "fedlab"], cwd=REPO_ROOT, stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest


def rekey(old_commit: str, *, dry_run: bool = False, directory: Path | None = None) -> dict[str, str]:
    """Rename every record whose key changed; return {old key: new key} (only the changed ones)."""
    directory = records_dir() if directory is None else Path(directory)
    paths = sorted(directory.glob(f"*{SUFFIX}"))
    with tempfile.TemporaryDirectory() as tmp:
        old = keys_under(extract(old_commit, Path(tmp)), paths)
    # Records keyed by older code (the tuning runs of an earlier digest) are not this commit's runs:
    # nothing shows that its code gives their numbers, so they keep their historical keys.
    paths = [p for p in paths if old[str(p)] + SUFFIX == p.name]
    new = keys_under(REPO_ROOT, paths)
    renames = {p.name.removesuffix(SUFFIX): new[str(p)] for p in paths if new[str(p)] + SUFFIX != p.name}
    if dry_run or not renames:
        return renames
    if len(set(renames.values())) != len(renames) or set(renames.values()) & {p.name.removesuffix(SUFFIX) for p in paths}:
        raise RuntimeError("two records would share a new key; refusing")
    root = integrity.evidence_root(directory, "records")
    encoded = {}
    for old_key, new_key in renames.items():  # every record checked before anything is written
        src = directory / f"{old_key}{SUFFIX}"
        payload = json.loads(gzip.decompress(integrity.verify(src, root)))  # only intact evidence is carried over
        digest = new_key.rsplit("-", 1)[1]
        payload["key"] = new_key
        payload["config"]["hash"] = digest
        payload["summary"]["config_hash"] = digest
        encoded[src] = (directory / f"{new_key}{SUFFIX}", encode_payload(payload))
    for dst, data in encoded.values():
        dst.write_bytes(data)
    moves = {src: dst for src, (dst, _) in encoded.items()}
    integrity.rename(moves, root)
    for src in moves:
        src.unlink()
    _replace_references(renames, directory.parent)
    return renames


def _replace_references(renames: dict[str, str], figures_dir: Path = FIGURES_DIR) -> list[Path]:
    """Replace old keys by new ones in every text file under ``figures_dir`` (not the records)."""
    changed = []
    for path in sorted(Path(figures_dir).rglob("*")):
        if not path.is_file() or path.suffix not in (".json", ".csv", ".md", ".yaml", ".txt"):
            continue
        text = path.read_text(encoding="utf-8")
        new_text = text
        for old_key, new_key in renames.items():
            new_text = new_text.replace(old_key, new_key)
        if new_text != text:
            path.write_text(new_text, encoding="utf-8")
            changed.append(path)
    for path in changed:  # a rewritten file that a manifest lists (a tuning file naming its runs) is re-recorded
        for root in _manifests_listing(path, Path(figures_dir)):
            integrity.rerecord(path, root)
    return changed


def _manifests_listing(path: Path, top: Path) -> list[Path]:
    """The evidence roots between ``path`` and ``top`` whose manifest lists ``path`` (``figures/``, ``figures/rerun``, …)."""
    roots = []
    for folder in [p for p in path.parents if p == top or top in p.parents]:
        if integrity.manifest_path(folder).exists() and \
                path.relative_to(folder).as_posix() in integrity.read_manifest(folder):
            roots.append(folder)
    return roots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="commit", required=True, help="the commit whose code keyed the records")
    parser.add_argument("--dry-run", action="store_true", help="only report what would be renamed")
    args = parser.parse_args(argv)
    renames = rekey(args.commit, dry_run=args.dry_run)
    verb = "would rename" if args.dry_run else "renamed"
    print(f"{verb} {len(renames)} records" + "".join(f"\n  {a} -> {b}" for a, b in list(renames.items())[:5])
          + ("\n  ..." if len(renames) > 5 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
