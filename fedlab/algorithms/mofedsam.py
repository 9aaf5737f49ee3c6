"""MoFedSAM — FedSAM with client-side global momentum (Qu et al., ICML 2022), as in FL-Simulator
``server/MoFedSAM.py`` + ``client/mofedsam.py``.

Round t, server → clients::

    m^t = −Δ̄^{t−1} / (K̄^{t−1} η_{t−1})      (m^0 = 0: no update exists before round 0)

K̄^{t−1} is the *mean* of the steps K_i the clients of round t−1 really ran (``RoundInfo.mean_steps``).

Client i, each local step with minibatch ξ (θ_{i,0} = θ^t)::

    g  = ∇f_i(θ; ξ)                           raw gradient; its loss is the one reported
    g̃  = ∇f_i(θ + ρ g/(‖g‖ + ε); ξ)            the shared SAM step (fedlab.algorithms.sam)
    d  = α g̃ + (1 − α) m^t                    α weights the fresh SAM gradient
    θ ← θ − η_t (clip(d, C) + wd·θ)            clip acts on the whole mixed direction (FL-Simulator)

upload Δ_i = θ_{i,K} − θ^t. Server: Δ̄^t = mean_{i∈S_t} Δ_i, θ^{t+1} = θ^t + η_g Δ̄^t, and it keeps
m^{t+1} = −Δ̄^t / (K̄^t η_t), divided by the K̄ and the lr that produced Δ̄^t.

State: server θ, m (2·d). Communication per round: down 2·d (θ^t, m^t), up 1·d (Δ_i).
Gradient evaluations per step: 2. Clients are stateless.

Defaults: α = 0.1, ρ = 0.1 (FL-Simulator), ε = 1e-12, η_g = 1. With α = 1 the momentum term is
multiplied by exactly 0 and MoFedSAM is FedSAM bit for bit. Paper vs code: guide/methods.md#mofedsam.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, descend, hparam, stacked_mean
from fedlab.algorithms.fedsam import FedSAM, FedSAMParams
from fedlab.algorithms.sam import sam_gradient, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class MoFedSAMParams(FedSAMParams):
    alpha: float = hparam(0.1, lo=0, hi=1)  # weight of the SAM gradient in d = α g̃ + (1 − α) m (FL-Simulator --alpha 0.1)


@register
class MoFedSAM(FedSAM):
    name = "mofedsam"
    label, color, order = "MoFedSAM", "#bcbd22", 6
    paper = "Qu et al., ICML 2022 (MoFedSAM); FL-Simulator implementation"
    hparams_cls = MoFedSAMParams
    tuning = {"rho": sam_radii(MoFedSAMParams.rho)}  # FL-Simulator default
    grad_evals_per_step = 2
    state_where = "server: θ, m (last mean update over K̄η)"

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "m": torch.zeros_like(theta0)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"], "m": server["m"]}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        g_sam, _ = sam_gradient(theta, g, self.hp.rho, batch, grad_fn, self.hp.eps)
        d = self.hp.alpha * g_sam + (1.0 - self.hp.alpha) * msg["m"]
        return descend(theta, d, step), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        delta_bar = stacked_mean(uploads, "delta")
        m = delta_bar / (-(info.mean_steps * info.lr))  # next round's m: K̄ and η of this round
        return {**server, "theta": server["theta"] + self.hp.server_lr * delta_bar, "m": m}
