"""The evidence manifest: a SHA-256 digest of every committed evidence file, and its lines kept.

The files, their manifest and its rules are :mod:`lab.evidence.integrity`'s docstring; this module is the
manifest itself — reading and checking a file against its line (:func:`verify`, :func:`read_listed`), adding a
line as a file is written (:func:`add`), moving lines (:func:`rename`) and listing what differs
(:func:`problems`). It sits below every kind of evidence (records, tuning files, claims data): the content
checks that guard the explicit re-record step read those kinds, so they and that step live above, in
:mod:`lab.evidence.integrity`.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["EVIDENCE_PATTERNS", "FIGURE_EVIDENCE_SUFFIXES", "MANIFEST_NAME", "RERECORD_HINT", "EvidenceError",
           "add", "evidence_files", "evidence_root", "file_digest", "manifest_path", "manifest_roots", "problems",
           "read_listed", "read_manifest", "relative", "rename", "replace_lines", "verify"]

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


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (the manifest's folder), as the manifest writes it; outside it is refused."""
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
    rel = relative(path, root)
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
        if relative(path, root) in read_manifest(root):
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
            rel, digest = relative(Path(path), root), file_digest(Path(path).read_bytes())
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


def replace_lines(paths: Iterable[Path], root: str | os.PathLike) -> None:
    """Set the lines of ``paths`` to their current digests, without a content check: only through
    :func:`lab.evidence.integrity.rerecord`, the explicit step that checks the content first."""
    _update(Path(root), paths, replace=True)


def rename(moves: dict[Path, Path], root: str | os.PathLike) -> None:
    """The explicit step of a re-key (the repository's ``python -m lab.evidence.rekey``): each ``old → new`` file move
    drops the old path's line and records the new file's digest. An old path without a line is
    refused, so a re-key cannot launder a file that was never evidence."""
    root = Path(root)
    with _locked(root):
        entries = read_manifest(root)
        for old, new in moves.items():
            rel = relative(Path(old), root)
            if rel not in entries:
                raise EvidenceError(f"{old} is not in {manifest_path(root)}; only recorded evidence is renamed")
            del entries[rel]
            entries[relative(Path(new), root)] = file_digest(Path(new).read_bytes())
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
