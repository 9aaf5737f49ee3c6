"""FedLESAM — locally estimated global perturbation (Fan et al., ICML 2024), ../shared/docs/ALGORITHMS.md §15.

Idea: the perturbation that matters is the one of the *global* loss. A client cannot compute it, but
the global model moved from θ_old,i (the model it received at its last participation) to θ^t along
(roughly) −∇F, so θ_old,i − θ^t points uphill on F. Perturbing along it needs no extra gradient: one
forward/backward per step instead of SAM's two.

Client i, round t (``variant="paper"``, the default), θ_{i,0} = θ^t::

    δ_i = ρ (θ_old,i − θ^t) / (‖θ_old,i − θ^t‖ + ε)   if the client has taken part before,
    δ_i = 0                                          at its first participation (seen_i = 0)
    each step:  g̃ = ∇f_i(θ + δ_i; ξ);  θ ← θ − η_t (clip(g̃, C) + wd·θ)
    upload Δ_i = θ_{i,K} − θ^t;  keep θ_old,i ← θ^t, seen_i ← 1

Server: FedAvg, θ^{t+1} = θ^t + η_g mean_{i∈S_t} Δ_i.

State: server θ; client θ_old,i (d) and the 0/1 flag seen_i (1 scalar), kept *on* the client.
Communication per round: down 1·d, up 1·d. Gradient evaluations per step: **1**.

Reported loss: the only gradient call of a step is at the perturbed point, so the loss returned by
``local_step`` is f_i(θ + δ_i; ξ) (equal to the unperturbed loss whenever δ_i = 0, e.g. at a client's
first participation or with ρ = 0). Computing f_i(θ; ξ) as well would cost a second forward pass
that the method is designed to avoid.

``variant="last_global_update"`` is what the released code *intends*: no client state, the server
also sends its last global update Δ^{t−1} = θ^t − θ^{t−1} (down 2·d), and every client perturbs along
δ = −ρ Δ^{t−1}/‖Δ^{t−1}‖ (zero in round 0). Under full participation θ_old,i = θ^{t−1}, so both
variants coincide exactly.

Known bugs of the reference code (MediaBrain-SJTU/FedLESAM, not reproduced): (1) issue #1 — the flat
update vector is indexed by parameter-tensor index, so every tensor is shifted by a single scalar and
the "norm" is a sum of |scalars|; the released perturbation is meaningless. (2) issue #3 — the code
uses the same last global update for every client instead of each client's θ_old,i (the paper).
(3) The repo does not import (server/__init__ imports missing modules).

Code layout: the two variants are two algorithms (:class:`FedLESAMPaper`, :class:`FedLESAMLastGlobalUpdate`)
sharing :class:`FedLESAM`'s local step; ``get_algorithm("fedlesam", {"variant": ...})`` (and ``FedLESAM(...)``)
builds the one the ``variant`` hyperparameter names.

Defaults: ρ = 0.01 (the value issue #1 reports "as in the paper"; the README uses ρ = 0.5 for
FedLESAM-S, preset ``readme``), ε = 1e-12, η_g = 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_gradient
from fedlab.models.functional import Batch, GradFn

Variant = Literal["paper", "last_global_update"]


@dataclass(frozen=True)
class FedLESAMParams(FedAvgParams):
    rho: float = hparam(0.01, lo=0)  # perturbation radius (issue #1: 0.01 as in the paper; README 0.5 for -S)
    eps: float = hparam(1e-12, lo=0)  # added to ‖θ_old − θ^t‖
    variant: Variant = "paper"  # "paper" (per-client θ_old) or "last_global_update" (code's intent)


@register
class FedLESAM(FedAvg):
    """What both variants share: SAM at θ + ρ d/‖d‖ along a direction d that costs no gradient, FedAvg's
    upload and server. Constructing ``FedLESAM`` builds the subclass of ``hp.variant``."""

    name = "fedlesam"
    paper = "Fan et al., ICML 2024"
    hparams_cls = FedLESAMParams
    grad_evals_per_step = 1
    state_where = "server: θ; client: θ_old,i, seen_i"
    presets = {"readme": {"rho": 0.5}}
    variant: ClassVar[str] = ""

    def __new__(cls, hparams: Any = None, **overrides: Any) -> "FedLESAM":
        if cls is FedLESAM:  # the registry's entry: dispatch on the variant hyperparameter
            cls = _BY_VARIANT[cls.resolve_hparams(hparams, overrides).variant]
        return super().__new__(cls)

    def __init__(self, hparams: Any = None, **overrides: Any) -> None:
        super().__init__(hparams, **overrides)
        if self.hp.variant != self.variant:
            raise ValueError(f"algorithm_params: variant={self.hp.variant!r} for '{self.name}' does not fit "
                             f"{type(self).__name__} (variant={self.variant!r}); build FedLESAM(...) to choose by variant")

    def perturbation_direction(self, cstate: State, msg: State) -> Tensor:
        """The (unnormalised) ascent direction d of this variant."""
        raise NotImplementedError

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        direction = self.perturbation_direction(cstate, msg)
        g_sam, loss = sam_gradient(theta, direction, self.hp.rho, batch, grad_fn, self.hp.eps)
        return descend(theta, g_sam, step), cstate, loss


class FedLESAMPaper(FedLESAM):
    """The paper's rule: d = seen_i·(θ_old,i − θ^t), the client's own last received model, kept on the client."""

    variant = "paper"

    def client_init(self, theta0: Tensor) -> State:
        return {"theta_old": torch.zeros_like(theta0), "seen": torch.zeros((), dtype=theta0.dtype)}

    def perturbation_direction(self, cstate: State, msg: State) -> Tensor:
        return cstate["seen"] * (cstate["theta_old"] - msg["theta"])

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        return {"delta": thetaK - theta0}, {"theta_old": msg["theta"].clone(), "seen": torch.ones_like(cstate["seen"])}


class FedLESAMLastGlobalUpdate(FedLESAM):
    """The released code's intent: d = −Δ^{t−1}, the server's last global update, broadcast to every client."""

    variant = "last_global_update"
    state_where = "server: θ, Δ^{t−1}"

    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone(), "last_update": torch.zeros_like(theta0)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"], "last_update": server["last_update"]}

    def perturbation_direction(self, cstate: State, msg: State) -> Tensor:
        return -msg["last_update"]

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        new = super().aggregate(server, uploads, info)
        new["last_update"] = new["theta"] - server["theta"]
        return new


_BY_VARIANT: dict[str, type[FedLESAM]] = {cls.variant: cls for cls in (FedLESAMPaper, FedLESAMLastGlobalUpdate)}
