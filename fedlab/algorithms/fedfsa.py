"""FedFSA — a larger SAM radius on each client's sharpest layers, personalised models (Xing et al., AAAI 2025,
"Flexible Sharpness-Aware Personalized Federated Learning"; Xing, Zhan, Xie, Yang, Wang, Liu); code
xxdznl/FedFSA (``FedFSA/training/FedFSA.py``, ``FedFSA/samOptimizers/FSA.py``, ``FedFSA/main.py``).

MoFedSAM's client and server (:mod:`fedlab.algorithms.mofedsam`) with a per-layer radius. θ is split into
the model's parameter tensors l = 1..L (``RoundInfo.layout``); client i keeps the set C_i of layers that
were its sharpest when it last trained (empty before its first round) and the model it ended with, θ̂_i.

Round t, server → clients: θ^t and m^t = −Δ̄^{t−1} / (K̄^{t−1} η_{t−1}) (m^0 = 0). Client i, θ_{i,0} = θ^t,
each step on minibatch ξ::

    g  = ∇f_i(θ; ξ);   ε̂_l = r_l g_l / (‖g‖ + ε),   r_l = ρ_larger if l ∈ C_i else ρ
    g̃  = ∇f_i(θ + ε̂; ξ)                         ‖g‖ is the norm of the whole gradient, not the layer's
    θ ← θ − η_t (clip(α g̃ + (1 − α) m^t, C) + wd·θ)

After K_i steps (θ̂_i ← θ_{i,K}; upload Δ_i = θ_{i,K} − θ^t), the perturbation sensitivity of each layer::

    s_l = mean_j (N(θ_{i,K,l})_j − N(θ^t_l)_j)²,   N(v) = (v − min v)/(max v − min v)   (within the layer)
    s_l = 0 for biases and normalisation layers (names with bias, norm, bn, shortcut, downsample)
    C_i ← the ``top_c`` layers of largest N(s) (N over the L layers; NaN ranks last; ties: the earlier layer)

Server: θ^{t+1} = θ^t + η_g Δ̄^t, m^{t+1} = −Δ̄^t / (K̄^t η_t) (Δ̄^t = mean_{i∈S_t} Δ_i), as MoFedSAM.
Personalised: client i's own model is θ̂_i (θ⁰ until it first trains), what ``Config.client_eval``
measures on its own split (:meth:`personal_model`); the global model is θ^t.

State: server θ, m; client θ̂_i and its layer mask (2·d). Communication per round: down 2·d (θ^t, m^t),
up 1·d (Δ_i). Gradient evaluations per step: 2. Without a layout (a toy problem) θ is one layer.

Defaults = the paper's appendix (Table 4) for FMNIST and CIFAR-10: ρ = 0.1, ρ_larger = 0.2, top_c = 2,
α = 0.1; ε = 1e-7 (``FSA.py``). Preset ``cifar100`` (CIFAR-100, Tiny-ImageNet, the README's command):
ρ = 0.05, ρ_larger = 0.9; preset ``resnet18`` (its ResNet-18 runs): ρ = 0.05, ρ_larger = 1, top_c = 5.
With ρ_larger = ρ (or top_c = 0) it is MoFedSAM bit for bit with the same ρ and ε; with α = 1 as well, FedSAM.
Paper vs code, and what fedlab does differently: guide/methods.md#fedfsa.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import Layout, RoundInfo, State, StepInfo, descend, hparam, normalized
from fedlab.algorithms.mofedsam import MoFedSAM, MoFedSAMParams
from fedlab.algorithms.sam import sam_radii
from fedlab.models.functional import Batch, GradFn

UNSCORED = ("bn", "downsample", "shortcut", "norm", "bias")
"""A layer whose name holds one of these (lower case) scores 0: the code ranks weights of conv and linear layers."""


@dataclass(frozen=True)
class FedFSAParams(MoFedSAMParams):
    rho: float = hparam(0.1, lo=0)  # ρ (the code's rho_default), the radius of every other layer
    rho_larger: float = hparam(0.2, lo=0)  # ρ_larger, the radius of a client's sharpest layers
    top_c: int = hparam(2, lo=0)  # how many layers get ρ_larger (the code's TopC)
    eps: float = hparam(1e-7, lo=0)  # added to ‖g‖ (FSA.py)


def _minmax(v: Tensor) -> Tensor:
    """(v − min v)/(max v − min v): NaN where v is constant (0/0), as in the code."""
    return (v - v.min()) / (v.max() - v.min())


def layers(layout: Layout, d: int) -> list[tuple[str, int]]:
    """(name, size) of each parameter tensor in θ's order; θ as one unnamed layer without a layout."""
    return [(name, math.prod(shape)) for name, shape in layout] or [("", d)]


def sensitivity(before: Tensor, after: Tensor, parts: list[tuple[str, int]]) -> Tensor:
    """N(s), the layers' perturbation sensitivities between the round's start and end (module docstring)."""
    scores, at = [], 0
    for name, n in parts:
        if any(word in name.lower() for word in UNSCORED):
            scores.append(before.new_zeros(()))
        else:
            scores.append(((_minmax(after[at:at + n]) - _minmax(before[at:at + n])) ** 2).mean())
        at += n
    return _minmax(torch.stack(scores))


def sharpest(scores: Tensor, top_c: int) -> Tensor:
    """1.0 at the ``top_c`` largest scores, else 0.0: the code's stable descending sort with NaN last."""
    key = torch.nan_to_num(scores, nan=-torch.inf)
    before = torch.ones(key.numel(), key.numel(), dtype=torch.bool, device=key.device).tril(-1)  # [j, k]: k < j
    ahead = (key[None, :] > key[:, None]) | ((key[None, :] == key[:, None]) & before)  # layer k ranks above j
    return (ahead.sum(dim=1) < top_c).to(scores.dtype)


@register
class FedFSA(MoFedSAM):
    name = "fedfsa"
    label, color, order = "FedFSA", "#66c2a5", 26
    paper = "Xing et al., AAAI 2025"
    hparams_cls = FedFSAParams
    tuning = {"rho": sam_radii(FedFSAParams.rho), "rho_larger": (0.1, 0.2, 0.5)}  # appendix: ρ_larger 0.05–1
    grad_evals_per_step = 2
    state_where = "server: θ, m; client: its own model θ̂_i, its sharpest layers"
    presets = {"cifar100": {"rho": 0.05, "rho_larger": 0.9},
               "resnet18": {"rho": 0.05, "rho_larger": 1.0, "top_c": 5}}
    personal_models = True

    def client_init(self, theta0: Tensor) -> State:
        return {"own": theta0.clone(), "sharp": torch.zeros_like(theta0)}  # sharp: 1 on the layers of C_i

    def local_step(self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn,
                   step: StepInfo) -> tuple[Tensor, State, Tensor]:
        hp = self.hp
        g, loss = grad_fn(theta, batch)
        radius = torch.where(cstate["sharp"] > 0, torch.full_like(g, hp.rho_larger), torch.full_like(g, hp.rho))
        g_sam, _ = grad_fn(theta + radius * normalized(g, hp.eps), batch)
        d = hp.alpha * g_sam + (1.0 - hp.alpha) * msg["m"]
        return descend(theta, d, step), cstate, loss

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        parts = layers(info.layout, thetaK.numel())
        chosen = sharpest(sensitivity(theta0, thetaK, parts), self.hp.top_c)
        sharp = torch.repeat_interleave(chosen, torch.tensor([n for _, n in parts], device=chosen.device))
        return {"delta": thetaK - theta0}, {"own": thetaK.clone(), "sharp": sharp}

    def personal_model(self, cstate: State, server: State) -> Tensor:
        return cstate["own"]

