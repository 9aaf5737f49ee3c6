"""The top eigenvalues of a symmetric operator A (above all the Hessian H = ∇²L(θ)), each with a
convergence flag under a stated tolerance and its residual, from a random start drawn from an explicit
``torch.Generator`` (the global RNG is never touched).

* :func:`lanczos` (Lanczos 1950; Golub & Van Loan 2013, §10.1): from a unit q₁ the recurrence
  β_j q_{j+1} = A q_j − α_j q_j − β_{j−1} q_{j−1}, α_j = q_jᵀ A q_j, β_j ≥ 0 the norm, gives an orthonormal
  Q_m with Q_mᵀ A Q_m = T_m tridiagonal (α on the diagonal, β beside it). The eigenvalues θ_1 ≥ θ_2 ≥ … of
  T_m (Ritz values) approach A's extreme eigenvalues; with T_m y_i = θ_i y_i and u_i = Q_m y_i,
  A u_i − θ_i u_i = β_m (e_mᵀ y_i) q_{m+1}, so r_i = β_m |e_mᵀ y_i| is the residual ‖A u_i − θ_i u_i‖, and
  some eigenvalue of A lies within r_i of θ_i. θ_i is flagged converged when r_i ≤ tol·(|θ_i| + 10⁻⁶)
  (PyHessian's guard, for θ_i = 0). In floating point Q loses orthogonality just as Ritz values converge
  (spurious copies appear), hence full reorthogonalisation: m vectors of length d are kept.
* :func:`power_iteration`: v ← A v / ‖A v‖ with the Rayleigh quotient λ_n = v_nᵀ A v_n, stopped by
  PyHessian's rule |λ_n − λ_{n−1}| / (|λ_{n−1}| + 10⁻⁶) < tol; later eigenvalues by deflation. A small
  change is no error bound (it is slow when λ₂ ≈ λ₁): read the residual.

:func:`top_eigenvalues` applies either to H through :class:`~fedlab.analysis.hessian.HessianOperator`.

C. Lanczos (1950), An iteration method for the solution of the eigenvalue problem of linear differential
and integral operators, J. Res. Nat. Bur. Standards 45, 255–282. G. H. Golub & C. F. Van Loan (2013),
Matrix Computations, 4th ed., Johns Hopkins. Z. Yao, A. Gholami, K. Keutzer & M. W. Mahoney (2020),
PyHessian: neural networks through the lens of the Hessian, IEEE BigData."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm
from fedlab.analysis.federation import LossFn
from fedlab._rng import torch_generator
from fedlab.analysis._checks import check_count, check_theta
from fedlab.analysis.hessian import EIG_METHODS, _operator

Matvec = Callable[[Tensor], Tensor]
PYHESSIAN_EPS = 1e-6  # PyHessian's guard in a relative tolerance, for an eigenvalue of 0


@dataclass(frozen=True, eq=False)
class EigenResult:
    """Top eigenvalues of a symmetric operator and how far to trust each.

    ``values[i]`` (descending for Lanczos, in the order found for power iteration) with unit vector
    ``vectors[i]``; ``converged[i]``: its stopping rule held at ``tol``; ``residuals[i]`` = ‖A u − λ u‖ for
    the u whose Rayleigh quotient λ is (some eigenvalue lies that close); ``iterations[i]``: products spent
    on it (power) or Lanczos steps (one Krylov space for all); ``hvps``: products in all; ``history``: the
    estimate after each product (power) or step (Lanczos), per eigenvalue."""

    values: Tensor
    vectors: Tensor
    converged: tuple[bool, ...]
    iterations: tuple[int, ...]
    hvps: int
    residuals: Tensor
    tol: float
    method: str
    history: tuple[tuple[float, ...], ...] = ()

    @property
    def n_hvp(self) -> int:
        return self.hvps

    def to_frame(self) -> pd.DataFrame:
        """One row per eigenvalue: ``index, eigenvalue, iterations, converged, residual``."""
        return pd.DataFrame({"index": range(1, len(self.values) + 1),
                             "eigenvalue": self.values.detach().cpu().double().numpy(),
                             "iterations": list(self.iterations), "converged": list(self.converged),
                             "residual": self.residuals.detach().cpu().double().numpy()})


HessianEigen = EigenResult  # its name before it held residuals and served any operator


def _checked(dim: int, k: int, max_iter: int, tol: float, generator: torch.Generator | None) -> torch.Generator:
    check_count("dim", dim)
    check_count("k", k)
    if k > dim:
        raise ValueError(f"k={k} exceeds the dimension d={dim}")
    check_count("max_iter", max_iter)
    if not (tol > 0):
        raise ValueError(f"tol must be > 0, got {tol!r}")
    return generator if generator is not None else torch_generator(0, "hessian-eig")


def _unit_random(d: int, gen: torch.Generator, dtype: torch.dtype, device: torch.device | str) -> Tensor:
    v = torch.randn(d, generator=gen, device=gen.device, dtype=dtype).to(device)  # same draw on any device
    return v / torch.linalg.vector_norm(v)


def _orthogonalise(v: Tensor, basis: list[Tensor]) -> Tensor:
    for _ in range(2):  # one pass leaves rounding-level overlap when v was nearly in the span; twice is enough
        for u in basis:
            v = v - torch.dot(u, v) * u
    return v


def power_iteration(matvec: Matvec, dim: int, k: int = 1, *, tol: float = 1e-3, max_iter: int = 100,
                    generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
                    device: torch.device | str = "cpu", progress: bool = False) -> EigenResult:
    """The k eigenvalues of largest magnitude of the symmetric map ``matvec`` on vectors of length ``dim``.

    Each from its own unit start (drawn from ``generator``, default ``torch_generator(0, "hessian-eig")``)
    and orthogonal to the vectors found before (projection deflation): v ← Av/‖Av‖ until PyHessian's rule
    (Yao et al. 2020) |λ_n − λ_{n−1}| / (|λ_{n−1}| + 10⁻⁶) < ``tol`` (converged) or ``max_iter`` products
    (not). Returns λ_n, its residual ‖A v_n − λ_n v_n‖ (both from the last product) and v_{n+1} = A v_n/‖A v_n‖."""
    gen = _checked(dim, k, max_iter, tol, generator)
    values: list[Tensor] = []
    vectors: list[Tensor] = []
    its, conv, res, history = [], [], [], []
    bar = tqdm(total=k * max_iter, desc="power iteration", disable=not progress, leave=False)
    for _ in range(k):
        v = _orthogonalise(_unit_random(dim, gen, dtype, device), vectors)
        v = v / torch.linalg.vector_norm(v)
        lam, done, hist = None, False, []
        for n in range(1, max_iter + 1):
            av = matvec(v)
            hv = _orthogonalise(av, vectors)
            new = torch.dot(v, hv)
            hist.append(float(new))
            bar.update(1)
            resid = torch.linalg.vector_norm(av - new * v)  # of A itself, not of the deflated map
            norm = torch.linalg.vector_norm(hv)
            done = float(norm) == 0.0 or (  # v in the null space: eigenvalue 0, exactly
                lam is not None and abs(float(new - lam)) / (abs(float(lam)) + PYHESSIAN_EPS) < tol)
            lam = new
            if float(norm) > 0:
                v = hv / norm  # one step past λ's vector: a better eigenvector, and the one deflated against
            if done:
                break
        assert lam is not None
        values.append(lam)
        vectors.append(v)
        its.append(n)
        conv.append(done)
        res.append(resid)
        history.append(tuple(hist))
    bar.close()
    return EigenResult(torch.stack(values), torch.stack(vectors), tuple(conv), tuple(its), sum(its),
                       torch.stack(res), tol, "power", tuple(history))


def lanczos(matvec: Matvec, dim: int, k: int = 1, *, tol: float = 1e-4, max_iter: int = 100,
            generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
            device: torch.device | str = "cpu", progress: bool = False) -> EigenResult:
    """The k largest eigenvalues of the symmetric map ``matvec`` on vectors of length ``dim``, by Lanczos (1950).

    β_j q_{j+1} = A q_j − α_j q_j − β_{j−1} q_{j−1} from a random unit q₁ (drawn as :func:`power_iteration`'s
    first), each q reorthogonalised against all before it; at most min(``max_iter``, ``dim``) steps, one
    product and one stored vector each. The Ritz values θ_i of the tridiagonal T_m come with
    r_i = β_m |e_mᵀ y_i| = ‖A u_i − θ_i u_i‖ (the derivation: :mod:`fedlab.analysis.eigen`). Stops once each
    of the k largest has r_i ≤ ``tol``·(|θ_i| + 10⁻⁶), or when β_m vanishes (an invariant subspace: its
    Ritz values are exact, and flagged converged). ``converged``, ``residuals``: those at the last step."""
    gen = _checked(dim, k, max_iter, tol, generator)
    Q = [_unit_random(dim, gen, dtype, device)]
    alphas: list[float] = []
    betas: list[float] = []
    history: list[list[float]] = [[] for _ in range(k)]
    bar = tqdm(total=min(max_iter, dim), desc="lanczos", disable=not progress, leave=False)
    for j in range(min(max_iter, dim)):
        w = matvec(Q[j])
        alphas.append(float(torch.dot(Q[j], w)))
        w = _orthogonalise(w - alphas[-1] * Q[j] - (betas[-1] * Q[j - 1] if j else 0.0), Q)
        b = float(torch.linalg.vector_norm(w))
        bar.update(1)
        off = torch.tensor(betas, dtype=torch.float64)
        evals, evecs = torch.linalg.eigh(torch.diag(torch.tensor(alphas, dtype=torch.float64))
                                         + torch.diag(off, 1) + torch.diag(off, -1))
        top = torch.arange(len(alphas) - 1, max(len(alphas) - 1 - k, -1), -1)  # eigh ascends
        resid = b * evecs[-1, top].abs()
        invariant = b <= 1e-10 * max(1.0, max(abs(a) for a in alphas))  # then the Ritz values are exact
        conv = (resid <= tol * (evals[top].abs() + PYHESSIAN_EPS)) | invariant
        for i, t in enumerate(evals[top].tolist()):
            history[i].append(t)
        if (len(top) == k and bool(conv.all())) or invariant:
            break
        betas.append(b)
        Q.append(w / b)
    bar.close()
    if len(top) < k:
        raise ValueError(f"Lanczos found only {len(top)} Ritz values; raise max_iter (k={k})")
    ritz = evecs[:, top].T.to(dtype).to(device) @ torch.stack(Q[:len(alphas)])
    return EigenResult(evals[top].to(dtype).to(device), ritz / torch.linalg.vector_norm(ritz, dim=1, keepdim=True),
                       tuple(bool(c) for c in conv), (len(alphas),) * k, len(alphas), resid.to(dtype).to(device),
                       tol, "lanczos", tuple(tuple(h) for h in history))


def top_eigenvalues(loss_fn: LossFn, theta: Tensor, k: int = 1, *, iters: int = 100, tol: float = 1e-4,
                    method: str | None = None, generator: torch.Generator | None = None, mode: str = "rev",
                    backend: str | None = None, progress: bool = False) -> EigenResult:
    """The k leading eigenvalues of H = ∇²L(θ), their eigenvectors and convergence flags.

    ``method="power"`` (default for k = 1): :func:`power_iteration`, the largest |λ| (the largest λ near a
    minimum). ``method="lanczos"`` (default for k > 1: one Krylov space for all k, several times fewer
    products, ``python -m lab bench analysis``): :func:`lanczos`. ``iters``: their ``max_iter``;
    ``generator``: the start (default ``torch_generator(0, "hessian-eig")``). ``mode``, ``backend``: as
    :class:`HessianOperator`; ``loss_fn`` may be such an operator at ``theta``, its graph then reused."""
    check_theta(theta)
    check_count("iters", iters)
    gen = _checked(theta.numel(), k, iters, tol, generator)  # before the graph is built
    if method is None:
        method = "power" if k == 1 else "lanczos"
    if method not in EIG_METHODS:
        raise ValueError(f"method={method!r} is invalid; allowed: None, {', '.join(EIG_METHODS)}")
    op = _operator(loss_fn, theta, backend, mode)
    return (power_iteration if method == "power" else lanczos)(
        op, op.dim, k, tol=tol, max_iter=iters, generator=gen, dtype=theta.dtype, device=theta.device,
        progress=progress)
