"""The one atomic file write of fedlab: temporary sibling, fsync, rename.

Every file written for later reading goes through :func:`atomic_write_bytes`: the bytes go to
``.<name>.<random>.tmp`` beside the target (mode ``0o666`` minus the umask, as ``open`` would give),
are fsync-ed (so the renamed file is not empty after a power cut), ``os.replace`` puts them in place
(a reader sees the old file or the new one), and the folder is fsync-ed (the rename is durable). A
process killed before the rename leaves an orphan that :func:`remove_orphans` deletes."""
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
    """Delete the ``.*.tmp`` files an interrupted write left in ``folder``, while no other process writes
    there (the results store holds the run's lock); returns the removed paths."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in folder.glob(f".*{TMP_SUFFIX}"):
        if p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed
