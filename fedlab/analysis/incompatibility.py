"""Flatness incompatibility: how far the clients' SAM perturbations are from the global one.

FedVSSAM (arXiv 2605.09144) calls the failure of local SAM under heterogeneity *flatness
incompatibility*. Its exact Δ_FI is not public; fedlab's operational definitions, at θ
and radius ρ (SAM, Foret et al. 2021):

    ε_{i,b} = ρ g_{i,b}/‖g_{i,b}‖   (client i, minibatch b — FedSAM's)
    ε_i^F   = ρ ∇F_i/‖∇F_i‖         (full batch — heterogeneity only)
    ε*      = ρ ∇F/‖∇F‖             (what the global model needs)

    misalignment        E_{i,b} ‖ε_{i,b} − ε*‖²    (and E_i ‖ε_i^F − ε*‖²)
    cosine              E_{i,b} cos(ε_{i,b}, ε*)
    missed sharpness    Δ_FI = F(θ + ε*) − E_{i,b} F(θ + ε_{i,b})

To first order F(θ+ε*) − F(θ+ε) ≈ (‖∇F‖ / 2ρ) ‖ε − ε*‖², reported as
``missed_sharpness_first_order``. :func:`mixing_sweep` measures the same for FedVSSAM's mixture
ε_i(γ_l) = ρ h_i/‖h_i‖, h_i = (1−γ_l) h + γ_l g_{i,b} (h = ∇F by default): γ_l = 1 is FedSAM, γ_l = 0
is ε*."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from fedlab.analysis.federation import EmpiricalLoss, evaluate_points, global_loss_fn
from fedlab.analysis._checks import check_like, check_rho
from fedlab.analysis.gradients import ClientGradients, gradients_at
from fedlab.models.functional import FlatModel

__all__ = ["IncompatibilityReport", "MixingSweep", "flatness_incompatibility", "mixing_sweep", "perturbation"]


def perturbation(direction: Tensor, rho: float) -> Tensor:
    """ρ d/‖d‖ along the last dimension; a zero direction gives a zero perturbation (no NaN)."""
    norm = torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    return torch.where(norm > 0, rho * direction / safe, torch.zeros_like(direction))


def _cosine(a: Tensor, b: Tensor) -> Tensor:
    """cos(a, b) along the last dim, 0 where either vector is zero."""
    na = torch.linalg.vector_norm(a, dim=-1)
    nb = torch.linalg.vector_norm(b, dim=-1)
    denom = na * nb
    dot = (a * b).sum(dim=-1)
    return torch.where(denom > 0, dot / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(dot))


def _np(t: Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().to("cpu", torch.float64).numpy()


@dataclass
class IncompatibilityReport:
    """Flatness-incompatibility measurements at one θ and ρ: numpy arrays ``[client]`` or
    ``[client, batch]``; perturbed losses ``None`` when the missed sharpness was skipped."""

    rho: float
    loss: float  # F(θ) on the evaluation sample
    loss_at_star: float  # F(θ + ε*)
    grad_norm: float  # ‖∇F(θ)‖
    misalignment: np.ndarray  # (N, B)  ‖ε_{i,b} − ε*‖²
    misalignment_full: np.ndarray  # (N,)  ‖ε_i^F − ε*‖²
    cosine: np.ndarray  # (N, B)
    cosine_full: np.ndarray  # (N,)
    perturbed_loss: np.ndarray | None  # (N, B)  F(θ + ε_{i,b})
    perturbed_loss_full: np.ndarray | None  # (N,)  F(θ + ε_i^F)
    n_samples: np.ndarray  # (N,)
    extra: dict = field(default_factory=dict)

    @property
    def missed_sharpness(self) -> float:
        """Δ_FI = F(θ+ε*) − mean_{i,b} F(θ+ε_{i,b})."""
        if self.perturbed_loss is None:
            return float("nan")
        return self.loss_at_star - float(self.perturbed_loss.mean())

    @property
    def missed_sharpness_full(self) -> float:
        """F(θ+ε*) − mean_i F(θ+ε_i^F): the part left with exact client gradients."""
        if self.perturbed_loss_full is None:
            return float("nan")
        return self.loss_at_star - float(self.perturbed_loss_full.mean())

    def to_frame(self) -> pd.DataFrame:
        """One row per client: misalignment, cosine, perturbed loss and missed sharpness (minibatch and full)."""
        df = pd.DataFrame({
            "client": np.arange(len(self.misalignment_full)),
            "n_samples": self.n_samples,
            "misalignment": self.misalignment.mean(axis=1),
            "misalignment_full": self.misalignment_full,
            "cosine": self.cosine.mean(axis=1),
            "cosine_full": self.cosine_full,
        })
        if self.perturbed_loss is not None and self.perturbed_loss_full is not None:
            df["perturbed_loss"] = self.perturbed_loss.mean(axis=1)
            df["perturbed_loss_full"] = self.perturbed_loss_full
            df["missed_sharpness"] = self.loss_at_star - df["perturbed_loss"]
            df["missed_sharpness_full"] = self.loss_at_star - df["perturbed_loss_full"]
        return df

    def summary(self) -> pd.DataFrame:
        """One row: the federation-level numbers (means over clients and minibatches)."""
        mis = float(self.misalignment.mean())
        row = {
            "rho": self.rho,
            "n_clients": len(self.misalignment_full),
            "batches": self.misalignment.shape[1],
            "loss": self.loss,
            "global_sharpness": self.loss_at_star - self.loss,  # F(θ+ε*) − F(θ)
            "grad_norm": self.grad_norm,
            "misalignment": mis,
            "misalignment_full": float(self.misalignment_full.mean()),
            "cosine": float(self.cosine.mean()),
            "cosine_full": float(self.cosine_full.mean()),
            "missed_sharpness": self.missed_sharpness,
            "missed_sharpness_full": self.missed_sharpness_full,
            "missed_sharpness_first_order": self.grad_norm / (2 * self.rho) * mis,
        }
        row.update(self.extra)
        return pd.DataFrame([row])


@dataclass
class _AtTheta:
    """What every report at one θ and ρ shares: the gradients, ε*, F(θ) and F(θ + ε*), the loss F."""

    theta: Tensor
    rho: float
    grads: ClientGradients
    loss_fn: EmpiricalLoss | None  # None: the missed sharpness is skipped
    eps_star: Tensor
    base: tuple[float, float]  # F(θ), F(θ + ε*)
    n_samples: np.ndarray
    vmap_chunk: int | None
    progress: bool

    @classmethod
    def build(cls, model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor, rho: float,
              batches: int, batch_size: int, eval_batches: int | None, eval_batch_size: int, seed: int,
              grads: ClientGradients | None, missed_sharpness: bool, vmap_chunk: int | None,
              progress: bool) -> "_AtTheta":
        rho = check_rho(rho)
        grads = gradients_at(model, clients, theta, grads, batches=batches, batch_size=batch_size, seed=seed,
                             progress=progress)
        theta = theta.detach()
        eps_star = perturbation(grads.global_grad, rho)
        loss_fn = global_loss_fn(model, clients, eval_batches, eval_batch_size, seed) if missed_sharpness else None
        if loss_fn is not None:
            with torch.no_grad():
                base = (float(loss_fn(theta)), float(loss_fn(theta + eps_star)))
        else:
            base = (grads.global_loss, float("nan"))
        n_samples = np.array([int(x.shape[0]) for x, _ in clients])
        return cls(theta, rho, grads, loss_fn, eps_star, base, n_samples, vmap_chunk, progress)

    def report(self, eps_batch: Tensor, eps_full: Tensor) -> IncompatibilityReport:
        """The report of the clients' perturbations ε_{i,b} (``eps_batch``) and ε_i^F (``eps_full``)."""
        n, b, d = eps_batch.shape
        mis_b = ((eps_batch - self.eps_star) ** 2).sum(dim=-1)
        mis_f = ((eps_full - self.eps_star) ** 2).sum(dim=-1)
        cos_b = _cosine(eps_batch, self.eps_star.expand_as(eps_batch))
        cos_f = _cosine(eps_full, self.eps_star.expand_as(eps_full))
        pl_b = pl_f = None
        if self.loss_fn is not None:
            points = self.theta[None] + torch.cat([eps_batch.reshape(n * b, d), eps_full])
            values = evaluate_points(self.loss_fn, points, vmap_chunk=self.vmap_chunk, progress=self.progress,
                                     desc="F(θ+ε)")
            pl_b, pl_f = values[: n * b].reshape(n, b), values[n * b:]
        loss, loss_star = self.base
        return IncompatibilityReport(self.rho, loss, loss_star, float(torch.linalg.vector_norm(self.grads.global_grad)),
                                     _np(mis_b), _np(mis_f), _np(cos_b), _np(cos_f), _np(pl_b), _np(pl_f),
                                     self.n_samples)


def flatness_incompatibility(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor,
                             rho: float = 0.05, *, batches: int = 4, batch_size: int = 32,
                             eval_batches: int | None = None, eval_batch_size: int = 64, seed: int = 0,
                             grads: ClientGradients | None = None, missed_sharpness: bool = True,
                             vmap_chunk: int | None = None, progress: bool = False) -> IncompatibilityReport:
    """Misalignment, cosine and missed sharpness of the clients' SAM perturbations at θ (module doc).

    ``batches``, ``batch_size``, ``seed``: the minibatches (:func:`~fedlab.analysis.gradients.client_gradients`;
    ``grads`` reuses ones computed at this θ). ``eval_batches``, ``eval_batch_size``: the sample F is
    evaluated on (``None``: every client's full data). ``missed_sharpness=False`` skips the N·(B+1)
    evaluations of F; ``vmap_chunk``: points per ``vmap`` call."""
    at = _AtTheta.build(model, clients, theta, rho, batches, batch_size, eval_batches, eval_batch_size, seed,
                        grads, missed_sharpness, vmap_chunk, progress)
    return at.report(perturbation(at.grads.batch, at.rho), perturbation(at.grads.full, at.rho))


@dataclass
class MixingSweep:
    """:func:`mixing_sweep` results: one :class:`IncompatibilityReport` per γ_l."""

    gammas: list[float]
    reports: list[IncompatibilityReport]
    h_source: str  # "grad_F" (h = ∇F) or "given"

    def summary(self) -> pd.DataFrame:
        """One row per γ_l (the reports' summaries with a ``gamma`` column first)."""
        frames = [r.summary().assign(gamma=g) for g, r in zip(self.gammas, self.reports)]
        df = pd.concat(frames, ignore_index=True)
        return df[["gamma"] + [c for c in df.columns if c != "gamma"]]

    def to_frame(self) -> pd.DataFrame:
        """One row per (γ_l, client)."""
        frames = [r.to_frame().assign(gamma=g) for g, r in zip(self.gammas, self.reports)]
        df = pd.concat(frames, ignore_index=True)
        return df[["gamma"] + [c for c in df.columns if c != "gamma"]]


def mixing_sweep(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor, rho: float = 0.05,
                 gammas: Sequence[float] = (0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0), *, h: Tensor | None = None,
                 batches: int = 4, batch_size: int = 32, eval_batches: int | None = None, eval_batch_size: int = 64,
                 seed: int = 0, grads: ClientGradients | None = None, missed_sharpness: bool = True,
                 vmap_chunk: int | None = None, progress: bool = False) -> MixingSweep:
    """:func:`flatness_incompatibility` of ε_i(γ) = ρ h_i/‖h_i‖ for each γ in ``gammas``, with
    h_{i,b} = (1−γ) h + γ g_{i,b} (full batch: ∇F_i); ``h`` defaults to ∇F, or pass a run's EMA h^t.
    Gradients are computed once for all γ."""
    if len(gammas) == 0:
        raise ValueError("gammas must hold at least one value")
    gam = [float(g) for g in gammas]
    bad = [g for g in gam if not (0.0 <= g <= 1.0)]
    if bad:
        raise ValueError(f"gammas must lie in [0, 1], got {bad}")
    at = _AtTheta.build(model, clients, theta, rho, batches, batch_size, eval_batches, eval_batch_size, seed,
                        grads, missed_sharpness, vmap_chunk, progress)
    grads = at.grads
    if h is None:
        h_vec, source = grads.global_grad, "grad_F"
    else:
        check_like(grads.global_grad, h, "h")
        h_vec, source = h.detach().to(grads.global_grad), "given"
    reports = [at.report(perturbation((1 - g) * h_vec + g * grads.batch, at.rho),
                         perturbation((1 - g) * h_vec + g * grads.full, at.rho)) for g in gam]
    return MixingSweep(gam, reports, source)
