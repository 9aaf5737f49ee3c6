"""The plain-PyTorch reference of the curvature benchmarks: PyHessian's approach, written on the ``nn.Module``.

Independent of fedlab's flat-vector code: one forward and one backward pass with ``create_graph=True`` on
the module's own parameters, then each Hessian-vector product is ``torch.autograd.grad(g, params, v)``
with v a list shaped like the parameters (Yao et al. 2020, PyHessian). On it: power iteration with
deflation under PyHessian's stopping rule (:func:`plain_power`) and Hutchinson probes (:func:`plain_trace`),
the probes drawn exactly as :func:`fedlab.analysis.hessian_trace` draws them. Used by
:mod:`lab.bench.curvature` and :mod:`lab.bench.estimators`.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PlainAutogradHessian", "dot", "normalised", "plain_power", "plain_trace", "rademacher"]


def rademacher(gen: torch.Generator, d: int, like: Tensor) -> Tensor:
    """One probe in {−1, +1}^d, drawn exactly as :func:`fedlab.analysis.hessian_trace` draws it (batch 1)."""
    signs = torch.randint(0, 2, (1, d), generator=gen, device=gen.device).to(like.device)
    return (signs.to(like.dtype) * 2 - 1)[0]


class PlainAutogradHessian:
    """H v for the mean cross-entropy of ``module`` on one batch, by autograd on the module's parameters.

    One forward and one backward pass with ``create_graph=True`` at construction; each product is
    ``torch.autograd.grad(g, params, v, retain_graph=True)`` with v a list shaped like the parameters.
    """

    def __init__(self, module: nn.Module, x: Tensor, y: Tensor) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        loss = F.cross_entropy(module(x), y)
        self.grads = torch.autograd.grad(loss, self.params, create_graph=True)
        self.n_products = 0

    def split(self, flat: Tensor) -> list[Tensor]:
        return [c.view_as(p) for c, p in zip(torch.split(flat, [p.numel() for p in self.params]), self.params)]

    def __call__(self, v: list[Tensor]) -> list[Tensor]:
        self.n_products += 1
        return [h.detach() for h in torch.autograd.grad(self.grads, self.params, v, retain_graph=True)]


def dot(a: list[Tensor], b: list[Tensor]) -> Tensor:
    return sum((x * y).sum() for x, y in zip(a, b))  # type: ignore[return-value]


def normalised(v: list[Tensor]) -> list[Tensor]:
    norm = torch.sqrt(dot(v, v))
    return [x / (norm + 1e-12) for x in v]


def plain_power(op: PlainAutogradHessian, k: int, tol: float, cap: int, gen: torch.Generator) -> dict[str, Any]:
    """Top-k eigenvalues by power iteration with deflation, each stopped by PyHessian's rule
    |λ_n − λ_{n−1}| / (|λ_{n−1}| + 10⁻⁶) < ``tol`` (``converged``) or after ``cap`` products (not)."""
    values: list[float] = []
    vectors: list[list[Tensor]] = []
    converged: list[bool] = []
    d = sum(p.numel() for p in op.params)
    for _ in range(k):
        v = normalised(op.split(torch.randn(d, generator=gen, device=gen.device)))
        lam: float | None = None
        done = False
        for _ in range(cap):
            for u in vectors:  # keep v orthogonal to the eigenvectors found
                c = dot(u, v)
                v = [x - c * y for x, y in zip(v, u)]
            v = normalised(v)
            hv = op(v)
            new = float(dot(hv, v))
            v = normalised(hv)
            if lam is not None and abs(new - lam) / (abs(lam) + 1e-6) < tol:  # PyHessian's rule
                lam, done = new, True
                break
            lam = new
        assert lam is not None
        values.append(lam)
        vectors.append(v)
        converged.append(done)
    return {"values": values, "converged": converged}


def plain_trace(op: PlainAutogradHessian, probes: int, gen: torch.Generator) -> list[float]:
    """vᵀHv for ``probes`` Rademacher probes v (Hutchinson), drawn as fedlab draws them."""
    d = sum(p.numel() for p in op.params)
    like = op.params[0]
    out = []
    for _ in range(probes):
        v = op.split(rademacher(gen, d, like))
        out.append(float(dot(op(v), v)))
    return out
