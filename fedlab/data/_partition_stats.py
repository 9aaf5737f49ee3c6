"""Label-distribution statistics of a client partition, exact from the client × class count matrix.

* effective classes — Hill number of order 1, ``exp(H)`` of the client's label entropy: 1 for one
  class, C for balanced; 0 for an empty client;
* TV distance — ``½ Σ_c |p_i(c) − g(c)|`` to the label distribution ``g`` of the union of client
  samples (the dataset's for a disjoint partition using every index); NaN for an empty client;
* size Gini — ``Σ_i Σ_j |n_i − n_j| / (2 N Σ_i n_i)``: 0 for equal sizes, → 1 when one client holds all."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True, eq=False)
class PartitionStats:
    """Per-client label statistics of a partition; see the module docstring for definitions."""

    counts: pd.DataFrame
    """clients × classes integer counts (index ``"client"``, columns class ids ``0..C-1``)."""
    sizes: np.ndarray
    effective_classes: np.ndarray
    classes_present: np.ndarray
    tv_distance: np.ndarray
    size_gini: float
    n_unique: int
    """Number of distinct dataset indices held by at least one client."""

    @property
    def empty_clients(self) -> np.ndarray:
        """Ids of the clients that hold no sample (the engine never samples them)."""
        return np.flatnonzero(self.sizes == 0).astype(np.int64)

    @property
    def n_empty(self) -> int:
        """How many clients hold no sample."""
        return int(self.empty_clients.size)

    @property
    def n_duplicated(self) -> int:
        """Samples held more than once (``n_samples − n_unique``): 0 for a disjoint partition; overlap is
        allowed (FL-Simulator reuses images) and counted here."""
        return int(self.sizes.sum()) - int(self.n_unique)

    def summary(self) -> dict[str, float]:
        """Scalar overview; means of the TV distance skip empty clients (their TV is NaN)."""
        tv = self.tv_distance[np.isfinite(self.tv_distance)]
        return {
            "n_clients": int(len(self.sizes)),
            "n_empty": self.n_empty,
            "n_samples": int(self.sizes.sum()),
            "n_unique": int(self.n_unique),
            "n_duplicated": self.n_duplicated,
            "min_size": int(self.sizes.min()),
            "max_size": int(self.sizes.max()),
            "size_gini": float(self.size_gini),
            "mean_effective_classes": float(self.effective_classes.mean()),
            "min_effective_classes": float(self.effective_classes.min()),
            "max_effective_classes": float(self.effective_classes.max()),
            "mean_classes_present": float(self.classes_present.mean()),
            "mean_tv_distance": float(tv.mean()) if len(tv) else float("nan"),
        }

    def table(self) -> pd.DataFrame:
        """One row per client: size, classes_present, effective_classes, tv_distance."""
        return pd.DataFrame(
            {
                "size": self.sizes,
                "classes_present": self.classes_present,
                "effective_classes": self.effective_classes,
                "tv_distance": self.tv_distance,
            },
            index=pd.RangeIndex(len(self.sizes), name="client"),
        )


def gini(sizes: np.ndarray) -> float:
    """Gini coefficient of non-negative integer sizes (0 when all are equal or all are zero)."""
    x = np.sort(np.asarray(sizes, dtype=np.int64))
    n, total = len(x), int(x.sum())
    if n == 0 or total == 0:
        return 0.0
    # Sorted-rank form G = (2 Σ_k k·x_(k) − (n+1) Σ x) / (n Σ x), k = 1..n. The numerator is kept
    # in exact integer arithmetic so that equal sizes give exactly 0, not a rounding residue.
    ranks = np.arange(1, n + 1, dtype=np.int64)
    numerator = 2 * int((ranks * x).sum()) - (n + 1) * total
    return numerator / (n * total)


def compute_stats(
    client_indices: Sequence[np.ndarray], labels: np.ndarray, n_classes: int
) -> PartitionStats:
    """Build :class:`PartitionStats` for index arrays into ``labels`` (classes ``0..n_classes-1``)."""
    n_clients = len(client_indices)
    sizes = np.array([len(ix) for ix in client_indices], dtype=np.int64)
    flat = np.concatenate(client_indices) if n_clients else np.empty(0, np.int64)
    owner = np.repeat(np.arange(n_clients, dtype=np.int64), sizes)
    # One bincount over (client, class) pairs instead of a Python loop over clients.
    counts = np.bincount(owner * n_classes + labels[flat], minlength=n_clients * n_classes)
    counts = counts.reshape(n_clients, n_classes)

    with np.errstate(divide="ignore", invalid="ignore"):
        p = counts / sizes[:, None]
        plogp = np.where(counts > 0, p * np.log(np.where(counts > 0, p, 1.0)), 0.0)
    entropy = -plogp.sum(axis=1)
    effective = np.where(sizes > 0, np.exp(entropy), 0.0)

    union = np.unique(flat)
    global_counts = np.bincount(labels[union], minlength=n_classes)
    g = global_counts / max(len(union), 1)
    tv = np.where(sizes > 0, 0.5 * np.abs(np.nan_to_num(p) - g).sum(axis=1), np.nan)

    frame = pd.DataFrame(
        counts,
        index=pd.RangeIndex(n_clients, name="client"),
        columns=pd.RangeIndex(n_classes, name="class"),
    )
    return PartitionStats(
        counts=frame,
        sizes=sizes,
        effective_classes=effective,
        classes_present=(counts > 0).sum(axis=1).astype(np.int64),
        tv_distance=tv,
        size_gini=gini(sizes),
        n_unique=int(len(union)),
    )
