"""FedSAM — local SAM at every client step (Qu et al., ICML 2022; Caldarola et al., ECCV 2022).

FL-Simulator ``client/fedsam.py``. For each local step with minibatch ξ:

    g  = ∇f_i(θ; ξ)                    raw cross-entropy gradient (no weight decay)
    ε̂  = ρ g / (‖g‖ + ε)               ascent along the local minibatch gradient
    g̃  = ∇f_i(θ + ε̂; ξ)                same minibatch
    θ ← θ − η_t (clip(g̃, C) + wd·θ)     descent from the unperturbed point

Server: as FedAvg. Two gradient evaluations per step; down 1·d, up 1·d.
With ρ = 0, ε̂ is exactly zero and FedSAM reproduces FedAvg bit for bit.
Paper vs code: guide/methods.md#fedsam.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_gradient, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedSAMParams(FedAvgParams):
    rho: float = hparam(0.1, lo=0)  # SAM radius ρ (FL-Simulator default 0.1; Liu's code hard-codes 0.05)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g‖ (FL-Sim 1e-7, Liu 1e-12, Caldarola 1e-16)


@register
class FedSAM(FedAvg):
    name = "fedsam"
    label, color, order = "FedSAM", "#ff7f0e", 5
    paper = "Qu et al., ICML 2022; Caldarola et al., ECCV 2022"
    hparams_cls = FedSAMParams
    tuning = {"rho": sam_radii(FedSAMParams.rho)}  # FL-Simulator 0.1 (Liu's code 0.05)
    grad_evals_per_step = 2

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        g_sam, _ = sam_gradient(theta, g, self.hp.rho, batch, grad_fn, self.hp.eps)
        return descend(theta, g_sam, step), cstate, loss
