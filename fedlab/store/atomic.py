"""The one atomic file write of fedlab: temporary sibling, fsync, rename.

Every file fedlab writes for later reading (run directories, checkpoints, partition JSON, unpacked
dataset files, sharpness tables) goes through :func:`atomic_write_bytes`:

1. the bytes go to ``.<name>.<random>.tmp`` in the target's own folder (same filesystem, so the
   rename below is atomic), created with mode ``0o666`` minus the process umask — the same
   permissions as an ordinary ``open(path, "w")`` (``tempfile.mkstemp`` would give ``0600``);
2. the file is flushed and ``fsync``-ed, so after the rename the *contents* are on disk too
   (a rename that survives a power cut while the data does not would be a silently empty file);
3. ``os.replace`` moves it over the target: a reader sees the old file or the new one, never half;
4. the folder is ``fsync``-ed so that the rename itself is durable.

A process killed between 1 and 3 leaves an orphan ``.<name>.*.tmp``; :func:`remove_orphans`
deletes them (the results store calls it, under the run's lock, whenever it opens a run).
"""
from __future__ import annotations

import io
import os
import secrets
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}{TMP_SUFFIX}")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some filesystems (and Windows) do not open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (see the module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    # O_EXCL: never write through a file (or link) someone else put there; 0o666 & ~umask like open().
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> None:
    """``torch.save`` into memory, then :func:`atomic_write_bytes` (so it is fsync-ed like the rest)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def remove_orphans(folder: str | os.PathLike) -> list[Path]:
    """Delete the ``.*.tmp`` files an interrupted :func:`atomic_write_bytes` left in ``folder``.

    Only call this while no other process writes into ``folder`` (the results store holds the run's
    lock). Returns the removed paths.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in folder.glob(f".*{TMP_SUFFIX}"):
        if p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed
