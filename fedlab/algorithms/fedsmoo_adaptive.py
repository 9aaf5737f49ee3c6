"""FedSMOO-adaptive — the per-client adaptive dynamic-regularised SAM of a practitioner's blog about
the FedSMOO paper (Sun et al., ICML 2023).

**This is the blog's variant, not the paper's method**, which is ``fedsmoo``. Client k in round t
(after warm-up), at local step 0 on its first minibatch ξ_0, at θ = θ^t:

    g      = ∇L_k(θ^t; ξ_0),  ℓ = L_k(θ^t; ξ_0)
    γ_k    = ⟨g, g_prev⟩ / (‖g‖‖g_prev‖ + 1e-8), clamped to [−1, 1]    consistency; 1 on a first visit
    σ_k    = max(0, L_k(θ^t + ρ_max g/‖g‖; ξ_0) − ℓ)                    sharpness (probe at ρ_max)
    τ_k    = std of the last W = 5 angles arccos(γ) between successive visits' gradients
             (population std; 0 until W angles have been seen; taken before this visit's angle is added)
    λ_k    = clip(a(1 − γ_k) + b σ_k + c τ_k, [λ_min, λ_max])
    ρ_k    = max(ρ_min, ρ_max e^{−λ_k})
    then g_prev ← g and this visit's angle enters the ring buffer (only if g_prev existed).

λ_k and ρ_k are kept in the client state for the K steps. Every step (minibatch ξ), with
ε = ρ_k g/(‖g‖ + ε₀) held fixed as in SAM: g = ∇L_k(θ; ξ);  g̃ = ∇L_k(θ + ε; ξ), and

    objective="blog" (default), L_k(θ) + λ_k‖θ − θ^t‖² + L_k(θ + ε):
        θ ← θ − η_t ( clip(g + g̃ + 2λ_k(θ − θ^t), C) + wd·θ )
    objective="perturbed_only", L_k(θ + ε) + λ_k‖θ − θ^t‖²:
        θ ← θ − η_t ( clip(g̃ + 2λ_k(θ − θ^t), C) + wd·θ )

Warm-up (rounds t < ``warmup_rounds``): plain FedAvg steps, λ_k = ρ_k = 0; the gradient history is
still recorded. Upload Δ_k = θ_{k,K} − θ^t plus λ_k, ρ_k (their means are logged,
:meth:`round_metrics`). Server: FedAvg, θ^{t+1} = θ^t + η_g mean Δ_k.

State: server θ (+ the two logged means); client g_prev (d), a ring buffer of W angles, its fill
count, a "has history" flag, λ_k, ρ_k. Communication per round: down 1·d, up 1·d + 2 floats.
Gradient evaluations per step: 2 (one more at step 0 after warm-up for the σ probe; 1 in warm-up).

Defaults (blog): (a, b, c) = (0.4, 0.5, 0.1), λ ∈ [0.01, 0.3], ρ_min = 0.001, ρ_max = 0.05, W = 5,
warm-up 3 rounds. Where the blog is vague, fedlab's choices: guide/methods.md#fedsmoo_adaptive.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, check_range, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_gradient, sam_perturbation
from fedlab.models.functional import Batch, GradFn


Objective = Literal["blog", "perturbed_only"]


@dataclass(frozen=True)
class FedSMOOAdaptiveParams(FedAvgParams):
    a: float = hparam(0.4, lo=0)  # weight of the inconsistency 1 − γ_k (blog)
    b: float = hparam(0.5, lo=0)  # weight of the sharpness σ_k (blog)
    c: float = hparam(0.1, lo=0)  # weight of the instability τ_k (blog)
    lam_min: float = hparam(0.01, lo=0)  # λ_k clipped to [lam_min, lam_max] (blog)
    lam_max: float = hparam(0.3, lo=0)  # ≥ lam_min (validate)
    rho_min: float = hparam(0.001, lo=0)  # ρ_k = max(rho_min, rho_max e^{−λ_k}) (blog)
    rho_max: float = hparam(0.05, lo=0)  # ≥ rho_min (validate)
    window: int = hparam(5, lo=2)  # rounds of angle history for τ_k (blog)
    warmup_rounds: int = hparam(3, lo=0)  # plain FedAvg rounds at the start (blog)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g‖ in the SAM perturbation and the σ probe
    cos_eps: float = hparam(1e-8, lo=0)  # added to ‖g‖‖g_prev‖ in γ_k (blog)
    objective: Objective = "blog"  # "blog": L(θ) + λ‖θ−θ^t‖² + L(θ+ε); "perturbed_only": L(θ+ε) + λ‖θ−θ^t‖²

    def validate(self) -> None:
        super().validate()
        # the only bounds that depend on another field; the rest is declared on the fields
        check_range("lam_max", self.lam_max, self.lam_min)
        check_range("rho_max", self.rho_max, self.rho_min)

@register
class FedSMOOAdaptive(FedAvg):
    name = "fedsmoo_adaptive"
    label, color, order = "FedSMOO (adaptive)", "#006d2c", 10
    paper = "blog variant of Sun et al., ICML 2023 (not the paper's method)"
    hparams_cls = FedSMOOAdaptiveParams
    # ρ_k = max(ρ_min, ρ_max e^{−λ_k}) needs ρ_max ≥ ρ_min = 0.001: no ρ = 0 point (FedSMOO's is the control)
    tuning = {"rho_max": (0.02, 0.05, 0.1)}
    grad_evals_per_step = 2
    state_where = "server: θ; client: g_prev, angle ring buffer, λ_k, ρ_k"

    def server_init(self, theta0: Tensor) -> State:
        zero = theta0.new_zeros(())
        return {"theta": theta0.clone(), "lambda_mean": zero, "rho_mean": zero.clone()}

    def client_init(self, theta0: Tensor) -> State:
        zero = theta0.new_zeros(())
        return {
            "g_prev": torch.zeros_like(theta0),
            "has_prev": zero,
            "angles": theta0.new_zeros((self.hp.window,)),
            "n_angles": zero.clone(),
            "lam": zero.clone(),
            "rho": zero.clone(),
        }

    def _round_start(self, theta: Tensor, g: Tensor, loss: Tensor, cstate: State, batch: Batch,
                     grad_fn: GradFn, warm: bool) -> State:
        """λ_k, ρ_k from the step-0 gradient, and the updated gradient history (vmappable)."""
        hp = self.hp
        g_prev, has_prev = cstate["g_prev"], cstate["has_prev"] > 0
        norms = torch.linalg.vector_norm(g, dim=-1) * torch.linalg.vector_norm(g_prev, dim=-1)
        cos = torch.clamp((g * g_prev).sum(dim=-1) / (norms + hp.cos_eps), -1.0, 1.0)
        gamma = torch.where(has_prev, cos, torch.ones_like(cos))
        angles, n_angles = cstate["angles"], cstate["n_angles"]
        tau = torch.where(n_angles >= hp.window, torch.std(angles, dim=-1, correction=0),
                          torch.zeros_like(cos))
        shifted = torch.cat((angles[..., 1:], torch.arccos(cos).unsqueeze(-1)), dim=-1)
        new_angles = torch.where(has_prev, shifted, angles)
        new_n = torch.where(has_prev, torch.clamp(n_angles + 1, max=hp.window), n_angles)
        if warm:
            lam = torch.zeros_like(cstate["lam"])
            rho = torch.zeros_like(cstate["rho"])
        else:
            _, probe_loss = grad_fn(theta + sam_perturbation(g, hp.rho_max, hp.eps), batch)
            sigma = torch.clamp(probe_loss - loss, min=0.0)
            lam = torch.clamp(hp.a * (1.0 - gamma) + hp.b * sigma + hp.c * tau, hp.lam_min, hp.lam_max)
            rho = torch.clamp(hp.rho_max * torch.exp(-lam), min=hp.rho_min)
        return {
            "g_prev": g, "has_prev": torch.ones_like(cstate["has_prev"]), "angles": new_angles,
            "n_angles": new_n, "lam": lam, "rho": rho,
        }

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        g, loss = grad_fn(theta, batch)
        warm = step.round < self.hp.warmup_rounds
        if step.k == 0:
            cstate = self._round_start(theta, g, loss, cstate, batch, grad_fn, warm)
        if warm:
            return descend(theta, g, step), cstate, loss
        rho, lam = cstate["rho"], cstate["lam"]
        g_sam, _ = sam_gradient(theta, g, rho, batch, grad_fn, self.hp.eps)
        data = g + g_sam if self.hp.objective == "blog" else g_sam
        d = data + 2.0 * lam * (theta - msg["theta"])
        return descend(theta, d, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        return {"delta": thetaK - theta0, "lam": cstate["lam"], "rho": cstate["rho"]}, cstate

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        server = super().aggregate(server, uploads, info)
        return {**server, "lambda_mean": uploads["lam"].mean(dim=0), "rho_mean": uploads["rho"].mean(dim=0)}

    def round_metrics(self, server: State) -> dict[str, float]:
        return {"lambda_k_mean": float(server["lambda_mean"]), "rho_k_mean": float(server["rho_mean"])}
