"""The evidence manifest: a SHA-256 digest of every committed evidence file, checked on every load.

Evidence is what the claims and the notebooks read instead of training: the run records
(``records/*.json.gz``), the tuning results (``tuning/**/*.csv`` and ``*.json``) and the claims data
(``claims_<profile>.csv`` and ``.md``). Their digests live in one committed text file beside them,
``figures/MANIFEST.sha256``, one line per file, sorted by path::

    <sha-256 of the file's bytes>  records/fedavg-0123456789ab.json.gz

(the format of ``sha256sum``, so ``cd figures && sha256sum -c MANIFEST.sha256`` checks it too). Why one
manifest and not a digest inside each file: the existing files keep their bytes (their numbers do not
move), and adding, removing or editing evidence shows in one reviewable diff.

The rules, enforced by :func:`verify` (every load) and :func:`add` (every write):

* a file that is not in the manifest, or whose bytes do not match its line, is refused with an
  :class:`EvidenceError` naming the file;
* a writer adds its file's line when it writes the file; adding the line a file already has is a
  no-op, but a line for the same path with another digest is refused — evidence that changed is not
  silently re-recorded. :func:`rerecord` (``python -m lab.evidence.integrity --rerecord PATH...``)
  is the one explicit step that replaces lines; :func:`problems` lists every difference between the
  manifest and the files on disk.

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

__all__ = ["MANIFEST_NAME", "EvidenceError", "add", "evidence_files", "evidence_root", "file_digest",
           "manifest_path", "problems", "read_manifest", "rename", "rerecord", "verify"]

MANIFEST_NAME = "MANIFEST.sha256"
# what counts as evidence under a root (figures/): records, tuning tables and choices, claims data
EVIDENCE_PATTERNS: tuple[str, ...] = ("records/*.json.gz", "tuning/**/*.json", "tuning/**/*.csv",
                                      "claims_*.csv", "claims_*.md", "*/calibration.json")
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
    """The explicit re-record step: set the lines of ``paths`` to their current digests."""
    _update(Path(root), [paths] if isinstance(paths, Path) else list(paths), replace=True)


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
    """The evidence files under ``root``, as sorted relative paths (orphan ``.*.tmp`` files excluded)."""
    root = Path(root)
    found = {p.relative_to(root).as_posix() for pattern in EVIDENCE_PATTERNS for p in root.glob(pattern)
             if p.is_file() and not p.name.startswith(".")}
    return sorted(found)


def problems(root: str | os.PathLike) -> dict[str, list[str]]:
    """How the manifest and the evidence on disk differ: ``{"changed", "unlisted", "missing"}`` → paths."""
    root = Path(root)
    entries = read_manifest(root)
    on_disk = evidence_files(root)
    return {"changed": [p for p in on_disk if p in entries and entries[p] != file_digest((root / p).read_bytes())],
            "unlisted": [p for p in on_disk if p not in entries],
            "missing": sorted(set(entries) - set(on_disk))}


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.evidence.integrity [--add PATH... | --rerecord PATH...] [--root DIR]``; without an action it
    lists every difference between the manifest and the evidence on disk (exit 1 if there is one)."""
    parser = argparse.ArgumentParser(prog="python -m lab.evidence.integrity", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("figures"),
                        help="the folder of the manifest (default: figures/ of the current directory)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--add", nargs="+", type=Path, metavar="PATH", help="add new evidence files")
    group.add_argument("--rerecord", nargs="+", type=Path, metavar="PATH",
                       help="accept the current bytes of changed evidence files (an explicit, reviewed step)")
    args = parser.parse_args(argv)
    try:
        if args.add or args.rerecord:
            (add if args.add else rerecord)(args.add or args.rerecord, args.root)
            return 0
        found = problems(args.root)
    except (EvidenceError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 4
    for kind, paths in found.items():
        for p in paths:
            print(f"{kind}: {p}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
