"""FedWMSAM — weighted momentum and sharpness-aware minimisation (Li et al., NeurIPS 2025,
arXiv 2511.22080, "A Fast and Flat Federated Learning Method via Weighted Momentum and
Sharpness-Aware Minimization"); authors' code Huang-Yongzhi/NeurlPS_FedWMSAM.

Round t, server → clients: θ^t, the momentum m^t, the SCAFFOLD control c^t and the weight α_t.
Client i keeps its control c_i (0 at its first participation) and forms (C2, personalised momentum)::

    p_i = m^t + α_t/(1 − α_t) · (c^t − c_i)          (personalised=False: p_i = m^t)

Each local step k = 0..K_i−1 with minibatch ξ (θ_{i,0} = θ^t)::

    δ   = (θ^t + k p_i) − θ                            the predicted global point minus the iterate (C1)
    e   = s ρ δ/(‖δ‖ + ε)                              s = +1 "toward" (paper), −1 "away" (code's sign)
    g   = ∇f_i(θ + e; ξ)                               one gradient; its loss is the one reported
    θ  ← θ − η_t (clip(α_t g + (1 − α_t) p_i, C) + wd·θ)

upload Δ_i = θ_{i,K} − θ^t; the client keeps c_i ← c_i − c^t − Δ_i/(K_i η_t) (SCAFFOLD option II, its
own K_i). Server, with Δ̄ = mean_{i∈S_t} Δ_i::

    v_i     = 1 + cos(Δ_i, m^t)  (0 where Δ_i or m^t is 0, as in round 0)
    α_{t+1} = 0.99 α_t + 0.01 · clamp(mean_i v_i, 0.1, 0.9)        (C3; adaptive=False: α fixed)
    c^{t+1} = c^t + (1/N) Σ_{i∈S_t} (c_i⁺ − c_i) = c^t − (1/N) Σ_{i∈S_t} (c^t + Δ_i/(K_i η_t))
    m^{t+1} = −κ Δ̄ / (K̄ η_t)                                     (κ = momentum_scale)
    θ^{t+1} = θ^t + η_g Δ̄

State: server θ, m, c (3·d) and α; client c_i (d). Communication per round: down 3·d + 1 scalar
(θ^t, m^t, c^t, α_t; down 2·d + 1 scalar with personalised=False), up 1·d (Δ_i). Gradient
evaluations per step: 1.

Presets: default / ``paper`` — ρ = 0.01, perturbation toward the predicted point, κ = 1, α_0 = 0.1.
``code`` — ρ = 0.1, s = −1, κ = 0.998, ε = 1e-7. With s = −1 the gradient is not SAM's: e points downhill
on F (cos(e, ∇F) ≈ −0.98 measured, +0.98 with s = +1), a look-ahead descent point, not an ascent.
Paper vs code: guide/methods.md#fedwmsam.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, descend, hparam, stacked_mean
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_perturbation, sam_radii
from fedlab.models.functional import Batch, GradFn

ALPHA_KEEP, ALPHA_LO, ALPHA_HI = 0.99, 0.1, 0.9  # hard-coded in server/FedWMSAM.py

Perturb = Literal["toward", "away"]


@dataclass(frozen=True)
class FedWMSAMParams(FedAvgParams):
    rho: float = hparam(0.01, lo=0)  # perturbation radius (paper: best near 0.01; code default 0.1)
    alpha: float = hparam(0.1, lo=0, hi=1, lo_open=True, hi_open=True)  # α_0, weight of the fresh gradient (code --alpha)
    adaptive: bool = True  # C3: α_{t+1} = 0.99 α_t + 0.01 clamp(mean(1 + cos), 0.1, 0.9)
    personalised: bool = True  # C2: p_i = m + α/(1−α)(c − c_i); False: p_i = m
    perturb: Perturb = "toward"  # "toward" the predicted point (paper) or "away" (the code's sign)
    momentum_scale: float = hparam(1.0, lo=0, lo_open=True)  # κ in m = −κ Δ̄/(K̄η) (code: lr_decay 0.998)
    eps: float = hparam(1e-12, lo=0)  # added to ‖δ‖ (code 1e-7)


@register
class FedWMSAM(FedAvg):
    name = "fedwmsam"
    label, color, order = "FedWMSAM", "#f781bf", 16
    paper = "Li et al., NeurIPS 2025 (arXiv 2511.22080)"
    hparams_cls = FedWMSAMParams
    tuning = {"rho": sam_radii(FedWMSAMParams.rho)}  # paper: best near 0.01
    grad_evals_per_step = 1
    state_where = "server: θ, m, c, α; client: c_i"
    presets = {
        "paper": {"rho": 0.01, "perturb": "toward", "momentum_scale": 1.0, "eps": 1e-12},
        "code": {"rho": 0.1, "perturb": "away", "momentum_scale": 0.998, "eps": 1e-7},
    }

    def server_init(self, theta0: Tensor) -> State:
        server = {"theta": theta0.clone(), "m": torch.zeros_like(theta0),
                  "alpha": torch.tensor(self.hp.alpha, dtype=torch.float64)}
        if self.hp.personalised:
            server["c"] = torch.zeros_like(theta0)
        return server

    def client_init(self, theta0: Tensor) -> State:
        return {"c_i": torch.zeros_like(theta0)} if self.hp.personalised else {}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        msg = {k: server[k] for k in ("theta", "m", "c") if k in server}
        msg["alpha"] = server["alpha"].to(server["theta"].dtype)  # kept in float64, sent as one model float
        return msg

    def momentum(self, cstate: State, msg: State) -> Tensor:
        """p_i, the client's personalised momentum."""
        if not self.hp.personalised:
            return msg["m"]
        alpha = msg["alpha"]
        return msg["m"] + (alpha / (1.0 - alpha)) * (msg["c"] - cstate["c_i"])

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        p = self.momentum(cstate, msg)
        target = msg["theta"] + step.k * p
        e = sam_perturbation(target - theta, self.hp.rho, self.hp.eps)
        g, loss = grad_fn(theta + e if self.hp.perturb == "toward" else theta - e, batch)
        alpha = msg["alpha"]
        return descend(theta, alpha * g + (1.0 - alpha) * p, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        delta = thetaK - theta0
        if not self.hp.personalised:
            return {"delta": delta}, cstate
        return {"delta": delta}, {"c_i": cstate["c_i"] - msg["c"] - delta / (K * info.lr)}

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        deltas, m = uploads["delta"], server["m"]
        delta_bar = stacked_mean(uploads, "delta")
        new = {**server, "theta": server["theta"] + self.hp.server_lr * delta_bar}
        if self.hp.adaptive:
            norms = torch.linalg.vector_norm(deltas, dim=1) * torch.linalg.vector_norm(m)
            cos = (deltas @ m) / torch.where(norms > 0, norms, torch.ones_like(norms))
            v = torch.where(norms > 0, cos + 1.0, torch.zeros_like(cos)).mean().to(torch.float64)
            new["alpha"] = ALPHA_KEEP * server["alpha"] + (1.0 - ALPHA_KEEP) * v.clamp(ALPHA_LO, ALPHA_HI)
        if self.hp.personalised:
            steps = torch.tensor(info.client_steps, dtype=deltas.dtype, device=deltas.device)
            scaled = deltas / (steps[:, None] * info.lr)  # Δ_i/(K_i η_t)
            new["c"] = server["c"] - (info.n_sampled * server["c"] + scaled.sum(dim=0)) / info.n_clients
        new["m"] = delta_bar / (-(info.mean_steps * info.lr / self.hp.momentum_scale))
        return new

    def round_metrics(self, server: State) -> dict[str, float]:
        return {"alpha": float(server["alpha"])}
