"""FedMoSWA — momentum-based stochastic controlled weight averaging (Liu et al., ICML 2025, arXiv
2507.20016): FedSWA (:mod:`fedlab.algorithms.fedswa`) plus SCAFFOLD-style control variates whose
global variate is an EMA of the clients' variates. Paper / first-upload form.

Client i, round t (θ_{i,0} = θ^t, receives θ^t and c), steps k = 0..K−1 with the FedSWA schedule
η_k = λ η_t (1 − (1 − ρ) k/K)::

    g = ∇f_i(θ; ξ_k)
    θ ← θ − η_k (clip(g, C) + (c − c_i) + wd·θ)          correction outside the clip (default)
    c_i⁺ = c_i − c + (θ_{i,0} − θ_{i,K}) / Σ_k η_k        option II, with the exact Σ_k η_k
    upload Δ_i = θ_{i,K} − θ_{i,0} and (c_i⁺ − c);  keep c_i ← c_i⁺ on the client

Server, with m = |S_t|::

    c^{t+1} = c^t + γ · mean_{i∈S_t}(c_i⁺ − c^t)  = (1 − γ) c^t + γ · mean_S c_i⁺
    θ^{t+1} = θ^t + α · mean_{i∈S_t} Δ_i

State: server θ, c (2·d); client c_i (d), kept on the client. Communication per round: down 2·d
(θ^t, c^t), up 2·d (Δ_i, c_i⁺ − c^t). Gradient evaluations per step: 1.

Options: ``clip_correction=True`` clips the whole direction clip(g + c − c_i); ``c_first_round_mean=True``
sets c to the plain mean of the variates in round 0 (γ = 1 once).
Defaults: γ = 0.2, ρ = 0.1, α = 1, λ = 1. Presets: ``paper`` (ρ 0.1, α 1.5, γ 0.2), ``code`` (ρ = 1,
γ = 0.4, α = 1, c = mean c_i⁺ in round 0), ``first_upload`` (ρ 0.1, γ = 0.1, c = mean c_i⁺ in round 0).
Paper vs code, and the code's broken per-client c_i: guide/methods.md#fedmoswa.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, descend, hparam, stacked_mean
from fedlab.algorithms.fedswa import FedSWA, FedSWAParams, swa_learning_rate_sum
from fedlab.algorithms.scaffold import ControlVariates
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedMoSWAParams(FedSWAParams):
    gamma: float = hparam(0.2, lo=0, hi=1, lo_open=True)  # momentum of the global control variate (paper ablation: 0.2 best)
    clip_correction: bool = False  # True: clip(g + c − c_i) (FL-Sim SCAFFOLD) instead of clip(g) + c − c_i
    c_first_round_mean: bool = False  # True: c^1 = mean c_i⁺ (both code versions), else the EMA from 0


@register
class FedMoSWA(ControlVariates, FedSWA):
    name = "fedmoswa"
    label, color, order = "FedMoSWA", "#393b79", 13
    paper = "Liu et al., ICML 2025 (FedMoSWA)"
    hparams_cls = FedMoSWAParams
    tuning = {"rho": (0.1, 0.5), "gamma": (0.1, 0.2)}
    grad_evals_per_step = 1
    state_where = "server: θ, c; client: c_i"
    presets = {
        "paper": {"rho": 0.1, "alpha": 1.5, "gamma": 0.2},
        "code": {"rho": 1.0, "alpha": 1.0, "gamma": 0.4, "c_first_round_mean": True},
        "first_upload": {"rho": 0.1, "alpha": 1.0, "gamma": 0.1, "c_first_round_mean": True},
    }

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        correction = msg["c"] - cstate["c_i"]
        lr = self.step_lr(step)
        if self.hp.clip_correction:
            theta_next = descend(theta, g + correction, step, lr=lr)
        else:
            theta_next = descend(theta, g, step, unclipped=correction, lr=lr)
        return theta_next, cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        total_lr = swa_learning_rate_sum(info.lr, K, self.hp.rho, self.hp.lr_multiplier)
        c_new = cstate["c_i"] - msg["c"] + (theta0 - thetaK) / total_lr
        return {"delta": thetaK - theta0, "dc": c_new - msg["c"]}, {"c_i": c_new}

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        gamma = 1.0 if (self.hp.c_first_round_mean and info.round == 0) else self.hp.gamma
        new = super().aggregate(server, uploads, info)
        new["c"] = server["c"] + gamma * stacked_mean(uploads, "dc")
        return new
