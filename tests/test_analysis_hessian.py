"""Curvature tools against exact references, the federated loss builders, and sharpness tracking."""
from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

import fedlab
from fedlab.analysis import (
    client_loss_fn,
    global_loss_fn,
    hessian_matrix,
    hessian_trace,
    hvp,
    sam_sharpness,
    top_eigenvalues,
)
from lab.sharpness import read_sharpness, track_sharpness
from fedlab.models import FlatModel
from fedlab import torch_generator


def tiny_mlp(seed: int = 0) -> FlatModel:
    """4 → 6 → 3 tanh network in float64 (d = 51), weights from a derived generator."""
    module = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    gen = torch_generator(seed, "test-mlp")
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return FlatModel(module)


def tiny_clients(seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch_generator(seed, "test-data")
    x = torch.randn(60, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (60,), generator=gen)
    return [(x[:20], y[:20]), (x[20:45], y[20:45]), (x[45:], y[45:])]  # unequal sizes on purpose


@pytest.fixture(scope="module")
def federation():
    model = tiny_mlp()
    clients = tiny_clients()
    loss = global_loss_fn(model, clients)
    theta = model.theta0()
    exact = torch.autograd.functional.hessian(lambda t: loss(t), theta)
    return model, clients, loss, theta, exact


def _quadratic(d: int = 7):
    gen = torch_generator(0, "test-quadratic")
    m = torch.randn(d, d, generator=gen, dtype=torch.float64)
    a = m @ m.T + torch.diag(torch.linspace(1.0, 5.0, d, dtype=torch.float64))
    b = torch.randn(d, generator=gen, dtype=torch.float64)
    return a, (lambda t: 0.5 * t @ a @ t + b @ t), torch.randn(d, generator=gen, dtype=torch.float64)


# --- Hessian-vector products ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_hvp_on_quadratic_is_the_matrix(mode):
    a, f, theta = _quadratic()
    v = torch.linspace(-1.0, 2.0, theta.numel(), dtype=torch.float64)
    torch.testing.assert_close(hvp(f, theta, v, mode=mode), a @ v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hessian_matrix(f, theta), a, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_hvp_on_mlp_matches_exact_hessian_and_finite_differences(federation, mode):
    model, clients, loss, theta, exact = federation
    gen = torch_generator(1, "test-v")
    v = torch.randn(theta.numel(), generator=gen, dtype=torch.float64)
    hv = hvp(loss, theta, v, mode=mode)
    torch.testing.assert_close(hv, exact @ v, rtol=1e-10, atol=1e-12)
    # central finite difference of the gradient: (∇L(θ + hv) − ∇L(θ − hv)) / 2h
    h = 1e-5
    grad = torch.func.grad(loss)
    fd = (grad(theta + h * v) - grad(theta - h * v)) / (2 * h)
    torch.testing.assert_close(hv, fd, rtol=1e-6, atol=1e-8)


def test_hessian_matrix_equals_autograd(federation):
    _, _, loss, theta, exact = federation
    torch.testing.assert_close(hessian_matrix(loss, theta), exact, rtol=1e-10, atol=1e-12)


def test_chunked_loss_gives_the_same_products(federation):
    model, clients, loss, theta, exact = federation
    small = global_loss_fn(model, clients, chunk_size=7)  # 60 samples in 9 chunks
    v = torch.ones_like(theta)
    torch.testing.assert_close(small(theta), loss(theta), rtol=1e-13, atol=0)
    torch.testing.assert_close(hvp(small, theta, v), exact @ v, rtol=1e-10, atol=1e-12)
    value, grad = small.value_and_grad(theta)
    torch.testing.assert_close(grad, torch.func.grad(loss)(theta), rtol=1e-12, atol=1e-14)


def test_global_loss_is_unweighted_mean_of_client_losses(federation):
    model, clients, loss, theta, _ = federation
    per_client = torch.stack([client_loss_fn(model, c)(theta) for c in clients])
    torch.testing.assert_close(loss(theta), per_client.mean(), rtol=1e-13, atol=0)
    torch.testing.assert_close(loss.group_losses(theta), per_client, rtol=1e-13, atol=0)
    pooled = model.loss(theta, (torch.cat([x for x, _ in clients]), torch.cat([y for _, y in clients])))
    assert abs(float(pooled - loss(theta))) > 1e-6  # sizes differ: the sample-weighted mean is another number


def test_minibatch_loss_is_deterministic_and_seeded(federation):
    model, clients, _, theta, _ = federation
    a = global_loss_fn(model, clients, batches=2, batch_size=5, seed=3)
    b = global_loss_fn(model, clients, batches=2, batch_size=5, seed=3)
    c = global_loss_fn(model, clients, batches=2, batch_size=5, seed=4)
    assert a.n_samples == 3 * 2 * 5
    assert float(a(theta)) == float(b(theta))
    assert float(a(theta)) != float(c(theta))


# --- eigenvalues and trace ------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["power", "lanczos"])
def test_top_two_eigenvalues_match_eigvalsh(federation, method):
    _, _, loss, theta, exact = federation
    ref = torch.linalg.eigvalsh(exact)
    assert ref[-1] > abs(ref[0])  # the largest eigenvalue also dominates in magnitude (power iteration)
    eig = top_eigenvalues(loss, theta, k=2, iters=300, tol=1e-8, method=method,
                          generator=torch_generator(0, "test-eig"))
    assert float(eig.values[0]) == pytest.approx(float(ref[-1]), rel=1e-2)
    assert float(eig.values[1]) == pytest.approx(float(ref[-2]), rel=1e-2)  # deflation finds the second
    assert all(eig.converged)
    # the vectors are unit eigenvectors: ‖Hu − λu‖ small
    for lam, u in zip(eig.values, eig.vectors):
        assert float(torch.linalg.vector_norm(u)) == pytest.approx(1.0, abs=1e-8)
        assert float(torch.linalg.vector_norm(exact @ u - lam * u)) < 0.05 * float(ref[-1])
    assert eig.to_frame()["eigenvalue"].tolist() == pytest.approx(eig.values.tolist())


def test_eigenvalues_reproducible_from_generator(federation):
    _, _, loss, theta, _ = federation
    a = top_eigenvalues(loss, theta, iters=5, generator=torch_generator(7, "e"))
    b = top_eigenvalues(loss, theta, iters=5, generator=torch_generator(7, "e"))
    assert torch.equal(a.values, b.values) and torch.equal(a.vectors, b.vectors)


def test_hutchinson_trace_within_five_percent(federation):
    _, _, loss, theta, exact = federation
    ref = float(torch.trace(exact))
    # Var(vᵀHv) = 2 Σ_{i≠j} H_ij² ≈ 9.4 here, so 5 % (≈ 2.7 standard errors) needs ~10⁴ probes
    est = hessian_trace(loss, theta, samples=10_000, generator=torch_generator(0, "test-trace"), batch=500)
    assert est.mean == pytest.approx(ref, rel=0.05)
    assert 0 < est.stderr < 0.025 * abs(ref)
    one_by_one = hessian_trace(loss, theta, samples=20, generator=torch_generator(0, "test-trace"), batch=1)
    torch.testing.assert_close(one_by_one.values, est.values[:20], rtol=1e-12, atol=1e-12)  # vmap == loop
    a, _, theta_q = _quadratic()
    quad = hessian_trace(lambda t: 0.5 * t @ a @ t, theta_q, samples=4000, generator=torch_generator(1, "q"), batch=500)
    assert quad.mean == pytest.approx(float(torch.trace(a)), rel=0.05)


def test_hutchinson_trace_flags_convergence_without_changing_its_values(federation):
    """The flag is read off the estimate, never stops it: the values are still vᵀHv of the probes drawn as
    documented, equal to the exact Hessian's to 1e-10 (float64), every probe used; ``converged`` is
    stderr ≤ tol·(|mean| + 10⁻⁶): never from one probe, always for a diagonal H (vᵀHv = tr H exactly)."""
    from fedlab.analysis.hessian import TRACE_TOL

    _, _, loss, theta, exact = federation
    est = hessian_trace(loss, theta, samples=40, generator=torch_generator(3, "flag"), batch=1)
    signs = torch.randint(0, 2, (40, theta.numel()), generator=torch_generator(3, "flag"))
    vs = signs.to(theta.dtype) * 2 - 1
    torch.testing.assert_close(est.values, ((vs @ exact) * vs).sum(dim=1), rtol=1e-10, atol=1e-10)
    assert est.samples == 40 and est.tol == TRACE_TOL
    assert est.converged == (est.stderr <= TRACE_TOL * (abs(est.mean) + 1e-6))
    assert est.to_frame()["converged"].tolist() == [est.converged]
    loose = hessian_trace(loss, theta, samples=40, generator=torch_generator(3, "flag"), batch=1, tol=10.0)
    strict = hessian_trace(loss, theta, samples=40, generator=torch_generator(3, "flag"), batch=1, tol=1e-6)
    assert torch.equal(loose.values, est.values) and loose.converged and not strict.converged
    assert not hessian_trace(loss, theta, samples=1, tol=10.0).converged  # one probe: no standard error
    diag = torch.linspace(1.0, 3.0, 5, dtype=torch.float64)
    quad = hessian_trace(lambda t: 0.5 * (diag * t * t).sum(), torch.ones(5, dtype=torch.float64), samples=3)
    assert quad.mean == pytest.approx(float(diag.sum()), rel=1e-12) and quad.converged
    with pytest.raises(ValueError, match="tol"):
        hessian_trace(loss, theta, samples=4, tol=0.0)


def test_sam_sharpness_is_first_order_rho_times_gradient_norm(federation):
    _, _, loss, theta, _ = federation
    rho = 1e-4
    g = torch.func.grad(loss)(theta)
    assert sam_sharpness(loss, theta, rho) == pytest.approx(rho * float(torch.linalg.vector_norm(g)), rel=1e-3)


def test_bad_input_names_the_argument(federation):
    model, clients, loss, theta, _ = federation
    with pytest.raises(ValueError, match="k must"):
        top_eigenvalues(loss, theta, k=0)
    with pytest.raises(ValueError, match="iters"):
        top_eigenvalues(loss, theta, iters=0)
    with pytest.raises(ValueError, match="v must"):
        hvp(loss, theta, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="samples"):
        hessian_trace(loss, theta, samples=0)
    with pytest.raises(ValueError, match="rho"):
        sam_sharpness(loss, theta, 0.0)
    with pytest.raises(ValueError, match="max_dim"):
        hessian_matrix(loss, theta, max_dim=10)
    with pytest.raises(ValueError, match=r"clients\[1\] is empty"):
        global_loss_fn(model, [clients[0], (clients[1][0][:0], clients[1][1][:0])])
    with pytest.raises(ValueError, match="clients must be a non-empty"):
        global_loss_fn(model, [])


# --- tracking -------------------------------------------------------------------------------------
def test_track_sharpness_trains_a_run_whose_record_is_committed(tiny, tmp_path, monkeypatch):
    # a finished run whose record is committed (figures/records/) but whose θ is only in runs/: the replay
    # in a temporary folder must train, not take the record (which has no θ) as the finished run
    from lab.evidence.records import write_record

    cfg = tiny(rounds=4, runs_dir=str(tmp_path / "runs"))
    done = fedlab.run(cfg, progress=False)
    write_record(done, tmp_path / "records")
    monkeypatch.setenv("FEDLAB_RECORDS", str(tmp_path / "records"))
    kw = dict(every=2, batches=1, batch_size=16, max_clients=4, iters=4, progress=False)
    df = track_sharpness(cfg, **kw)
    assert df["lambda_1"].notna().sum() == 3  # rounds 0, 2, 4
    fresh = track_sharpness(cfg.replace(runs_dir=str(tmp_path / "fresh")), **kw)  # nothing in runs/: trains
    assert fresh["lambda_1"].dropna().tolist() == df["lambda_1"].dropna().tolist()


def test_track_sharpness_writes_csv_with_the_right_rounds(tiny, tmp_path):
    cfg = tiny(rounds=4, runs_dir=str(tmp_path / "a"))
    kw = dict(every=2, batches=1, batch_size=16, max_clients=4, iters=4, progress=False)
    df = track_sharpness(cfg, **kw)
    run_dir = fedlab.Simulation.build(cfg).store.dir
    csv = read_sharpness(run_dir)
    assert csv is not None and csv["round"].tolist() == [0, 2, 4]
    assert {"loss", "lambda_1", "eig_iterations", "measure_key"} <= set(csv.columns)
    assert csv["lambda_1"].notna().all() and (csv["loss"] > 0).all()
    assert df["round"].tolist() == [0, 1, 2, 3, 4]  # merged with the metrics (round 0 has no metrics row)
    assert df["lambda_1"].notna().tolist() == [True, False, True, False, True]
    assert df["test_acc"].notna().tolist() == [False, False, True, False, True]  # eval_every=2
    assert not list(run_dir.glob("*.tmp"))
    # the run itself is the same as an untracked one
    plain = fedlab.run(cfg.replace(runs_dir=str(tmp_path / "plain")), progress=False)
    assert torch.equal(plain.theta, fedlab.run(cfg, progress=False).theta)
    # a second call reuses the stored measurements (no new measurement: identical timings)
    again = track_sharpness(cfg, **kw)
    pd.testing.assert_frame_equal(read_sharpness(run_dir), csv)
    assert again["lambda_1"].dropna().tolist() == csv["lambda_1"].tolist()
    # a run finished without tracking is replayed elsewhere and gives the same numbers
    replayed = track_sharpness(cfg.replace(runs_dir=str(tmp_path / "plain")), **kw)
    assert replayed["lambda_1"].dropna().tolist() == csv["lambda_1"].tolist()
    assert (tmp_path / "plain" / run_dir.name / "sharpness.csv").exists()
    with pytest.raises(ValueError, match="every"):
        track_sharpness(cfg, every=0)
