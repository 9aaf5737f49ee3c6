"""FedAvg (McMahan et al., AISTATS 2017), as in FL-Simulator's ``FedAvg``.

Client, K steps:  θ ← θ − η_t (clip(g_i(θ; ξ), C) + wd·θ);  upload Δ_i = θ_{i,K} − θ^t.
Server:           θ^{t+1} = θ^t + η_g · (1/m) Σ_{i∈S_t} Δ_i.
State: server θ. Communication per round: down 1·d, up 1·d. One gradient per step.
Paper vs code: guide/methods.md#fedavg.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, descend, hparam, stacked_mean,
)
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedAvgParams(HParams):
    server_lr: float = hparam(1.0, lo=0, lo_open=True)  # η_g; 1 = plain averaging of client models


@register
class FedAvg(Algorithm):
    name = "fedavg"
    label, color, order = "FedAvg", "#000000", 0
    paper = "McMahan et al., AISTATS 2017"
    hparams_cls = FedAvgParams
    tuning = {}
    grad_evals_per_step = 1
    state_where = "server: θ"

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        return descend(theta, g, step), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        return {**server, "theta": server["theta"] + self.hp.server_lr * stacked_mean(uploads, "delta")}
