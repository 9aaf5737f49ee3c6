"""FedProx (Li et al., MLSys 2020), as in FL-Simulator ``client/fedprox.py``.

Client i minimises f_i(θ) + (μ/2)‖θ − θ^t‖², so every local step (minibatch ξ) is

    g = ∇f_i(θ; ξ)
    θ ← θ − η_t ( clip(g − μ θ^t, C) + μ θ + wd·θ )

i.e. the effective gradient is g + μ(θ − θ^t) + wd·θ (−μθ^t clipped with g, μθ outside the clip).

Server: θ^{t+1} = θ^t + η_g · (1/m) Σ_{i∈S_t} Δ_i, Δ_i = θ_{i,K} − θ^t.

State: server θ; clients stateless. Communication per round: down 1·d (θ^t), up 1·d (Δ_i).
Gradient evaluations per step: 1.

Defaults: μ = 0.01; preset ``flsim_default``: μ = 0.1. With μ = 0 FedProx is FedAvg bit for bit.
Paper vs code, and other codes' conventions for μ: guide/methods.md#fedprox.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedProxParams(FedAvgParams):
    mu: float = hparam(0.01, lo=0)  # proximal weight μ, gradient μ(θ − θ^t) (FL-Sim `--lamb` convention; README 0.1 / 0.01)


@register
class FedProx(FedAvg):
    name = "fedprox"
    label, color, order = "FedProx", "#8c8c8c", 1
    paper = "Li et al., MLSys 2020"
    hparams_cls = FedProxParams
    tuning = {"mu": (0.01, 0.1)}  # the default and FL-Simulator's
    grad_evals_per_step = 1
    state_where = "server: θ"
    presets = {"flsim_default": {"mu": 0.1}}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        mu = self.hp.mu
        return descend(theta, g - mu * msg["theta"], step, unclipped=mu * theta), cstate, loss
