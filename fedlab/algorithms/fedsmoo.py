"""FedSMOO — the paper's method (Sun et al., ICML 2023, "Dynamic Regularized Sharpness Aware
Minimization in Federated Learning"), as in the authors' code FL-Simulator ``client/fedsmoo.py``,
``optimizer/DRegSAM.py``, ``server/FedSMOO.py`` after the fix of 2024-10-26 (commit 502bec6). Not the
per-client adaptive scheme of the practitioner's blog: that variant is ``fedsmoo_adaptive``.

Client i keeps h_i (FedDyn dual, sum of its past Δ_i) and μ_i (dynamic dual of the perturbation);
the server broadcasts θ^t and the global perturbation s. Each local step with minibatch ξ:

    g  = ∇f_i(θ; ξ)                                raw gradient
    ĝ  = g − μ_i − s                               corrected ascent direction
    ε̂  = ρ ĝ / (‖ĝ‖ + ε)
    μ_i ← μ_i + (ε̂ − s)                            persists across steps and rounds
    g̃  = ∇f_i(θ + ε̂; ξ)                            same minibatch
    θ ← θ − η_t ( clip(g̃ + λ(h_i − θ^t), C) + λθ + wd·θ )      (FedDyn's step with g̃ for g)

After K steps: Δ_i = θ_{i,K} − θ^t; upload Δ_i and μ_i; the client keeps h_i ← h_i + Δ_i.
Server: FedDyn's update (h̄ ← h̄ + (1/N)Σ_S Δ_i; θ^{t+1} = θ^t + mean_S Δ_i + h̄), and

    s ← ρ μ̄ / (‖μ̄‖ + ε),   μ̄ = (1/m) Σ_{i∈S_t} μ_i          (s = 0 in round 0)

State: server θ, h̄, s; client h_i, μ_i. Communication per round: down 2·d (θ^t, s), up 2·d (Δ_i, μ_i).
Gradient evaluations per step: 2.

Defaults: ρ = 0.1, λ = 0.1, ε = 1e-12. With ρ = 0 FedSMOO is FedDyn bit for bit (ε̂ = 0, s = 0, μ_i
stays 0). Paper vs code, and the pre-fix bug: guide/methods.md#fedsmoo.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, hparam, stacked_mean
from fedlab.algorithms.feddyn import REGULARISER_WEIGHTS, FedDyn, FedDynParams
from fedlab.algorithms.sam import sam_gradient, sam_perturbation, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedSMOOParams(FedDynParams):
    rho: float = hparam(0.1, lo=0)  # SAM radius ρ, also the norm of the global perturbation s (README / issue #17)
    eps: float = hparam(1e-12, lo=0)  # added to ‖ĝ‖ and ‖μ̄‖ (FL-Sim 1e-7)


@register
class FedSMOO(FedDyn):
    name = "fedsmoo"
    label, color, order = "FedSMOO", "#2ca02c", 9
    paper = "Sun et al., ICML 2023"
    hparams_cls = FedSMOOParams
    tuning = {"rho": sam_radii(FedSMOOParams.rho), "lam": REGULARISER_WEIGHTS}  # README / issue #17: 0.1
    grad_evals_per_step = 2
    state_where = "server: θ, h̄, s; client: h_i, μ_i"

    def server_init(self, theta0: Tensor) -> State:
        return {**super().server_init(theta0), "s": torch.zeros_like(theta0)}

    def client_init(self, theta0: Tensor) -> State:
        return {**super().client_init(theta0), "mu": torch.zeros_like(theta0)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"], "s": server["s"]}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        s = msg["s"]
        direction = g - cstate["mu"] - s
        mu = cstate["mu"] + (sam_perturbation(direction, self.hp.rho, self.hp.eps) - s)
        g_sam, _ = sam_gradient(theta, direction, self.hp.rho, batch, grad_fn, self.hp.eps)
        return self._dyn_descent(theta, g_sam, cstate, msg, step), {**cstate, "mu": mu}, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        up, cstate = super().upload(theta0, thetaK, cstate, msg, info, K)
        return {**up, "mu": cstate["mu"]}, cstate

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        server = super().aggregate(server, uploads, info)
        s = sam_perturbation(stacked_mean(uploads, "mu"), self.hp.rho, self.hp.eps)
        return {**server, "s": s}
