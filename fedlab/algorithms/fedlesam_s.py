"""FedLESAM-S — FedLESAM's locally estimated global perturbation on SCAFFOLD (Fan et al., ICML 2024);
code MediaBrain-SJTU/FedLESAM (``client/fedlesam_s.py``, ``optimizer/LESAM_S.py``, ``server/FedLESAM_S.py``).

Client i, round t, θ_{i,0} = θ^t, with the perturbation δ_i of :mod:`fedlab.algorithms._lesam`
(``variant="paper"``: δ_i = ρ (θ_old,i − θ^t)/(‖θ_old,i − θ^t‖ + ε), zero at the first participation)::

    each step (minibatch ξ):  d = ∇f_i(θ + δ_i; ξ) + λ_c (c − c_i)
                              θ ← θ − η_t ( clip(d, C) + wd·θ )
    after K_i steps:          Δ_i = θ_{i,K} − θ^t;  c_i⁺ = c_i − c − Δ_i/(K_i η_t)   (SCAFFOLD option II)
                              upload Δ_i and Δc_i = c_i⁺ − c_i;  keep c_i ← c_i⁺ (and θ_old,i ← θ^t, seen_i ← 1)
    server:                   θ^{t+1} = θ^t + η_g mean_{i∈S_t} Δ_i;   c ← c + (1/N) Σ_{i∈S_t} Δc_i

λ_c (``correction_scale``) multiplies the control-variate correction as the released code does
(its loss adds ``lamb``·⟨θ, c − c_i⟩ with ``--lamb`` 0.1, the flag FedDyn's λ also reads); c_i⁺ is
not scaled. With λ_c = 1 (preset ``unscaled``) and ρ = 0 the method is :class:`~fedlab.algorithms.scaffold.Scaffold`
bit for bit.

State: server θ, c; client c_i, θ_old,i, seen_i (``variant="last_global_update"``: server θ, c, Δ^{t−1};
client c_i). Communication per round: down 2·d (θ^t, c; 3·d with ``last_global_update``), up 2·d
(Δ_i, Δc_i). Gradient evaluations per step: 1. Reported loss: f_i(θ + δ_i; ξ).

Defaults: ρ = 0.01 (FedLESAM's; preset ``readme``: ρ = 0.5, the README's FedLESAM-S command),
λ_c = 0.1 (the code's ``--lamb``), ε = 1e-12 (the code: 1e-7), η_g = 1.
Paper vs code, and the code's bugs: guide/methods.md#fedlesam_s.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._lesam import LocallyEstimatedPerturbation
from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, descend, hparam
from fedlab.algorithms.fedlesam import FedLESAMParams
from fedlab.algorithms.scaffold import Scaffold
from fedlab.algorithms.sam import sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedLESAMSParams(FedLESAMParams):
    correction_scale: float = hparam(0.1, lo=0)  # λ_c on c − c_i (the code's --lamb); 1 = SCAFFOLD's correction


@register
class FedLESAMS(LocallyEstimatedPerturbation, Scaffold):
    name = "fedlesam_s"
    label, color, order = "FedLESAM-S", "#cab2d6", 21
    paper = "Fan et al., ICML 2024"
    hparams_cls = FedLESAMSParams
    grad_evals_per_step = 1
    state_where = "server: θ, c (+ Δ^{t−1}: last_global_update); client: c_i (+ θ_old,i, seen_i: paper)"
    presets = {"readme": {"rho": 0.5}, "unscaled": {"correction_scale": 1.0}}
    tuning = {"rho": sam_radii(presets["readme"]["rho"])}  # README 0.5; ρ = 0 is SCAFFOLD

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = self.perturbed_gradient(theta, cstate, msg, batch, grad_fn)
        # the correction enters the loss in the code, so it is clipped together with the gradient
        d = g + self.hp.correction_scale * (msg["c"] - cstate["c_i"])
        return descend(theta, d, step), cstate, loss
