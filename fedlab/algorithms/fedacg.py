"""FedACG — accelerated client gradient (Kim et al., CVPR 2024), as in geehokim/FedACG.

The server keeps θ^t and a global momentum m (m = 0 before round 0) and sends the look-ahead point

    θ̃^t = θ^t + λ m^{t−1}                          (one vector: down 1·d)

Client i starts from θ̃ and minimises f_i(θ) + β Σ(θ − θ̃)² (no ½, so the proximal gradient is
2β(θ − θ̃)); each step with minibatch ξ:

    θ ← θ − η_t ( clip(∇f_i(θ; ξ) + 2β(θ − θ̃), C) + wd·θ )

(the prox term is part of the loss, hence clipped with the gradient). Upload Δ_i = θ_{i,K} − θ̃.
Server:

    m^t     = λ m^{t−1} + (1/m) Σ_{i∈S_t} Δ_i
    θ^{t+1} = θ̃^t + (1/m) Σ_{i∈S_t} Δ_i   (= mean_S θ_{i,K} = θ^t + m^t)

State: server θ, m. Communication per round: down 1·d (θ̃), up 1·d (Δ_i). Gradient evaluations per
step: 1.

Defaults (FedACG configs): λ = 0.85, β = 1e-3. With λ = 0 and β = 0 FedACG is FedAvg bit for bit.
Paper vs code: guide/methods.md#fedacg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, descend, hparam, stacked_mean,
)
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedACGParams(HParams):
    lam: float = hparam(0.85, lo=0, hi=1, hi_open=True)  # λ, server momentum and look-ahead coefficient (FedACG `server.momentum`)
    beta: float = hparam(1e-3, lo=0)  # β, weight of Σ(θ − θ̃)² in the local loss (FedACG `prox_loss.weight`)


@register
class FedACG(Algorithm):
    name = "fedacg"
    label, color, order = "FedACG", "#9467bd", 4
    paper = "Kim et al., CVPR 2024"
    hparams_cls = FedACGParams
    tuning = {}
    grad_evals_per_step = 1
    state_where = "server: θ, m"

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "m": torch.zeros_like(theta0)}

    def _lookahead(self, server: State) -> Tensor:
        return server["theta"] + self.hp.lam * server["m"]

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": self._lookahead(server)}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        d = g + 2.0 * self.hp.beta * (theta - msg["theta"])
        return descend(theta, d, step), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        mean_delta = stacked_mean(uploads, "delta")
        theta = self._lookahead(server) + mean_delta
        m = self.hp.lam * server["m"] + mean_delta
        return {**server, "theta": theta, "m": m}
