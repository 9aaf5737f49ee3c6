"""SCAFFOLD, option II control variates (Karimireddy et al., ICML 2020), as in FL-Simulator
``server/SCAFFOLD.py`` + ``client/scaffold.py``.

Client i holds its control variate c_i; the server holds θ and the global variate c. Round t:

    local steps (minibatch ξ):   d = ∇f_i(θ; ξ) + (c − c_i)
                                 θ ← θ − η_t ( clip(d, C) + wd·θ )
    after K steps:               Δ_i  = θ_{i,K} − θ^t                      (descent displacement)
                                 c_i⁺ = c_i − c − Δ_i / (K η_t)            (option II)
                                 upload Δ_i and Δc_i = c_i⁺ − c_i;  keep c_i ← c_i⁺
    server:                      θ^{t+1} = θ^t + η_g · (1/m) Σ_{i∈S_t} Δ_i
                                 c ← c + (1/N) Σ_{i∈S_t} Δc_i

Since c and every c_i start at 0, the server's c always equals (1/N) Σ_{all i} c_i. K is the number
of steps the client actually ran (the ``K`` argument of ``upload``); Δ_i contains the weight-decay
contribution.

State: server θ, c; client c_i (it stays on the client and is not communicated). Communication per
round: down 2·d (θ^t, c), up 2·d (Δ_i, Δc_i). Gradient evaluations per step: 1.

Defaults: η_g = 1, c_i = c = 0 at start. Paper vs code: guide/methods.md#scaffold.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, RoundInfo, State, StepInfo, descend, stacked_mean,
)
from fedlab.algorithms.fedavg import FedAvgParams
from fedlab.models.functional import Batch, GradFn

@dataclass(frozen=True)
class ScaffoldParams(FedAvgParams):
    """SCAFFOLD's only hyperparameter is the server learning rate η_g (``server_lr``, default 1)."""


class ControlVariates:
    """The state of the control-variate methods (SCAFFOLD, FedMoSWA): the server keeps θ and the
    global variate c, each client its own c_i (zero at the start), and both θ and c are broadcast."""

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "c": torch.zeros_like(theta0)}

    def client_init(self, theta0: Tensor) -> State:
        return {"c_i": torch.zeros_like(theta0)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"], "c": server["c"]}


@register
class Scaffold(ControlVariates, Algorithm):
    name = "scaffold"
    label, color, order = "SCAFFOLD", "#1f77b4", 2
    paper = "Karimireddy et al., ICML 2020"
    hparams_cls = ScaffoldParams
    tuning = {}
    grad_evals_per_step = 1
    state_where = "server: θ, c; client: c_i"

    def _data_gradient(self, theta: Tensor, g: Tensor, correction: Tensor, batch: Batch,
                       grad_fn: GradFn) -> Tensor:
        """The data part of the descent direction; SCAFFOLD uses the plain minibatch gradient."""
        return g

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        correction = msg["c"] - cstate["c_i"]
        d = self._data_gradient(theta, g, correction, batch, grad_fn) + correction
        return descend(theta, d, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        delta = thetaK - theta0
        c_i = cstate["c_i"]
        c_new = c_i - msg["c"] - delta / (K * info.lr)
        return {"delta": delta, "delta_c": c_new - c_i}, {**cstate, "c_i": c_new}

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        theta = server["theta"] + self.hp.server_lr * stacked_mean(uploads, "delta")
        c = server["c"] + uploads["delta_c"].sum(dim=0) / info.n_clients
        return {**server, "theta": theta, "c": c}
