"""DP-FedAvg — FedAvg with client-level differential privacy (McMahan et al., ICLR 2018), in the form the
DP-FedSAM paper (Shi et al., CVPR 2023) and its code YMJS-Irfan/DP-FedSAM use as their baseline.

Client i, round t: K_i plain SGD steps θ ← θ − η_t (clip(∇f_i(θ; ξ), C_g) + wd·θ) from θ^t, then::

    Δ_i  = θ_{i,K} − θ^t
    Δ̃_i = Δ_i · min(1, C / (‖Δ_i‖ + 1e-6))                       clipped on the client: ‖Δ̃_i‖ ≤ C
    server:  θ^{t+1} = θ^t + η_g ( (1/m) Σ_{i∈S_t} Δ̃_i + z_t ),   z_t ~ N(0, (σC/m)² I_d)

C is ``update_clip`` (one norm over the whole update; ``None``: no clipping), σ ``noise_multiplier``,
m = |S_t|. Replacing one client's update moves the sum Σ Δ̃_i by at most 2C and adding or removing one
by at most C, so the noise on the sum, σC, makes each round the sampled Gaussian mechanism with noise
multiplier σ and sampling rate q = m/N, whose (ε, δ) over T rounds :mod:`fedlab.analysis.privacy`
computes (add/remove adjacency).

Where the noise is drawn: the paper and the code add N(0, σ²C²/m · I) to *each* clipped update before
averaging; the mean then carries N(0, σ²C²/m² · I). fedlab draws that sum once, on the server: the
same distribution of θ^{t+1} under the unweighted mean (the sum of m independent N(0, σ²C²/m) is
N(0, σ²C²)), a trusted-aggregator model in which only the aggregate is released. It is one draw of d
numbers per round instead of m, and needs no client identity inside ``upload``. z_t comes from
``fedlab.torch_generator(seed, "dp-noise", t)`` (the run's seed, :attr:`RoundInfo.seed`), drawn on the
CPU in θ's dtype, so a resumed run draws the same noise and no global RNG state is touched.

State: server θ. Communication per round: down 1·d, up 1·d. Gradient evaluations per step: 1.
With σ = 0 and C = None it is :class:`~fedlab.algorithms.fedavg.FedAvg` bit for bit.

Defaults (the DP-FedSAM code and README): C = 0.2, σ = 0.95, η_g = 1.
Paper vs code: guide/methods.md#dp_fedavg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlab._rng import torch_generator
from fedlab.algorithms._registry import register
from fedlab.algorithms.base import RoundInfo, State, clip_by_norm, hparam, stacked_mean
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams


@dataclass(frozen=True)
class DPFedAvgParams(FedAvgParams):
    update_clip: float | None = hparam(0.2, lo=0, lo_open=True)  # C on ‖Δ_i‖ (DP-FedSAM `--C`); None: no clip
    noise_multiplier: float = hparam(0.95, lo=0)  # σ: the noise on the sum is σC (DP-FedSAM `--sigma`)

    def validate(self) -> None:
        if self.noise_multiplier > 0 and self.update_clip is None:
            raise ValueError(f"noise_multiplier={self.noise_multiplier!r} needs update_clip: the noise's "
                             "standard deviation is σ·C/m (set update_clip, or noise_multiplier=0)")


@register
class DPFedAvg(FedAvg):
    name = "dp_fedavg"
    label, color, order = "DP-FedAvg", "#525252", 23
    paper = "McMahan et al., ICLR 2018"
    hparams_cls = DPFedAvgParams
    # σ and C set the privacy and are chosen, not tuned (a tuning run would spend privacy)
    tuning = {}
    grad_evals_per_step = 1
    state_where = "server: θ"

    def upload(self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo,
               K: int) -> tuple[State, State]:
        # the client bounds its own contribution: the sensitivity C holds whatever the server does
        return {"delta": clip_by_norm(thetaK - theta0, self.hp.update_clip)}, cstate

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        mean = stacked_mean(uploads, "delta")
        if self.hp.noise_multiplier > 0:
            std = self.hp.noise_multiplier * self.hp.update_clip / info.n_sampled
            gen = torch_generator(info.seed, "dp-noise", info.round)
            # drawn on the CPU: the same noise on every device, then moved to θ's
            z = torch.randn(mean.shape, generator=gen, dtype=mean.dtype).to(mean.device)
            mean = mean + std * z
        return {**server, "theta": server["theta"] + self.hp.server_lr * mean}
