"""FedNSAM — SAM steered by global Nesterov momentum (Liu et al., MM 2025, arXiv 2602.23827).

Server, every variant (Δ̄ = mean_{i∈S_t} Δ_i, Δ_i = θ_{i,K} − θ_{i,0} relative to the client's start)::

    m^t     = γ m^{t−1} + Δ̄^t          (m^{−1} = 0, so m^0 = Δ̄^0)
    θ^{t+1} = θ^t + m^t                 (= θ_{i,0} + Δ̄ = mean_S θ_{i,K} with round-start extrapolation)

``variant="code"`` (default; the official client)::

    θ_{i,0} = θ^t + γ m^{t−1}           extrapolate once; the server sends this point (down 1·d)
    each step:  g = ∇f_i(θ; ξ);  g̃ = ∇f_i(θ + ρ g/‖g‖; ξ);  θ ← θ − η_t (clip(g̃, C) + wd·θ)

    ordinary local-gradient SAM: 2 gradient evaluations per step. With γ = 0 this is FedSAM exactly.

``variant="paper"``::

    δ = ρ (−m^{t−1}) / ‖m^{t−1}‖        uphill is −m, since m accumulates descent displacements
    each step:  g̃ = ∇f_i(θ + δ; ξ);  θ ← θ − η_t (clip(g̃, C) + wd·θ)       1 gradient per step

    the client needs m itself: down 2·d (θ_{i,0} and m). δ = 0 while m = 0 (round 0).

``extrapolation="round_start"`` (default) moves the start once, θ_{i,0} = θ^t + γm;
``"every_step"`` starts at θ^t and evaluates every gradient at θ_{i,k} + γm (+ δ) without moving
the iterate; down 2·d (θ^t, m).

State: server θ, m (2·d); clients stateless. Up 1·d (Δ_i).
Gradient evaluations per step: 2 (code) / 1 (paper); the class attribute gives the maximum (2), an
instance reports its variant's count. Reported loss: at the (extrapolated) unperturbed iterate
(code); at the perturbed point, the only gradient call (paper).

Defaults: γ = 0.85, ρ = 0.05 (the official client's constants), ε = 1e-12.
``momentum_overwrite_bug=True`` (preset ``official_repo``): the official server's m ← (1+γ)Δ̄ from
round 1 on, without accumulation. Paper vs code: guide/methods.md#fednsam.
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

Variant = Literal["code", "paper"]
Extrapolation = Literal["round_start", "every_step"]


@dataclass(frozen=True)
class FedNSAMParams(HParams):
    rho: float = hparam(0.05, lo=0)  # SAM radius (hard-coded 0.05 in the official client)
    gamma: float = hparam(0.85, lo=0, hi=1, hi_open=True)  # global momentum / extrapolation coefficient (hard-coded 0.85)
    eps: float = hparam(1e-12, lo=0)  # added to the norm of the perturbation direction
    variant: Variant = "code"  # "code": local-gradient SAM; "paper": perturb along −m (1 grad/step)
    extrapolation: Extrapolation = "round_start"  # "round_start" (code) or "every_step" (look-ahead gradients)
    momentum_overwrite_bug: bool = False  # True: official repo's m ← (1+γ)Δ̄ (no accumulation)


class _GradEvals:
    """``FedNSAM.grad_evals_per_step``: 2 on the class (the maximum over the variants, what the registry
    lists), and on an instance its own variant's count (2 for "code": g at θ then at θ + ρ ĝ; 1 for
    "paper": the ascent direction −m is free). Derived from the hyperparameters, never assigned."""

    def __get__(self, obj: "FedNSAM | None", objtype: type | None = None) -> int:
        return 2 if obj is None or obj.hp.variant == "code" else 1


@register
class FedNSAM(Algorithm):
    name = "fednsam"
    label, color, order = "FedNSAM", "#e6ab02", 14
    paper = "Liu et al., MM 2025 (arXiv 2602.23827)"
    hparams_cls = FedNSAMParams
    tuning = {"rho": sam_radii(FedNSAMParams.rho)}  # official client 0.05
    grad_evals_per_step = _GradEvals()  # type: ignore[assignment]  # class: 2 (the maximum); instance: its variant's
    state_where = "server: θ, m"
    presets = {
        "code": {"variant": "code", "extrapolation": "round_start"},
        "paper": {"variant": "paper", "extrapolation": "round_start"},
        "official_repo": {"variant": "code", "extrapolation": "round_start", "momentum_overwrite_bug": True},
    }

    @property
    def _every_step(self) -> bool:
        return self.hp.extrapolation == "every_step"

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "m": torch.zeros_like(theta0)}

    def _start(self, server: State) -> Tensor:
        """θ_{i,0}: θ^t + γ m^{t−1} with round-start extrapolation, else θ^t."""
        if self._every_step:
            return server["theta"]
        return server["theta"] + self.hp.gamma * server["m"]

    def broadcast(self, server: State, info: RoundInfo) -> State:
        msg = {"theta": self._start(server)}
        if self.hp.variant == "paper" or self._every_step:
            msg["m"] = server["m"]
        return msg

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        point = theta + self.hp.gamma * msg["m"] if self._every_step else theta
        if self.hp.variant == "code":
            g, loss = grad_fn(point, batch)
            g_sam, _ = sam_gradient(point, g, self.hp.rho, batch, grad_fn, self.hp.eps)
        else:
            g_sam, loss = sam_gradient(point, -msg["m"], self.hp.rho, batch, grad_fn, self.hp.eps)
        return descend(theta, g_sam, step), cstate, loss

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        delta_bar = stacked_mean(uploads, "delta")
        if self.hp.momentum_overwrite_bug and info.round > 0:
            m = self.hp.gamma * delta_bar + delta_bar  # the old m is never read
        elif self.hp.momentum_overwrite_bug:
            m = delta_bar  # round 0: the official code's empty-momentum branch
        else:
            m = self.hp.gamma * server["m"] + delta_bar
        return {**server, "theta": server["theta"] + m, "m": m}
