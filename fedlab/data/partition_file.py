"""Partitions read from a file (``partition="file"``): JSON or NPZ client index lists, checked and fingerprinted.

Re-exported by :mod:`fedlab.data.partition`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
import numpy as np

from fedlab.data._partition_core import Partition, _check_int, _check_labels

# --- Files ---


def from_file(path: str | os.PathLike, labels: Any = None, *, n_classes: int | None = None, allow_empty: bool = False,
              allow_duplicates: bool | None = None) -> Partition:
    """Load a partition from JSON (scheme ``"file"``).

    Layouts: :meth:`Partition.to_json`'s object, a bare list of per-client index lists, or NIID-Bench's
    ``net_dataidx_map`` (``"0".."N-1"`` → list, ordered by id). Indices: JSON integers ≥ 0, below
    ``len(labels)``; clients non-empty unless ``allow_empty``; order kept, so a reloaded ``to_json`` file
    has the original fingerprint. An index repeated within a client is refused unless
    ``allow_duplicates``, or by default when ``to_json`` wrote it for a scheme that repeats by design
    (``dirichlet_client`` with reuse). ``n_classes``: the argument, else ``labels.max() + 1`` (the file's
    must agree), else the file's, else 0. The source scheme and params go to ``params["source_*"]``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a UTF-8 text file ({exc})") from None
    except OSError as exc:  # missing, a folder, unreadable: name the file, not a raw OS error
        raise ValueError(f"partition file {path}: cannot be read ({exc.strerror or exc}); "
                         "give partition_params['path'] an existing JSON file") from None

    source_scheme, source_params, file_classes = None, None, None
    if isinstance(data, dict) and "clients" in data:
        raw = data["clients"]
        source_scheme, source_params, file_classes = data.get("scheme"), data.get("params"), data.get("n_classes")
    elif isinstance(data, dict) and data and all(isinstance(k, str) and k.isdigit() for k in data):
        if set(data) != {str(i) for i in range(len(data))}:
            raise ValueError(f"{path}: client ids must be exactly '0'..'{len(data) - 1}'")
        raw = [data[str(i)] for i in range(len(data))]
    elif isinstance(data, list):
        raw = data
    else:
        raise ValueError(
            f"{path}: expected a JSON object with a 'clients' list, or a list of per-client index lists"
        )
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: clients must be a non-empty list of per-client index lists")

    y = _check_labels(labels) if labels is not None else None
    if allow_duplicates is None:
        allow_duplicates = isinstance(source_params, dict) and source_params.get("reuse_on_exhaustion") is True
    arrays = []
    for i, ix in enumerate(raw):
        if not isinstance(ix, list):
            raise ValueError(f"{path}: client {i} must be a list of indices (got {type(ix).__name__})")
        for j, v in enumerate(ix):
            if type(v) is not int:  # rejects floats and JSON true/false
                raise ValueError(f"{path}: client {i}: index at position {j} must be an integer (got {v!r})")
        if not ix and not allow_empty:
            raise ValueError(f"{path}: client {i} has no indices (clients must be non-empty)")
        arr = np.array(ix, dtype=np.int64) if ix else np.empty(0, np.int64)
        if len(arr) and int(arr.min()) < 0:
            raise ValueError(f"{path}: client {i}: index {int(arr.min())} must be >= 0")
        if y is not None and len(arr) and int(arr.max()) >= len(y):
            raise ValueError(f"{path}: client {i}: index {int(arr.max())} out of range for {len(y)} labels")
        if not allow_duplicates and len(arr):
            values, counts = np.unique(arr, return_counts=True)
            if counts.max() > 1:
                raise ValueError(f"{path}: client {i} lists index {int(values[counts.argmax()])} "
                                 f"{int(counts.max())} times; each client must hold an index once (or pass "
                                 "partition_params allow_duplicates=True to train on repeated samples)")
        arrays.append(arr)

    if file_classes is not None and (isinstance(file_classes, bool) or not isinstance(file_classes, int)):
        raise ValueError(f"{path}: n_classes must be an integer (got {file_classes!r})")
    if n_classes is not None:
        nc = _check_int("n_classes", n_classes, 1)
        if y is not None and nc < int(y.max()) + 1:
            raise ValueError(f"n_classes={nc} is smaller than labels.max()+1 ({int(y.max()) + 1})")
    elif y is not None:
        nc = int(y.max()) + 1
        if file_classes is not None and file_classes != nc:
            raise ValueError(f"{path}: n_classes={file_classes} in the file does not match the labels ({nc})")
    else:
        nc = file_classes if file_classes is not None else 0

    params = {"path": str(path), "source_scheme": source_scheme, "source_params": source_params}
    return Partition(client_indices=tuple(arrays), scheme="file", params=params, n_classes=nc, labels=y)
