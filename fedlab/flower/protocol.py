"""What travels between the Flower ServerApp and the ClientApps, and how it is encoded.

One fedlab round over Flower (``t`` is 0-based; Flower's ``server_round`` is t + 1)::

    server → client i   Message "train", content RecordDict
                          "broadcast": ArrayRecord = algorithm.broadcast(server, info)   (downlink)
                          "round":     ConfigRecord {round t, sampled client ids, expected client
                                                     id, the round client i last took part in}
    client i → server   reply, content RecordDict
                          "upload":    ArrayRecord = algorithm.upload(...)[0]             (uplink)
                          "metrics":   MetricRecord {train-loss, num-examples}

The arrays of the two ArrayRecords are exactly the tensors fedlab's engine counts as downlink and
uplink floats (``Simulation.run``: ``_numel(msg) · m`` and ``Σ_i _numel(upload_i)``), so the payload
of a round is ``4 · floats`` bytes in float32. The ConfigRecord and MetricRecord hold a handful of
scalars and no model-sized vector. Arrays are serialised with ``numpy.save`` (Flower's ``Array``),
which is lossless, so a vector arrives bit for bit as it left.

Persistent client state (SCAFFOLD's c_i, FedDyn's h_i, FedSMOO's μ_i, ...) never travels: it lives
in the ClientApp's ``context.state`` under :data:`CLIENT_STATE` (see :mod:`fedlab.flower.client`).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord

from fedlab.algorithms import RoundInfo, State
from fedlab.algorithms._registry import algorithm_names
from fedlab.config import Config, ConfigError
from fedlab.engine.loop import Simulation

BROADCAST = "broadcast"
"""Content key of the server's ArrayRecord (the algorithm's broadcast message)."""
ROUND = "round"
"""Content key of the server's ConfigRecord describing the round."""
UPLOAD = "upload"
"""Content key of the client's ArrayRecord (the algorithm's upload)."""
METRICS = "metrics"
"""Content key of the client's MetricRecord (scalars only)."""
CLIENT_STATE = "fedlab.client-state"
"""``context.state`` key of a client's persistent algorithm state (an ArrayRecord)."""
CLIENT_META = "fedlab.client-meta"
"""``context.state`` key of the ConfigRecord {client, last-round} that dates the stored state."""
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
"""Flower's node-config keys (set by the simulation engine, or ``flower-supernode --node-config``)."""
QUERY_CLIENT_ID = "query.client_id"
"""Message type the server uses to ask a node which fedlab client it is."""


def servable_algorithms() -> tuple[str, ...]:
    """Algorithms the Flower apps serve: every registered fedlab algorithm.

    Every method fits the contract the apps rely on (server state on the server, client state on
    the client, only broadcast and upload travel), so the list is the registry itself.
    """
    return algorithm_names()


def check_servable(name: str) -> None:
    """Raise ``ConfigError`` naming the allowed algorithms when Flower cannot serve ``name``."""
    allowed = servable_algorithms()
    if name not in allowed:
        raise ConfigError(f"algorithm: fedlab's Flower apps cannot serve '{name}'; allowed: {', '.join(allowed)}")


def round_info(sim: Simulation, t: int, clients: Sequence[int]) -> RoundInfo:
    """The RoundInfo of round t with the given sampled clients, on the server and on every client.

    The one place the Flower apps build a RoundInfo: both sides derive it from the shared run
    config exactly as the engine does (``Simulation.round_info``), so nothing of it travels but the
    round number and the sampled ids. The clients' K_i come from their jobs, as in the engine
    (E·⌈n_i/B⌉ in epoch mode), so every side sees the steps the clients really run.
    """
    jobs = sim.client_jobs(t, np.asarray(clients, dtype=np.int64), sim.client_indices)
    return sim.round_info(t, tuple(len(job.batches) for job in jobs))


def to_record(state: State) -> ArrayRecord:
    """A fedlab state/message/upload dict as an ArrayRecord (tensors copied to CPU numpy)."""
    return ArrayRecord.from_torch_state_dict({k: v.detach() for k, v in state.items()})


def from_record(record: ArrayRecord, device: str | torch.device = "cpu") -> State:
    """The inverse of :func:`to_record`: tensors on ``device``, bit-identical to what was sent."""
    return {k: torch.from_numpy(a.numpy()).to(device) for k, a in record.items()}


@dataclass(frozen=True)
class Traffic:
    """Bytes in the arrays of some messages: the payload (numel × itemsize) and as serialised."""

    arrays: int = 0
    floats: int = 0
    payload_bytes: int = 0
    serialized_bytes: int = 0

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def traffic(record: ArrayRecord) -> Traffic:
    """What one ArrayRecord carries: its element count, payload bytes and ``numpy.save`` bytes."""
    floats = payload = serialized = 0
    for a in record.values():
        n = int(np.prod(a.shape, dtype=np.int64))
        floats += n
        payload += n * np.dtype(a.dtype).itemsize
        serialized += len(a.data)
    return Traffic(len(record), floats, payload, serialized)


_JSON_FIELDS = ("algorithm_params", "partition_params")


def config_from_run_config(run_config: Mapping[str, Any]) -> Config:
    """A fedlab Config from Flower's run config (``[tool.flwr.app.config]`` or ``flwr run --run-config``).

    Keys are Config field names, with '-' or '_' (``n-clients = 4``); ``algorithm-params`` and
    ``partition-params`` are JSON objects in a string (``'{"rho": 0.05}'``); an empty string means
    None. Unknown keys raise ``ConfigError`` naming the allowed ones.
    """
    values: dict[str, Any] = {}
    for key, value in run_config.items():
        name = key.replace("-", "_")
        if name in _JSON_FIELDS and isinstance(value, str):
            try:
                value = json.loads(value) if value else {}
            except json.JSONDecodeError as err:
                raise ConfigError(f"run config '{key}' must be a JSON object (got {value!r}: {err})") from None
        elif value == "":
            value = None
        values[name] = value
    config = Config.from_dict(values)
    check_servable(config.algorithm)
    return config


def named_configs(experiments: Config | Mapping[str, Config] | None) -> dict[str | None, Config] | None:
    """``{None: config}`` for one Config, the mapping itself for named ones (checked), None for None."""
    if experiments is None:
        return None
    if isinstance(experiments, Config):
        check_servable(experiments.algorithm)
        return {None: experiments}
    if not experiments:
        raise ValueError("experiments: give at least one named Config")
    for name, cfg in experiments.items():
        if not isinstance(name, str) or not isinstance(cfg, Config):
            raise TypeError(f"experiments must map names (str) to fedlab Configs (got {name!r}: {type(cfg).__name__})")
        check_servable(cfg.algorithm)
    sizes = {cfg.n_clients for cfg in experiments.values()}
    if len(sizes) > 1:
        raise ValueError(f"experiments sharing one federation need one n_clients (got {sorted(sizes)})")
    return dict(experiments)
