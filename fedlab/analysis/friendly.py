"""The friendly adversary and the two sources of perturbation error: heterogeneity and batch noise.

A SAM perturbation from one minibatch, ε_A = ρ g_A/‖g_A‖, raises f_A by ≈ ρ‖g_A‖; on a batch B whose
gradient points elsewhere it can *lower* the loss, f_B(θ + ε_A) < f_B(θ) — a "friendly adversary"
(VaSSO, Li & Giannakis, NeurIPS 2023), carried to federated learning by FedVSSAM (arXiv 2605.09144),
where B may belong to another client. A client's minibatch error splits as

    g_{i,b} − ∇F = δ_i + ζ_{i,b},   δ_i = ∇F_i − ∇F (heterogeneity),   ζ_{i,b} = g_{i,b} − ∇F_i (batch noise),

and since ζ averages to zero over a client's minibatches, E‖g − ∇F‖² = E‖δ‖² + E‖ζ‖².
:func:`gradient_decomposition` measures each term on a sample; :func:`friendly_adversary` counts
friendly pairs within and across clients; :func:`friendly_vs_alpha` and
:func:`friendly_vs_batch_size` sweep heterogeneity and batch size."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import vmap
from tqdm import tqdm

from fedlab.analysis.federation import federation_from_config
from fedlab.analysis.points import resolve_chunk
from fedlab.analysis._checks import check_count, check_rho
from fedlab.analysis.gradients import ClientGradients, client_gradients, gradients_at
from fedlab.analysis.incompatibility import perturbation
from fedlab.models.functional import FlatModel
from fedlab._rng import numpy_generator

if TYPE_CHECKING:  # pragma: no cover
    from fedlab.config import Config

__all__ = [
    "FriendlyReport",
    "GradientDecomposition",
    "friendly_adversary",
    "friendly_vs_alpha",
    "friendly_vs_batch_size",
    "gradient_decomposition",
]


# --- δ / ζ decomposition ---
@dataclass
class GradientDecomposition:
    """‖g_{i,b} − ∇F‖² = ‖δ_i‖² + ‖ζ_{i,b}‖² + 2⟨δ_i, ζ_{i,b}⟩ on a sample, in float64; ``total_sq`` is
    computed from g − ∇F directly, so :attr:`identity_residual` checks the decomposition."""

    delta_sq: np.ndarray  # (N,)     ‖δ_i‖²
    zeta_sq: np.ndarray  # (N, B)    ‖ζ_{i,b}‖²
    cross: np.ndarray  # (N, B)      2⟨δ_i, ζ_{i,b}⟩
    total_sq: np.ndarray  # (N, B)   ‖g_{i,b} − ∇F‖²
    global_grad_sq: float  # ‖∇F‖²

    @property
    def identity_residual(self) -> float:
        """max |‖g − ∇F‖² − (‖δ‖² + ‖ζ‖² + 2⟨δ,ζ⟩)| over all (i, b)."""
        return float(np.abs(self.total_sq - (self.delta_sq[:, None] + self.zeta_sq + self.cross)).max())

    def to_frame(self) -> pd.DataFrame:
        """One row per client: ‖δ_i‖², E_b‖ζ‖², 2E_b⟨δ,ζ⟩, E_b‖g − ∇F‖²."""
        return pd.DataFrame({
            "client": np.arange(len(self.delta_sq)),
            "delta_sq": self.delta_sq,
            "zeta_sq": self.zeta_sq.mean(axis=1),
            "cross": self.cross.mean(axis=1),
            "total_sq": self.total_sq.mean(axis=1),
        })

    def summary(self) -> pd.DataFrame:
        """One row: E‖δ‖², E‖ζ‖², 2E⟨δ,ζ⟩, its normalised size 2E⟨δ,ζ⟩/(E‖δ‖²+E‖ζ‖²), E‖g − ∇F‖²."""
        d2 = float(self.delta_sq.mean())
        z2 = float(self.zeta_sq.mean())
        cr = float(self.cross.mean())
        return pd.DataFrame([{
            "delta_sq": d2,
            "zeta_sq": z2,
            "cross": cr,
            "cross_normalized": cr / (d2 + z2) if d2 + z2 > 0 else 0.0,
            "total_sq": float(self.total_sq.mean()),
            "heterogeneity_share": d2 / (d2 + z2) if d2 + z2 > 0 else float("nan"),
            "global_grad_sq": self.global_grad_sq,
            "identity_residual": self.identity_residual,
        }])


def gradient_decomposition(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor, *,
                           batches: int = 4, batch_size: int = 32, seed: int = 0, grads: ClientGradients | None = None,
                           progress: bool = False) -> GradientDecomposition:
    """Split each minibatch direction error g_{i,b} − ∇F into heterogeneity δ_i and batch noise ζ_{i,b}."""
    if grads is None:
        grads = client_gradients(model, clients, theta, batches=batches, batch_size=batch_size, seed=seed,
                                 progress=progress)
    gF = grads.global_grad.double()
    n, b = grads.n_clients, grads.n_batches
    delta_sq = np.empty(n)
    zeta_sq = np.empty((n, b))
    cross = np.empty((n, b))
    total = np.empty((n, b))
    for i in range(n):  # one client at a time keeps the float64 copies small
        gi = grads.full[i].double()
        gb = grads.batch[i].double()
        delta = gi - gF
        zeta = gb - gi
        delta_sq[i] = float(delta @ delta)
        zeta_sq[i] = (zeta * zeta).sum(dim=1).cpu().numpy()
        cross[i] = (2 * (zeta @ delta)).cpu().numpy()
        direct = gb - gF
        total[i] = (direct * direct).sum(dim=1).cpu().numpy()
    return GradientDecomposition(delta_sq, zeta_sq, cross, total, float(gF @ gF))


# --- friendly-adversary rates ---
def _batch_losses(model: FlatModel, thetas: Tensor, xb: Tensor, yb: Tensor, vmap_chunk: int | None,
                  sample_chunk: int = 4096, progress: bool = False) -> Tensor:
    """``L[p, t] = f_t(θ_p)``: the mean loss of target batch t at point p. ``xb``: (T, bs, ...)."""
    T, bs = yb.shape
    x = xb.reshape(T * bs, *xb.shape[2:])
    y = yb.reshape(-1)

    def per_batch(theta: Tensor) -> Tensor:
        parts = []
        for s in range(0, T * bs, sample_chunk):
            logits = model.forward(theta, x[s:s + sample_chunk])
            parts.append(F.cross_entropy(logits, y[s:s + sample_chunk], reduction="none"))
        return torch.cat(parts).reshape(T, bs).mean(dim=1)

    chunk = resolve_chunk(vmap_chunk, thetas)
    out = []
    with torch.no_grad():
        for s in tqdm(range(0, thetas.shape[0], chunk), desc="f_B(θ+ε_A)", disable=not progress, leave=False):
            block = thetas[s:s + chunk]
            out.append(torch.stack([per_batch(t) for t in block]) if chunk == 1 else vmap(per_batch)(block))
    return torch.cat(out)


@dataclass
class FriendlyReport:
    """Loss changes f_B(θ + ε_A) − f_B(θ) for pairs of minibatches (A builds ε, B is evaluated):
    ``same_batch[i, a]`` (B = A), ``within[i, a, b]`` (both of client i), ``cross[p, t]`` (source batch
    p of client ``cross_sources[p]`` on target batch t of another client ``cross_targets[t]``)."""

    rho: float
    same_batch: np.ndarray  # (N, B)
    within: np.ndarray  # (N, B, B)
    cross: np.ndarray  # (N·B, T)
    cross_sources: np.ndarray  # (N·B,)  client id of each source batch
    cross_targets: np.ndarray  # (T,)    client id of each target batch

    @property
    def _cross_mask(self) -> np.ndarray:
        return self.cross_sources[:, None] != self.cross_targets[None, :]

    @property
    def same_batch_rate(self) -> float:
        """Fraction of batches whose own perturbation lowers their loss (≈ 0 for small ρ)."""
        return float((self.same_batch < 0).mean())

    @property
    def within_client_rate(self) -> float:
        """Fraction of pairs A ≠ B of the same client with f_B(θ + ε_A) < f_B(θ)."""
        b = self.within.shape[1]
        if b < 2:
            return float("nan")
        off = ~np.eye(b, dtype=bool)
        return float((self.within[:, off] < 0).mean())

    @property
    def cross_client_rate(self) -> float:
        """Fraction of pairs with A and B from different clients and f_B(θ + ε_A) < f_B(θ)."""
        mask = self._cross_mask
        return float((self.cross[mask] < 0).mean()) if mask.any() else float("nan")

    def to_frame(self) -> pd.DataFrame:
        """One row per client (as the source of ε_A): rates and mean loss changes."""
        n, b = self.same_batch.shape
        off = ~np.eye(b, dtype=bool)
        rows = []
        mask = self._cross_mask
        for i in range(n):
            src = self.cross_sources == i
            sel = self.cross[src][mask[src]]
            rows.append({
                "client": i,
                "same_batch_increase": float(self.same_batch[i].mean()),
                "within_client_rate": float((self.within[i][off] < 0).mean()) if b > 1 else float("nan"),
                "within_client_change": float(self.within[i][off].mean()) if b > 1 else float("nan"),
                "cross_client_rate": float((sel < 0).mean()) if sel.size else float("nan"),
                "cross_client_change": float(sel.mean()) if sel.size else float("nan"),
            })
        return pd.DataFrame(rows)

    def summary(self) -> pd.DataFrame:
        """One row: the three rates and the mean loss change for each kind of pair."""
        b = self.within.shape[1]
        off = ~np.eye(b, dtype=bool)
        mask = self._cross_mask
        return pd.DataFrame([{
            "rho": self.rho,
            "same_batch_rate": self.same_batch_rate,
            "within_client_rate": self.within_client_rate,
            "cross_client_rate": self.cross_client_rate,
            "same_batch_change": float(self.same_batch.mean()),
            "within_client_change": float(self.within[:, off].mean()) if b > 1 else float("nan"),
            "cross_client_change": float(self.cross[mask].mean()) if mask.any() else float("nan"),
        }])


def friendly_adversary(
    model: FlatModel,
    clients: Sequence[tuple[Tensor, Tensor]],
    theta: Tensor,
    rho: float = 0.05,
    *,
    batches: int = 4,
    batch_size: int = 32,
    cross_targets: int | None = None,
    seed: int = 0,
    grads: ClientGradients | None = None,
    vmap_chunk: int | None = None,
    progress: bool = False,
) -> FriendlyReport:
    """How often a minibatch SAM perturbation ε_A = ρ g_A/‖g_A‖ lowers another batch's loss.

    Each client contributes ``batches`` minibatches (those of :func:`client_gradients` with this ``seed``);
    each perturbation is evaluated on all N·B batches, or on ``cross_targets`` random ones
    (``numpy_generator(seed, "friendly-targets")``, within-client pairs then separately)."""
    rho = check_rho(rho)
    check_count("cross_targets", cross_targets, optional=True)
    grads = gradients_at(model, clients, theta, grads, batches=batches, batch_size=batch_size, seed=seed,
                         progress=progress)
    theta = theta.detach()
    n, b = grads.n_clients, grads.n_batches
    xb = torch.stack([clients[i][0][grads.batch_indices[i]] for i in range(n)])  # (N, B, bs, ...)
    yb = torch.stack([clients[i][1][grads.batch_indices[i]] for i in range(n)])  # (N, B, bs)
    xs = xb.reshape(n * b, *xb.shape[2:])
    ys = yb.reshape(n * b, -1)
    owner = np.repeat(np.arange(n), b)
    eps = perturbation(grads.batch, rho).reshape(n * b, -1)
    points = theta[None] + eps

    all_targets = cross_targets is None or int(cross_targets) >= n * b
    if all_targets:
        tgt = np.arange(n * b)
    else:
        tgt = np.sort(numpy_generator(seed, "friendly-targets").choice(n * b, size=int(cross_targets), replace=False))
    tgt_t = torch.as_tensor(tgt, device=xs.device)
    base = _batch_losses(model, theta[None], xs, ys, vmap_chunk)[0]  # f_t(θ) for every batch
    moved = _batch_losses(model, points, xs[tgt_t], ys[tgt_t], vmap_chunk, progress=progress)
    cross = (moved - base[tgt_t][None]).cpu().double().numpy()
    if all_targets:
        full = cross.reshape(n, b, n, b)
        within = np.stack([full[i, :, i, :] for i in range(n)])
    else:
        blocks = []
        for i in range(n):
            sl = slice(i * b, (i + 1) * b)
            m = _batch_losses(model, points[sl], xs[sl], ys[sl], vmap_chunk)
            blocks.append((m - base[sl][None]).cpu().double().numpy())
        within = np.stack(blocks)
    same = np.stack([np.diag(w) for w in within])
    return FriendlyReport(rho, same, within, cross, owner, owner[tgt])


# --- sweeps ---
def _row(grads: ClientGradients, model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor,
         rho: float, cross_targets: int | None, seed: int, vmap_chunk: int | None) -> dict:
    dec = gradient_decomposition(model, clients, theta, grads=grads).summary().iloc[0].to_dict()
    fr = friendly_adversary(model, clients, theta, rho, cross_targets=cross_targets, seed=seed, grads=grads,
                            vmap_chunk=vmap_chunk).summary().iloc[0].to_dict()
    return {**dec, **fr, "n_clients": grads.n_clients, "batches": grads.n_batches,
            "batch_size": grads.batch_size}


def friendly_vs_alpha(config: "Config", alphas: Sequence[float], *, theta: Tensor | None = None, rho: float = 0.05,
                      batches: int = 4, batch_size: int = 32, max_clients: int | None = None,
                      max_per_client: int | None = None, cross_targets: int | None = None, seed: int = 0,
                      vmap_chunk: int | None = None, progress: bool = False) -> pd.DataFrame:
    """Decomposition and friendly rates for a Dirichlet partition at each α (one row per α), built by
    :func:`federation_from_config` at θ = ``theta`` or the initial model; ``max_clients`` keeps the same
    seeded subset of client positions for every α."""
    if len(alphas) == 0:
        raise ValueError("alphas must hold at least one value")
    rho = check_rho(rho)
    rows = []
    for alpha in tqdm(list(alphas), desc="alpha", disable=not progress, leave=False):
        if not (float(alpha) > 0):
            raise ValueError(f"alphas must be > 0, got {alpha!r}")
        cfg = config.replace(partition="dirichlet", alpha=float(alpha))
        model, clients, _ = federation_from_config(cfg, max_per_client=max_per_client, seed=seed)
        if max_clients is not None and len(clients) > max_clients:
            keep = np.sort(numpy_generator(seed, "friendly-clients").choice(len(clients), max_clients, replace=False))
            clients = [clients[int(i)] for i in keep]
        th = model.theta0() if theta is None else theta.detach().to(model.theta0().device)
        grads = client_gradients(model, clients, th, batches=batches, batch_size=batch_size, seed=seed)
        rows.append({"alpha": float(alpha), **_row(grads, model, clients, th, rho, cross_targets, seed, vmap_chunk)})
    return pd.DataFrame(rows)


def friendly_vs_batch_size(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor,
                           batch_sizes: Sequence[int], *, rho: float = 0.05, batches: int = 4,
                           cross_targets: int | None = None, seed: int = 0, vmap_chunk: int | None = None,
                           progress: bool = False) -> pd.DataFrame:
    """Decomposition and friendly rates per minibatch size (one row each): larger batches shrink E‖ζ‖²
    (≈ ∝ 1/size) but not ‖δ‖², so the within-client rate falls while the cross-client rate stays."""
    if len(batch_sizes) == 0:
        raise ValueError("batch_sizes must hold at least one value")
    rho = check_rho(rho)
    rows = []
    for bs in tqdm(list(batch_sizes), desc="batch size", disable=not progress, leave=False):
        grads = client_gradients(model, clients, theta, batches=batches, batch_size=int(bs), seed=seed)
        rows.append(_row(grads, model, clients, theta, rho, cross_targets, seed, vmap_chunk))
    df = pd.DataFrame(rows)
    return df[["batch_size"] + [c for c in df.columns if c != "batch_size"]]
