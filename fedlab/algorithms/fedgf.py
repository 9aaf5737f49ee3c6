"""FedGF — federated learning for global flatness (Lee et al., ICML 2024, PMLR 235:27037–27071,
"Rethinking the Flat Minima Searching in Federated Learning"); authors' code hwan-sig/Official-FedGF.

The server sends, besides θ^t, a globally perturbed model w̃^t along the last pseudo-gradient
p = θ^{t−1} − θ^t and a weight c_t ∈ [0, 1]. Client i, each step with minibatch ξ (θ_{i,0} = θ^t)::

    g   = ∇f_i(θ; ξ)                                   its loss is the one reported
    θ⁺  = θ + ρ g/(‖g‖ + ε)                            the local SAM point
    θ̂   = c_t w̃^t + (1 − c_t) θ⁺                       (round 0: c_0 = 0, θ̂ = θ⁺ exactly)
    θ  ← θ − η_t (clip(∇f_i(θ̂; ξ), C) + wd·θ)          descent from the unperturbed θ

upload Δ_i = θ_{i,K} − θ^t. Server, with Δ̄ = mean_{i∈S_t} Δ_i::

    D_t     = (1/m) Σ_{i∈S_t} ‖Δ_i‖                     client divergence ‖θ^t − θ_{i,K}‖
    c_{t+1} = share of the last min(t + 1, W) rounds with D > T_D
    θ^{t+1} = θ^t + η_g Δ̄;   p = θ^t − θ^{t+1};   w̃^{t+1} = θ^{t+1} + ρ_g p/(‖p‖ + ε)

With c ≡ 0 (T_D never exceeded) FedGF is FedSAM.

State: server θ, p (2·d), the window of W bits and c. Clients are stateless. Communication per round:
down 2·d + 1 scalar (θ^t, w̃^t, c_t; w̃⁰ = θ⁰ in round 0), up 1·d (the client model).
Gradient evaluations per step: 2.

Defaults: ρ = 0.05 (its grid's middle), ρ_g = ρ, W = 30, T_D = 0.2 (the lower of the script's c_o ∈ {0.2, 0.3}).
Paper vs code: guide/methods.md#fedgf.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, descend, hparam, stacked_mean
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_perturbation, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedGFParams(FedAvgParams):
    rho: float = hparam(0.05, lo=0)  # local SAM radius (script grid 0.02, 0.05, 0.1)
    rho_global: float | None = hparam(None, lo=0)  # ρ_g of w̃; None: = rho (the code's fallback)
    window: int = hparam(30, lo=1)  # W, rounds over which c is the share of divergent rounds (script: 30)
    divergence_threshold: float = hparam(0.2, lo=0)  # T_D (fedlab's reading of the script's c_o 0.2 / 0.3)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g‖ and ‖p‖ (code: 1e-16 and none)


@register
class FedGF(FedAvg):
    name = "fedgf"
    label, color, order = "FedGF", "#a6761d", 18
    paper = "Lee et al., ICML 2024"
    hparams_cls = FedGFParams
    tuning = {"rho": sam_radii(FedGFParams.rho), "divergence_threshold": (0.2, 0.3)}  # code default 0.05
    grad_evals_per_step = 2
    state_where = "server: θ, p (last update), W-round window, c"

    @property
    def rho_global(self) -> float:
        return self.hp.rho if self.hp.rho_global is None else self.hp.rho_global

    def server_init(self, theta0: Tensor) -> State:
        scalar = torch.zeros((), dtype=torch.float64)
        return {"theta": theta0.clone(), "p": torch.zeros_like(theta0),
                "window": torch.zeros(self.hp.window, dtype=torch.float64), "filled": scalar.clone(), "c": scalar}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        # round 0: p = 0 and c = 0, so w̃ = θ⁰ and the mix below is exactly the local SAM point
        perturbed = server["theta"] + sam_perturbation(server["p"], self.rho_global, self.hp.eps)
        return {"theta": server["theta"], "perturbed": perturbed, "c": server["c"].to(perturbed.dtype)}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        point = theta + sam_perturbation(g, self.hp.rho, self.hp.eps)
        c = msg["c"]
        point = c * msg["perturbed"] + (1.0 - c) * point
        g_sam, _ = grad_fn(point, batch)
        return descend(theta, g_sam, step), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        divergence = torch.linalg.vector_norm(uploads["delta"], dim=1).mean()
        bit = (divergence > self.hp.divergence_threshold).to(torch.float64)
        window = torch.cat([server["window"][1:], bit.reshape(1)])
        filled = torch.clamp(server["filled"] + 1.0, max=float(self.hp.window))
        theta = server["theta"] + self.hp.server_lr * stacked_mean(uploads, "delta")
        return {**server, "theta": theta, "p": server["theta"] - theta, "window": window, "filled": filled,
                "c": window.sum() / filled}

    def round_metrics(self, server: State) -> dict[str, float]:
        return {"c": float(server["c"])}
