"""Loss landscapes: 1-D interpolations and slices, 2-D slices, filter-normalised directions, plots.

* :func:`interpolate` — L((1−α)θ_a + αθ_b), the linear path of Goodfellow et al. (ICLR 2015);
* :func:`slice_1d` — L(θ + α d); :func:`slice_2d` — L(θ + α d₁ + β d₂);
* :func:`filter_normalized_direction` — the direction of Li et al., "Visualizing the Loss Landscape of
  Neural Nets" (NeurIPS 2018), which removes the scale invariance of normalised ReLU networks so that
  landscapes of different models compare.

Grids are symmetric with the centre exactly at 0 (the centre is L(θ) bit for bit); points are
vmapped in chunks on CUDA and spread over one thread per core on CPU."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from fedlab.analysis.federation import (
    EmpiricalLoss,
    LossFn,
    evaluate_affine,
)
from fedlab.analysis._checks import check_count, check_like
from fedlab.engine.evaluate import CPU_EVAL_BATCH
from fedlab.models.functional import FlatModel, ParamSpec, param_spec

__all__ = [
    "Slice1D",
    "Slice2D",
    "filter_normalized_direction",
    "interpolate",
    "plot_contour",
    "plot_surface",
    "slice_1d",
    "slice_2d",
]

ONE_DIM = ("zero", "copy", "normalize")


# --- directions ---
def _spec_of(model_or_spec: FlatModel | nn.Module | ParamSpec) -> ParamSpec:
    if isinstance(model_or_spec, ParamSpec):
        return model_or_spec
    if isinstance(model_or_spec, FlatModel):
        return model_or_spec.spec
    if isinstance(model_or_spec, nn.Module):
        return param_spec(model_or_spec)
    raise ValueError(f"model_or_spec must be a FlatModel, nn.Module or ParamSpec, got {type(model_or_spec).__name__}")


def filter_normalized_direction(model_or_spec: FlatModel | nn.Module | ParamSpec, theta: Tensor,
                                generator: torch.Generator, *, one_dim: str = "zero", eps: float = 1e-10) -> Tensor:
    """A random filter-normalised direction d (Li et al. 2018), flat like θ.

    d ~ N(0, I); for every parameter tensor with ≥ 2 dims and each filter f (a slice along dim 0):
    d_f ← d_f · ‖θ_f‖ / (‖d_f‖ + ``eps``). One-dimensional tensors (biases, GroupNorm affine):
    ``one_dim="zero"`` (default, Li et al.'s ``ignore="biasbn"``) d = 0, ``"copy"`` d = θ,
    ``"normalize"`` the whole tensor as one filter. Drawn with ``generator`` on its own device, so a seed
    gives the same direction on any device."""
    spec = _spec_of(model_or_spec)
    if theta.ndim != 1 or theta.numel() != spec.dim:
        raise ValueError(f"theta must be a 1-D tensor of the model's {spec.dim} parameters, got {tuple(theta.shape)}")
    if one_dim not in ONE_DIM:
        raise ValueError(f"one_dim={one_dim!r} is invalid; allowed: {', '.join(ONE_DIM)}")
    raw = torch.randn(spec.dim, generator=generator, device=generator.device, dtype=theta.dtype)
    raw = raw.to(theta.device)
    out = []
    for d_part, t_part in zip(spec.unflatten(raw).values(), spec.unflatten(theta.detach()).values()):
        if d_part.ndim >= 2:
            d_rows = d_part.reshape(d_part.shape[0], -1)
            t_rows = t_part.reshape(t_part.shape[0], -1)
            scale = torch.linalg.vector_norm(t_rows, dim=1, keepdim=True) / (
                torch.linalg.vector_norm(d_rows, dim=1, keepdim=True) + eps)
            out.append((d_rows * scale).reshape(-1))
        elif one_dim == "zero":
            out.append(torch.zeros_like(d_part).reshape(-1))
        elif one_dim == "copy":
            out.append(t_part.clone().reshape(-1))
        else:
            scale = torch.linalg.vector_norm(t_part) / (torch.linalg.vector_norm(d_part) + eps)
            out.append((d_part * scale).reshape(-1))
    return torch.cat(out)


# --- grids ---
def _symmetric_grid(span: float, n: int) -> np.ndarray:
    """n points from −span to span; for odd n the centre is exactly 0."""
    check_count("n", n, 2)
    if not (span > 0):
        raise ValueError(f"span must be > 0, got {span!r}")
    half = (n - 1) / 2
    return (np.arange(n) - half) / half * float(span)


def _check_direction(theta: Tensor, d: Tensor, name: str) -> None:
    if theta.ndim != 1:
        raise ValueError(f"theta must be a 1-D tensor, got shape {tuple(theta.shape)}")
    check_like(theta, d, name)


@dataclass
class Slice1D:
    """Losses along a line: ``losses[j]`` at coordinate ``alphas[j]``."""

    alphas: np.ndarray
    losses: np.ndarray
    kind: str = "slice"  # "slice" (θ + αd) or "interpolation" ((1−α)θ_a + αθ_b)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"alpha": self.alphas, "loss": self.losses})


@dataclass
class Slice2D:
    """Losses on a plane: ``losses[i, j]`` at (α = ``alphas[j]``, β = ``betas[i]``), the layout of
    ``contour(alphas, betas, losses)``."""

    alphas: np.ndarray
    betas: np.ndarray
    losses: np.ndarray

    @property
    def center(self) -> float:
        """The loss at the grid point nearest to (0, 0) — exactly L(θ) for odd n."""
        return float(self.losses[int(np.abs(self.betas).argmin()), int(np.abs(self.alphas).argmin())])

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per grid point (``alpha, beta, loss``)."""
        aa, bb = np.meshgrid(self.alphas, self.betas)
        return pd.DataFrame({"alpha": aa.ravel(), "beta": bb.ravel(), "loss": self.losses.ravel()})


def _in_layout(loss_fn: LossFn, theta: Tensor, channels_last: bool | None) -> LossFn:
    """``loss_fn`` with its model in the requested layout (an ``EmpiricalLoss`` over 4-D inputs only),
    and, in the CPU's fast layout, cut into cache-sized chunks of samples (:data:`CPU_EVAL_BATCH`)."""
    if not isinstance(loss_fn, EmpiricalLoss) or loss_fn.x.ndim != 4:
        return loss_fn
    if channels_last is None:
        channels_last = theta.device.type == "cpu" or loss_fn.model.channels_last
    out = loss_fn.with_channels_last(bool(channels_last))
    if channels_last and theta.device.type == "cpu":
        out = out.with_chunk_size(min(out.chunk_size, CPU_EVAL_BATCH))
    return out


def _point_workers(loss_fn: LossFn, theta: Tensor, threads: int | None) -> list[EmpiricalLoss]:
    """Replicas of an ``EmpiricalLoss`` for ``threads`` point threads on the CPU (``None``: one per
    usable core); none for other losses, on other devices, or for ``threads=1``."""
    from fedlab.engine.hardware import usable_cores

    check_count("threads", threads, optional=True)
    if not isinstance(loss_fn, EmpiricalLoss) or theta.device.type != "cpu":
        return []
    n = usable_cores() if threads is None else threads
    return [loss_fn.replica() for _ in range(n - 1)]


def _as_numpy(t: Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def interpolate(loss_fn: LossFn, theta_a: Tensor, theta_b: Tensor, n: int = 21, extend: float = 0.25, *,
                vmap_chunk: int | None = None, threads: int | None = None, progress: bool = False) -> Slice1D:
    """L((1−α)θ_a + αθ_b) on ``n`` points of [0, 1] extended by ⌊``extend``·(n−1)⌋ steps at each end;
    α = 0 and 1 are grid points, so the ends are L(θ_a) and L(θ_b) exactly. ``threads``: see :func:`slice_2d`."""
    _check_direction(theta_a, theta_b, "theta_b")
    check_count("n", n, 2)
    if not (extend >= 0):
        raise ValueError(f"extend must be >= 0, got {extend!r}")
    extra = int(np.floor(extend * (n - 1) + 1e-9))
    alphas = np.arange(-extra, n + extra) / (n - 1)
    a = torch.as_tensor(alphas, dtype=theta_a.dtype)[:, None]
    ends = torch.stack([theta_a.detach(), theta_b.detach()])
    losses = evaluate_affine(loss_fn, torch.zeros_like(theta_a), torch.cat([1 - a, a], dim=1), ends,
                             vmap_chunk=vmap_chunk, workers=_point_workers(loss_fn, theta_a, threads),
                             progress=progress, desc="interpolate")
    return Slice1D(alphas, _as_numpy(losses), "interpolation")


def slice_1d(loss_fn: LossFn, theta: Tensor, direction: Tensor, span: float = 1.0, n: int = 21, *,
             vmap_chunk: int | None = None, threads: int | None = None, progress: bool = False) -> Slice1D:
    """L(θ + α d) for ``n`` values of α evenly spaced in [−span, span] (α = 0 exact for odd n);
    ``threads``: see :func:`slice_2d`."""
    _check_direction(theta, direction, "direction")
    alphas = _symmetric_grid(span, n)
    a = torch.as_tensor(alphas, dtype=theta.dtype)[:, None]
    losses = evaluate_affine(loss_fn, theta.detach(), a, direction.detach()[None], vmap_chunk=vmap_chunk,
                             workers=_point_workers(loss_fn, theta, threads), progress=progress, desc="slice 1-D")
    return Slice1D(alphas, _as_numpy(losses))


def slice_2d(loss_fn: LossFn, theta: Tensor, d1: Tensor, d2: Tensor, span: float = 1.0, n: int = 21, *,
             vmap_chunk: int | None = None, channels_last: bool | None = None, threads: int | None = None,
             progress: bool = True) -> Slice2D:
    """L(θ + α d₁ + β d₂) on an n×n grid over [−span, span]²; n² loss evaluations.

    ``channels_last=None`` evaluates an :class:`~fedlab.analysis.federation.EmpiricalLoss` over images in
    NHWC layout and in cache-sized chunks on CPU (about twice as fast on the ``cnn``, ``python -m lab
    bench analysis``; values to ~1e-7 relative); ``False`` keeps the loss as given, so the centre is
    ``loss_fn(θ)`` bit for bit. ``threads``: on CPU, that many grid points at once, one thread each over
    model replicas (default one per usable core, ``1`` the plain loop); bit-identical to ``threads=1``
    under ``torch.set_num_threads(1)``."""
    _check_direction(theta, d1, "d1")
    _check_direction(theta, d2, "d2")
    loss_fn = _in_layout(loss_fn, theta, channels_last)
    grid = _symmetric_grid(span, n)
    a = torch.as_tensor(grid, dtype=theta.dtype)
    aa = a[None, :].expand(n, n).reshape(-1, 1)  # α varies along columns
    bb = a[:, None].expand(n, n).reshape(-1, 1)  # β along rows
    dirs = torch.stack([d1.detach(), d2.detach()])
    losses = evaluate_affine(loss_fn, theta.detach(), torch.cat([aa, bb], dim=1), dirs, vmap_chunk=vmap_chunk,
                             workers=_point_workers(loss_fn, theta, threads), progress=progress, desc="slice 2-D")
    return Slice2D(grid, grid.copy(), _as_numpy(losses).reshape(n, n))


# --- plots (matplotlib only; imported lazily so the analysis code runs without a display) ---
def plot_contour(ax: Any, result: Slice2D, *, levels: int | Sequence[float] = 20, log: bool = False,
                 cmap: str = "viridis", colorbar: bool = True, filled: bool = True) -> Any:
    """Contour plot of a 2-D slice with a colorbar; ``log`` plots log10 of the loss. The centre θ is marked."""
    z = np.log10(np.maximum(result.losses, 1e-12)) if log else result.losses
    draw = ax.contourf if filled else ax.contour
    cs = draw(result.alphas, result.betas, z, levels=levels, cmap=cmap)
    if filled:
        ax.contour(result.alphas, result.betas, z, levels=cs.levels, colors="k", linewidths=0.3, alpha=0.5)
    ax.plot([0.0], [0.0], marker="*", color="white", markeredgecolor="black", markersize=10)
    ax.set_xlabel("α (direction 1)")
    ax.set_ylabel("β (direction 2)")
    ax.set_aspect("equal")
    if colorbar:
        cb = ax.figure.colorbar(cs, ax=ax)
        cb.set_label("log10 loss" if log else "loss")
    return cs


def plot_surface(fig_or_ax3d: Any, result: Slice2D, *, cmap: str = "viridis", log: bool = False,
                 **kwargs: Any) -> Any:
    """3-D surface of a 2-D slice on a 3-D axes (or on a new one added to the given figure)."""
    ax = fig_or_ax3d
    if not hasattr(ax, "plot_surface"):
        ax = fig_or_ax3d.add_subplot(projection="3d")
    z = np.log10(np.maximum(result.losses, 1e-12)) if log else result.losses
    aa, bb = np.meshgrid(result.alphas, result.betas)
    surf = ax.plot_surface(aa, bb, z, cmap=cmap, linewidth=0, antialiased=True, **kwargs)
    ax.set_xlabel("α")
    ax.set_ylabel("β")
    ax.set_zlabel("log10 loss" if log else "loss")
    return surf
