"""Basins of attraction of a federated method on a closed-form toy federation (notebook 02).

A *basin map* runs one method from every point of a grid of start points θ⁰ and records where the
final global model θ^T lands. Running each start separately costs one full run per grid point; this
module runs all of them at once by stacking the starts as the rows of one (n, d) "parameter" and
handing that to :func:`fedlab.toy.run_functional`, with a gradient oracle that acts row by row.
That is exact — row r of the stacked run is the run from start r — as long as the method never
reduces over anything but the last dimension (every norm, clip and normalisation of FedAvg, FedSAM,
FedVSSAM and FedACG is ``dim=-1``; the client mean is over the stacked client dimension 0).
:func:`run_from_starts` does not take that on trust: it re-runs the first start on its own for a few
rounds and refuses a method whose stacked rows disagree with it.

The end points are then assigned to the minima of the global loss F by distance
(:func:`assign_basins`), and :func:`basin_shares` counts the share of start points per minimum.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from fedlab.algorithms.base import Algorithm
from fedlab.toy import BatchFn, ToyRun, run_functional

ELSEWHERE = "elsewhere"
"""The label of an end point farther than the radius from every named minimum."""

RowGradFn = Callable[[Tensor, object], tuple[Tensor, Tensor]]
"""``grad_fn(θ, batch)`` with θ of shape (..., d): the gradient (..., d) and loss (...) of every row."""


def start_grid(lo: Sequence[float], hi: Sequence[float], n: int, *, dtype: torch.dtype = torch.float64) -> Tensor:
    """The n × n grid of start points on the rectangle [lo₀, hi₀] × [lo₁, hi₁], shape (n², 2).

    Row r = j·n + i is the point (x_i, y_j), so ``.reshape(n, n, 2)`` gives an image whose row index is y
    (what ``imshow(..., origin="lower")`` expects).
    """
    if n < 2:
        raise ValueError(f"n must be at least 2 (got {n})")
    if len(lo) != 2 or len(hi) != 2 or not all(a < b for a, b in zip(lo, hi)):
        raise ValueError(f"lo and hi must be two coordinates each with lo < hi (got lo={lo}, hi={hi})")
    xs = torch.linspace(float(lo[0]), float(hi[0]), n, dtype=dtype)
    ys = torch.linspace(float(lo[1]), float(hi[1]), n, dtype=dtype)
    return torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1).reshape(-1, 2)


def run_from_starts(
    algorithm: Algorithm, starts: Tensor, grad_fn: RowGradFn, batch_fn: BatchFn, *, n_clients: int,
    rounds: int, local_steps: int, lr: float, seed: int = 0, check_rounds: int = 2,
) -> ToyRun:
    """``run_functional`` from every row of ``starts`` (shape (n, d)) at once; the trajectory is (T+1, n, d).

    ``grad_fn`` must treat the rows of θ independently (a loss written for θ of shape (..., d)). Before
    returning, the first start is run alone for ``min(check_rounds, rounds)`` rounds; if its global
    model differs from row 0 of the stacked run, the algorithm couples the rows (some reduction over
    more than the last dimension) and a ValueError says so.
    """
    if starts.ndim != 2 or starts.shape[0] < 1:
        raise ValueError(f"starts must have shape (n, d) with n ≥ 1 (got {tuple(starts.shape)})")
    if check_rounds < 1:
        raise ValueError(f"check_rounds must be at least 1 (got {check_rounds})")
    kw = dict(n_clients=n_clients, local_steps=local_steps, lr=lr, seed=seed)
    run = run_functional(algorithm, starts, grad_fn, batch_fn, rounds=rounds, **kw)
    t = min(check_rounds, rounds)
    alone = run_functional(algorithm, starts[0], grad_fn, batch_fn, rounds=t, **kw).trajectory[t]
    if not torch.allclose(run.trajectory[t, 0], alone, rtol=1e-9, atol=1e-12):
        raise ValueError(f"algorithm '{algorithm.name}' couples the stacked start points (after {t} round(s) "
                         f"start 0 is at {run.trajectory[t, 0].tolist()} stacked, {alone.tolist()} alone); "
                         "run each start with run_functional instead")
    return run


def assign_basins(points: Tensor, minima: Mapping[str, Tensor], radius: float) -> np.ndarray:
    """The name of the nearest minimum within ``radius`` of each point (shape (n, d)), else ``ELSEWHERE``.

    A name may stand for one minimum (shape (d,)) or for several (shape (k, d), e.g. a symmetric pair).
    """
    if not minima:
        raise ValueError("minima must name at least one minimum")
    if not radius > 0:
        raise ValueError(f"radius must be positive (got {radius})")
    names, rows = [], []
    for name, m in minima.items():
        m = torch.as_tensor(m, dtype=points.dtype)
        m = m[None] if m.ndim == 1 else m
        names += [name] * m.shape[0]
        rows.append(m)
    centres = torch.cat(rows)
    if points.ndim != 2 or centres.shape[1] != points.shape[1]:
        raise ValueError(f"points must have shape (n, {centres.shape[1]}) like the minima (got {tuple(points.shape)})")
    dist = torch.cdist(points, centres)  # (n, number of minima)
    nearest = dist.argmin(dim=1)
    within = dist.gather(1, nearest[:, None])[:, 0] < radius
    labels = np.array(names, dtype=object)[nearest.numpy()]
    labels[~within.numpy()] = ELSEWHERE
    return labels


def basin_shares(labels: Mapping[str, np.ndarray], categories: Sequence[str]) -> pd.DataFrame:
    """Share of start points (0–1) per category (columns, in the given order) for each method (rows)."""
    unknown = {str(x) for lab in labels.values() for x in np.unique(lab)} - set(categories)
    if unknown:
        raise ValueError(f"categories must list every label; missing {sorted(unknown)}")
    return pd.DataFrame({c: [float(np.mean(lab == c)) for lab in labels.values()] for c in categories},
                        index=list(labels))
