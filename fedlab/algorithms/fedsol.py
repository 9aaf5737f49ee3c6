"""FedSOL — federated stabilized orthogonal learning (Lee et al., CVPR 2024, pp. 12512–12522, arXiv
2308.12532, "FedSOL: Stabilized Orthogonal Learning with Proximal Restrictions in Federated
Learning"); authors' code Lee-Gihun/FedSOL.

Client i, each step with minibatch ξ = (x, y) (θ_{i,0} = θ^t; the teacher is the received θ^t)::

    L_p(θ) = KL( softmax(f(x; θ^t)/τ) ‖ softmax(f(x; θ)/τ) )      averaged over the batch
    g_p    = ∇L_p(θ; ξ)                                 one gradient; the reported loss is CE(θ; ξ)
    e      = ρ g_p/(‖g_p‖ + ε)    (e = 0 while θ = θ^t, where g_p = 0 exactly)
    θ     ← θ − η_t (clip(∇CE(θ + e; ξ), C) + wd·θ)     descent from the unperturbed θ

upload Δ_i = θ_{i,K} − θ^t. Server: θ^{t+1} = θ^t + η_g (1/m) Σ_{i∈S_t} Δ_i (FedAvg).

With ρ = 0 FedSOL is FedAvg bit for bit (e = 0; it still pays for g_p).

State: server θ; clients stateless. Communication per round: down 1·d (θ^t, which is also the
teacher), up 1·d (Δ_i). Gradient evaluations per step: 2 (g_p and the descent gradient; the teacher
adds one forward pass).

Defaults: ρ = 1.0 (the code's configs), τ = 3, ε = 1e-12; no presets.
Paper vs code, and the adaptive variant not implemented: guide/methods.md#fedsol.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_perturbation
from fedlab.models.functional import Batch, Distill, GradFn


@dataclass(frozen=True)
class FedSOLParams(FedAvgParams):
    rho: float = hparam(1.0, lo=0)  # perturbation radius ρ (configs/fedsol_fixed.json: 1.0)
    tau: float = hparam(3.0, lo=0, lo_open=True)  # temperature of the proximal KL (hard-coded 3 in the code)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g_p‖ (code: 1e-12)


@register
class FedSOL(FedAvg):
    name = "fedsol"
    label, color, order = "FedSOL", "#6a3d9a", 20
    paper = "Lee et al., CVPR 2024"
    hparams_cls = FedSOLParams
    # ρ scales a unit vector along the proximal gradient (configs: 1.0), not a loss-gradient radius
    tuning = {"rho": (0.0, 0.1, 0.5, 1.0)}  # ρ = 0 is FedAvg bit for bit
    grad_evals_per_step = 2
    state_where = "server: θ"

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        anchor = msg["theta"]
        # the proximal loss's weight is irrelevant after normalisation: plain KL, no τ² factor (as the code)
        g_p, loss = grad_fn(theta, batch, distill=Distill(anchor, self.hp.tau, 1.0, with_ce=False))
        e = sam_perturbation(g_p, self.hp.rho, self.hp.eps)
        moved = torch.ne(theta, anchor).any()  # False only at θ = θ^t, where ∇L_p = 0 exactly
        e = torch.where(moved, e, torch.zeros_like(e))
        g, _ = grad_fn(theta + e, batch)
        return descend(theta, g, step), cstate, loss
