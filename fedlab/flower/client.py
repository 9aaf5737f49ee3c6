"""The client side: a Flower ``ClientApp`` that runs a fedlab algorithm's local steps and upload.

For a "train" message of round t, client i (its ``partition-id``) restores its state c_i from
``context.state`` (or ``client_init(θ_0)``), draws its minibatches as the engine does and trains with
the engine's sequential client loop, keeps c_i and replies with the upload only: the engine's
numbers, and client state never leaves the client. A stateful client that took part before but
holds no state, or state from another round (a restarted SuperNode), refuses to train: restarting
from c_i = 0 would change the method."""
from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedlab.algorithms import State
from fedlab.config import Config
from fedlab.engine.clients import RoundWork, run_clients_sequential
from fedlab.engine.loop import Simulation
from fedlab.flower.protocol import (
    BROADCAST, CLIENT_META, CLIENT_STATE, METRICS, NUM_PARTITIONS, PARTITION_ID, QUERY_CLIENT_ID, ROUND, UPLOAD,
    config_from_run_config, from_record, named_configs, round_info, to_record,
)


class ClientStateError(RuntimeError):
    """A client of a stateful method lacks (or holds a stale copy of) the state it needs."""


@lru_cache(maxsize=16)
def _simulation(config_json: str) -> Simulation:
    # One build (dataset, partition, model) per process and config: a Ray actor serves many messages.
    return Simulation.build(Config.from_dict(json.loads(config_json)))


def client_simulation(config: Config) -> Simulation:
    """The client's view of the run: the same dataset, partition, model and algorithm as the server."""
    return _simulation(json.dumps(config.to_dict(), sort_keys=True))


def client_id(context: Context, config: Config) -> int:
    """The fedlab client this node is: its ``partition-id``, checked against ``n_clients``."""
    node = context.node_config
    if PARTITION_ID not in node:
        raise ValueError(f"node_config lacks '{PARTITION_ID}': start the SuperNode with "
                         f"--node-config \"{PARTITION_ID}=<i> {NUM_PARTITIONS}={config.n_clients}\"")
    i = int(node[PARTITION_ID])
    n = int(node.get(NUM_PARTITIONS, config.n_clients))
    if n != config.n_clients or not 0 <= i < n:
        raise ValueError(f"node_config {PARTITION_ID}={i}, {NUM_PARTITIONS}={n} does not fit n_clients="
                         f"{config.n_clients}; allowed: {PARTITION_ID} in [0, {config.n_clients}) and "
                         f"{NUM_PARTITIONS}={config.n_clients}")
    return i


def restore_client_state(sim: Simulation, context: Context, i: int, last_round: int,
                         keys: tuple[str, str] = (CLIENT_STATE, CLIENT_META)) -> State:
    """Client i's state for a round: ``client_init(θ_0)`` if it never took part (``last_round = -1``),
    else the stored state, which must date from ``last_round``."""
    alg = sim.algorithm
    fresh = alg.client_init(sim.model.theta0())
    if not fresh:  # stateless method: nothing to restore
        return fresh
    stored = context.state.array_records.get(keys[0])
    meta = context.state.config_records.get(keys[1])
    stored_round = int(meta["last-round"]) if meta is not None else None
    if last_round < 0:
        if stored is not None:
            raise ClientStateError(f"client {i} holds {alg.name} state from round {stored_round} but the server "
                                   "says it never took part in this run")
        return fresh
    if stored is None:
        raise ClientStateError(
            f"client {i} took part in round {last_round} but holds no {alg.name} client state "
            f"({', '.join(sorted(fresh))}); a stateful method cannot continue without it (was the SuperNode "
            "restarted? its Context.state is lost with it)")
    owner = int(meta["client"]) if meta is not None else None
    if stored_round != last_round or owner != i:
        raise ClientStateError(f"client {i} holds {alg.name} state of client {owner} from round {stored_round}, "
                               f"but the server expects client {i}'s state from round {last_round}")
    state = from_record(stored, sim.config.device)
    if set(state) != set(fresh):
        raise ClientStateError(f"client {i}'s stored state has keys {sorted(state)}; {alg.name} needs {sorted(fresh)}")
    return state


class FedlabClient:
    """The handlers of fedlab's ClientApp for one Config, named Configs (each with its own client state)
    or None (the Config in Flower's run config)."""

    def __init__(self, experiments: Config | Mapping[str, Config] | None = None) -> None:
        self.experiments = named_configs(experiments)

    def _experiment(self, msg: Message, context: Context) -> tuple[str | None, Config]:
        if self.experiments is None:
            return None, config_from_run_config(context.run_config)
        rnd = msg.content.config_records.get(ROUND)
        name = rnd.get("experiment") if rnd is not None else None
        name = None if name is None else str(name)
        if name not in self.experiments:
            allowed = ", ".join(str(n) for n in self.experiments)
            raise ValueError(f"the server asked for experiment {name!r}; this ClientApp serves: {allowed}")
        return name, self.experiments[name]

    def query(self, msg: Message, context: Context) -> Message:
        """Reply with this node's fedlab client id (the server maps node ids to clients with it)."""
        i = client_id(context, self._experiment(msg, context)[1])
        return Message(RecordDict({ROUND: ConfigRecord({"client": i})}), reply_to=msg)

    def train(self, msg: Message, context: Context) -> Message:
        """One round of local work: restore c_i, K local steps, upload; keep c_i; reply the upload."""
        name, config = self._experiment(msg, context)
        sim = client_simulation(config)
        i = client_id(context, config)
        rnd = msg.content.config_records[ROUND]
        t, expected, last = int(rnd["round"]), int(rnd["client"]), int(rnd["last-round"])
        if expected != i:
            raise ValueError(f"the server sent client {expected}'s round to node {context.node_id}, which is client {i}")
        clients = [int(c) for c in rnd["clients"]]
        info = round_info(sim, t, clients)
        broadcast = from_record(msg.content.array_records[BROADCAST], config.device)
        keys = state_keys(name)
        cstate = restore_client_state(sim, context, i, last, keys)
        jobs = sim.client_jobs(t, np.array([i], dtype=np.int64), sim.client_indices)
        (result,) = run_clients_sequential(RoundWork(sim.algorithm, broadcast, jobs, [cstate], sim.local_data,
                                                     sim.model.autograd_grad_fn, info))
        if result.state:  # the engine keeps non-empty states only; so do we
            context.state[keys[0]] = to_record(result.state)
            context.state[keys[1]] = ConfigRecord({"client": i, "last-round": t})
        metrics = MetricRecord({"train-loss": float(result.mean_loss),
                                "num-examples": int(sim.client_indices[i].numel())})
        return Message(RecordDict({UPLOAD: to_record(result.upload), METRICS: metrics}), reply_to=msg)


def state_keys(experiment: str | None) -> tuple[str, str]:
    """The ``context.state`` keys of an experiment's client state and of its date."""
    suffix = "" if experiment is None else f".{experiment}"
    return CLIENT_STATE + suffix, CLIENT_META + suffix


def make_client_app(experiments: Config | Mapping[str, Config] | None = None) -> ClientApp:
    """fedlab's ClientApp for a Config, named Configs, or (None) the Config in Flower's run config."""
    client = FedlabClient(experiments)
    app = ClientApp()
    app.train()(client.train)
    app.query(QUERY_CLIENT_ID.split(".", 1)[1])(client.query)
    return app


__all__ = ["ClientStateError", "FedlabClient", "client_id", "client_simulation", "make_client_app",
           "restore_client_state"]
