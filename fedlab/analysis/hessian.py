"""Curvature of a loss θ ↦ L(θ) on flat parameter vectors: Hessian-vector products, the Hessian
trace and SAM sharpness (top eigenvalues: :mod:`fedlab.analysis.eigen`).

Only :func:`hessian_matrix` (small d, tests and teaching) forms H = ∇²L(θ); everything else needs
products Hv, exact and at a small multiple of a gradient's cost:

* :func:`hvp` — Hv = ∇_θ⟨∇L(θ), v⟩ (reverse over reverse, Pearlmutter 1994) or d/dt ∇L(θ + t v)|₀
  (forward over reverse, ``torch.func.jvp``);
* :class:`HessianOperator` — v ↦ Hv at one θ for many v, keeping the first-order graph;
* :func:`hessian_trace` — Hutchinson (1989): E[vᵀHv] = tr(H) for Rademacher v, with its standard error;
* :func:`sam_sharpness` — what SAM minimises (Foret et al., ICLR 2021): max_{‖ε‖≤ρ} L(θ+ε) − L(θ)
  ≈ L(θ + ρ∇L/‖∇L‖) − L(θ).

A loss is any function θ ↦ scalar that ``torch.func`` can differentiate twice (the federated
objectives: :func:`~fedlab.analysis.federation.global_loss_fn`). Random vectors come from an explicit
``torch.Generator`` on its own device, so results do not depend on the global RNG or the device."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor
from torch.func import grad, jvp, vmap
from tqdm import tqdm

from fedlab.analysis.federation import EmpiricalLoss, LossFn, client_loss_fn, global_loss_fn
from fedlab.analysis._checks import check_count, check_like, check_rho, check_theta
from fedlab.analysis.points import resolve_chunk
from fedlab._rng import torch_generator

__all__ = ["HessianOperator", "TRACE_TOL", "TraceEstimate", "client_loss_fn", "global_loss_fn", "hessian_matrix",
           "hessian_trace", "hvp", "sam_sharpness"]

HVP_MODES = ("rev", "fwd")
BACKENDS = ("graph", "func")
EIG_METHODS = ("power", "lanczos")


def _parts(loss_fn: LossFn) -> list[LossFn]:
    return loss_fn.parts() if isinstance(loss_fn, EmpiricalLoss) else [loss_fn]


def _hvp_one(fn: LossFn, theta: Tensor, v: Tensor, mode: str) -> Tensor:
    if mode == "rev":
        return grad(lambda t: torch.dot(grad(fn)(t), v))(theta)
    return jvp(grad(fn), (theta,), (v,))[1]


def _hvp_sum(loss_fn: LossFn, theta: Tensor, v: Tensor, mode: str) -> Tensor:
    out = None
    for part in _parts(loss_fn):
        hv = _hvp_one(part, theta, v, mode)
        out = hv if out is None else out + hv
    assert out is not None
    return out


def _resolve_backend(backend: str | None, mode: str) -> str:
    if mode not in HVP_MODES:
        raise ValueError(f"mode={mode!r} is invalid; allowed: {', '.join(HVP_MODES)}")
    if backend is None:
        return "graph" if mode == "rev" else "func"
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is invalid; allowed: {', '.join(BACKENDS)}")
    if backend == "graph" and mode == "fwd":
        raise ValueError("backend='graph' computes reverse-over-reverse products; mode='fwd' needs backend='func'")
    return backend


class HessianOperator:
    """The linear map v ↦ H v with H = ∇²L(θ) at one fixed θ, for many products.

    ``backend="graph"``: one forward and backward pass with ``create_graph=True`` give g = ∇L(θ) with its
    graph; each H v = ∇_θ⟨g, v⟩ is then one backward pass through it, about half the cost of
    ``backend="func"`` (``torch.func.grad`` of ⟨∇L, v⟩, recomputing everything per v; equal to float
    rounding). The graph holds all of L's samples until the operator is dropped; ``"func"`` works chunk
    by chunk when that does not fit. ``batch(vs)`` applies H to each row, ``chunk`` rows per vmapped call
    (pays on a GPU, slower on CPU). ``n_products`` counts the products. Results are detached."""

    def __init__(self, loss_fn: LossFn, theta: Tensor, *, backend: str | None = None, mode: str = "rev") -> None:
        check_theta(theta)
        self.backend = _resolve_backend(backend, mode)
        self.mode = mode
        self.loss_fn = loss_fn
        self.theta = theta.detach()
        self.n_products = 0
        self._leaf: Tensor | None = None
        self._grad: Tensor | None = None
        if self.backend == "graph":
            with torch.enable_grad():
                leaf = self.theta.clone().requires_grad_(True)
                (g,) = torch.autograd.grad(loss_fn(leaf), leaf, create_graph=True)
            self._leaf, self._grad = leaf, g

    @property
    def dim(self) -> int:
        return self.theta.numel()

    def _graph_product(self, v: Tensor, batched: bool) -> Tensor:
        assert self._leaf is not None and self._grad is not None
        if not self._grad.requires_grad:  # ∇L does not depend on θ (L affine in θ): H = 0
            return torch.zeros_like(v)
        with torch.enable_grad():
            (hv,) = torch.autograd.grad(self._grad, self._leaf, v, retain_graph=True, allow_unused=True,
                                        is_grads_batched=batched)
        return torch.zeros_like(v) if hv is None else hv.detach()

    def __call__(self, v: Tensor) -> Tensor:
        check_like(self.theta, v, "v")
        self.n_products += 1
        if self.backend == "graph":
            return self._graph_product(v.detach(), batched=False)
        return _hvp_sum(self.loss_fn, self.theta, v.detach(), self.mode).detach()

    def batch(self, vs: Tensor, chunk: int = 1) -> Tensor:
        """``stack([H v for v in vs])``, ``chunk`` vectors per batched call (1: a plain loop)."""
        if vs.ndim != 2 or vs.shape[1] != self.dim:
            raise ValueError(f"vs must be a (n, {self.dim}) tensor, got shape {tuple(vs.shape)}")
        check_count("chunk", chunk)
        self.n_products += vs.shape[0]
        vs = vs.detach()
        if self.backend == "func":
            return _hvp_batch(self.loss_fn, self.theta, vs, self.mode, chunk).detach()
        if chunk == 1:
            return torch.stack([self._graph_product(v, batched=False) for v in vs])
        return torch.cat([self._graph_product(vs[i:i + chunk], batched=True) for i in range(0, len(vs), chunk)])


def _operator(loss_fn: "LossFn | HessianOperator", theta: Tensor, backend: str | None, mode: str) -> HessianOperator:
    """``loss_fn`` itself if it is a :class:`HessianOperator` at θ (its graph reused), else a new one."""
    if not isinstance(loss_fn, HessianOperator):
        return HessianOperator(loss_fn, theta, backend=backend, mode=mode)
    if loss_fn.theta.shape != theta.shape or not torch.equal(loss_fn.theta, theta.detach()):
        raise ValueError("loss_fn is a HessianOperator built at another theta; build one at this theta")
    return loss_fn


def hvp(loss_fn: LossFn, theta: Tensor, v: Tensor, *, mode: str = "rev", backend: str | None = None) -> Tensor:
    """The Hessian-vector product ∇²L(θ) v, exactly, without forming the Hessian.

    ``mode="rev"``: Hv = ∇_θ⟨∇L(θ), v⟩; ``mode="fwd"``: Hv = J_{∇L}(θ) v (``torch.func.jvp(grad(L))``,
    often faster, needs forward-mode rules throughout). ``backend``: see :class:`HessianOperator`; for
    many products at one θ build the operator once."""
    check_theta(theta)
    check_like(theta, v, "v")
    return HessianOperator(loss_fn, theta, backend=backend, mode=mode)(v)


def _hvp_batch(loss_fn: LossFn, theta: Tensor, vs: Tensor, mode: str, chunk: int) -> Tensor:
    """H v for each row of ``vs``; rows batched with ``vmap`` ``chunk`` at a time."""
    if chunk == 1:
        return torch.stack([_hvp_sum(loss_fn, theta, v, mode) for v in vs])
    out = [vmap(lambda v: _hvp_sum(loss_fn, theta, v, mode))(vs[i:i + chunk]) for i in range(0, len(vs), chunk)]
    return torch.cat(out)


def hessian_matrix(loss_fn: LossFn, theta: Tensor, *, max_dim: int = 4096, mode: str = "rev",
                   backend: str | None = None) -> Tensor:
    """The full Hessian ∇²L(θ) (d×d), column by column from :func:`hvp`; ValueError if d > ``max_dim``."""
    check_theta(theta)
    d = theta.numel()
    if d > max_dim:
        raise ValueError(f"theta has d={d} entries, above max_dim={max_dim}; use hvp/top_eigenvalues instead")
    eye = torch.eye(d, dtype=theta.dtype, device=theta.device)
    op = HessianOperator(loss_fn, theta, backend=backend, mode=mode)
    cols = op.batch(eye, chunk=min(d, 64) if theta.is_cuda else 1)
    return cols.T.contiguous().detach()  # column j is H e_j


TRACE_TOL = 0.05
"""Relative standard error at which a Hutchinson trace counts as converged: stderr ≤ 0.05 (|mean| + 10⁻⁶)."""


@dataclass
class TraceEstimate:
    """Hutchinson estimate of tr(H): ``mean`` ± ``stderr`` from ``samples`` Rademacher probes; ``converged``:
    stderr ≤ ``tol``·(|mean| + 10⁻⁶), the relative standard error within ``tol`` (never from one probe)."""

    mean: float
    stderr: float
    samples: int
    values: Tensor  # vᵀHv for each probe
    tol: float = TRACE_TOL

    @property
    def converged(self) -> bool:
        return bool(self.stderr <= self.tol * (abs(self.mean) + 1e-6))  # a NaN stderr (one probe) is not

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"trace": self.mean, "trace_stderr": self.stderr, "samples": self.samples,
                              "converged": self.converged, "tol": self.tol}])


def hessian_trace(loss_fn: LossFn, theta: Tensor, samples: int = 100, *, generator: torch.Generator | None = None,
                  batch: int | None = None, mode: str = "rev", backend: str | None = None, progress: bool = False,
                  tol: float = TRACE_TOL) -> TraceEstimate:
    """Hutchinson's estimator: tr(H) ≈ (1/S) Σ_s v_sᵀ H v_s with v_s ∈ {−1, +1}^d.

    Unbiased since E[v vᵀ] = I; its variance 2 Σ_{i≠j} H_ij² is reported as ``stderr`` (std / √S), and
    ``converged`` says whether stderr ≤ ``tol``·(|mean| + 10⁻⁶) (all S probes are used either way).
    ``batch`` probes are vmapped together (default 8 on CUDA, 1 on CPU); ``loss_fn`` may be a
    :class:`HessianOperator` at ``theta``."""
    check_theta(theta)
    check_count("samples", samples)
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    chunk = resolve_chunk(batch, theta) if batch is not None else (8 if theta.is_cuda else 1)
    gen = generator if generator is not None else torch_generator(0, "hessian-trace")
    op = _operator(loss_fn, theta, backend, mode)
    theta = op.theta
    d = theta.numel()
    quads: list[Tensor] = []
    bar = tqdm(total=samples, desc="hutchinson", disable=not progress, leave=False)
    for start in range(0, samples, chunk):
        n = min(chunk, samples - start)
        signs = torch.randint(0, 2, (n, d), generator=gen, device=gen.device).to(theta.device)
        vs = signs.to(theta.dtype) * 2 - 1
        quads.append((vs * op.batch(vs, chunk)).sum(dim=1))
        bar.update(n)
    bar.close()
    vals = torch.cat(quads)
    mean = float(vals.mean())
    stderr = float(vals.std(unbiased=True) / math.sqrt(samples)) if samples > 1 else float("nan")
    return TraceEstimate(mean, stderr, samples, vals, tol)


def sam_sharpness(loss_fn: LossFn, theta: Tensor, rho: float) -> float:
    """SAM's sharpness L(θ + ρ∇L/‖∇L‖) − L(θ) (Foret et al. 2021), the first-order worst case in the ρ-ball."""
    check_theta(theta)
    rho = check_rho(rho)
    theta = theta.detach()
    if isinstance(loss_fn, EmpiricalLoss):
        base, g = loss_fn.value_and_grad(theta)
    else:
        g, base = torch.func.grad_and_value(loss_fn)(theta)
    norm = torch.linalg.vector_norm(g)
    if float(norm) == 0.0:
        return 0.0
    with torch.no_grad():
        return float(loss_fn(theta + rho * g / norm) - base)
