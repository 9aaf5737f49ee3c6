"""FedGloSS — federated global server-side sharpness (Caldarola et al., CVPR 2025, arXiv 2412.03752,
"Beyond Local Sharpness: Communication-Efficient Global Sharpness-aware Minimization for Federated
Learning"); authors' code pietrocagnasso/fedgloss.

Round t, server → clients (Δ̃ = −Δ̄^{t−1}, the last pseudo-gradient; Δ̃ = 0 before round 1)::

    ε^t = ρ_s(t) Δ̃/(‖Δ̃‖ + ε)          θ̃ = θ^t + ε^t   (the only vector sent)

Client i (θ_{i,0} = θ̃; λ_i = 0 at its first participation), each step with minibatch ξ::

    g   = ∇f_i(θ; ξ)                                    its loss is the one reported
    g̃   = ∇f_i(θ + ρ_l(t) g/(‖g‖ + ε); ξ)              local SAM, same batch
    θ  ← θ − η_t (clip(g̃ − λ_i + (θ − θ̃)/β, C) + wd·θ)

upload Δ_i = θ_{i,K} − θ̃; the client keeps λ_i ← λ_i − Δ_i/β. Server, Δ̄ = mean_{i∈S_t} Δ_i::

    σ       ← σ − Σ_{i∈S_t} Δ_i / (β N m)   (= σ − Δ̄/(βN))
    θ^{t+1} = θ^t + η_g Δ̄ − β σ              (ε^t removed: the step starts from θ^t)
    Δ̃       ← −Δ̄

``dual=False`` drops λ_i, the prox term and σ: θ^{t+1} = θ^t + η_g Δ̄ (server SAM + local SAM only).

ρ schedule (``ramp_rounds`` T_s ≥ 2; T_s ≤ 1: constant ρ from round 0):
``server_ramp="ramp"``: ρ(t) = ρ_0 + t (ρ − ρ_0)/T_s for t ≤ T_s, then ρ; the same for ρ_l and ρ_s.
``"code"``: ρ_l ramps, ρ_s(0) = ρ_0, ρ_s(t) = ρ_l + (ρ_s − ρ_0)/T_s for 1 ≤ t ≤ T_s, then ρ_s.

State: server θ, σ, Δ̃ (3·d); client λ_i (d). Communication per round: down 1·d (θ̃), up 1·d (Δ_i).
Gradient evaluations per step: 2.

``rho`` is ρ_l (the client radius, as in FedSAM), ``rho_server`` is ρ_s.
Defaults: the CIFAR-10 setting without warm-up, ρ_s = ρ_l = 0.15, β = 10. Presets ``cifar10`` (ρ_s =
ρ_l = 0.15, β = 10, T_s = 2000 from ρ_0 = 0.001; T = 10 000 rounds), ``cifar100`` (ρ_l = 0.2, ρ_s = 0.01,
β = 100, T_s = 15 000; T = 20 000), ``code`` (``cifar10`` with the code's server warm-up and ε = 1e-16).
Paper vs code: guide/methods.md#fedgloss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, check_range, descend, hparam, stacked_mean,
)
from fedlab.algorithms.sam import sam_gradient, sam_perturbation, sam_radii
from fedlab.models.functional import Batch, GradFn

Warmup = Literal["ramp", "code"]


@dataclass(frozen=True)
class FedGloSSParams(HParams):
    rho_server: float = hparam(0.15, lo=0)  # ρ_s, server SAM radius (CIFAR-10 0.15; CIFAR-100 0.01)
    rho: float = hparam(0.15, lo=0)  # ρ_l, client SAM radius (CIFAR-10 0.15; CIFAR-100 0.2)
    beta: float = hparam(10.0, lo=0, lo_open=True)  # ADMM penalty β (CIFAR-10 10; CIFAR-100 100)
    dual: bool = True  # the ADMM terms λ_i, (θ − θ̃)/β and σ
    ramp_rounds: int = hparam(0, lo=0)  # T_s; ≥ 2 ramps ρ from rho0 (paper: 2000 / 15 000)
    rho0: float = hparam(0.001, lo=0)  # ρ at round 0 of the warm-up
    server_ramp: Warmup = "ramp"  # "ramp" (intent) or "code" (server list built from the client ρ)
    server_lr: float = hparam(1.0, lo=0, lo_open=True)  # η_g (FedOpt SGD lr 1, momentum 0)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g‖ and ‖Δ̃‖ (code: 1e-16 and none)

    def validate(self) -> None:
        if self.ramp_rounds > 1:
            check_range("rho0", self.rho0, hi=max(self.rho, self.rho_server))


@register
class FedGloSS(Algorithm):
    name = "fedgloss"
    label, color, order = "FedGloSS", "#4daf4a", 17
    paper = "Caldarola et al., CVPR 2025 (arXiv 2412.03752)"
    hparams_cls = FedGloSSParams
    tuning = {"rho": sam_radii(FedGloSSParams.rho), "rho_server": sam_radii(FedGloSSParams.rho_server)}  # CIFAR-10 0.15
    grad_evals_per_step = 2
    state_where = "server: θ, σ, Δ̃ (last pseudo-gradient); client: λ_i"
    presets = {
        "cifar10": {"rho_server": 0.15, "rho": 0.15, "beta": 10.0, "ramp_rounds": 2000, "rho0": 0.001},
        "cifar100": {"rho_server": 0.01, "rho": 0.2, "beta": 100.0, "ramp_rounds": 15000, "rho0": 0.001},
        "code": {"rho_server": 0.15, "rho": 0.15, "beta": 10.0, "ramp_rounds": 2000, "rho0": 0.001,
                 "server_ramp": "code", "eps": 1e-16},
    }

    def _ramp(self, t: int, rho: float) -> float:
        T_s, rho0 = self.hp.ramp_rounds, self.hp.rho0
        if T_s <= 1 or t > T_s:
            return rho
        return rho0 + t * (rho - rho0) / T_s

    def rho_local_at(self, t: int) -> float:
        return self._ramp(t, self.hp.rho)

    def rho_server_at(self, t: int) -> float:
        T_s = self.hp.ramp_rounds
        if self.hp.server_ramp == "code" and T_s > 1 and 1 <= t <= T_s:
            return self.hp.rho + (self.hp.rho_server - self.hp.rho0) / T_s
        return self._ramp(t, self.hp.rho_server)

    def server_init(self, theta0: Tensor) -> State:
        zeros = torch.zeros_like(theta0)
        return {"theta": theta0.clone(), "sigma": zeros.clone(), "pseudo_grad": zeros}

    def client_init(self, theta0: Tensor) -> State:
        return {"lam": torch.zeros_like(theta0)} if self.hp.dual else {}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        eps_t = sam_perturbation(server["pseudo_grad"], self.rho_server_at(info.round), self.hp.eps)
        return {"theta": server["theta"] + eps_t}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        g_sam, _ = sam_gradient(theta, g, self.rho_local_at(step.round), batch, grad_fn, self.hp.eps)
        if self.hp.dual:
            g_sam = g_sam - cstate["lam"] + (theta - msg["theta"]) / self.hp.beta
        return descend(theta, g_sam, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        delta = thetaK - theta0
        if not self.hp.dual:
            return {"delta": delta}, cstate
        return {"delta": delta}, {"lam": cstate["lam"] - delta / self.hp.beta}

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        delta_bar = stacked_mean(uploads, "delta")
        theta = server["theta"] + self.hp.server_lr * delta_bar
        new = {**server, "pseudo_grad": -delta_bar}
        if self.hp.dual:
            sigma = server["sigma"] - delta_bar / (self.hp.beta * info.n_clients)
            theta = theta - self.hp.beta * sigma
            new["sigma"] = sigma
        new["theta"] = theta
        return new
