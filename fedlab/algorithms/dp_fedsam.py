"""DP-FedSAM — local SAM under client-level differential privacy (Shi et al., CVPR 2023, "Make Landscape
Flatter in Differentially Private Federated Learning"); code YMJS-Irfan/DP-FedSAM (``fedml_api/dpfedsam``).

Client i, round t, from θ^t, K_i SAM steps on the same minibatch ξ::

    g  = ∇f_i(θ; ξ);   ε̂ = ρ g/(‖g‖ + ε)
    θ ← θ − η_t ( clip(∇f_i(θ + ε̂; ξ), C_g) + wd·θ )

then the mechanism of :mod:`fedlab.algorithms.dp_fedavg` unchanged: Δ̃_i = Δ_i · min(1, C/(‖Δ_i‖ + 1e-6))
uploaded, θ^{t+1} = θ^t + η_g ((1/m) Σ_{i∈S_t} Δ̃_i + z_t), z_t ~ N(0, (σC/m)² I) drawn once on the
server from ``torch_generator(seed, "dp-noise", t)`` (the paper adds N(0, σ²C²/m · I) per client: the
same distribution of the mean; why fedlab draws it once is in that module). SAM's flatter, smaller
local updates lose less to the clip and to the noise — the paper's point. The privacy of T rounds is
that of DP-FedAvg: :mod:`fedlab.analysis.privacy` with q = m/N and σ.

``adaptive=True`` (preset ``code``) is the released optimiser's default (``--adaptive`` True): ASAM
with T_θ = |θ| (Kwon et al., ICML 2021), ε̂ = ρ T_θ² g / (‖T_θ g‖ + ε) element-wise.

State: server θ. Communication per round: down 1·d, up 1·d. Gradient evaluations per step: 2.
With ρ = 0 it is :class:`~fedlab.algorithms.dp_fedavg.DPFedAvg` bit for bit (same noise draws); with
σ = 0 and C = None it is :class:`~fedlab.algorithms.fedsam.FedSAM` with the same ρ.

Defaults (code and README): ρ = 0.5, C = 0.2, σ = 0.95, ε = 1e-12 (the code's SAM), η_g = 1.
Paper vs code: guide/methods.md#dp_fedsam.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, descend, hparam
from fedlab.algorithms.dp_fedavg import DPFedAvg, DPFedAvgParams
from fedlab.algorithms.sam import sam_gradient, sam_perturbation, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class DPFedSAMParams(DPFedAvgParams):
    rho: float = hparam(0.5, lo=0)  # SAM radius ρ (`--rho` 0.5 in the code and every README command)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g‖
    adaptive: bool = False  # True: ASAM with T = |θ|, as the released optimiser runs by default


@register
class DPFedSAM(DPFedAvg):
    name = "dp_fedsam"
    label, color, order = "DP-FedSAM", "#fdbf6f", 24
    paper = "Shi et al., CVPR 2023"
    hparams_cls = DPFedSAMParams
    tuning = {"rho": sam_radii(DPFedSAMParams.rho)}  # code and README 0.5
    grad_evals_per_step = 2
    presets = {"code": {"adaptive": True}}

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        if self.hp.adaptive:  # ε̂ = T·(ρ Tg/‖Tg‖): the scale enters the norm once and the step twice
            scale = theta.abs()
            g_sam, _ = grad_fn(theta + scale * sam_perturbation(scale * g, self.hp.rho, self.hp.eps), batch)
        else:
            g_sam, _ = sam_gradient(theta, g, self.hp.rho, batch, grad_fn, self.hp.eps)
        return descend(theta, g_sam, step), cstate, loss
