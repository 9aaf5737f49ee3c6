"""The communication a method costs, measured from what it sends (a fact of the algorithm contract).

It lives in the engine because it measures by running one real round (:func:`fedlab.engine.round.run_round`);
the algorithms only declare what they send.

``python -m fedlab algorithms`` prints it, and the registry test holds every method's declared
``uplink_vectors``/``downlink_vectors`` against it.
"""
from __future__ import annotations

from typing import Any

import torch

from fedlab.algorithms._registry import get_algorithm
from fedlab.engine.clients import ClientJob, GivenBatches, RoundWork, run_clients_sequential
from fedlab.engine.round import round_info, run_round

__all__ = ["communication_vectors"]


def communication_vectors(name: str, dim: int = 10_000) -> tuple[float, float]:
    """(uplink, downlink) per client per round in units of d, measured from what the method sends.

    Runs one round of one client (:func:`fedlab.engine.round.run_round`: broadcast → two local
    steps → upload → aggregate) on a quadratic oracle of dimension ``dim`` and counts the floats of
    the upload and of the message.
    """
    alg = get_algorithm(name)
    theta0 = torch.zeros(dim)
    target = torch.linspace(-1.0, 1.0, dim)

    def grad_fn(theta: torch.Tensor, batch: Any, *, distill: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        # a quadratic has no logits to distil from: a method's teacher (FedGMT, FedSOL) is ignored here,
        # which changes no float it sends
        r = theta - target
        return r, 0.5 * (r * r).sum()

    server = alg.server_init(theta0)
    info = round_info(0, lr0=0.1, schedule="constant", rounds=1, decay=1.0, client_steps=(2,), n_clients=4,
                      weight_decay=0.0, clip_norm=None)
    jobs = [ClientJob(0, [None, None], None)]
    done = run_round(alg, server, {}, [0], theta0, info,
                     lambda msg, states: run_clients_sequential(
                         RoundWork(alg, msg, jobs, states, GivenBatches(), grad_fn, info)))
    up = sum(v.numel() for v in done.results[0].upload.values()) / dim
    down = sum(v.numel() for v in done.msg.values()) / dim
    return round(up, 2), round(down, 2)

