"""What travels between the Flower ServerApp and the ClientApps, and how it is encoded.

One round (``t`` 0-based; Flower's ``server_round`` is t + 1)::

    server → client i   "broadcast": ArrayRecord = algorithm.broadcast(server, info)   (downlink)
                        "round":     ConfigRecord {t, sampled ids, expected client id, last round taken part}
    client i → server   "upload":    ArrayRecord = algorithm.upload(...)[0]             (uplink)
                        "metrics":   MetricRecord {train-loss, num-examples}

The arrays are exactly what the engine counts as downlink and uplink floats (4 bytes each in
float32), serialised losslessly with ``numpy.save``. Persistent client state never travels: it lives
in the ClientApp's ``context.state`` under :data:`CLIENT_STATE`."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord

from fedlab.algorithms import RoundInfo, State
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


def round_info(sim: Simulation, t: int, clients: Sequence[int]) -> RoundInfo:
    """The RoundInfo of round t, built on the server and on every client from the shared run config as
    the engine does (``Simulation.round_info``), so only the round and the sampled ids travel."""
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
    """A fedlab Config from Flower's run config: Config field names with '-' or '_'; ``algorithm-params``
    and ``partition-params`` as JSON strings; "" means None; an unknown key is a ConfigError naming the
    allowed ones."""
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
    return Config.from_dict(values)


def named_configs(experiments: Config | Mapping[str, Config] | None) -> dict[str | None, Config] | None:
    """``{None: config}`` for one Config, the mapping itself for named ones (checked), None for None."""
    if experiments is None:
        return None
    if isinstance(experiments, Config):
        return {None: experiments}
    if not experiments:
        raise ValueError("experiments: give at least one named Config")
    for name, cfg in experiments.items():
        if not isinstance(name, str) or not isinstance(cfg, Config):
            raise TypeError(f"experiments must map names (str) to fedlab Configs (got {name!r}: {type(cfg).__name__})")
    sizes = {cfg.n_clients for cfg in experiments.values()}
    if len(sizes) > 1:
        raise ValueError(f"experiments sharing one federation need one n_clients (got {sorted(sizes)})")
    return dict(experiments)
