"""FedGMT — sharpness-aware federated learning via the global model trajectory (Li et al., ICML 2025,
PMLR 267:35317–35341, "One Arrow, Two Hawks: Sharpness-aware Minimization for Federated Learning via
Global Model Trajectory"); authors' code harrylee999/FL-SAM.

Server, kept across rounds: θ^t, the trajectory θ̃^t (θ̃⁰ = θ⁰) and h̄ = (1/N) Σ_{all N clients} h_i.
Round t, server → clients: θ^t and θ̃^t. Client i keeps h_i = Σ of its past Δ_i (0 at its first
participation; h_i = −β u_i, the paper's ADMM dual u_i). Each step with minibatch ξ = (x, y)
(θ_{i,0} = θ^t)::

    q   = softmax(f(x; θ̃^t)/τ)                         the teacher, forward only
    L   = CE(f(x; θ), y) + γ τ² · KL(q ‖ softmax(f(x; θ)/τ))     (KL averaged over the batch)
    g   = ∇L(θ; ξ)                                     one gradient; the reported loss is the CE
    θ  ← θ − η_t (clip(g + h_i/β, C) + wd·θ)

upload Δ_i = θ_{i,K} − θ^t; the client keeps h_i ← h_i + Δ_i. Server (FedDyn's server, β-free)::

    h̄       ← h̄ + (1/N) Σ_{i∈S_t} Δ_i
    θ^{t+1} = θ^t + (1/m) Σ_{i∈S_t} Δ_i + h̄           (= mean θ_{i,K} + mean over all N of h_i)
    θ̃^{t+1} = α θ̃^t + (1 − α) θ^{t+1}

``dual=False`` drops h_i and h̄: θ^{t+1} = θ^t + mean Δ_i (distillation only). With γ = 0 the
teacher is never evaluated, and with γ = 0, ``dual=False`` FedGMT is FedAvg bit for bit.

State: server θ, θ̃, h̄ (3·d); client h_i (d). Communication per round: down 2·d (θ^t, θ̃^t), up 1·d
(Δ_i). Gradient evaluations per step: 1 (plus one forward pass).

Defaults = preset ``code``: γ = 1, α = 0.95, τ = 3, β = 10. Paper vs code: guide/methods.md#fedgmt.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, descend, hparam, stacked_mean,
)
from fedlab.models.functional import Batch, Distill, GradFn


@dataclass(frozen=True)
class FedGMTParams(HParams):
    gamma: float = hparam(1.0, lo=0)  # γ, sharpness strength (code -ga 1.0; README grid 0.5, 1, 2)
    alpha: float = hparam(0.95, lo=0, hi=1, hi_open=True)  # EMA coefficient of the trajectory (-al; grid 0.95, 0.995, 0.998)
    tau: float = hparam(3.0, lo=0, lo_open=True)  # softmax temperature τ of the distillation (-tau 3)
    beta: float = hparam(10.0, lo=0, lo_open=True)  # ADMM penalty β; the dual acts as h_i/β (-be 10)
    dual: bool = True  # the dual term h_i/β and the server's h̄


@register
class FedGMT(Algorithm):
    name = "fedgmt"
    label, color, order = "FedGMT", "#fb9a99", 19
    paper = "Li et al., ICML 2025"
    hparams_cls = FedGMTParams
    # the FL-SAM README's sharpness-strength grid; its α grid (0.95, 0.995, 0.998) is for 500 rounds
    tuning = {"gamma": (0.5, 1.0, 2.0)}
    grad_evals_per_step = 1
    state_where = "server: θ, θ̃ (EMA of the global models), h̄; client: h_i"
    presets = {"code": {"gamma": 1.0, "alpha": 0.95, "tau": 3.0, "beta": 10.0}}  # README's command

    def server_init(self, theta0: Tensor) -> State:
        server = {"theta": theta0.clone(), "teacher": theta0.clone()}
        if self.hp.dual:
            server["h_mean"] = torch.zeros_like(theta0)
        return server

    def client_init(self, theta0: Tensor) -> State:
        return {"h": torch.zeros_like(theta0)} if self.hp.dual else {}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"], "teacher": server["teacher"]}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        hp = self.hp
        if hp.gamma > 0:  # a Python float: the branch is static under vmap
            g, loss = grad_fn(theta, batch, distill=Distill(msg["teacher"], hp.tau, hp.gamma * hp.tau**2))
        else:
            g, loss = grad_fn(theta, batch)
        if hp.dual:
            g = g + cstate["h"] / hp.beta
        return descend(theta, g, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        delta = thetaK - theta0
        if not self.hp.dual:
            return {"delta": delta}, cstate
        return {"delta": delta}, {"h": cstate["h"] + delta}

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        theta = server["theta"] + stacked_mean(uploads, "delta")
        new = dict(server)
        if self.hp.dual:
            new["h_mean"] = server["h_mean"] + uploads["delta"].sum(dim=0) / info.n_clients
            theta = theta + new["h_mean"]
        new["theta"] = theta
        new["teacher"] = self.hp.alpha * server["teacher"] + (1.0 - self.hp.alpha) * theta
        return new
