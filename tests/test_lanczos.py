"""Lanczos and power iteration with convergence flags (issue 41): against the dense eigenvalues of a
tiny MLP's Hessian and of synthetic symmetric operators whose spectrum is chosen.

Tolerances: float64 throughout. A converged Lanczos Ritz value at tol 1e-10 must match ``eigvalsh`` to
1e-6 relative (its residual bound alone guarantees 1e-10 to *some* eigenvalue); power iteration at tol
1e-10 to 1e-6 as well. Every reported residual must bound the distance to the nearest eigenvalue."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor, nn

from fedlab import torch_generator
from fedlab.analysis import EigenResult, HessianOperator, global_loss_fn, lanczos, power_iteration, top_eigenvalues
from fedlab.models import FlatModel


@pytest.fixture(scope="module")
def mlp_hessian():
    """5 → 12 → 3 tanh MLP (d = 111) in float64, its loss, θ, and the dense Hessian."""
    gen = torch_generator(0, "test-lanczos-mlp")
    module = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 3)).double()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    model = FlatModel(module)
    x = torch.randn(80, 5, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (80,), generator=gen)
    loss = global_loss_fn(model, [(x[:30], y[:30]), (x[30:], y[30:])])
    theta = model.theta0()
    dense = torch.autograd.functional.hessian(loss, theta)
    return loss, theta, 0.5 * (dense + dense.T)


def _operator_with(spectrum: Tensor, seed: int = 0) -> tuple[Tensor, object]:
    """A = U diag(spectrum) Uᵀ with U a random orthogonal matrix, and its matvec."""
    d = spectrum.numel()
    u, _ = torch.linalg.qr(torch.randn(d, d, generator=torch_generator(seed, "test-lanczos-u"), dtype=torch.float64))
    a = u @ torch.diag(spectrum) @ u.T
    a = 0.5 * (a + a.T)
    return a, (lambda v: a @ v)


def _assert_residuals_bound_distance(res: EigenResult, eigs: Tensor) -> None:
    # for symmetric A, unit u and any λ, some eigenvalue lies within ‖Au − λu‖ of λ
    for lam, r in zip(res.values.tolist(), res.residuals.tolist()):
        assert float((eigs - lam).abs().min()) <= r * (1 + 1e-6) + 1e-12


def _assert_value_and_residual_are_the_previous_iterates(res: EigenResult, a: Tensor) -> None:
    # power iteration returns v_{n+1} = A v_n/‖A v_n‖ with v_n's Rayleigh quotient and residual (A invertible)
    v = torch.linalg.solve(a, res.vectors[0])
    v = v / torch.linalg.vector_norm(v)
    lam = float(v @ a @ v)
    assert float(res.values[0]) == pytest.approx(lam, rel=1e-10)
    assert float(res.residuals[0]) == pytest.approx(float(torch.linalg.vector_norm(a @ v - lam * v)), rel=1e-8)


@pytest.mark.parametrize("k", [1, 3])
def test_lanczos_matches_dense_hessian_eigenvalues(mlp_hessian, k):
    loss, theta, dense = mlp_hessian
    ref = torch.linalg.eigvalsh(dense).flip(0)
    op = HessianOperator(loss, theta)
    res = lanczos(op, op.dim, k, tol=1e-10, max_iter=111, generator=torch_generator(1, "test-lanczos"))
    assert res.method == "lanczos" and res.values.shape == (k,) and res.converged == (True,) * k
    torch.testing.assert_close(res.values, ref[:k], rtol=1e-6, atol=0)
    assert res.hvps == op.n_products == res.iterations[0] < op.dim  # the Krylov space stays small
    assert all(float(r) <= 1e-10 * (abs(float(v)) + 1e-6) for r, v in zip(res.residuals, res.values))  # the flag
    # the reported residual bound is the true residual of the returned Ritz pair
    for lam, u, r in zip(res.values, res.vectors, res.residuals):
        assert float(torch.linalg.vector_norm(u)) == pytest.approx(1.0, abs=1e-10)
        assert float(torch.linalg.vector_norm(dense @ u - lam * u)) == pytest.approx(float(r), rel=1e-2, abs=1e-9)
    same = top_eigenvalues(loss, theta, k, iters=111, tol=1e-10, method="lanczos",
                           generator=torch_generator(1, "test-lanczos"))
    torch.testing.assert_close(same.values, res.values, rtol=1e-12, atol=0)


def test_lanczos_flags_clustered_top_eigenvalues_unconverged_in_few_steps():
    d = 200
    # top three within 1e-4 of each other, the rest spread below: a hard cluster for a short Krylov space
    spectrum = torch.cat([torch.tensor([1.0, 0.9999, 0.9998], dtype=torch.float64),
                          torch.linspace(0.0, 0.98, d - 3, dtype=torch.float64)])
    a, matvec = _operator_with(spectrum)
    eigs = torch.linalg.eigvalsh(a)
    short = lanczos(matvec, d, 3, tol=1e-8, max_iter=6, generator=torch_generator(0, "test-lanczos"))
    assert short.converged == (False, False, False) and short.hvps == 6 and short.iterations == (6, 6, 6)
    assert all(float(r) > 1e-8 * (abs(float(v)) + 1e-6) for r, v in zip(short.residuals, short.values))
    for lam, u, r in zip(short.values, short.vectors, short.residuals):  # β_m |e_mᵀ y_i| is the true residual
        assert float(torch.linalg.vector_norm(a @ u - lam * u)) == pytest.approx(float(r), rel=1e-6)
    _assert_residuals_bound_distance(short, eigs)
    full = lanczos(matvec, d, 3, tol=1e-8, max_iter=d, generator=torch_generator(0, "test-lanczos"))
    assert all(full.converged) and full.hvps > 6
    torch.testing.assert_close(full.values, eigs.flip(0)[:3], rtol=1e-7, atol=0)
    _assert_residuals_bound_distance(full, eigs)
    # the i-th Ritz value exists from step i + 1 on
    assert [len(h) for h in full.history] == [full.hvps - i for i in range(3)]
    assert full.history[0][-1] == float(full.values[0])


def test_lanczos_stops_on_an_invariant_subspace_with_exact_values():
    # rank 2: the Krylov space of any start is (at most) 2-dimensional plus the null component
    a, matvec = _operator_with(torch.cat([torch.tensor([3.0, -1.0], dtype=torch.float64), torch.zeros(38)]))
    res = lanczos(matvec, 40, 2, tol=1e-12, max_iter=40, generator=torch_generator(0, "test-lanczos"))
    assert res.hvps <= 3 and all(res.converged)
    torch.testing.assert_close(res.values, torch.tensor([3.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-10)


def test_power_iteration_to_tolerance_matches_dense_top_eigenvalue(mlp_hessian):
    loss, theta, dense = mlp_hessian
    eigs = torch.linalg.eigvalsh(dense)
    top = eigs[eigs.abs().argmax()]  # power iteration finds the largest magnitude
    op = HessianOperator(loss, theta)
    tight = power_iteration(op, op.dim, tol=1e-10, max_iter=5000, generator=torch_generator(2, "test-power"))
    assert tight.converged == (True,) and tight.method == "power" and tight.hvps == tight.iterations[0] == op.n_products
    assert float(tight.values[0]) == pytest.approx(float(top), rel=1e-6)
    _assert_residuals_bound_distance(tight, eigs)
    # PyHessian's default tol 1e-3: the flag is set, and the value is within a few tol of λ_max
    # (the relative change understates the error by about 1 / (1 − (λ₂/λ₁)²) here, a factor ~6)
    loose = power_iteration(op, op.dim, max_iter=5000, generator=torch_generator(2, "test-power"))
    assert loose.tol == 1e-3 and loose.converged == (True,) and loose.hvps < tight.hvps
    assert abs(float(loose.values[0]) - float(top)) <= 20 * 1e-3 * abs(float(top))
    _assert_residuals_bound_distance(loose, eigs)


def test_power_iteration_stops_exactly_by_the_stated_rule():
    spectrum = torch.cat([torch.tensor([2.0, 1.9], dtype=torch.float64), torch.linspace(-1.0, 1.0, 48)])
    a, matvec = _operator_with(spectrum, seed=3)
    res = power_iteration(matvec, 50, tol=1e-4, max_iter=1000, generator=torch_generator(0, "test-power"))
    _assert_value_and_residual_are_the_previous_iterates(res, a)
    h = res.history[0]
    rule = [abs(h[n] - h[n - 1]) / (abs(h[n - 1]) + 1e-6) < 1e-4 for n in range(1, len(h))]
    assert res.converged == (True,) and rule[-1] and not any(rule[:-1]) and res.iterations == (len(h),)
    assert float(res.values[0]) == h[-1]


def test_power_iteration_unconverged_when_capped_on_a_slow_operator():
    # λ₂/λ₁ = 0.999: the estimate still moves by ≫ 1e-3 relative after two products from a random start
    spectrum = torch.cat([torch.tensor([1.0, 0.999, -0.998], dtype=torch.float64), torch.linspace(0.1, 0.5, 97)])
    a, matvec = _operator_with(spectrum, seed=1)
    res = power_iteration(matvec, 100, max_iter=2, generator=torch_generator(0, "test-power"))
    assert res.converged == (False,) and res.iterations == (2,) and res.hvps == 2
    _assert_value_and_residual_are_the_previous_iterates(res, a)
    _assert_residuals_bound_distance(res, torch.linalg.eigvalsh(a))
    deflated = power_iteration(matvec, 100, 2, max_iter=2, generator=torch_generator(0, "test-power"))
    assert deflated.converged == (False, False) and deflated.hvps == 4


@pytest.mark.parametrize("solver", [lanczos, power_iteration])
def test_same_generator_seed_gives_identical_results_and_leaves_global_rng(solver):
    _, matvec = _operator_with(torch.linspace(-1.0, 3.0, 60, dtype=torch.float64), seed=2)
    state = torch.random.get_rng_state()
    runs = [solver(matvec, 60, 2, tol=1e-3, max_iter=8, generator=torch_generator(s, "test-det")) for s in (5, 5, 6)]
    assert torch.equal(torch.random.get_rng_state(), state)
    a, b, c = runs
    assert torch.equal(a.values, b.values) and torch.equal(a.vectors, b.vectors)
    assert torch.equal(a.residuals, b.residuals) and a.history == b.history and a.converged == b.converged
    assert not torch.equal(a.values, c.values)  # the start vector does come from the generator


def test_result_is_frozen_and_arguments_are_checked():
    _, matvec = _operator_with(torch.linspace(0.0, 1.0, 10, dtype=torch.float64))
    res = lanczos(matvec, 10, 2, max_iter=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.tol = 1.0  # type: ignore[misc]
    frame = res.to_frame()
    assert list(frame.columns) == ["index", "eigenvalue", "iterations", "converged", "residual"]
    assert frame["residual"].tolist() == pytest.approx(res.residuals.tolist()) and res.n_hvp == res.hvps
    with pytest.raises(ValueError, match="k=11 exceeds"):
        lanczos(matvec, 10, 11)
    with pytest.raises(ValueError, match="max_iter"):
        power_iteration(matvec, 10, max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        lanczos(matvec, 10, tol=0.0)
    with pytest.raises(ValueError, match="only 1 Ritz"):
        lanczos(matvec, 10, 2, max_iter=1)
