"""FedLESAM — locally estimated global perturbation (Fan et al., ICML 2024); code MediaBrain-SJTU/FedLESAM.

Client i, round t (``variant="paper"``, the default), θ_{i,0} = θ^t::

    δ_i = ρ (θ_old,i − θ^t) / (‖θ_old,i − θ^t‖ + ε)   if the client has taken part before,
    δ_i = 0                                          at its first participation (seen_i = 0)
    each step:  g̃ = ∇f_i(θ + δ_i; ξ);  θ ← θ − η_t (clip(g̃, C) + wd·θ)
    upload Δ_i = θ_{i,K} − θ^t;  keep θ_old,i ← θ^t, seen_i ← 1

θ_old,i is the model the client received at its last participation. Server: FedAvg,
θ^{t+1} = θ^t + η_g mean_{i∈S_t} Δ_i.

State: server θ; client θ_old,i (d) and the 0/1 flag seen_i (1 scalar), kept *on* the client.
Communication per round: down 1·d, up 1·d. Gradient evaluations per step: **1**. Reported loss:
f_i(θ + δ_i; ξ), the step's only gradient call (the unperturbed loss whenever δ_i = 0).

``variant="last_global_update"`` (what the released code intends): no client state, the server also
sends Δ^{t−1} = θ^t − θ^{t−1} (down 2·d), and every client perturbs along δ = −ρ Δ^{t−1}/‖Δ^{t−1}‖
(zero in round 0). Under full participation both variants coincide exactly. The two variants are two
classes (:class:`FedLESAMPaper`, :class:`FedLESAMLastGlobalUpdate`) sharing :class:`FedLESAM`'s local
step; ``get_algorithm("fedlesam", variant=...)`` builds the one named.

Defaults: ρ = 0.01 (preset ``readme``: ρ = 0.5), ε = 1e-12, η_g = 1.
Paper vs code, and the code's bugs: guide/methods.md#fedlesam.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, StepInfo, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_gradient, sam_radii
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
    label, color, order = "FedLESAM", "#b15928", 11
    paper = "Fan et al., ICML 2024"
    hparams_cls = FedLESAMParams
    tuning = {"rho": sam_radii(FedLESAMParams.rho)}  # issue #1: 0.01 "as in the paper"
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
