"""FedSOL — federated stabilized orthogonal learning (Lee et al., CVPR 2024, pp. 12512–12522, arXiv
2308.12532: G. Lee, M. Jeong, S. Kim, J. Oh, S.-Y. Yun, "FedSOL: Stabilized Orthogonal Learning with
Proximal Restrictions in Federated Learning"). Authors' code Lee-Gihun/FedSOL (read at ebc3f64):
``algorithms/fedsol_fixed/ClientTrainer.py``, ``algorithms/fedsol_adaptive/ClientTrainer.py``,
``algorithms/optimizer.py`` (``SAM``), ``configs/fedsol_fixed.json``.

A proximal objective keeps the client near the global model, but FedSOL never descends on it: its
gradient only sets a SAM-style weight perturbation, and the local (cross-entropy) gradient is taken at
the perturbed point, where learning the local task barely moves the proximal loss ("orthogonal" to it).
The proximal objective is the distillation loss to the global model (the code; FedNTD-style), not
FedProx's ‖θ − θ^t‖².

Client i, each step with minibatch ξ = (x, y) (θ_{i,0} = θ^t; the teacher is the received θ^t)::

    L_p(θ) = KL( softmax(f(x; θ^t)/τ) ‖ softmax(f(x; θ)/τ) )      averaged over the batch
    g_p    = ∇L_p(θ; ξ)                                 one gradient; the reported loss is CE(θ; ξ)
    e      = ρ g_p/(‖g_p‖ + ε)    (e = 0 while θ = θ^t, see below)
    θ     ← θ − η_t (clip(∇CE(θ + e; ξ), C) + wd·θ)     descent from the unperturbed θ

upload Δ_i = θ_{i,K} − θ^t. Server: θ^{t+1} = θ^t + η_g (1/m) Σ_{i∈S_t} Δ_i (FedAvg).

With ρ = 0 FedSOL is FedAvg bit for bit (e = 0; it still pays for g_p).

State: server θ; clients stateless. Communication per round: down 1·d (θ^t, which is also the
teacher), up 1·d (Δ_i). Gradient evaluations per step: 2 (g_p and the descent gradient; the teacher
adds one forward pass).

Defaults: ρ = 1.0 (``configs/fedsol_fixed.json`` and ``fedsol_adaptive.json``), τ = 3 (hard-coded),
ε = 1e-12 (``SAM.first_step``); the code's setting: CIFAR-10 LDA α = 0.1, 100 clients, 10 %, E = 5,
B = 50, SGD lr 0.01, momentum 0.9, wd 1e-5, lr × 0.99 per round, 300 rounds. No presets: the paper's
own text (beyond its abstract) was not available to us, so no setting of it could be checked.

Paper vs code, and what fedlab does (ebc3f64):
* First step of every client: there θ = θ^t, the student equals the teacher and ∇L_p = 0 exactly, but
  autograd through ``KLDivLoss`` leaves rounding noise (‖g_p‖ = 3e-8 measured in float32 on a
  10-200-3 MLP, far above ε = 1e-12), which ``first_step`` normalises into a step of full length ρ in an arbitrary
  direction. fedlab uses the exact zero: no perturbation while θ = θ^t (a vmappable ``torch.where``),
  as a zero direction switches every fedlab perturbation off.
* The adaptive variant (``fedsol_adaptive``, ``ExpSAM``) scales g_p element-wise by |θ − θ^t|, first
  normalised per parameter tensor along its first dimension (``F.normalize(·, 2, dim=0)``). That needs
  the layout of the parameter tensors, which fedlab's flat-vector contract hides from algorithms; it is
  not implemented (a whole-vector normalisation would change its scale by orders of magnitude).
* Partial perturbation (``perturb_head`` / ``perturb_body`` False) needs the layer split too; the
  configs perturb everything, which is what fedlab does.
* Local SGD has momentum 0.9 and weight decay 1e-5 in the code (fedlab: plain SGD, the run's
  ``weight_decay``); the server mean is weighted by n_i (fedlab: unweighted, like every fedlab method).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import State, StepInfo, descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_perturbation
from fedlab.models.functional import Batch, Distill, GradFn


@dataclass(frozen=True)
class FedSOLParams(FedAvgParams):
    rho: float = hparam(1.0, lo=0)  # perturbation radius ρ (configs/fedsol_fixed.json: 1.0)
    tau: float = hparam(3.0, lo=0, lo_open=True)  # temperature of the proximal KL (hard-coded 3 in the code)
    eps: float = hparam(1e-12, lo=0)  # added to ‖g_p‖ (code: 1e-12)


@register
class FedSOL(FedAvg):
    name = "fedsol"
    paper = "Lee et al., CVPR 2024"
    hparams_cls = FedSOLParams
    grad_evals_per_step = 2
    state_where = "server: θ"

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        anchor = msg["theta"]
        # the proximal loss's weight is irrelevant after normalisation: plain KL, no τ² factor (as the code)
        g_p, loss = grad_fn(theta, batch, distill=Distill(anchor, self.hp.tau, 1.0, with_ce=False))
        e = sam_perturbation(g_p, self.hp.rho, self.hp.eps)
        moved = torch.ne(theta, anchor).any()  # False only at θ = θ^t, where ∇L_p = 0 exactly
        e = torch.where(moved, e, torch.zeros_like(e))
        g, _ = grad_fn(theta + e, batch)
        return descend(theta, g, step), cstate, loss
