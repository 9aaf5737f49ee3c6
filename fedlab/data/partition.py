"""Split a labelled dataset among federated clients.

Every partitioner is a pure function of ``(labels, n_clients, parameters, seed)`` drawing from one
generator ``numpy_generator(seed, "partition", scheme)``, so a call gives the same
:attr:`Partition.fingerprint` in every process. Client indices are listed in ascending order (the
engine shuffles each client's data itself). The schemes:

==================  =====================================================================  =========
scheme              what α / the parameter means                                           disjoint
==================  =====================================================================  =========
iid                 near-equal slices of a permutation (McMahan et al. 2017)               yes
dirichlet           per class: shares over clients ~ Dir(α·1_N) (NIID-Bench, Li et al.)   yes
dirichlet_client    per client: class prior ~ Dir(a·1_C), equal sizes (FedDyn code /      optional
                    FL-Simulator); a = α, or α/C as in Hsu et al. 2019
pathological        exactly ``classes_per_client`` classes per client                      yes
shards              ``shards_per_client`` label-sorted shards each (McMahan et al. 2017)   yes
file                JSON (:meth:`Partition.to_json` or another code base)                 as stored
natural             the dataset's own clients (``Dataset.natural_clients``)               as given
==================  =====================================================================  =========

The same α is *not* comparable across conventions: FedGloSS's "α = 0.5" (total concentration, 10
classes) is roughly FL-Simulator's "Dir-0.05". The type is :mod:`~fedlab.data._partition_core`, the
schemes :mod:`~fedlab.data.partitioners`, the file format :mod:`~fedlab.data.partition_file`."""
from __future__ import annotations

import os
from typing import Any

from fedlab.data._partition_stats import PartitionStats
from fedlab.data._partition_core import Partition, _check_alpha, _check_int
from fedlab.data.partition_file import from_file
from fedlab.data.partitioners import dirichlet, dirichlet_client, iid, natural, pathological, shards

__all__ = [
    "PARTITIONERS",
    "PARTITION_OPTIONS",
    "Partition",
    "PartitionStats",
    "dirichlet",
    "dirichlet_client",
    "from_file",
    "iid",
    "make_partition",
    "natural",
    "pathological",
    "shards",
]

PARTITIONERS: tuple[str, ...] = ("iid", "dirichlet", "dirichlet_client", "pathological", "shards", "file", "natural")
"""Every scheme :func:`make_partition` builds; ``Config.partition`` allows exactly these."""
PARTITION_OPTIONS: tuple[str, ...] = ("min_size", "balance_cap", "concentration", "reuse_on_exhaustion", "path",
                                      "allow_empty", "allow_duplicates")
"""The options ``Config.partition_params`` may set: the keyword arguments of :func:`make_partition` that a
config does not already carry in its own fields."""


# --- Dispatcher ---


def make_partition(scheme: str, labels: Any, n_clients: int, *, seed: int, alpha: float | None = None,
                   classes_per_client: int | None = None, shards_per_client: int = 2, min_size: int = 0,
                   balance_cap: bool = False, concentration: str = "per_class", reuse_on_exhaustion: bool = True,
                   path: str | os.PathLike | None = None, allow_empty: bool = False,
                   allow_duplicates: bool | None = None, natural_clients: Any = None) -> Partition:
    """Build a partition by scheme name (one of :data:`PARTITIONERS`); arguments the scheme does not use
    are ignored. ``"file"`` needs ``path`` (``labels`` may be ``None``; exactly ``n_clients`` clients;
    ``allow_empty`` / ``allow_duplicates`` as :func:`from_file`); ``"natural"`` takes ``natural_clients``."""
    if scheme not in PARTITIONERS:
        raise ValueError(f"unknown partition scheme {scheme!r}; allowed: {', '.join(PARTITIONERS)}")
    if scheme == "iid":
        return iid(labels, n_clients, seed=seed)
    if scheme == "dirichlet":
        return dirichlet(labels, n_clients, _check_alpha(alpha, scheme), seed=seed, min_size=min_size,
                         balance_cap=balance_cap)
    if scheme == "dirichlet_client":
        return dirichlet_client(labels, n_clients, _check_alpha(alpha, scheme), seed=seed,
                                concentration=concentration, reuse_on_exhaustion=reuse_on_exhaustion)
    if scheme == "pathological":
        if classes_per_client is None:
            raise ValueError("classes_per_client is required for scheme 'pathological' (an integer >= 1)")
        return pathological(labels, n_clients, classes_per_client, seed=seed)
    if scheme == "shards":
        return shards(labels, n_clients, shards_per_client, seed=seed)
    if scheme == "natural":
        return natural(labels, natural_clients, n_clients)
    # scheme == "file"
    if path is None:
        raise ValueError("path is required for scheme 'file'")
    n = _check_int("n_clients", n_clients, 1)
    part = from_file(path, labels, allow_empty=allow_empty, allow_duplicates=allow_duplicates)
    if part.n_clients != n:
        raise ValueError(f"n_clients={n} does not match the {part.n_clients} clients in {path}")
    return part
