"""The partition type and the checks every partitioner shares (every message names the field).

Public names are re-exported by :mod:`fedlab.data.partition`."""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import operator
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fedlab.store.atomic import atomic_write_text
from fedlab.data._partition_stats import PartitionStats, compute_stats

CONCENTRATIONS: tuple[str, ...] = ("per_class", "total")

# --- The result type ---


@dataclass(frozen=True, eq=False, repr=False)
class Partition:
    """Which dataset indices each client holds: read-only int64 ``client_indices``; ``labels`` of the
    whole dataset (``None`` for a file without labels: no :attr:`stats`); ``n_classes`` = labels.max() + 1.
    Equality is identity; compare :attr:`fingerprint`."""

    client_indices: tuple[np.ndarray, ...]
    scheme: str
    params: dict
    n_classes: int
    labels: np.ndarray | None

    def __post_init__(self) -> None:
        # Normalise once, so every consumer can rely on int64, read-only arrays (a partition is a
        # value: an engine that sliced and then mutated an index array would corrupt it silently).
        arrays = []
        for i, ix in enumerate(self.client_indices):
            raw = np.asarray(ix)
            if raw.size and not np.issubdtype(raw.dtype, np.integer):
                raise ValueError(f"client_indices[{i}] must hold integers (got dtype {raw.dtype})")
            arr = raw.astype(np.int64, copy=True).reshape(-1)
            arr.setflags(write=False)
            arrays.append(arr)
        object.__setattr__(self, "client_indices", tuple(arrays))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "n_classes", int(self.n_classes))
        if self.labels is not None:
            y = np.array(self.labels, dtype=np.int64, copy=True)
            y.setflags(write=False)
            object.__setattr__(self, "labels", y)
            if self.n_classes < int(y.max()) + 1:
                raise ValueError(f"n_classes={self.n_classes} is smaller than labels.max()+1 ({int(y.max()) + 1})")
            top = max((int(a.max()) for a in arrays if len(a)), default=-1)
            if top >= len(y):
                raise ValueError(f"client_indices contain index {top}, out of range for {len(y)} labels")
        if any(len(a) and int(a.min()) < 0 for a in arrays):
            raise ValueError("client_indices must be >= 0")

    @property
    def n_clients(self) -> int:
        return len(self.client_indices)

    @property
    def sizes(self) -> np.ndarray:
        """Number of samples held by each client (int64)."""
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)

    @cached_property
    def stats(self) -> PartitionStats:
        """Label statistics (counts, effective classes, TV distance, size Gini); needs labels."""
        if self.labels is None:
            raise ValueError("labels are unknown for this partition; pass labels= to from_file to get stats")
        return compute_stats(self.client_indices, self.labels, self.n_classes)

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 of the assignment: ``n_clients``, then per client its length and indices, as little-endian
        int64 (lengths make ``[1],[2]`` ≠ ``[1,2],[]``; no ``hash()``, so the same on every machine). Scheme
        and params are excluded: two recipes giving one split share a fingerprint."""
        h = hashlib.sha256()
        h.update(np.array([self.n_clients], dtype="<i8").tobytes())
        for ix in self.client_indices:
            h.update(np.array([len(ix)], dtype="<i8").tobytes())
            h.update(ix.astype("<i8", copy=False).tobytes())
        return h.hexdigest()

    def is_disjoint(self) -> bool:
        """True when no index is held twice (by two clients or twice by one client)."""
        flat = np.concatenate(self.client_indices) if self.client_indices else np.empty(0, np.int64)
        return len(np.unique(flat)) == len(flat)

    def to_json(self, path: str | os.PathLike) -> None:
        """Write ``{"scheme", "params", "n_classes", "clients": [[idx, ...], ...]}`` atomically, one client
        per line (readable, diff-friendly, plain JSON)."""
        path = Path(path)
        head = json.dumps({"scheme": self.scheme, "params": self.params, "n_classes": self.n_classes})
        clients = ",\n".join(json.dumps(ix.tolist()) for ix in self.client_indices)
        text = f'{head[:-1]}, "clients": [\n{clients}\n]}}\n'  # head without its closing brace
        atomic_write_text(path, text)

    def __repr__(self) -> str:
        n = int(self.sizes.sum())
        return (
            f"Partition(scheme={self.scheme!r}, n_clients={self.n_clients}, n_samples={n}, "
            f"n_classes={self.n_classes}, params={self.params!r}, fingerprint={self.fingerprint[:12]}…)"
        )


# --- Input validation (every message names the field and what is allowed) ---


def _check_labels(labels: Any) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of integer class ids (got shape {y.shape})")
    if y.size == 0:
        raise ValueError("labels must be non-empty")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must have an integer dtype (got {y.dtype})")
    if int(y.min()) < 0:
        raise ValueError(f"labels must be >= 0 (got {int(y.min())})")
    return y.astype(np.int64)


def _check_int(name: str, value: Any, minimum: int) -> int:
    # bool is an int subclass, but alpha=True or n_clients=True is always a mistake.
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer (got {value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer (got {value!r})") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {v})")
    return v


def _check_n_clients(n_clients: Any, n_samples: int) -> int:
    n = _check_int("n_clients", n_clients, 1)
    if n > n_samples:
        raise ValueError(f"n_clients={n} exceeds the number of samples ({n_samples})")
    return n


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool):
        raise ValueError(f"seed must be an integer (got {seed!r})")
    try:
        return operator.index(seed)
    except TypeError:
        raise ValueError(f"seed must be an integer (got {seed!r})") from None


def _check_alpha(alpha: Any, scheme: str) -> float:
    if alpha is None:
        raise ValueError(f"alpha is required for scheme {scheme!r} (a number > 0)")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise ValueError(f"alpha must be a number > 0 (got {alpha!r})")
    a = float(alpha)
    if not math.isfinite(a):
        raise ValueError(f"alpha must be finite (got {a!r})")
    if a <= 0:
        raise ValueError(f"alpha must be > 0 (got {a!r})")
    return a


def _class_pools(y: np.ndarray, n_classes: int) -> list[np.ndarray]:
    """Indices of each class 0..n_classes-1, ascending (one stable sort instead of C scans)."""
    order = np.argsort(y, kind="stable")
    bounds = np.cumsum(np.bincount(y, minlength=n_classes))[:-1]
    return np.split(order, bounds)


def _group(indices: np.ndarray, owner: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Per-client sorted index arrays from parallel (index, owning client) arrays."""
    order = np.lexsort((indices, owner))
    bounds = np.cumsum(np.bincount(owner, minlength=n_clients))[:-1]
    return np.split(indices[order], bounds)


def _partition(scheme: str, clients: list[np.ndarray], params: dict, y: np.ndarray) -> Partition:
    return Partition(
        client_indices=tuple(np.sort(c) for c in clients),
        scheme=scheme,
        params=params,
        n_classes=int(y.max()) + 1,
        labels=y,
    )
