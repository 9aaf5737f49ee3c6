"""FedLESAM-D — FedLESAM's locally estimated global perturbation on FedDyn (Fan et al., ICML 2024);
code MediaBrain-SJTU/FedLESAM (``client/fedlesam_d.py``, ``optimizer/LESAM_D.py``, ``server/FedLESAM_D.py``).

Client i, round t, θ_{i,0} = θ^t, with the perturbation δ_i of :mod:`fedlab.algorithms._lesam`
(``variant="paper"``: δ_i = ρ (θ_old,i − θ^t)/(‖θ_old,i − θ^t‖ + ε), zero at the first participation)::

    each step (minibatch ξ):  g̃ = ∇f_i(θ + δ_i; ξ)
                              θ ← θ − η_t ( clip(g̃ + λ(h_i − θ^t), C) + λθ + wd·θ )
    after K_i steps:          upload Δ_i = θ_{i,K} − θ^t;  keep h_i ← h_i + Δ_i (and θ_old,i ← θ^t, seen_i ← 1)
    server:                   h̄ ← h̄ + (1/N) Σ_{i∈S_t} Δ_i;   θ^{t+1} = θ^t + mean_{i∈S_t} Δ_i + h̄

that is FedDyn's local objective f_i(θ) + λ⟨θ, h_i − θ^t⟩ + (λ/2)‖θ‖² with its data gradient taken at
the perturbed point (the code evaluates the whole loss there; the linear term's gradient does not
depend on the point, and λθ comes from SGD's weight decay at the unperturbed θ), and FedDyn's server
unchanged. With ρ = 0 the method is :class:`~fedlab.algorithms.feddyn.FedDyn` bit for bit.

State: server θ, h̄; client h_i, θ_old,i, seen_i (``variant="last_global_update"``: server θ, h̄, Δ^{t−1},
where Δ^{t−1} = θ^t − θ^{t−1} includes h̄, as the code's ``global_update``; client h_i).
Communication per round: down 1·d (θ^t; 2·d with ``last_global_update``), up 1·d (Δ_i). Gradient
evaluations per step: 1. Reported loss: f_i(θ + δ_i; ξ).

Defaults: λ = 0.1 (the code's ``--lamb``, as FedDyn), ρ = 0.01 (FedLESAM's), ε = 1e-12 (the code: 1e-7).
Paper vs code, and the code's bugs: guide/methods.md#fedlesam_d.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._lesam import LocallyEstimatedPerturbation
from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, hparam
from fedlab.algorithms.feddyn import REGULARISER_WEIGHTS, FedDyn, FedDynParams
from fedlab.algorithms.fedlesam import Variant
from fedlab.algorithms.sam import sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedLESAMDParams(FedDynParams):
    rho: float = hparam(0.01, lo=0)  # perturbation radius (FedLESAM's default)
    eps: float = hparam(1e-12, lo=0)  # added to ‖d‖
    variant: Variant = "paper"  # "paper" (per-client θ_old) or "last_global_update" (the released code)


@register
class FedLESAMD(LocallyEstimatedPerturbation, FedDyn):
    name = "fedlesam_d"
    label, color, order = "FedLESAM-D", "#80b1d3", 22
    paper = "Fan et al., ICML 2024"
    hparams_cls = FedLESAMDParams
    tuning = {"rho": sam_radii(FedLESAMDParams.rho), "lam": REGULARISER_WEIGHTS}  # ρ = 0 is FedDyn
    grad_evals_per_step = 1
    state_where = "server: θ, h̄ (+ Δ^{t−1}: last_global_update); client: h_i (+ θ_old,i, seen_i: paper)"

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = self.perturbed_gradient(theta, cstate, msg, batch, grad_fn)
        return self._dyn_descent(theta, g, cstate, msg, step), cstate, loss
