"""FedScar — correcting the geometric bias of local SAM (ICML 2026, "FedScar: Correcting Geometric Bias
for Flatness-Consistent Federated Learning"; authors not public), code Ultraman6/FedScar
(``system/flcore/clients/clientscar.py``, ``system/flcore/servers/serverscar.py``, the README's main method).

Every client carries a bias b_i, a decaying sum of unit steps from where it last ended toward the
global model that came next, and a FedDyn-style dual h_i (the sum of its past Δ_i). Client i in round
t (seen_i: it took part before; θ̂_i: its last end point; t_i: the round it was last seen)::

    β-step:   s_i = seen_i · α (θ^t − θ̂_i)/(‖θ^t − θ̂_i‖ + ε);   b_i ← γ^{t−t_i} b_i + s_i
    start:    θ_{i,0} = θ^t + b_i;   anchor a_i = θ̂_i (θ^t at the first participation)
    each step (minibatch ξ):  g = ∇f_i(θ; ξ),  g̃ = ∇f_i(θ + ρ g/(‖g‖ + ε); ξ)
              d = g̃ + (β/2)(θ − a_i)/(‖θ − a_i‖ + ε) + β(h_i + b_i) + (b̄ − b_i)
              θ ← θ − η_t (clip(d, C) + wd·θ)
    after K_i steps:  Δ_i = θ_{i,K} − θ_{i,0};  upload Δ_i, b_i, s_i;  keep h_i ← h_i + Δ_i, θ̂_i ← θ_{i,K}
    server:   h̄ ← h̄ + (1/N) Σ_{i∈S_t} Δ_i;   b̄⁺ = γ b̄ + (1/N) Σ_{i∈S_t} s_i
              θ^{t+1} = θ^t + mean_{i∈S_t} (b_i + Δ_i) + β (h̄ − b̄⁺)   (= mean θ_{i,K} + β mean_N (h − b))

The second and third terms of d are the gradient of the code's β/2·‖θ − a_i‖ + β⟨θ, h_i + b_i⟩ (a norm,
not its square), the fourth the vector it adds to the gradient. b̄ = γ b̄_prev is broadcast: every
b_j decays by γ each round, so the server keeps only their mean, and a client decays its own b_j for
the rounds it sat out.

State: server θ, h̄, b̄ (means over all N clients); client h_i, b_i, θ̂_i, seen_i, t_i.
Communication per round: down 2·d (θ^t, b̄), up 3·d (Δ_i, b_i, s_i). Gradient evaluations per step: 2.

Defaults = the README's FedScar: ρ = 0.1, α = 0.1, γ = 0.9 (``gama``), β = 0.06; ε = 1e-12 (the code
divides by the bare norm). With α = β = 0, b_i ≡ 0 and FedScar is FedSAM bit for bit.

Paper vs code (the paper's text was not available), the code's other variants and its oddities:
guide/methods.md#fedscar. The one difference forced by fedlab's contract: the code's b̄ already holds
this round's β-steps s_j of the sampled clients (its server keeps every client's model and computes
them before training); fedlab broadcasts before any client has computed its s_j, so a round's clients
see γ b̄_prev, and the s_j enter b̄ at aggregation (the server's θ^{t+1} uses the full b̄⁺, as the code).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, descend, hparam, normalized,
)
from fedlab.algorithms.sam import sam_gradient, sam_radii
from fedlab.models.functional import Batch, GradFn


@dataclass(frozen=True)
class FedScarParams(HParams):
    rho: float = hparam(0.1, lo=0)  # SAM radius ρ (README 0.1)
    alpha: float = hparam(0.1, lo=0)  # α, length of a client's bias step s_i (the code's `alpha`, assigned to `var`)
    gamma: float = hparam(0.9, lo=0, hi=1)  # γ, per-round decay of every b_i (the code's `gama`)
    beta: float = hparam(0.06, lo=0)  # β, weight of the anchor, the dual/bias term and the server correction
    eps: float = hparam(1e-12, lo=0)  # added to every norm divided by (the code: none; ESAM 1e-7)


@register
class FedScar(Algorithm):
    name = "fedscar"
    label, color, order = "FedScar", "#b2df8a", 25
    paper = "ICML 2026, code Ultraman6/FedScar"  # the authors are not named in what could be read
    hparams_cls = FedScarParams
    # the README's ρ 0.1; β weighs its dual and bias terms (README 0.06; main.py also tried 0.01)
    tuning = {"rho": sam_radii(FedScarParams.rho), "beta": (0.01, 0.06)}
    grad_evals_per_step = 2
    state_where = "server: θ, h̄, b̄; client: h_i, b_i, θ̂_i (last end point), seen_i, t_i"

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "h_mean": torch.zeros_like(theta0), "b_mean": torch.zeros_like(theta0)}

    def client_init(self, theta0: Tensor) -> State:
        zero = torch.zeros((), dtype=theta0.dtype)
        return {"h": torch.zeros_like(theta0), "b": torch.zeros_like(theta0), "last_end": torch.zeros_like(theta0),
                "seen": zero, "last_round": zero.clone()}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"], "b_mean": self.hp.gamma * server["b_mean"]}

    def _bias(self, cstate: State, msg: State, t: int) -> tuple[Tensor, Tensor]:
        """(b_i of round t, its β-step s_i); pure, so every hook recomputes the same numbers."""
        hp = self.hp
        step = cstate["seen"] * hp.alpha * normalized(msg["theta"] - cstate["last_end"], hp.eps)
        return hp.gamma ** (t - cstate["last_round"]) * cstate["b"] + step, step

    def _anchor(self, cstate: State, msg: State) -> Tensor:
        return torch.where(cstate["seen"] > 0, cstate["last_end"], msg["theta"])

    def client_start(self, msg: State, cstate: State, info: RoundInfo) -> Tensor:
        return msg["theta"] + self._bias(cstate, msg, info.round)[0]

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        hp = self.hp
        b, _ = self._bias(cstate, msg, step.round)
        g, loss = grad_fn(theta, batch)
        g_sam, _ = sam_gradient(theta, g, hp.rho, batch, grad_fn, hp.eps)
        pull = 0.5 * hp.beta * normalized(theta - self._anchor(cstate, msg), hp.eps)
        d = g_sam + pull + hp.beta * (cstate["h"] + b) + (msg["b_mean"] - b)
        return descend(theta, d, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        b, s = self._bias(cstate, msg, info.round)
        delta = thetaK - theta0
        seen = torch.ones_like(cstate["seen"])
        new = {"h": cstate["h"] + delta, "b": b, "last_end": thetaK.clone(), "seen": seen,
               "last_round": torch.full_like(cstate["last_round"], info.round)}
        return {"delta": delta, "shift": b, "bias_step": s}, new

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        n = info.n_clients
        h_mean = server["h_mean"] + uploads["delta"].sum(dim=0) / n
        b_mean = self.hp.gamma * server["b_mean"] + uploads["bias_step"].sum(dim=0) / n
        moved = (uploads["shift"] + uploads["delta"]).mean(dim=0)  # mean θ_{i,K} − θ^t
        theta = server["theta"] + moved + self.hp.beta * (h_mean - b_mean)
        return {"theta": theta, "h_mean": h_mean, "b_mean": b_mean}
