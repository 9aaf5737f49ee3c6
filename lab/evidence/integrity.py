"""The evidence manifest: a SHA-256 digest of every committed evidence file, checked on every load.

Evidence is what the claims and the notebooks read instead of training: the run records
(``records/*.json.gz``), the tuning results (``tuning/**/*.csv`` and ``*.json``), the claims data
(``claims_<profile>.csv`` and ``.md``, ``findings_<profile>.csv``) and every figure's sidecar and data
(``<name>.json`` and ``<name>.csv`` beside a ``<name>.png``): a sidecar decides which records a claim
reads and a figure's CSV is what a table claim is computed from, so they are evidence too
(:func:`lab.tools.figures.save_figure` records their lines as it writes them). Their digests live in one committed text file beside them,
``figures/MANIFEST.sha256``, one line per file, sorted by path::

    <sha-256 of the file's bytes>  records/fedavg-0123456789ab.json.gz

(the format of ``sha256sum``, so ``cd figures && sha256sum -c MANIFEST.sha256`` checks it too). Why one
manifest and not a digest inside each file: the existing files keep their bytes (their numbers do not
move), and adding, removing or editing evidence shows in one reviewable diff.

The rules, enforced by :func:`verify` (every load) and :func:`add` (every write), the manifest's own
functions (:mod:`lab.evidence.manifest`, re-exported here):

* a file that is not in the manifest, or whose bytes do not match its line, is refused with an
  :class:`EvidenceError` naming the file; so is a file the manifest lists that is gone
  (:func:`read_listed`): deleted evidence is never read as "not made yet";
* a writer adds its file's line when it writes the file; adding the line a file already has is a
  no-op, but a line for the same path with another digest is refused — evidence that changed is not
  silently re-recorded. :func:`rerecord` (``python -m lab.evidence.integrity --rerecord PATH...``)
  is the one explicit step that replaces lines, and it first runs the checks a load runs on the file's
  content (:func:`check_content`: a record must still be the run its key names), so re-recording cannot
  launder an edited config; :func:`problems` lists every difference between the manifest and the
  files on disk, and the command without arguments does so for every manifest under ``figures/``.

The *root* of an evidence file (the folder the manifest is in, paths relative to it) is the folder
above ``records/`` or ``tuning/`` when the folder has that name (``figures/``), else the folder itself
(:func:`evidence_root`), so a records folder used by tests (``$FEDLAB_RECORDS``) gets its own manifest.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path

# the manifest's API, re-exported: callers name the evidence's integrity, and its manifest is part of it
from lab.evidence.manifest import (MANIFEST_NAME, EvidenceError, add, evidence_files, evidence_root, file_digest,
                                   manifest_path, manifest_roots, problems, read_listed, read_manifest, relative,
                                   rename, replace_lines, verify)
from lab.evidence.records import check_record_file, load_record
from lab.evidence.tuning_files import load_tuning

__all__ = ["MANIFEST_NAME", "EvidenceError", "add", "check_content", "evidence_files", "evidence_root", "file_digest",
           "manifest_path", "manifest_roots", "problems", "read_listed", "read_manifest", "rename", "rerecord",
           "verify"]


def rerecord(paths: Path | Iterable[Path], root: str | os.PathLike) -> None:
    """The explicit re-record step: set the lines of ``paths`` to their current digests, after
    :func:`check_content` passed for every one of them (nothing is written if one fails)."""
    paths = [paths] if isinstance(paths, Path) else [Path(p) for p in paths]
    check_content(paths, Path(root))
    replace_lines(paths, Path(root))


def check_content(paths: Iterable[Path], root: str | os.PathLike) -> None:
    """The checks a load runs on each file's content, without its manifest line (which is about to change).

    A record must be the run its key names (:func:`lab.evidence.records.check_record_file`: its config block
    hashes to its key, its summary agrees with its metrics); a tuning choice must be its table's best point
    (:func:`lab.evidence.tuning_files.load_tuning`); a sidecar must be a JSON object whose ``records`` are
    there; a CSV must parse. Raises :class:`EvidenceError` naming the first file that fails."""
    import json

    root = Path(root)
    for path in (Path(p) for p in paths):
        rel = relative(path, root)
        if not path.is_file():
            raise EvidenceError(f"evidence file {path} does not exist; nothing to record")
        if rel.startswith("records/") and rel.endswith(".json.gz"):
            check_record_file(path)
        elif rel.startswith("tuning/") or "/tuning/" in rel:
            load_tuning(path.with_suffix(".json"), check_manifest=False)
        elif path.suffix == ".csv":
            import pandas as pd

            try:
                pd.read_csv(path)
            except (ValueError, UnicodeDecodeError) as err:
                raise EvidenceError(f"evidence file {path} is not a readable CSV ({type(err).__name__}: {err}); "
                                    "restore it from git or write it again with the code that makes it") from None
        elif path.suffix == ".json":
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise EvidenceError(f"evidence file {path} is not JSON ({type(err).__name__}: {err}); "
                                    "restore it from git or write it again with the code that makes it") from None
            if not isinstance(meta, dict):
                raise EvidenceError(f"evidence file {path} is not a JSON object; restore it from git")
            for key in meta.get("records") or []:  # a sidecar: the records it names must be there (and sound)
                folder = path.parent / str(meta.get("records_dir", "records"))
                if load_record(str(key), folder) is None:
                    raise EvidenceError(f"sidecar {path} names record {key!r}, which is not in "
                                        f"{folder}; restore it, or remake the figure")


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.evidence.integrity [--add PATH... | --rerecord PATH...] [--root DIR]``; without an action it
    lists every difference between the evidence on disk and its manifest, for every manifest at or under
    ``--root`` (``figures/``, ``figures/rerun/``, ``figures/regime/``; exit 1 if there is one)."""
    parser = argparse.ArgumentParser(prog="python -m lab.evidence.integrity", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("figures"),
                        help="the folder of the manifest (default: figures/ of the current directory); "
                             "the check without an action covers every manifest under it")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--add", nargs="+", type=Path, metavar="PATH", help="add new evidence files")
    group.add_argument("--rerecord", nargs="+", type=Path, metavar="PATH",
                       help="accept the current bytes of changed evidence files (an explicit, reviewed step)")
    args = parser.parse_args(argv)
    try:
        if args.add:
            check_content(args.add, args.root)  # what --rerecord checks, for a file recorded by hand
            add(args.add, args.root)
            return 0
        if args.rerecord:
            rerecord(args.rerecord, args.root)
            return 0
        roots = manifest_roots(args.root)
        if not roots:
            print(f"error: no {MANIFEST_NAME} at or under {args.root}; run from the repository root or pass --root",
                  file=sys.stderr)
            return 4
        found = {root: problems(root) for root in roots}
    except (EvidenceError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 4
    bad = 0
    for root, kinds in found.items():
        for kind, paths in kinds.items():
            for p in paths:
                # relative to --root, so a line of figures/rerun/ reads rerun/tuning/...
                print(f"{kind}: {(root / p).relative_to(args.root).as_posix()}")
                bad += 1
    checked = ", ".join(str(manifest_path(r)) for r in roots)
    print(f"{bad} problem(s) in {len(roots)} manifest(s): {checked}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
