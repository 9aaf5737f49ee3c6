"""Which clients take part in round t.

``uniform``: exactly m = round(p·N), uniformly without replacement (the theory setting, FedVSSAM's
"UAR"); ``bernoulli``: each client with probability p, an empty draw redrawn (FL-Simulator);
``schedule``: a JSON list of client ids per round, to replay another run. Each round draws from its
own generator (seed, "sampling", t), so a resumed run samples what an uninterrupted one would.
Clients without data are never sampled (``uniform`` draws among the others, ``bernoulli`` still draws
their coins so no other draw moves, a schedule naming one is refused)."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedlab._rng import numpy_generator


BERNOULLI_RETRIES = 1000
"""Empty Bernoulli draws of a round redrawn before :func:`sample_clients` gives up on it."""


def eligible_clients(sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Sorted int64 ids of the clients that hold at least one sample (the only ones ever sampled)."""
    return np.flatnonzero(np.asarray(sizes) > 0).astype(np.int64)


def check_sampling(n_clients: int, participation: float, mode: str, eligible: np.ndarray) -> None:
    """Raise ValueError when ``mode`` cannot draw a round from the ``eligible`` (non-empty) clients."""
    if eligible.size == 0:
        raise ValueError(f"none of the {n_clients} clients holds any sample")
    m = max(1, round(participation * n_clients))
    if mode == "uniform" and m > eligible.size:
        raise ValueError(f"participation={participation} asks for m={m} clients per round but only "
                         f"{eligible.size} of the {n_clients} clients hold data (empty clients are never "
                         "sampled); lower participation or use a partition without empty clients")


def sample_clients(round_: int, n_clients: int, participation: float, *, seed: int, mode: str = "uniform",
                   schedule: list[list[int]] | None = None, eligible: np.ndarray | None = None) -> np.ndarray:
    """Sorted int64 ids of the clients sampled in round ``round_`` among ``eligible`` (default: all)."""
    eligible = np.arange(n_clients, dtype=np.int64) if eligible is None else np.asarray(eligible, np.int64)
    if mode == "uniform":
        check_sampling(n_clients, participation, mode, eligible)
        m = max(1, round(participation * n_clients))
        rng = numpy_generator(seed, "sampling", round_)
        # choice over positions in `eligible`: with every client eligible these are the ids themselves
        return np.sort(eligible[rng.choice(eligible.size, size=m, replace=False)]).astype(np.int64)
    if mode == "bernoulli":
        check_sampling(n_clients, participation, mode, eligible)
        allowed = np.zeros(n_clients, dtype=bool)
        allowed[eligible] = True
        for retry in range(BERNOULLI_RETRIES):
            rng = numpy_generator(seed, "sampling", round_, retry)
            chosen = np.flatnonzero((rng.random(n_clients) < participation) & allowed)
            if chosen.size:
                return chosen.astype(np.int64)
        raise RuntimeError(f"bernoulli sampling drew no client {BERNOULLI_RETRIES} times; participation is too small")
    if mode == "schedule":
        if schedule is None:
            raise ValueError("sampling='schedule' needs a schedule (list of client-id lists per round)")
        if round_ >= len(schedule):
            raise ValueError(f"the client schedule has {len(schedule)} rounds; round {round_} is beyond it")
        ids = np.sort(np.asarray(schedule[round_], dtype=np.int64))
        empty = np.setdiff1d(ids, eligible)
        if empty.size:
            raise ValueError(f"the client schedule names client {int(empty[0])} in round {round_}, "
                             "which holds no data (empty clients are never sampled)")
        return ids
    raise ValueError(f"sampling={mode!r} is invalid; allowed: uniform, bernoulli, schedule")


def load_schedule(path: str | Path, n_clients: int, rounds: int, *,
                  eligible: np.ndarray | None = None) -> list[list[int]]:
    """Read and validate a client schedule: a JSON list of ≥ ``rounds`` non-empty lists of distinct
    integer ids in ``[0, n_clients)`` (and in ``eligible``); every error is a ValueError naming
    ``schedule_path``, the file, and the round and client at fault."""
    where = f"schedule_path={str(path)!r}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{where}: cannot read the client schedule ({err.strerror or err})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{where}: not a JSON file ({err})") from None
    if not isinstance(data, list) or len(data) < rounds:
        got = f"{len(data)} entries" if isinstance(data, list) else type(data).__name__
        raise ValueError(f"{where}: must hold a JSON list of at least {rounds} per-round client-id lists "
                         f"(got {got})")
    out = []
    for t, ids in enumerate(data[:rounds]):
        if not isinstance(ids, list) or not ids or not all(type(i) is int for i in ids):
            raise ValueError(f"{where}: round {t} must be a non-empty list of integer client ids (got {ids!r})")
        if min(ids) < 0 or max(ids) >= n_clients or len(set(ids)) != len(ids):
            raise ValueError(f"{where}: round {t} has ids outside [0, {n_clients}) or repeated ids ({ids!r})")
        if eligible is not None:
            empty = sorted(set(ids) - set(np.asarray(eligible).tolist()))
            if empty:
                raise ValueError(f"{where}: round {t} names client {empty[0]}, which holds no data "
                                 "(empty clients are never sampled); remove it from the schedule")
        out.append(sorted(ids))
    return out


def schedule_digest(schedule: list[list[int]] | None) -> str:
    """SHA-256 of the rounds a run replays (the run key covers the schedule's contents, not its path)."""
    if schedule is None:
        return ""
    return hashlib.sha256(json.dumps(schedule, separators=(",", ":")).encode()).hexdigest()
