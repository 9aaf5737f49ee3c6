"""One round of federated learning, the one protocol every driver runs.

    info    = round_info(t, ...)                    η_t and η_{t−1} from the schedule, the K_i, n
    msg     = broadcast(server, info)               what the server sends (θ, and c, m, ... per method)
    results = local_work(msg, states)               each sampled client: client_start, K × local_step, upload
    server  = aggregate(server, stacked uploads, info)

:meth:`fedlab.engine.Simulation.train_round` (real data, any executor), :func:`fedlab.toy.run_functional`
(gradient oracles) and :func:`fedlab.engine.accounting.communication_vectors` (what a method sends)
all call :func:`run_round`; :func:`round_info` is the only place a :class:`RoundInfo` is built.
"""
from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms.base import Algorithm, Layout, RoundInfo, State
from fedlab.engine.clients import ClientResult
from fedlab.engine.schedule import learning_rate

__all__ = ["LocalWork", "RoundRun", "round_info", "run_round"]

LocalWork = Callable[[State, list[State]], list[ClientResult]]
"""``local_work(msg, states) -> results``: the sampled clients' local training, in job order."""


def round_info(t: int, *, lr0: float, schedule: str, rounds: int, decay: float, client_steps: tuple[int, ...],
               n_clients: int, weight_decay: float, clip_norm: float | None, seed: int = 0,
               layout: Layout = ()) -> RoundInfo:
    """Round t's info: η_t and η_{t−1} (= η_0 at t = 0) from :func:`~fedlab.engine.schedule.learning_rate`;
    ``seed``, the run's, for the methods that draw random numbers (DP noise); ``layout``, θ's parameter
    tensors, for the methods that treat layers apart (FedFSA)."""
    lr = learning_rate(t, lr0, schedule, rounds, decay)
    prev = learning_rate(t - 1, lr0, schedule, rounds, decay) if t > 0 else lr
    return RoundInfo(round=t, lr=lr, prev_lr=prev, client_steps=client_steps, n_clients=n_clients,
                     weight_decay=weight_decay, clip_norm=clip_norm, seed=seed, layout=layout)


@dataclass
class RoundRun:
    server: State  # the aggregated server state after the round
    msg: State  # what was broadcast
    results: list[ClientResult]  # per sampled client, in job order


def run_round(algorithm: Algorithm, server: State, client_states: MutableMapping[int, State],
              clients: Sequence[int], theta0: Tensor, info: RoundInfo, local_work: LocalWork) -> RoundRun:
    """Broadcast → local work → upload → aggregate; stores each client's new persistent state.

    A client seen for the first time starts from ``algorithm.client_init(theta0)``; a state left
    empty by the method (stateless clients) is not stored.
    """
    msg = algorithm.broadcast(server, info)
    states = [client_states.get(i) or algorithm.client_init(theta0) for i in clients]
    results = local_work(msg, states)
    uploads = {k: torch.stack([r.upload[k] for r in results]) for k in results[0].upload}
    server = algorithm.aggregate(server, uploads, info)
    for r in results:
        if r.state:
            client_states[r.client] = r.state
    return RoundRun(server, msg, results)
