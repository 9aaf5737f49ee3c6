"""FedGAMMA — SCAFFOLD-corrected local SAM (Dai et al., TNNLS 2023), as re-implemented in
FL-Simulator ``client/fedgamma.py`` + ``server/FedGamma.py`` (no authors' code).

Client i, each local step with minibatch ξ (c, c_i as in SCAFFOLD):

    g  = ∇f_i(θ; ξ)                          raw minibatch gradient (no wd, no correction)
    v  = g                                   (``perturb_with_correction=True``: v = g + (c − c_i))
    ε̂  = ρ v / (‖v‖ + ε)
    g̃  = ∇f_i(θ + ε̂; ξ)                      same minibatch
    θ ← θ − η_t ( clip(g̃ + (c − c_i), C) + wd·θ )

Upload and server are SCAFFOLD option II unchanged (:class:`~fedlab.algorithms.scaffold.Scaffold`):
c_i⁺ = c_i − c − Δ_i/(K η_t); θ^{t+1} = θ^t + η_g Δ̄; c ← c + (1/N) Σ_S (c_i⁺ − c_i).

State: server θ, c; client c_i. Communication per round: down 2·d (θ^t, c), up 2·d (Δ_i, Δc_i).
Gradient evaluations per step: 2.

Defaults: ρ = 0.01 (FL-Simulator README "SAM lr" for FedGamma), ε = 1e-12, η_g = 1. With ρ = 0
FedGAMMA is SCAFFOLD bit for bit. Paper vs code: guide/methods.md#fedgamma.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import hparam
from fedlab.algorithms.sam import sam_gradient, sam_radii
from fedlab.algorithms.scaffold import Scaffold, ScaffoldParams
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedGammaParams(ScaffoldParams):
    rho: float = hparam(0.01, lo=0)  # SAM radius ρ (FL-Simulator README for FedGamma)
    eps: float = hparam(1e-12, lo=0)  # added to ‖v‖ (FL-Sim ESAM 1e-7; fedlab's FedSAM default 1e-12)
    perturb_with_correction: bool = False  # True: ascent along g + (c − c_i); False: along g (reference code)


@register
class FedGamma(Scaffold):
    name = "fedgamma"
    label, color, order = "FedGAMMA", "#8c564b", 7
    paper = "Dai et al., IEEE TNNLS 2023"
    hparams_cls = FedGammaParams
    tuning = {"rho": sam_radii(FedGammaParams.rho)}  # FL-Simulator README 0.01
    grad_evals_per_step = 2
    state_where = "server: θ, c; client: c_i"
    presets = {"corrected_perturbation": {"perturb_with_correction": True}}

    def _data_gradient(self, theta: Tensor, g: Tensor, correction: Tensor, batch: Batch,
                       grad_fn: GradFn) -> Tensor:
        direction = g + correction if self.hp.perturb_with_correction else g
        g_sam, _ = sam_gradient(theta, direction, self.hp.rho, batch, grad_fn, self.hp.eps)
        return g_sam
