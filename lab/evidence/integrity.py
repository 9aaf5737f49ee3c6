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

The rules, enforced by :func:`verify` (every load) and :func:`add` (every write):

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
import contextlib
import hashlib
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["MANIFEST_NAME", "EvidenceError", "add", "check_content", "evidence_files", "evidence_root", "file_digest",
           "manifest_path", "manifest_roots", "problems", "read_listed", "read_manifest", "rename", "rerecord",
           "verify"]

MANIFEST_NAME = "MANIFEST.sha256"
# what counts as evidence under a root (figures/): records, tuning tables and choices, claims data
EVIDENCE_PATTERNS: tuple[str, ...] = ("records/*.json.gz", "tuning/**/*.json", "tuning/**/*.csv",
                                      "claims_*.csv", "claims_*.md", "findings_*.csv", "*/calibration.json")
# a figure (``<name>.png`` at the root, written by save_figure) brings these siblings: its sidecar and its data
FIGURE_EVIDENCE_SUFFIXES: tuple[str, ...] = (".json", ".csv")
_LINE = re.compile(r"^([0-9a-f]{64})  (\S(?:.*\S)?)$")
RERECORD_HINT = ("if the change is intended, re-record it explicitly with "
                 "`python -m lab.evidence.integrity --rerecord <file>` and commit the manifest; "
                 "otherwise restore the file from git")


class EvidenceError(RuntimeError):
    """A committed evidence file (record, tuning file, claims data) cannot be trusted; the message names it."""


def evidence_root(folder: str | os.PathLike, kind: str | None = None) -> Path:
    """The folder whose manifest covers evidence kept in ``folder`` (``kind``: ``records`` or ``tuning``)."""
    folder = Path(folder)
    return folder.parent if kind is not None and folder.name == kind else folder


def manifest_path(root: str | os.PathLike) -> Path:
    return Path(root) / MANIFEST_NAME


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise EvidenceError(f"evidence file {path} is outside the folder of its manifest {manifest_path(root)}") \
            from None


def read_manifest(root: str | os.PathLike) -> dict[str, str]:
    """``{relative path: sha-256}`` of ``root``'s manifest ({} without one); a malformed line is refused."""
    path = manifest_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as err:
        raise EvidenceError(f"evidence manifest {path} cannot be read ({type(err).__name__}: {err})") from None
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.match(line)
        if match is None:
            raise EvidenceError(f"evidence manifest {path} line {number} is not '<sha-256>  <path>': {line[:80]!r}; "
                                "restore it from git")
        digest, rel = match.groups()
        if rel in entries:
            raise EvidenceError(f"evidence manifest {path} lists {rel} twice (line {number}); restore it from git")
        entries[rel] = digest
    return entries


def verify(path: str | os.PathLike, root: str | os.PathLike, data: bytes | None = None) -> bytes:
    """Check ``path``'s bytes (``data`` if already read) against its manifest line; return the bytes.

    Refused, naming the file: no line for it (or no manifest), or a line with another digest."""
    path, root = Path(path), Path(root)
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as err:
            raise EvidenceError(f"evidence file {path} cannot be read ({type(err).__name__}: {err})") from None
    entries = read_manifest(root)
    rel = _relative(path, root)
    if rel not in entries:
        raise EvidenceError(f"evidence file {path} is not in the evidence manifest {manifest_path(root)}; "
                            "only evidence written by fedlab (which adds its line) is trusted")
    if entries[rel] != file_digest(data):
        raise EvidenceError(f"evidence file {path} was changed after it was recorded: its SHA-256 "
                            f"{file_digest(data)[:16]}… differs from {entries[rel][:16]}… in "
                            f"{manifest_path(root)}; {RERECORD_HINT}")
    return data


def read_listed(path: str | os.PathLike, root: str | os.PathLike) -> bytes | None:
    """``path``'s bytes, checked against ``root``'s manifest; None when the file does not exist and the
    manifest does not list it (evidence not made yet).

    Refused, naming the file: a file the manifest lists that is gone (deleted evidence is an error, never
    a silent fallback to "not run" or to defaults), and everything :func:`verify` refuses."""
    path, root = Path(path), Path(root)
    if not path.exists():
        if _relative(path, root) in read_manifest(root):
            raise EvidenceError(f"evidence file {path} is listed in {manifest_path(root)} but is missing; "
                                "restore it from git (`git checkout -- <file>`), or, if it was removed on purpose, "
                                "remove its line with the change that removed it")
        return None
    return verify(path, root)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """An exclusive lock on the manifest, so concurrent writers (processes or threads) never lose a line."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f".{MANIFEST_NAME}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write(root: Path, entries: dict[str, str]) -> None:
    from fedlab.store.atomic import atomic_write_text

    atomic_write_text(manifest_path(root), "".join(f"{entries[k]}  {k}\n" for k in sorted(entries)))


def _update(root: Path, paths: Iterable[Path], replace: bool) -> None:
    root = Path(root)
    with _locked(root):
        entries = read_manifest(root)
        changed = False
        for path in paths:
            rel, digest = _relative(Path(path), root), file_digest(Path(path).read_bytes())
            if entries.get(rel) == digest:
                continue
            if rel in entries and not replace:
                raise EvidenceError(f"evidence file {path} differs from the version recorded in "
                                    f"{manifest_path(root)}; refusing to re-record it silently; {RERECORD_HINT}")
            entries[rel], changed = digest, True
        if changed:
            _write(root, entries)


def add(paths: Path | Iterable[Path], root: str | os.PathLike) -> None:
    """Add the line of each new evidence file in ``paths`` to ``root``'s manifest (create-if-absent).

    A file already listed with the same digest is left as is; one listed with another digest is
    refused (:class:`EvidenceError`): use :func:`rerecord` for an intended change."""
    _update(Path(root), [paths] if isinstance(paths, Path) else list(paths), replace=False)


def rerecord(paths: Path | Iterable[Path], root: str | os.PathLike) -> None:
    """The explicit re-record step: set the lines of ``paths`` to their current digests, after
    :func:`check_content` passed for every one of them (nothing is written if one fails)."""
    paths = [paths] if isinstance(paths, Path) else [Path(p) for p in paths]
    check_content(paths, Path(root))
    _update(Path(root), paths, replace=True)


def check_content(paths: Iterable[Path], root: str | os.PathLike) -> None:
    """The checks a load runs on each file's content, without its manifest line (which is about to change).

    A record must be the run its key names (:func:`lab.evidence.records.check_record_file`: its config block
    hashes to its key, its summary agrees with its metrics); a tuning choice must be its table's best point
    (:func:`lab.evidence.tuning_files.load_tuning`); a sidecar must be a JSON object whose ``records`` are
    there; a CSV must parse. Raises :class:`EvidenceError` naming the first file that fails."""
    import json

    root = Path(root)
    for path in (Path(p) for p in paths):
        rel = _relative(path, root)
        if not path.is_file():
            raise EvidenceError(f"evidence file {path} does not exist; nothing to record")
        if rel.startswith("records/") and rel.endswith(".json.gz"):
            from lab.evidence.records import check_record_file

            check_record_file(path)
        elif rel.startswith("tuning/") or "/tuning/" in rel:
            from lab.evidence.tuning_files import load_tuning

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
                from lab.evidence.records import load_record

                folder = path.parent / str(meta.get("records_dir", "records"))
                if load_record(str(key), folder) is None:
                    raise EvidenceError(f"sidecar {path} names record {key!r}, which is not in "
                                        f"{folder}; restore it, or remake the figure")


def rename(moves: dict[Path, Path], root: str | os.PathLike) -> None:
    """The explicit step of a re-key (the repository's ``python -m lab.evidence.rekey``): each ``old → new`` file move
    drops the old path's line and records the new file's digest. An old path without a line is
    refused, so a re-key cannot launder a file that was never evidence."""
    root = Path(root)
    with _locked(root):
        entries = read_manifest(root)
        for old, new in moves.items():
            rel = _relative(Path(old), root)
            if rel not in entries:
                raise EvidenceError(f"{old} is not in {manifest_path(root)}; only recorded evidence is renamed")
            del entries[rel]
            entries[_relative(Path(new), root)] = file_digest(Path(new).read_bytes())
        _write(root, entries)


def evidence_files(root: str | os.PathLike) -> list[str]:
    """The evidence files under ``root``, as sorted relative paths (orphan ``.*.tmp`` files excluded): the
    :data:`EVIDENCE_PATTERNS` and, for every figure ``<name>.png`` at the root, its ``<name>.json`` and
    ``<name>.csv`` (:data:`FIGURE_EVIDENCE_SUFFIXES`)."""
    root = Path(root)
    found = {p.relative_to(root).as_posix() for pattern in EVIDENCE_PATTERNS for p in root.glob(pattern)
             if p.is_file() and not p.name.startswith(".")}
    found |= {p.with_suffix(s).name for p in root.glob("*.png") for s in FIGURE_EVIDENCE_SUFFIXES
              if p.with_suffix(s).is_file()}
    return sorted(found)


def manifest_roots(folder: str | os.PathLike) -> list[Path]:
    """Every folder at or under ``folder`` that has a manifest (``figures/``, ``figures/rerun/``, ...), sorted;
    the ``ci`` profile's scratch folder is not evidence (git ignores it) and is left out."""
    from lab.repro import in_scratch

    return sorted(p.parent for p in Path(folder).rglob(MANIFEST_NAME) if p.is_file() and not in_scratch(p.parent))


def problems(root: str | os.PathLike) -> dict[str, list[str]]:
    """How the manifest and the evidence on disk differ: ``{"changed", "unlisted", "missing"}`` → paths."""
    root = Path(root)
    entries = read_manifest(root)
    # a listed file is checked whether or not it still matches a pattern (a sidecar whose PNG went away)
    on_disk = sorted(set(evidence_files(root)) | {p for p in entries if (root / p).is_file()})
    return {"changed": [p for p in on_disk if p in entries and entries[p] != file_digest((root / p).read_bytes())],
            "unlisted": [p for p in on_disk if p not in entries],
            "missing": sorted(set(entries) - set(on_disk))}


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
    # under `python -m`, this file runs as __main__: the records' and tuning files' errors subclass the
    # EvidenceError of the imported module, a different class from this one's
    from lab.evidence import integrity as imported

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
    except (EvidenceError, imported.EvidenceError, OSError) as err:
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
