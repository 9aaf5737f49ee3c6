"""The partitioners: IID, the two Dirichlet conventions, pathological label skew, shards, natural clients.

The schemes, their sources and defaults are tabled in :mod:`fedlab.data.partition`, which re-exports them."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedlab._rng import numpy_generator
from fedlab.data._partition_core import (CONCENTRATIONS, Partition, _check_alpha, _check_int, _check_labels,
                                          _check_n_clients, _check_seed, _class_pools, _group, _partition)

# --- Partitioners ---


def iid(labels: Any, n_clients: int, *, seed: int) -> Partition:
    """IID split (McMahan et al. 2017): one random permutation cut into ``n_clients`` slices whose sizes
    differ by at most 1 (FL-Simulator's ``iid``)."""
    y = _check_labels(labels)
    n = _check_n_clients(n_clients, len(y))
    seed = _check_seed(seed)
    rng = numpy_generator(seed, "partition", "iid")
    clients = np.array_split(rng.permutation(len(y)), n)
    return _partition("iid", clients, {"seed": seed}, y)


def dirichlet(labels: Any, n_clients: int, alpha: float, *, seed: int, min_size: int = 0, balance_cap: bool = False,
              max_tries: int = 100) -> Partition:
    """Label skew with per-class Dirichlet shares over clients (Yurochkin et al. 2019; NIID-Bench, Li et al. 2022).

    For each class c draw ``q_c ~ Dir(α·1_N)`` over the N clients and cut c's shuffled indices at
    ``floor(cumsum(q_c)·n_c)``: **α is the concentration of one class's shares**, not the per-client
    prior of Hsu et al. 2019 (:func:`dirichlet_client`). Disjoint. ``balance_cap`` (NIID-Bench): clients
    already holding n/N samples get share 0. ``min_size``: redraw the whole partition (same generator)
    until every client has that many samples; ValueError after ``max_tries``."""
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


def dirichlet_client(labels: Any, n_clients: int, alpha: float, *, seed: int, concentration: str = "per_class",
                     reuse_on_exhaustion: bool = True) -> Partition:
    """Equal-size clients with a Dirichlet class prior each (FedDyn code / FL-Simulator).

    ``n_i = floor(n/N)``, the remainder to client 0. Client i draws ``p_i ~ Dir(a·1_C)``, with a = α
    (``concentration="per_class"``: FL-Simulator, FedDyn, Liu's FedSWA/FedNSAM code) or a = α/C
    (``"total"``: Hsu et al. 2019, the FedSAM/FedGloSS JSON splits, whose CIFAR-10 "α = 0.5" is a = 0.05).
    Filling: a client with quota left, chosen uniformly, draws a class from its prior and takes that
    class's next unused image. An exhausted class is refilled and reshuffled under
    ``reuse_on_exhaustion=True`` (FL-Simulator; not disjoint), or redrawn from ``p_i`` renormalised over
    the classes left (original FedDyn; disjoint)."""
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
    """Draw from ``prior`` restricted to classes with images left; if it has no mass there (tiny α, where
    FedDyn's rejection loop never ends), draw proportionally to the images left."""
    w = np.where(remaining > 0, prior, 0.0)
    if not w.sum() > 0:
        w = remaining.astype(float)
    cdf = np.cumsum(w)
    c = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    if c >= len(w) or w[c] <= 0:  # only reachable through rounding at the top of the CDF
        c = int(np.flatnonzero(w > 0)[-1])
    return c


def pathological(labels: Any, n_clients: int, classes_per_client: int, *, seed: int) -> Partition:
    """Exactly ``classes_per_client`` (c) distinct classes per client (McMahan et al. 2017), built without shards.

    Client i takes slots ``[i·c, (i+1)·c)`` of consecutive random class permutations (reordered where a
    window straddles two, so its classes stay distinct): every class has ⌊N·c/C⌋ or ⌈N·c/C⌉ holders,
    which share its samples as evenly as possible. Disjoint. ValueError when a class has fewer samples
    than holders. FL-Simulator's "Pathological" instead fills equal quotas with reuse."""
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
    """McMahan et al. 2017 shards: sort by label (shuffled first), cut into N·s near-equal shards, give each
    client s random ones. A shard can straddle a class boundary unless the class sizes are multiples of
    the shard size. Disjoint."""
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
    """The dataset's own clients (``natural_clients``, e.g. ``synthetic``): client i holds ``natural_clients[i]``.
    Nothing is drawn. ValueError without natural clients or when ``n_clients`` differs from their number."""
    y = _check_labels(labels)
    n = _check_int("n_clients", n_clients, 1)
    if natural_clients is None:
        raise ValueError("this dataset has no natural clients (partition 'natural' needs a dataset that "
                         "defines its clients, e.g. dataset='synthetic')")
    clients = tuple(np.asarray(c, dtype=np.int64) for c in natural_clients)
    if len(clients) != n:
        raise ValueError(f"n_clients={n} must equal the dataset's {len(clients)} natural clients")
    return Partition(client_indices=clients, scheme="natural", params={}, n_classes=int(y.max()) + 1, labels=y)
