"""The communication a method costs, measured from what it sends (a fact of the algorithm contract).

``python -m fedlab algorithms`` prints it, and the registry test holds every method's declared
``uplink_vectors``/``downlink_vectors`` against it.
"""
from __future__ import annotations

from typing import Any

import torch

from fedlab.algorithms.base import RoundInfo, StepInfo
from fedlab.algorithms._registry import get_algorithm

__all__ = ["communication_vectors"]


def communication_vectors(name: str, dim: int = 10_000) -> tuple[float, float]:
    """(uplink, downlink) per client per round in units of d, measured from what the method sends.

    Runs one client through broadcast → local steps → upload on a quadratic oracle of dimension
    ``dim`` and counts the floats of the upload and of the message.
    """
    alg = get_algorithm(name)
    theta0 = torch.zeros(dim)
    target = torch.linspace(-1.0, 1.0, dim)

    def grad_fn(theta: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        r = theta - target
        return r, 0.5 * (r * r).sum()

    server = alg.server_init(theta0)
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, client_steps=(2,), n_clients=4,
                     weight_decay=0.0, clip_norm=None)
    msg = alg.broadcast(server, info)
    cstate = alg.client_init(theta0)
    start = alg.client_start(msg, cstate, info)
    theta = start
    for k in range(2):
        theta, cstate, _ = alg.local_step(theta, cstate, msg, None, grad_fn,
                                          StepInfo(k=k, K=2, lr=0.1, weight_decay=0.0, clip_norm=None))
    upload, _ = alg.upload(start, theta, cstate, msg, info, 2)
    up = sum(v.numel() for v in upload.values()) / dim
    down = sum(v.numel() for v in msg.values()) / dim
    return round(up, 2), round(down, 2)
