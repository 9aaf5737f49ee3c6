"""Which clients take part in round t.

* ``uniform``  — exactly m = round(p·N) clients, uniformly without replacement (the theory setting,
  FedVSSAM's "UAR"); ids sorted.
* ``bernoulli`` — FL-Simulator: each client independently with probability p; an empty draw is
  redrawn (so "10 % of 100" means 10 on average, not exactly 10).
* ``schedule`` — a JSON file holding one list of client ids per round, to replay another run's
  selections exactly.

Each round draws from its own generator derived from (seed, "sampling", t), so a resumed run
samples exactly what an uninterrupted one would.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from fedlab.repro import numpy_generator


def sample_clients(
    round_: int, n_clients: int, participation: float, *, seed: int, mode: str = "uniform",
    schedule: list[list[int]] | None = None,
) -> np.ndarray:
    """Sorted int64 ids of the clients sampled in round ``round_``."""
    if mode == "uniform":
        m = max(1, round(participation * n_clients))
        rng = numpy_generator(seed, "sampling", round_)
        return np.sort(rng.choice(n_clients, size=m, replace=False)).astype(np.int64)
    if mode == "bernoulli":
        for retry in range(1000):
            rng = numpy_generator(seed, "sampling", round_, retry)
            chosen = np.flatnonzero(rng.random(n_clients) < participation)
            if chosen.size:
                return chosen.astype(np.int64)
        raise RuntimeError("bernoulli sampling drew no client 1000 times; participation is too small")
    if mode == "schedule":
        if schedule is None:
            raise ValueError("sampling='schedule' needs a schedule (list of client-id lists per round)")
        if round_ >= len(schedule):
            raise ValueError(f"the client schedule has {len(schedule)} rounds; round {round_} is beyond it")
        return np.sort(np.asarray(schedule[round_], dtype=np.int64))
    raise ValueError(f"sampling={mode!r} is invalid; allowed: uniform, bernoulli, schedule")


def load_schedule(path: str | Path, n_clients: int, rounds: int) -> list[list[int]]:
    """Read and validate a client schedule: a JSON list of ≥ ``rounds`` non-empty lists of ids.

    Ids must be JSON integers (``true``/``1.0`` are refused) in ``[0, n_clients)``, none repeated
    within a round. Every error is a ``ValueError`` naming ``schedule_path`` and the file.
    """
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
        out.append(sorted(ids))
    return out


def schedule_digest(schedule: list[list[int]] | None) -> str:
    """SHA-256 of the rounds a run replays (the run key covers the schedule's contents, not its path)."""
    if schedule is None:
        return ""
    return hashlib.sha256(json.dumps(schedule, separators=(",", ":")).encode()).hexdigest()
