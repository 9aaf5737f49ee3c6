"""FedVSSAM — variance-suppressed sharpness-aware FL (Xiao et al., NeurIPS 2026, arXiv 2605.09144).

No public code: fedlab's reading of the paper. Client i, round t (receives θ^t and h^t;
θ_{i,0} = θ^t), each step k with minibatch ξ_k::

    g    = ∇f_i(θ; ξ_k)                                 its loss is the one reported
    h_i  = (1 − γ_l) h^t + γ_l g                        [LF]  (lf=False: h_i = g)
    g̃    = ∇f_i(θ + ρ h_i / (‖h_i‖ + ε); ξ_k)           the shared SAM step, same batch
    u    = (1 − γ_l) h^t + γ_l g̃                        [LU]  (lu=False: u = g̃)
    θ   ← θ − η_t (clip(u, C) + wd·θ)                   clip u (not g̃), wd outside the mixing

upload Δ_i = θ_{i,K} − θ^t only. Server, with Δ̄ = mean_{i∈S_t} Δ_i and η_g = β η_t K
(β = ``server_lr_scale``, K = ``RoundInfo.mean_steps``, the mean of the clients' K_i)::

    g^{t+1} = (θ^t − mean θ_{i,K}) / (η_t K) = −Δ̄ / (η_t K)     pseudo-gradient
    h^{t+1} = (1 − γ_g) h^t + γ_g g^{t+1}                       [GU]  (gu=False: γ_g := 1)
    θ^{t+1} = θ^t − η_g h^{t+1}

fedlab evaluates the last line as θ^{t+1} = θ^t + β (γ_g Δ̄ − (1 − γ_g) η_t K h^t) (no division of Δ̄
by η_t K); with γ_l = γ_g = 1 and β = 1 it is FedAvg's θ^t + Δ̄, so preset "base" is FedSAM exactly.

State: server θ, h (2·d); clients stateless. Communication per round: down 2·d (θ^t, h^t), or 1·d
when clients never read h (lf = lu = False, or γ_l = 1 as in the "base" preset and the plain-FedSAM
round 0 of h_init="first_round"); up 1·d. Gradient evaluations per step: 2.

Options: ``lf``, ``lu``, ``gu`` (default True; False = the paper's ablation without that part);
``h_init`` = ``"zero"`` (h⁰ = 0) or ``"first_round"`` (round 0 is plain FedSAM, h¹ = g¹).
Defaults: ρ = 0.05, (γ_l, γ_g) = (0.4, 0.6); presets ``high`` = (0.1, 0.6), ``base`` = (1, 1);
β = 1; ε = 1e-12. Open choices of this reading: guide/methods.md#fedvssam.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import (
    Algorithm, HParams, RoundInfo, State, StepInfo, descend, hparam, stacked_mean,
)
from fedlab.algorithms.sam import sam_gradient, sam_radii
from fedlab.models.functional import Batch, GradFn

HInit = Literal["zero", "first_round"]


def mix(h: Tensor | None, x: Tensor, weight: float) -> Tensor:
    """(1 − w) h + w x; w = 1 returns x itself (h is then not read and may be None)."""
    if weight == 1.0:
        return x
    assert h is not None
    return (1.0 - weight) * h + weight * x


@dataclass(frozen=True)
class FedVSSAMParams(HParams):
    rho: float = hparam(0.05, lo=0)  # SAM radius (paper)
    gamma_l: float = hparam(0.4, lo=0, hi=1, lo_open=True)  # local mixing weight of the fresh gradient (paper, moderate heterogeneity)
    gamma_g: float = hparam(0.6, lo=0, hi=1, lo_open=True)  # server EMA weight of the new pseudo-gradient (paper)
    server_lr_scale: float = hparam(1.0, lo=0, lo_open=True)  # β in η_g = β η_t K (fedlab choice; the paper's η_g is not public)
    lf: bool = True  # variance-suppressed local flatness search (perturb along h_i)
    lu: bool = True  # variance-suppressed local update (step along u)
    gu: bool = True  # variance-suppressed global update (EMA h); False: γ_g := 1
    h_init: HInit = "zero"  # "zero" or "first_round" (round 0 = plain FedSAM, h¹ = g¹)
    eps: float = hparam(1e-12, lo=0)  # added to ‖h_i‖


@register
class FedVSSAM(Algorithm):
    name = "fedvssam"
    label, color, order = "FedVSSAM", "#d62728", 15
    paper = "Xiao et al., NeurIPS 2026 (arXiv 2605.09144)"
    hparams_cls = FedVSSAMParams
    tuning = {"rho": sam_radii(FedVSSAMParams.rho), "preset": ("moderate", "high")}  # paper 0.05
    grad_evals_per_step = 2
    state_where = "server: θ, h"
    presets = {
        "moderate": {"gamma_l": 0.4, "gamma_g": 0.6},
        "high": {"gamma_l": 0.1, "gamma_g": 0.6},
        "base": {"gamma_l": 1.0, "gamma_g": 1.0},
    }

    def _clients_need_h(self, round_: int) -> bool:
        """Clients read h only when they mix it in (γ_l < 1 with LF or LU on); otherwise h stays home."""
        return (self.hp.lf or self.hp.lu) and self.local_gamma(round_) != 1.0

    def _warmup(self, round_: int) -> bool:
        """True in the plain-FedSAM round 0 of ``h_init="first_round"``."""
        return self.hp.h_init == "first_round" and round_ == 0

    def local_gamma(self, round_: int) -> float:
        return 1.0 if self._warmup(round_) else self.hp.gamma_l

    def server_gamma(self, round_: int) -> float:
        return 1.0 if (self._warmup(round_) or not self.hp.gu) else self.hp.gamma_g

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "h": torch.zeros_like(theta0)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        if self._clients_need_h(info.round):
            return {"theta": server["theta"], "h": server["h"]}
        return {"theta": server["theta"]}

    def local_direction(self, theta: Tensor, msg: State, batch: Batch, grad_fn: GradFn,
                        gamma_l: float) -> tuple[Tensor, Tensor]:
        """(u, f_i(θ; ξ)): the variance-suppressed descent direction of one local step."""
        h = msg.get("h")
        g, loss = grad_fn(theta, batch)
        ascent = mix(h, g, gamma_l) if self.hp.lf else g
        g_sam, _ = sam_gradient(theta, ascent, self.hp.rho, batch, grad_fn, self.hp.eps)
        u = mix(h, g_sam, gamma_l) if self.hp.lu else g_sam
        return u, loss

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        u, loss = self.local_direction(theta, msg, batch, grad_fn, self.local_gamma(step.round))
        return descend(theta, u, step), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        delta_bar = stacked_mean(uploads, "delta")
        lr_k = info.lr * info.mean_steps  # η_t K̄
        beta = self.hp.server_lr_scale
        gamma_g = self.server_gamma(info.round)
        pseudo_grad = delta_bar / -lr_k  # g^{t+1}
        h = mix(server["h"], pseudo_grad, gamma_g)
        # θ − η_g h^{t+1} with η_g = β η_t K and g^{t+1} = −Δ̄/(η_t K), expanded (see module docstring)
        if gamma_g == 1.0:
            theta = server["theta"] + beta * delta_bar
        else:
            theta = server["theta"] + beta * (gamma_g * delta_bar - ((1.0 - gamma_g) * lr_k) * server["h"])
        return {**server, "theta": theta, "h": h}

    def round_metrics(self, server: State) -> dict[str, float]:
        return {"h_norm": float(torch.linalg.vector_norm(server["h"]))}
