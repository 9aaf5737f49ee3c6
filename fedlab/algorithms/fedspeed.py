"""FedSpeed (Sun et al., ICLR 2023) as released in FL-Simulator ``client/fedspeed.py`` +
``server/FedSpeed.py`` (the authors' code) — FedDyn with a local SAM gradient.

Client i (state h_i), each local step with minibatch ξ:

    g  = ∇f_i(θ; ξ)                            raw gradient (no wd, no dual term)
    ε̂  = ρ g / (‖g‖ + ε)
    g̃  = ∇f_i(θ + ε̂; ξ)                        same minibatch
    θ ← θ − η_t ( clip(g̃ + λ(h_i − θ^t), C) + λθ + wd·θ )      (FedDyn's step with g̃ for g)

Upload Δ_i = θ_{i,K} − θ^t, client keeps h_i ← h_i + Δ_i; server = FedDyn:
h̄ ← h̄ + (1/N)Σ_S Δ_i, θ^{t+1} = θ^t + mean_S Δ_i + h̄ (= mean θ_{i,K} + mean over all N of h_i).

State: server θ, h̄; client h_i. Communication per round: down 1·d, up 1·d.
Gradient evaluations per step: 2.

Defaults: ρ = 0.1, λ = 0.1 (FL-Simulator README / parser), ε = 1e-12. With ρ = 0 FedSpeed is FedDyn
bit for bit. Paper vs code (the paper's gradient merging): guide/methods.md#fedspeed.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, hparam
from fedlab.algorithms.feddyn import REGULARISER_WEIGHTS, FedDyn, FedDynParams
from fedlab.algorithms.sam import sam_gradient, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedSpeedParams(FedDynParams):
    rho: float = hparam(0.1, lo=0)  # SAM radius ρ (FL-Simulator README)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g‖ (FL-Sim ESAM 1e-7)


@register
class FedSpeed(FedDyn):
    name = "fedspeed"
    label, color, order = "FedSpeed", "#e377c2", 8
    paper = "Sun et al., ICLR 2023"
    hparams_cls = FedSpeedParams
    tuning = {"rho": sam_radii(FedSpeedParams.rho), "lam": REGULARISER_WEIGHTS}  # README ρ 0.1
    grad_evals_per_step = 2
    state_where = "server: θ, h̄ (mean of all h_i); client: h_i"

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        g_sam, _ = sam_gradient(theta, g, self.hp.rho, batch, grad_fn, self.hp.eps)
        return self._dyn_descent(theta, g_sam, cstate, msg, step), cstate, loss
