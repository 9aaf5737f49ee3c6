"""FedDyn — federated dynamic regularisation (Acar et al., ICLR 2021), as in FL-Simulator
``server/FedDyn.py`` + ``client/feddyn.py``.

Client i keeps h_i, the running sum of its past displacements Δ_i (= −∇L_i(θ_i^{prev})/λ in the
paper's notation). Local objective f_i(θ) + λ⟨θ, h_i − θ^t⟩ + (λ/2)‖θ‖², so each step (minibatch ξ):

    g = ∇f_i(θ; ξ)
    θ ← θ − η_t ( clip(g + λ(h_i − θ^t), C) + λθ + wd·θ )

(the linear term is clipped with g; λθ is passed to :func:`descend` as ``unclipped``).
After K steps: Δ_i = θ_{i,K} − θ^t; upload Δ_i; the client keeps h_i ← h_i + Δ_i.
Server (keeps θ and h̄ = (1/N) Σ_{all N clients} h_i, never-sampled clients counting with h_i = 0):

    h̄ ← h̄ + (1/N) Σ_{i∈S_t} Δ_i
    θ^{t+1} = mean_{i∈S_t} θ_{i,K} + h̄  = θ^t + (1/m) Σ_{i∈S_t} Δ_i + h̄

State: server θ, h̄; client h_i. Communication per round: down 1·d (θ^t), up 1·d (Δ_i). Gradient
evaluations per step: 1.

Defaults: λ = 0.1 (FL-Simulator ``--lamb``). FedSpeed and FedSMOO reuse this descent
(:meth:`FedDyn._dyn_descent`) and this server (:meth:`FedDyn.aggregate`) unchanged, so with ρ = 0 they
reproduce FedDyn bit for bit. Paper vs code: guide/methods.md#feddyn.
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


REGULARISER_WEIGHTS = (0.01, 0.1)
"""λ candidates in the dynamic regularisers' tuning grids (FL-Simulator's default 0.1 and its README's 0.01)."""


@dataclass(frozen=True)
class FedDynParams(HParams):
    lam: float = hparam(0.1, lo=0)  # λ, dynamic-regulariser weight (FL-Simulator `--lamb` default; README also 0.01)


@register
class FedDyn(Algorithm):
    name = "feddyn"
    label, color, order = "FedDyn", "#17becf", 3
    paper = "Acar et al., ICLR 2021"
    hparams_cls = FedDynParams
    tuning = {"lam": REGULARISER_WEIGHTS}
    grad_evals_per_step = 1
    state_where = "server: θ, h̄ (mean of all h_i); client: h_i"

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "h_mean": torch.zeros_like(theta0)}

    def client_init(self, theta0: Tensor) -> State:
        return {"h": torch.zeros_like(theta0)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"]}

    def _dyn_descent(self, theta: Tensor, data_grad: Tensor, cstate: State, msg: State,
                     step: StepInfo) -> Tensor:
        """θ − η (clip(data_grad + λ(h_i − θ^t), C) + λθ + wd θ): the step FedDyn/FedSpeed/FedSMOO share."""
        lam = self.hp.lam
        return descend(theta, data_grad + lam * (cstate["h"] - msg["theta"]), step, unclipped=lam * theta)

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        return self._dyn_descent(theta, g, cstate, msg, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        delta = thetaK - theta0
        return {"delta": delta}, {**cstate, "h": cstate["h"] + delta}

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        h_mean = server["h_mean"] + uploads["delta"].sum(dim=0) / info.n_clients
        theta = server["theta"] + stacked_mean(uploads, "delta") + h_mean
        return {**server, "theta": theta, "h_mean": h_mean}
