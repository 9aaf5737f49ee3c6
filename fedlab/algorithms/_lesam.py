"""FedLESAM's locally estimated global perturbation (Fan et al., ICML 2024) as a mixin for other methods.

FedLESAM-S and FedLESAM-D put the estimate on SCAFFOLD's and FedDyn's local objectives and servers.
Placed before the host class (``class FedLESAMS(LocallyEstimatedPerturbation, Scaffold)``), each hook
calls the host's own contract method and only *adds* the state its variant needs, so the host's
numbers are untouched and with ρ = 0 the host is reproduced bit for bit:

* ``variant="paper"``: the client keeps θ_old,i (the model it received at its last participation)
  and the 0/1 flag seen_i; the direction is d_i = seen_i · (θ_old,i − θ^t);
* ``variant="last_global_update"`` (the released code): the server keeps Δ^{t−1} = θ^t − θ^{t−1}
  (zero before round 1), broadcasts it (one more d down), and every client uses d = −Δ^{t−1}.

The perturbed gradient is ∇f_i(θ + ρ d/(‖d‖ + ε); ξ): one gradient evaluation, none spent on d.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fedlab.algorithms.base import RoundInfo, State
from fedlab.algorithms.sam import sam_gradient
from fedlab.models.functional import Batch, GradFn


class LocallyEstimatedPerturbation:
    """The hooks; the host's hyperparameters must carry ``rho``, ``eps`` and ``variant``."""

    hp: Any

    @property
    def _paper(self) -> bool:
        return self.hp.variant == "paper"

    def server_init(self, theta0: Tensor) -> State:
        server = super().server_init(theta0)  # type: ignore[misc]
        return server if self._paper else {**server, "last_update": torch.zeros_like(theta0)}

    def client_init(self, theta0: Tensor) -> State:
        cstate = super().client_init(theta0)  # type: ignore[misc]
        if not self._paper:
            return cstate
        return {**cstate, "theta_old": torch.zeros_like(theta0), "seen": torch.zeros((), dtype=theta0.dtype)}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        msg = super().broadcast(server, info)  # type: ignore[misc]
        return msg if self._paper else {**msg, "last_update": server["last_update"]}

    def perturbed_gradient(self, theta: Tensor, cstate: State, msg: State, batch: Batch,
                           grad_fn: GradFn) -> tuple[Tensor, Tensor]:
        """(∇f_i(θ + δ; ξ), f_i(θ + δ; ξ)) with δ = ρ d/(‖d‖ + ε) along this variant's direction d."""
        if self._paper:
            direction = cstate["seen"] * (cstate["theta_old"] - msg["theta"])
        else:
            direction = -msg["last_update"]
        return sam_gradient(theta, direction, self.hp.rho, batch, grad_fn, self.hp.eps)

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        up, cstate = super().upload(theta0, thetaK, cstate, msg, info, K)  # type: ignore[misc]
        if self._paper:  # the model received this round is the next participation's θ_old,i
            cstate = {**cstate, "theta_old": msg["theta"].clone(), "seen": torch.ones_like(cstate["seen"])}
        return up, cstate

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        new = super().aggregate(server, uploads, info)  # type: ignore[misc]
        return new if self._paper else {**new, "last_update": new["theta"] - server["theta"]}
