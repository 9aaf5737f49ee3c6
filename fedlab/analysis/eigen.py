"""The top Hessian eigenvalues by power iteration or Lanczos, on :class:`~fedlab.analysis.hessian.HessianOperator`
(its checks and backends), from a seeded random start."""
from __future__ import annotations

from dataclasses import dataclass, field
import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm
from fedlab.analysis.federation import LossFn
from fedlab._rng import torch_generator
from fedlab.analysis._checks import check_count, check_theta
from fedlab.analysis.hessian import EIG_METHODS, HessianOperator, _operator


def _unit_random(d: int, generator: torch.Generator, like: Tensor) -> Tensor:
    v = torch.randn(d, generator=generator, device=generator.device, dtype=like.dtype).to(like.device)
    return v / torch.linalg.vector_norm(v)


@dataclass
class HessianEigen:
    """Top eigenpairs of a Hessian: ``values[j]`` with unit eigenvector ``vectors[j]``."""

    values: Tensor  # (k,), in the order found (power) or descending (lanczos)
    vectors: Tensor  # (k, d)
    iterations: list[int]  # products used per eigenvalue (power) or in total (lanczos, one entry)
    converged: list[bool]
    method: str
    n_hvp: int = 0
    history: list[list[float]] = field(default_factory=list)  # eigenvalue estimate per iteration

    def to_frame(self) -> pd.DataFrame:
        """One row per eigenvalue: ``index, eigenvalue, iterations, converged``."""
        its = self.iterations if len(self.iterations) == len(self.values) else self.iterations * len(self.values)
        return pd.DataFrame({
            "index": range(1, len(self.values) + 1),
            "eigenvalue": self.values.detach().cpu().double().numpy(),
            "iterations": its,
            "converged": self.converged,
        })


def top_eigenvalues(
    loss_fn: LossFn,
    theta: Tensor,
    k: int = 1,
    *,
    iters: int = 100,
    tol: float = 1e-4,
    method: str | None = None,
    generator: torch.Generator | None = None,
    mode: str = "rev",
    backend: str | None = None,
    progress: bool = False,
) -> HessianEigen:
    """The k leading eigenvalues of H = ∇²L(θ) and their eigenvectors.

    ``method="power"`` (default for k = 1): power iteration with projection deflation against the pairs
    found (as PyHessian, Yao et al. 2020); it finds the largest eigenvalue in magnitude (the largest one
    near a minimum); Rayleigh quotient vᵀHv, stopping on a relative change below ``tol`` or after
    ``iters`` products. ``method="lanczos"`` (default for k > 1: one Krylov space for all k, several
    times fewer products, ``python -m lab bench analysis``): full reorthogonalisation over at most
    ``iters`` steps, the k largest Ritz values, stopping once their residual bounds β_m |y_m| fall below
    ``tol``·|λ| (stores ``iters`` vectors). ``generator``: start vectors (default
    ``torch_generator(0, "hessian-eig")``). ``mode``, ``backend``: as :class:`HessianOperator`;
    ``loss_fn`` may be such an operator at ``theta``, whose graph is then reused."""
    check_theta(theta)
    check_count("k", k)
    if k > theta.numel():
        raise ValueError(f"k={k} exceeds the dimension d={theta.numel()}")
    check_count("iters", iters)
    if not (tol > 0):
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if method is None:
        method = "power" if k == 1 else "lanczos"
    if method not in EIG_METHODS:
        raise ValueError(f"method={method!r} is invalid; allowed: None, {', '.join(EIG_METHODS)}")
    gen = generator if generator is not None else torch_generator(0, "hessian-eig")
    op = _operator(loss_fn, theta, backend, mode)
    if method == "power":
        return _power(op, k, iters, tol, gen, progress)
    return _lanczos(op, k, iters, tol, gen, progress)


def _orthogonalise(v: Tensor, basis: list[Tensor]) -> Tensor:
    for _ in range(2):  # twice is enough (Kahan–Parlett "twice is enough")
        for u in basis:
            v = v - torch.dot(u, v) * u
    return v


def _power(op: HessianOperator, k: int, iters: int, tol: float, gen: torch.Generator,
           progress: bool) -> HessianEigen:
    theta = op.theta
    values: list[Tensor] = []
    vectors: list[Tensor] = []
    its: list[int] = []
    conv: list[bool] = []
    history: list[list[float]] = []
    bar = tqdm(total=k * iters, desc="power iteration", disable=not progress, leave=False)
    for _ in range(k):
        v = _orthogonalise(_unit_random(theta.numel(), gen, theta), vectors)
        v = v / torch.linalg.vector_norm(v)
        lam = None
        done = False
        hist: list[float] = []
        n = 0
        for n in range(1, iters + 1):
            hv = _orthogonalise(op(v), vectors)
            new = torch.dot(v, hv)  # Rayleigh quotient vᵀHv (‖v‖ = 1)
            hist.append(float(new))
            bar.update(1)
            norm = torch.linalg.vector_norm(hv)
            if float(norm) == 0.0:  # v lies in the null space: eigenvalue 0
                lam, done = new, True
                break
            if lam is not None and abs(float(new - lam)) <= tol * (abs(float(lam)) + 1e-12):
                lam, done = new, True
                v = hv / norm
                break
            lam = new
            v = hv / norm
        assert lam is not None
        # Report the Rayleigh quotient of the final (normalised) iterate, consistent with the vector.
        values.append(lam)
        vectors.append(v)
        its.append(n)
        conv.append(done)
        history.append(hist)
    bar.close()
    return HessianEigen(torch.stack(values), torch.stack(vectors), its, conv, "power", sum(its), history)


def _lanczos(op: HessianOperator, k: int, iters: int, tol: float, gen: torch.Generator,
             progress: bool) -> HessianEigen:
    theta = op.theta
    d = theta.numel()
    m_max = min(iters, d)
    q = _unit_random(d, gen, theta)
    Q: list[Tensor] = [q]
    alphas: list[float] = []
    betas: list[float] = []
    history: list[list[float]] = [[] for _ in range(k)]
    converged = False
    evals = evecs = None
    bar = tqdm(total=m_max, desc="lanczos", disable=not progress, leave=False)
    for j in range(m_max):
        w = op(Q[j])
        a = float(torch.dot(Q[j], w))
        alphas.append(a)
        w = w - a * Q[j] - (betas[-1] * Q[j - 1] if j > 0 else 0.0)
        w = _orthogonalise(w, Q)  # full reorthogonalisation
        b = float(torch.linalg.vector_norm(w))
        bar.update(1)
        T = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if j > 0:
            off = torch.tensor(betas, dtype=torch.float64)
            T = T + torch.diag(off, 1) + torch.diag(off, -1)
        evals, evecs = torch.linalg.eigh(T)
        top = min(k, j + 1)
        for i in range(top):
            history[i].append(float(evals[-1 - i]))
        if j + 1 >= k:
            resid = (b * evecs[-1, -k:].abs()).max()
            scale = evals[-k:].abs().max().clamp_min(1e-12)
            if float(resid) <= tol * float(scale):
                converged = True
                break
        if b <= 1e-10 * max(1.0, max(abs(x) for x in alphas)):  # invariant subspace found
            converged = j + 1 >= k
            break
        betas.append(b)
        Q.append(w / b)
    bar.close()
    assert evals is not None and evecs is not None
    m = len(alphas)
    basis = torch.stack(Q[:m])
    order = torch.argsort(evals, descending=True)[:k]
    if len(order) < k:
        raise ValueError(f"Lanczos found only {len(order)} Ritz values; raise iters (k={k})")
    vals = evals[order].to(theta.dtype).to(theta.device)
    ritz = (evecs[:, order].T.to(theta.dtype).to(theta.device) @ basis)
    ritz = ritz / torch.linalg.vector_norm(ritz, dim=1, keepdim=True)
    return HessianEigen(vals, ritz, [m], [converged] * k, "lanczos", m, history)
