"""The server side: a Flower ``Strategy`` (Message API) that runs a fedlab algorithm's server rules.

Round t of :class:`FedlabStrategy`: ``configure_train`` takes S_t from fedlab's own sampler
(``Simulation.sample``), maps each client to the node whose ``partition-id`` it is and sends it
``algorithm.broadcast(server, info)`` as is; ``aggregate_train`` stacks the uploads in client-id order
(the engine's, so float sums agree) and applies ``algorithm.aggregate``. The whole server state stays
on the server; of the clients it knows only the round each last took part in. Every array sent or
received is measured (:class:`~fedlab.flower.protocol.Traffic`) to compare with fedlab's accounting.

A Flower run is stored as ``fedlab.run`` stores a run (:mod:`fedlab.results`: config.json, metrics.csv with
the engine's columns, summary.json, checkpoint.pt), in ``<runs_dir>/flower/<algorithm>-<run key>/`` beside
the engine's runs, and handed to a tracker (:mod:`fedlab.tracking`) round by round; a finished one is
loaded, not trained again. Each round's row is the engine's (``Simulation._round_row``) but for
``flatness_distance``, NaN: it needs every client's final model, which never leaves the client. The
checkpoint is written once, when the run ends: the client states a resume would need live on the clients."""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from logging import INFO

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from fedlab.algorithms import RoundInfo, State
from fedlab.config import Config
from fedlab.engine.clients import ClientResult
from fedlab.engine.costs import cost_columns
from fedlab.engine.loop import Simulation
from fedlab.engine.state import RoundOutcome, TrainingState
from fedlab.results import TERMINAL_STATUSES, RunResult, RunStore
from fedlab.tracking import Logger, get_logger, tracked
from fedlab.flower.protocol import (
    BROADCAST, METRICS, QUERY_CLIENT_ID, ROUND, UPLOAD, Traffic, config_from_run_config,
    from_record, named_configs, round_info, to_record, traffic,
)


@dataclass
class RoundRecord:
    """One round as the Flower server saw it."""

    round: int  # t + 1, as fedlab's metrics count rounds
    clients: list[int]
    downlink: Traffic  # the broadcast arrays of every message sent
    uplink: Traffic  # the upload arrays of every reply received
    train_loss: float
    test_acc: float = float("nan")
    test_loss: float = float("nan")
    wall_seconds: float = 0.0  # configure_train to aggregate_train: sending, local work, aggregation


@dataclass
class _Pending:
    t: int
    clients: list[int]
    info: RoundInfo
    server: State
    msg: State
    downlink: Traffic
    started: float
    results: list[ClientResult] | None = None  # the round's uploads and losses, once aggregated


class _Diverged(Exception):
    """Ends ``Strategy.start`` after a diverged round, as the engine stops there."""


def flower_simulation(config: Config) -> Simulation:
    """The server's view of a run: the engine's Simulation, its store ``<runs_dir>/flower/<algorithm>-<key>``."""
    sim = Simulation.build(config)
    return replace(sim, store=RunStore.for_run(sim.store.dir.parent / "flower", config.algorithm, sim.config_hash))


class FedlabStrategy(Strategy):
    """Any registered fedlab algorithm as a Flower ``Strategy``. ``simulation`` holds the Config,
    algorithm, model and test set (never the training data); ``on_round`` gets each :class:`RoundRecord`;
    ``timeout`` bounds the wait for nodes and replies."""

    def __init__(self, simulation: Simulation, *, on_round: Callable[[RoundRecord], None] | None = None,
                 timeout: float = 3600.0, experiment: str | None = None) -> None:
        self.sim = simulation
        self.experiment = experiment  # named experiment of a multi-experiment ClientApp (None: the only one)
        self.algorithm = simulation.algorithm
        self.on_round = on_round
        self.timeout = timeout
        self.node_of: dict[int, int] = {}  # fedlab client id -> Flower node id
        self.last_round: dict[int, int] = {}  # client id -> the round it last took part in
        self.rounds: list[RoundRecord] = []
        self.rows: list[dict] = []  # the metrics rows, as the engine writes them
        self.status = "running"
        self.server: State = self.algorithm.server_init(simulation.model.theta0())
        self.log: Callable[[int, dict], None] = lambda round, row: None
        self._pending: _Pending | None = None
        self._eval_set = simulation.eval_set()

    # --- the run ---------------------------------------------------------------------------------
    def initial_arrays(self) -> ArrayRecord:
        """The server state of round 0, ``server_init(θ_0)``, as the ArrayRecord ``start`` carries."""
        return to_record(self.server)

    def run(self, grid: Grid, logger: Logger | str | None = None) -> RunResult:
        """All ``config.rounds`` rounds through ``Strategy.start`` (until one diverges), stored and tracked as
        ``fedlab.run`` does (see the module docstring); a finished run in the store is returned as is."""
        sim = self.sim
        with sim.store.lock(quiet=True):
            done = sim.store.load_checkpoint(sim.config_hash)
            if done is not None and done.status in TERMINAL_STATUSES:
                return sim._result(done.rows, done.status, done.server)
            sim.store.write_config(sim._config_info())
            with tracked(get_logger(logger), sim.config, sim.config_hash, sim.store.dir, 0,
                         lambda: sim._summary(self.rows, self.status) if self.rows else {"status": self.status}) \
                    as self.log, contextlib.suppress(_Diverged):
                self.start(grid, self.initial_arrays(), num_rounds=sim.config.rounds, timeout=self.timeout,
                           evaluate_fn=self.evaluate_global)
            sim._save(TrainingState(self.server, {}, sim.model.theta0(), len(self.rows)), self.rows, self.status)
            return sim._result(self.rows, self.status, self.server)

    def connect(self, grid: Grid) -> None:
        """Map fedlab client ids to node ids: ask every node its ``partition-id`` (a "query" message)."""
        n = self.sim.config.n_clients
        deadline = time.monotonic() + self.timeout
        while len(nodes := list(grid.get_node_ids())) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(nodes)} of the run's n_clients={n} Flower nodes connected "
                                   f"within {self.timeout:g} s")
            time.sleep(1.0)
        queries = [Message(RecordDict({ROUND: self._round_record({})}), dst_node_id=node,
                           message_type=QUERY_CLIENT_ID, group_id="connect") for node in nodes]
        for reply in grid.send_and_receive(queries, timeout=self.timeout):
            _raise_on_error(reply, "answering which client it is")
            i = int(reply.content.config_records[ROUND]["client"])
            if i in self.node_of:
                raise ValueError(f"nodes {self.node_of[i]} and {reply.metadata.src_node_id} both say they are "
                                 f"client {i} (partition-id); each must be a different client")
            self.node_of[i] = reply.metadata.src_node_id
        missing = sorted(set(range(n)) - set(self.node_of))
        if missing:
            raise RuntimeError(f"no Flower node answered as client(s) {missing}")

    def _round_record(self, values: dict) -> ConfigRecord:
        if self.experiment is not None:
            values = {**values, "experiment": self.experiment}
        return ConfigRecord(values)

    # --- Strategy ------------------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if not self.node_of:
            self.connect(grid)
        t = server_round - 1
        clients = [int(c) for c in self.sim.sample(t)]
        info = round_info(self.sim, t, clients)
        server = from_record(arrays, self.sim.config.device)
        msg = self.algorithm.broadcast(server, info)
        messages, down = [], Traffic()
        for i in clients:
            record = to_record(msg)
            down = down + traffic(record)
            rnd = self._round_record({"round": t, "client": i, "clients": clients,
                                      "last-round": self.last_round.get(i, -1)})
            content = RecordDict({BROADCAST: record, ROUND: rnd})
            messages.append(Message(content, dst_node_id=self.node_of[i], message_type=MessageType.TRAIN,
                                    group_id=str(server_round)))
        self._pending = _Pending(t, clients, info, server, msg, down, time.perf_counter())
        return messages

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        p = self._pending
        if p is None or p.t != server_round - 1:
            raise RuntimeError(f"aggregate_train for round {server_round} without its configure_train")
        client_of = {node: i for i, node in self.node_of.items()}
        by_client: dict[int, Message] = {}
        for reply in replies:
            i = client_of.get(reply.metadata.src_node_id, -1)
            _raise_on_error(reply, f"in round {server_round} (client {i})")
            by_client[i] = reply
        missing = sorted(set(p.clients) - set(by_client))
        if missing:
            raise RuntimeError(f"round {server_round}: no reply from client(s) {missing} within {self.timeout:g} s")
        up = Traffic()
        nowhere = torch.full((self.sim.model.dim,), math.nan, device=self.sim.config.device)  # θ_{i,K}: not sent
        p.results = []
        for i in p.clients:  # client-id order, as the engine stacks them
            record = by_client[i].content.array_records[UPLOAD]
            up = up + traffic(record)
            loss = torch.tensor(float(by_client[i].content.metric_records[METRICS]["train-loss"]))  # float32, exact
            p.results.append(ClientResult(i, nowhere, from_record(record, self.sim.config.device), {}, loss))
        uploads = {k: torch.stack([r.upload[k] for r in p.results]) for k in p.results[0].upload}
        self.server = self.algorithm.aggregate(p.server, uploads, p.info)
        for i in p.clients:
            self.last_round[i] = p.t
        train_loss = float(torch.stack([r.mean_loss for r in p.results]).mean())
        self.rounds.append(RoundRecord(server_round, p.clients, p.downlink, up, train_loss,
                                       wall_seconds=time.perf_counter() - p.started))
        return to_record(self.server), MetricRecord({"train-loss": train_loss})

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # the global model is evaluated on the server (evaluate_global), as in the engine

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """The round's metrics row, the engine's (test accuracy every ``eval_every`` rounds and at the end,
        client evaluation, costs), handed to the tracker; raises ``_Diverged`` after a diverged round."""
        p = self._pending
        if server_round == 0 or p is None or p.results is None:
            return None
        self._pending = None
        outcome = RoundOutcome(np.asarray(p.clients), p.info, p.msg, p.results)
        # the clients' states live on the SuperNodes: the server's view holds none (personalised methods
        # with client_eval are refused before a simulation starts)
        state = TrainingState(self.server, {}, self.sim.model.theta0(), p.t + 1)
        row, diverged = self.sim._round_row(p.t, outcome, state, self._eval_set)
        row.update(cost_columns(row, self.rows[-1] if self.rows else None, outcome,
                                self.algorithm.grad_evals_per_step))
        row["wall_seconds"] = time.perf_counter() - p.started
        self.rows.append(row)
        self.log(server_round, row)
        self.status = self.sim._status(p.t, diverged, self.rows)
        rec = self.rounds[-1]
        rec.test_acc, rec.test_loss = row["test_acc"], row["test_loss"]
        if self.on_round is not None:
            self.on_round(rec)
        if diverged:
            raise _Diverged
        return None if np.isnan(rec.test_acc) else MetricRecord({"accuracy": rec.test_acc, "loss": rec.test_loss})

    def summary(self) -> None:
        c = self.sim.config
        log(INFO, "\t├── fedlab algorithm: %s (%s)", c.algorithm, self.algorithm.hp)
        log(INFO, "\t├── clients: %d, sampling: %s", c.n_clients, c.sampling)
        log(INFO, "\t└── state kept: %s", self.algorithm.state_where)


def _raise_on_error(reply: Message, doing: str) -> None:
    if reply.has_error():
        raise RuntimeError(f"Flower node {reply.metadata.src_node_id} failed {doing}: {reply.error.reason}")


def make_server_app(experiments: Config | Mapping[str, Config] | None = None, *,
                    on_round: Callable[[RoundRecord], None] | None = None,
                    on_finish: Callable[[str | None, FedlabStrategy, RunResult], None] | None = None,
                    timeout: float = 3600.0, logger: Logger | str | None = None) -> ServerApp:
    """fedlab's ServerApp for one Config, for named Configs run one after another over one federation,
    or (None) for the Config in Flower's run config. ``on_finish(name, strategy, result)`` receives each
    experiment's stored run; ``logger``: a tracker, as for ``fedlab.run``."""
    named = named_configs(experiments)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        runs = named if named is not None else {None: config_from_run_config(context.run_config)}
        for name, cfg in runs.items():
            strategy = FedlabStrategy(flower_simulation(cfg), on_round=on_round, timeout=timeout, experiment=name)
            result = strategy.run(grid, logger)
            if on_finish is not None:
                on_finish(name, strategy, result)

    return app
