"""Split a labelled dataset among federated clients.

Every partitioner is a pure function of ``(labels, n_clients, parameters, seed)``: it draws from
one generator ``numpy_generator(seed, "partition", scheme)`` and nothing else (no global RNG, no
iteration over sets or dicts), so the same call gives the same :attr:`Partition.fingerprint` in
every process. Generated partitions list each client's indices in ascending order; that order
carries no information, since the engine shuffles each client's data with its own generator.

The schemes and the code bases whose conventions they follow (../shared/docs/ALGORITHMS.md §21):

==================  ==================================================================  =========
scheme              what α / the parameter means                                        disjoint
==================  ==================================================================  =========
iid                 shuffled, cut into near-equal slices (McMahan et al. 2017, FedAvg)  yes
dirichlet           per class: shares over clients ~ Dir(α·1_N)  (NIID-Bench,           yes
                    Li et al. 2022); unequal client sizes
dirichlet_client    per client: class prior ~ Dir(a·1_C), equal sizes, filled by        optional
                    sampling (FedDyn code / FL-Simulator); a = α or α/C (Hsu et al.
                    2019, as in the FedSAM/FedGloSS JSON splits)
pathological        exactly ``classes_per_client`` classes per client, balanced         yes
shards              sort by label, ``shards_per_client`` random shards each             yes
                    (McMahan et al. 2017)
file                loaded from JSON (:meth:`Partition.to_json` or another code base)  as stored
natural             the dataset's own clients (``Dataset.natural_clients``, e.g. the   as given
                    per-device split of ``synthetic``); no randomness
==================  ==================================================================  =========

The same number α is *not* comparable across conventions: FedGloSS's "α = 0.5" (total
concentration over 10 classes) is roughly FL-Simulator's "Dir-0.05" (per-class concentration).

Why one ~710-line file: the seven partitioners (and the file format) share the input checks, the class
pools and the :class:`Partition` type; each scheme is one function of ~50 lines, and apart they
would import each other's private helpers.
"""
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
from fedlab._rng import numpy_generator

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
CONCENTRATIONS: tuple[str, ...] = ("per_class", "total")
PARTITION_OPTIONS: tuple[str, ...] = ("min_size", "balance_cap", "concentration", "reuse_on_exhaustion", "path",
                                      "allow_empty", "allow_duplicates")
"""The options ``Config.partition_params`` may set: the keyword arguments of :func:`make_partition` that a
config does not already carry in its own fields."""


# --------------------------------------------------------------------------------------------
# The result type
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class Partition:
    """Which dataset indices each client holds.

    ``client_indices`` are read-only int64 arrays into the dataset, one per client. ``labels`` is
    the int64 label array of the whole dataset (``None`` only for a partition loaded from a file
    without labels, in which case :attr:`stats` is unavailable). ``n_classes`` is
    ``labels.max() + 1`` (0 when unknown). Equality is identity; compare :attr:`fingerprint`.
    """

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
        """SHA-256 hex digest identifying the assignment.

        Hashes ``n_clients``, then for each client in order its length followed by its indices,
        all as little-endian int64 bytes. Lengths make the encoding unambiguous (``[1],[2]`` ≠
        ``[1,2],[]``); explicit byte order and no use of ``hash()`` make it identical on every
        machine and for every ``PYTHONHASHSEED``. Scheme and params are deliberately excluded:
        two recipes that produce the same split get the same fingerprint.
        """
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
        """Write ``{"scheme", "params", "n_classes", "clients": [[idx, ...], ...]}`` atomically.

        The file goes through :func:`fedlab.store.atomic.atomic_write_text` (temporary sibling, fsync,
        rename), so a crash never leaves a truncated partition that a later run would load. One client per line
        keeps large files readable and diff-friendly while staying plain JSON.
        """
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


# --------------------------------------------------------------------------------------------
# Input validation (every message names the field and what is allowed)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Partitioners
# --------------------------------------------------------------------------------------------


def iid(labels: Any, n_clients: int, *, seed: int) -> Partition:
    """IID split (McMahan et al. 2017): one random permutation cut into ``n_clients`` slices.

    Slice sizes differ by at most 1 (the first ``n mod N`` clients get one extra sample); every
    index is used exactly once. Same construction as FL-Simulator's ``iid`` (contiguous slices of
    a shuffled set). Labels are only used for validation and statistics.
    """
    y = _check_labels(labels)
    n = _check_n_clients(n_clients, len(y))
    seed = _check_seed(seed)
    rng = numpy_generator(seed, "partition", "iid")
    clients = np.array_split(rng.permutation(len(y)), n)
    return _partition("iid", clients, {"seed": seed}, y)


def dirichlet(
    labels: Any,
    n_clients: int,
    alpha: float,
    *,
    seed: int,
    min_size: int = 0,
    balance_cap: bool = False,
    max_tries: int = 100,
) -> Partition:
    """Label-skew split with per-class Dirichlet shares over clients (NIID-Bench, Li et al. 2022).

    For each class c (in increasing order) draw shares ``q_c ~ Dir(α·1_N)`` over the N clients and
    cut that class's shuffled indices at ``floor(cumsum(q_c)·n_c)``. Here **α is the concentration
    per client of one class's shares**: small α gives each class to few clients (and clients very
    unequal sizes); α → ∞ gives every client ≈ n_c/N of every class. This is the convention of
    Yurochkin et al. 2019 and NIID-Bench; it is *not* the per-client prior of Hsu et al. 2019 (see
    :func:`dirichlet_client`). Disjoint: every index is used exactly once.

    ``balance_cap`` is the NIID-Bench trick: when drawing class c, clients already holding at
    least n/N samples get share 0, which keeps sizes from running away (a client can still
    exceed n/N by at most one class chunk).

    ``min_size``: redraw the *whole* partition (continuing the same generator, so the result is
    still a function of the seed) until every client has at least ``min_size`` samples; raises
    ``ValueError`` after ``max_tries`` draws (FedACG/NIID-Bench use ``min_size=10``).
    """
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, len(y))
    a = _check_alpha(alpha, "dirichlet")
    seed = _check_seed(seed)
    min_size = _check_int("min_size", min_size, 0)
    max_tries = _check_int("max_tries", max_tries, 1)
    n = len(y)
    if min_size * n_clients > n:
        raise ValueError(
            f"min_size={min_size} is impossible: n_clients*min_size={min_size * n_clients} "
            f"exceeds the number of samples ({n})"
        )
    rng = numpy_generator(seed, "partition", "dirichlet")
    pools = [p for p in _class_pools(y, int(y.max()) + 1) if len(p)]
    cap = n / n_clients

    for _ in range(max_tries):
        sizes = np.zeros(n_clients, dtype=np.int64)
        idx_parts, owner_parts = [], []
        for pool in pools:
            shuffled = rng.permutation(pool)
            q = rng.dirichlet(np.full(n_clients, a))
            eligible = sizes < cap if balance_cap else np.ones(n_clients, dtype=bool)
            q = np.where(eligible, q, 0.0)
            # With tiny α every eligible share can underflow to exactly 0.0; rather than divide by
            # zero, fall back to equal shares among the eligible clients. (Some client is always
            # eligible: the classes so far hold fewer than n samples, so not all can be ≥ n/N.)
            q = q / q.sum() if q.sum() > 0 else eligible / eligible.sum()
            m = len(shuffled)
            cuts = np.clip((np.cumsum(q)[:-1] * m).astype(np.int64), 0, m)
            per_client = np.diff(np.concatenate(([0], cuts, [m])))
            idx_parts.append(shuffled)
            owner_parts.append(np.repeat(np.arange(n_clients), per_client))
            sizes += per_client
        if sizes.min() >= min_size:
            clients = _group(np.concatenate(idx_parts), np.concatenate(owner_parts), n_clients)
            params = {"alpha": a, "seed": seed, "min_size": min_size, "balance_cap": bool(balance_cap),
                      "max_tries": max_tries}
            return _partition("dirichlet", clients, params, y)
    raise ValueError(
        f"min_size={min_size} not reached in max_tries={max_tries} draws of dirichlet(alpha={a}, "
        f"n_clients={n_clients}); lower min_size, raise alpha, or raise max_tries"
    )


def dirichlet_client(
    labels: Any,
    n_clients: int,
    alpha: float,
    *,
    seed: int,
    concentration: str = "per_class",
    reuse_on_exhaustion: bool = True,
) -> Partition:
    """Equal-size split with a Dirichlet class prior per client (FedDyn code / FL-Simulator).

    Sizes: ``n_i = floor(n/N)`` for every client and the remainder ``n mod N`` goes to client 0,
    exactly as FL-Simulator does. Each client draws a class prior ``p_i ~ Dir(a·1_C)`` over the
    C classes present in ``labels``, where

    * ``concentration="per_class"``: a = α, the per-class concentration used by FL-Simulator,
      FedDyn and Liu's FedSWA/FedNSAM code ("Dir-0.1" there means a = 0.1);
    * ``concentration="total"``: a = α/C, i.e. q ~ Dir(α·prior) with a uniform prior, the
      total-concentration convention of Hsu et al. 2019 used by the FedSAM/FedGloSS JSON splits
      (their "α = 0.5" on CIFAR-10 is a = 0.05).

    Filling: repeatedly pick a client uniformly among those with quota left, draw a class from its
    prior and give it the next unused image of that class (each class pool is shuffled once). When
    the drawn class has no image left:

    * ``reuse_on_exhaustion=True`` (faithful to FL-Simulator): the pool is refilled and reshuffled,
      so an image can appear on several clients (and others on none); not disjoint.
    * ``reuse_on_exhaustion=False`` (the original FedDyn behaviour): the class is redrawn from
      ``p_i`` renormalised over classes that still have images; disjoint, every index used once,
      but late draws drift from ``p_i`` as classes run out.
    """
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, len(y))
    a = _check_alpha(alpha, "dirichlet_client")
    seed = _check_seed(seed)
    if concentration not in CONCENTRATIONS:
        raise ValueError(f"concentration must be one of {', '.join(CONCENTRATIONS)} (got {concentration!r})")
    n = len(y)
    rng = numpy_generator(seed, "partition", "dirichlet_client")

    present = [p for p in _class_pools(y, int(y.max()) + 1) if len(p)]
    k = len(present)
    conc = a if concentration == "per_class" else a / k
    quotas = np.full(n_clients, n // n_clients, dtype=np.int64)
    quotas[0] += n - quotas.sum()

    priors = rng.dirichlet(np.full(k, conc), size=n_clients)
    bad = ~np.isfinite(priors).all(axis=1) | ~(priors.sum(axis=1) > 0)
    priors[bad] = 1.0 / k  # guard against an all-zero draw at extreme α; never hit in practice
    priors /= priors.sum(axis=1, keepdims=True)
    pools = [rng.permutation(p).tolist() for p in present]

    # A client's class draws are i.i.d. from its prior whatever the interleaving of clients, so
    # all of them are drawn up front in one vectorised inverse-CDF lookup: row i of the CDF is
    # shifted by i, which lets a single searchsorted serve every client at once.
    cdf = np.cumsum(priors, axis=1)
    cdf[:, -1] = 1.0
    owner = np.repeat(np.arange(n_clients), quotas)
    pos = np.searchsorted((cdf + np.arange(n_clients)[:, None]).ravel(), rng.random(n) + owner, side="right")
    # (clip: u + i can round up to i + 1 for huge i, which would spill into the next row)
    draws = np.clip(pos - owner * k, 0, k - 1).tolist()
    start = np.concatenate(([0], np.cumsum(quotas)[:-1])).tolist()
    picks = rng.random(n).tolist()

    # The interleaving itself is sequential (which client is picked depends on who is full, and
    # without reuse the class depends on what is exhausted), so it is a plain loop on Python
    # lists: about 0.1 s for 60 000 samples.
    left = quotas.tolist()
    used = [0] * n_clients
    pointer = [0] * k
    remaining = np.array([len(p) for p in pools], dtype=np.int64)
    active = list(range(n_clients))
    out_idx, out_owner = [], []
    for u in picks:
        j = min(int(u * len(active)), len(active) - 1)
        i = active[j]
        c = draws[start[i] + used[i]]
        used[i] += 1
        if pointer[c] == len(pools[c]):
            if reuse_on_exhaustion:
                pools[c] = rng.permutation(pools[c]).tolist()
                pointer[c] = 0
            else:
                c = _redraw_class(priors[i], remaining, rng)
        out_idx.append(pools[c][pointer[c]])
        out_owner.append(i)
        pointer[c] += 1
        remaining[c] -= 1
        left[i] -= 1
        if left[i] == 0:
            # swap-remove keeps the pick O(1); the order of `active` stays deterministic
            active[j] = active[-1]
            active.pop()

    clients = _group(np.array(out_idx, dtype=np.int64), np.array(out_owner, dtype=np.int64), n_clients)
    params = {"alpha": a, "seed": seed, "concentration": concentration,
              "reuse_on_exhaustion": bool(reuse_on_exhaustion), "per_class_alpha": conc}
    return _partition("dirichlet_client", clients, params, y)


def _redraw_class(prior: np.ndarray, remaining: np.ndarray, rng: np.random.Generator) -> int:
    """Draw from ``prior`` restricted to classes with images left (rejection ≡ renormalisation).

    If the client's prior puts no mass on any remaining class (possible only at tiny α, where
    FedDyn's rejection loop would never end), draw proportionally to the images left instead.
    """
    w = np.where(remaining > 0, prior, 0.0)
    if not w.sum() > 0:
        w = remaining.astype(float)
    cdf = np.cumsum(w)
    c = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    if c >= len(w) or w[c] <= 0:  # only reachable through rounding at the top of the CDF
        c = int(np.flatnonzero(w > 0)[-1])
    return c


def pathological(labels: Any, n_clients: int, classes_per_client: int, *, seed: int) -> Partition:
    """Exactly ``classes_per_client`` (= c) distinct classes per client, class holders balanced.

    The "pathological non-IID" setting of McMahan et al. 2017, built deterministically rather
    than through shards: a slot list is made of consecutive random permutations of the classes
    and client i takes slots ``[i·c, (i+1)·c)``. Each permutation lists every class once, so every
    class is held by ⌊N·c/C⌋ or ⌈N·c/C⌉ clients. Where a client's window straddles two
    permutations, the head of the new one is reordered so that the client's classes stay
    distinct. Each class's shuffled samples are then split as evenly as possible among its
    holders. Disjoint; if N·c < C, the classes that no client holds are left out.

    Requires every class to have at least as many samples as clients holding it (otherwise some
    client would end with fewer than c classes); raises ``ValueError`` if not. Differs from
    FL-Simulator's "Pathological", which fills equal quotas by sampling with reuse.
    """
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, len(y))
    seed = _check_seed(seed)
    pools = _class_pools(y, int(y.max()) + 1)
    classes = np.array([cls for cls, p in enumerate(pools) if len(p)], dtype=np.int64)
    c = _check_int("classes_per_client", classes_per_client, 1)
    if c > len(classes):
        raise ValueError(f"classes_per_client={c} exceeds the number of classes ({len(classes)})")
    rng = numpy_generator(seed, "partition", "pathological")

    slots: list[int] = []
    while len(slots) < n_clients * c:
        perm = rng.permutation(classes).tolist()
        carried = len(slots) % c  # classes the current client already got from the previous block
        if carried:
            taken = set(slots[-carried:])  # membership tests only; never iterated
            head = [x for x in perm if x not in taken][: c - carried]
            chosen = set(head)
            perm = head + [x for x in perm if x not in chosen]
        slots.extend(perm)
    assignment = np.array(slots[: n_clients * c], dtype=np.int64).reshape(n_clients, c)

    idx_parts, owner_parts = [], []
    for cls in classes.tolist():
        holders = np.flatnonzero((assignment == cls).any(axis=1))  # in client order
        if len(holders) == 0:
            continue
        if len(pools[cls]) < len(holders):
            raise ValueError(
                f"class {cls} has {len(pools[cls])} samples but is held by {len(holders)} clients; "
                f"pathological needs at least one sample per holder (lower n_clients or classes_per_client)"
            )
        for holder, chunk in zip(holders, np.array_split(rng.permutation(pools[cls]), len(holders))):
            idx_parts.append(chunk)
            owner_parts.append(np.full(len(chunk), holder, dtype=np.int64))
    clients = _group(np.concatenate(idx_parts), np.concatenate(owner_parts), n_clients)
    return _partition("pathological", clients, {"classes_per_client": c, "seed": seed}, y)


def shards(labels: Any, n_clients: int, shards_per_client: int = 2, *, seed: int) -> Partition:
    """McMahan et al. 2017 shards: sort by label, cut into N·s shards, give each client s of them.

    Samples are shuffled before the (stable) sort so that the order inside a class is random,
    then the sorted list is cut into ``n_clients * shards_per_client`` contiguous shards whose
    sizes differ by at most 1, and each client receives ``shards_per_client`` random shards.
    A client holds at most ``shards_per_client`` classes when every class size is a multiple of
    the shard size (MNIST in the paper: 200 shards of 300); otherwise a shard can straddle a class
    boundary. Disjoint; every index is used exactly once.
    """
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, len(y))
    seed = _check_seed(seed)
    s = _check_int("shards_per_client", shards_per_client, 1)
    if s * n_clients > len(y):
        raise ValueError(
            f"shards_per_client*n_clients={s * n_clients} exceeds the number of samples ({len(y)})"
        )
    rng = numpy_generator(seed, "partition", "shards")
    shuffled = rng.permutation(len(y))
    by_label = shuffled[np.argsort(y[shuffled], kind="stable")]
    pieces = np.array_split(by_label, s * n_clients)
    deal = rng.permutation(s * n_clients).reshape(n_clients, s)
    clients = [np.concatenate([pieces[k] for k in row]) for row in deal.tolist()]
    return _partition("shards", clients, {"shards_per_client": s, "seed": seed}, y)


def natural(labels: Any, natural_clients: Any, n_clients: int) -> Partition:
    """The dataset's own clients (scheme ``"natural"``): client i holds ``natural_clients[i]``.

    For datasets that come split by device or writer (:attr:`fedlab.data.Dataset.natural_clients`,
    e.g. ``synthetic``). Nothing is drawn, so there is no seed; the indices are kept as given. Raises
    ``ValueError`` when the dataset has no natural clients (``natural_clients=None``) or when
    ``n_clients`` differs from their number (the split is the dataset's, not a choice).
    """
    y = _check_labels(labels)
    n = _check_int("n_clients", n_clients, 1)
    if natural_clients is None:
        raise ValueError("this dataset has no natural clients (partition 'natural' needs a dataset that "
                         "defines its clients, e.g. dataset='synthetic')")
    clients = tuple(np.asarray(c, dtype=np.int64) for c in natural_clients)
    if len(clients) != n:
        raise ValueError(f"n_clients={n} must equal the dataset's {len(clients)} natural clients")
    return Partition(client_indices=clients, scheme="natural", params={}, n_classes=int(y.max()) + 1, labels=y)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def from_file(
    path: str | os.PathLike,
    labels: Any = None,
    *,
    n_classes: int | None = None,
    allow_empty: bool = False,
    allow_duplicates: bool | None = None,
) -> Partition:
    """Load a partition from JSON (scheme ``"file"``).

    Accepted layouts: the object written by :meth:`Partition.to_json`
    (``{"clients": [[...], ...], ...}``, other keys optional); a bare list of per-client index
    lists; or an object mapping client ids ``"0".."N-1"`` to index lists (NIID-Bench's
    ``net_dataidx_map``), ordered by the integer id. Indices must be JSON integers ≥ 0, below
    ``len(labels)`` when labels are given; clients must be non-empty unless ``allow_empty``.
    The order of indices within a client is kept as stored, so the fingerprint of a reloaded
    ``to_json`` file equals the original.

    An index listed twice by one client is refused (a hand-edited or concatenated file, whose client
    would silently train on that sample twice as often), unless ``allow_duplicates=True``, or
    ``None`` (the default) and the file was written by :meth:`Partition.to_json` of a scheme that
    repeats samples by design (``dirichlet_client`` with ``reuse_on_exhaustion``).

    ``n_classes``: the argument if given, else ``labels.max() + 1`` if labels are given (and then
    the file's ``n_classes``, if any, must agree), else the file's ``n_classes``, else 0
    (unknown). The original scheme and params are kept in ``params["source_scheme"]`` and
    ``params["source_params"]``.
    """
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


# --------------------------------------------------------------------------------------------
# Dispatcher
# --------------------------------------------------------------------------------------------


def make_partition(
    scheme: str,
    labels: Any,
    n_clients: int,
    *,
    seed: int,
    alpha: float | None = None,
    classes_per_client: int | None = None,
    shards_per_client: int = 2,
    min_size: int = 0,
    balance_cap: bool = False,
    concentration: str = "per_class",
    reuse_on_exhaustion: bool = True,
    path: str | os.PathLike | None = None,
    allow_empty: bool = False,
    allow_duplicates: bool | None = None,
    natural_clients: Any = None,
) -> Partition:
    """Build a partition by scheme name (one of :data:`PARTITIONERS`), e.g. from a config.

    Arguments that the chosen scheme does not use are ignored, so a config can carry all of them.
    For ``"file"``, ``path`` is required, ``labels`` may be ``None`` and the file must hold exactly
    ``n_clients`` clients; ``allow_empty=True`` accepts clients without indices (the engine never
    samples them); ``allow_duplicates`` is :func:`from_file`'s. For ``"natural"``, ``natural_clients``
    is the dataset's own split (:func:`natural`).
    """
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
