"""Curvature you can cite: the top Hessian eigenvalue of one fixed function, with a convergence flag.

Two notebooks (02 and 09) measure λ_max of the same final models. When each draws its own images (a few
clients' label-skewed minibatches in one, a few hundred images in the other) they measure λ_max of
different functions, and the same model gets two different numbers. This module fixes the function:

* :func:`curvature_sample` — one **class-balanced** sample of the training set, ``size // C`` images of
  each of the C classes, drawn without replacement from ``numpy_generator(seed, "curvature-sample", c)``
  (one generator per class c, so a class's draw does not depend on the others). ``size`` must be a multiple
  of C that every class can fill; otherwise it is refused (a silently unbalanced sample would change the
  function measured).
* :func:`curvature_loss` — L_S(θ) = (1/|S|) Σ_{(x, y) ∈ S} ℓ(f_θ(x), y) on that sample S: the training loss
  restricted to S, a deterministic function of θ.
* :func:`lambda_max` — λ_max(∇²L_S(θ)) by Lanczos (:func:`fedlab.analysis.eigen.lanczos`): the largest Ritz
  value θ₁ of the tridiagonal T_m, flagged converged when its residual r₁ = ‖H u₁ − θ₁ u₁‖ ≤ tol·(|θ₁| + 10⁻⁶).
  Some eigenvalue of H lies within r₁ of θ₁ (a bound, unlike power iteration's "small change" rule), and θ₁
  never exceeds the top eigenvalue (θ₁ is a Rayleigh quotient, a lower estimate when not converged).
* :func:`convergence_line` — the sentence a notebook prints: how many of the estimates converged, at which
  tolerance and within how many steps.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

from fedlab._rng import numpy_generator, torch_generator
from fedlab.analysis._checks import check_count
from fedlab.analysis.eigen import EigenResult, top_eigenvalues
from fedlab.analysis.federation import EmpiricalLoss, global_loss_fn

__all__ = ["CURVATURE_MAX_ITER", "CURVATURE_SAMPLE_SIZE", "CURVATURE_SEED", "CURVATURE_TOL", "convergence_line",
           "curvature_loss", "curvature_sample", "lambda_max"]

CURVATURE_SAMPLE_SIZE = 2000
"""Training images in the shared curvature sample (200 per class on a 10-class dataset)."""
CURVATURE_SEED = 0
"""The sample's seed, fixed: the notebooks' training ``seed`` varies the runs, never the function measured."""
CURVATURE_TOL = 1e-3
"""Relative Lanczos residual at which λ_max counts as converged: r₁ ≤ 10⁻³ (|θ₁| + 10⁻⁶)."""
CURVATURE_MAX_ITER = 100
"""Lanczos steps (Hessian-vector products) allowed before an estimate is reported unconverged."""


def curvature_sample(labels: np.ndarray | Tensor, size: int = CURVATURE_SAMPLE_SIZE, *, seed: int) -> np.ndarray:
    """Sorted indices of ``size`` training samples, exactly ``size // C`` of each of the C classes in ``labels``.

    Class c's share is drawn without replacement from ``numpy_generator(seed, "curvature-sample", c)``; the
    global RNG is never read. ValueError, naming ``size``, when ``size`` is not a positive multiple of C or a
    class holds fewer than ``size // C`` samples."""
    y = (labels.detach().cpu().numpy() if isinstance(labels, Tensor) else np.asarray(labels)).reshape(-1)
    check_count("size", size)
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) == 0:
        raise ValueError("labels is empty: there is nothing to sample")
    size = int(size)
    if size % len(classes):
        raise ValueError(f"size={size} is not a multiple of the {len(classes)} classes, so the sample cannot be "
                         f"class-balanced; use a multiple of {len(classes)}")
    share = size // len(classes)
    short = {int(c): int(n) for c, n in zip(classes, counts) if n < share}
    if short:
        raise ValueError(f"size={size} needs {share} samples of each class, but class(es) {short} (class: count) "
                         f"hold fewer; the largest balanced size here is {len(classes) * int(counts.min())}")
    picked = [numpy_generator(seed, "curvature-sample", int(c)).choice(np.flatnonzero(y == c), share, replace=False)
              for c in classes]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def curvature_loss(model, x_train: Tensor, y_train: Tensor, size: int = CURVATURE_SAMPLE_SIZE, *,
                   seed: int = CURVATURE_SEED) -> EmpiricalLoss:
    """L_S(θ), the mean training loss of ``model`` on the :func:`curvature_sample` S of (``x_train``, ``y_train``)
    — every image of S at once (no minibatches, so the function does not depend on a batch draw)."""
    keep = torch.as_tensor(curvature_sample(y_train, size, seed=seed), device=x_train.device)
    return global_loss_fn(model, [(x_train[keep], y_train[keep])])


def lambda_max(loss_fn, theta: Tensor, *, tol: float = CURVATURE_TOL, max_iter: int = CURVATURE_MAX_ITER,
               seed: int = 0) -> EigenResult:
    """λ_max(∇²``loss_fn``(θ)) by Lanczos from a unit start drawn from ``torch_generator(seed, "curvature-lanczos")``
    (the same start for every θ of one dimension, so two models differ by their Hessians, not their starts).
    ``values[0]`` is the estimate, ``converged[0]`` whether its residual met ``tol`` within ``max_iter`` steps,
    ``residuals[0]`` the residual itself."""
    return top_eigenvalues(loss_fn, theta, 1, iters=max_iter, tol=tol, method="lanczos",
                           generator=torch_generator(seed, "curvature-lanczos"))


def convergence_line(converged: Iterable[bool], tol: float = CURVATURE_TOL,
                     max_iter: int = CURVATURE_MAX_ITER) -> str:
    """"λ_max converged for N of M models (…)": the count a figure's reader needs before trusting its λ_max."""
    flags = [bool(c) for c in converged]
    return (f"λ_max converged for {sum(flags)} of {len(flags)} models (Lanczos, relative residual ≤ {tol:g}, "
            f"at most {max_iter} steps)")
