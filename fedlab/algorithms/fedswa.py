"""FedSWA — stochastic weight averaging for FL (Liu et al., ICML 2025, arXiv 2507.20016).

Client i, round t, K local steps (θ_{i,0} = θ^t), step k = 0..K−1 with minibatch ξ_k::

    η_k = λ · η_t · (1 − (1 − ρ) k/K)   = λ [(1 − k/K) η_t + (k/K) ρ η_t]
    θ ← θ − η_k (clip(g_i(θ; ξ_k), C) + wd·θ)

so the step size falls linearly from λη_t (first step, full lr) towards λρη_t (reached at k = K, one
step after the last). λ = ``lr_multiplier``; K is ``StepInfo.K``. Upload Δ_i = θ_{i,K} − θ^t.

Server ("EMA aggregation", LookAhead-style), with v^t = mean_{i∈S_t} θ_{i,K}:

    θ^{t+1} = θ^t + α (v^t − θ^t) = θ^t + α · mean Δ_i          α > 1 extrapolates

State: server θ. Communication per round: down 1·d, up 1·d. Gradient evaluations per step: 1.
With ρ = 1, λ = 1, α = 1 every η_k is exactly η_t and FedSWA is FedAvg bit for bit.

Defaults: ρ = 0.1, α = 1.0, λ = 1. Presets ``paper`` (α = 1.5), ``code`` (λ = 2, ρ = 0, α = 1).
Paper vs code: guide/methods.md#fedswa.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, descend, hparam, stacked_mean,
)
from fedlab.models.functional import Batch, GradFn


def swa_learning_rate(lr: float, k: int, K: int, rho: float, multiplier: float = 1.0) -> float:
    """η_k = λ η (1 − (1 − ρ) k/K): linear from λη at k = 0 towards λρη at k = K.

    Written as one product so that ρ = 1, λ = 1 returns ``lr`` exactly (the FedAvg reduction).
    """
    return multiplier * lr * (1.0 - (1.0 - rho) * k / K)


def swa_learning_rate_sum(lr: float, K: int, rho: float, multiplier: float = 1.0) -> float:
    """Σ_{k<K} η_k, the total step length of one round (FedMoSWA's control-variate denominator)."""
    return sum(swa_learning_rate(lr, k, K, rho, multiplier) for k in range(K))


@dataclass(frozen=True)
class FedSWAParams(HParams):
    rho: float = hparam(0.1, lo=0, hi=1)  # end of the in-round lr decay, as a fraction of η_t (paper ablation: 0.1 best)
    alpha: float = hparam(1.0, lo=0, lo_open=True)  # server EMA/extrapolation weight (code: 1; paper ablation: 1.5 best)
    lr_multiplier: float = hparam(1.0, lo=0, lo_open=True)  # λ: the code's optimizer uses 2× the scheduled lr


@register
class FedSWA(Algorithm):
    name = "fedswa"
    label, color, order = "FedSWA", "#1b9e77", 12
    paper = "Liu et al., ICML 2025 (FedSWA)"
    hparams_cls = FedSWAParams
    # rho is the end of the in-round lr decay (a fraction of η), not a SAM radius
    tuning = {"rho": (0.1, 0.5), "alpha": (1.0, 1.5)}
    grad_evals_per_step = 1
    state_where = "server: θ"
    presets = {
        "paper": {"rho": 0.1, "alpha": 1.5, "lr_multiplier": 1.0},
        "code": {"rho": 0.0, "alpha": 1.0, "lr_multiplier": 2.0},
    }

    def step_lr(self, step: StepInfo) -> float:
        """η_k of this local step."""
        return swa_learning_rate(step.lr, step.k, step.K, self.hp.rho, self.hp.lr_multiplier)

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        return descend(theta, g, step, lr=self.step_lr(step)), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        return {**server, "theta": server["theta"] + self.hp.alpha * stacked_mean(uploads, "delta")}
