"""The fast curvature path (kept first-order graph, Lanczos for k > 1, channels-last landscapes) against
the previous path (``torch.func`` products, power iteration, NCHW) and against exact references.

Tolerances: float64 tiny models — products agree to 1e-10 relative, eigenvalues to the solvers'
tolerance; float32 ``cnn`` — products to 1e-4 relative (float rounding of a different summation
order), eigenvalues of the two paths to 1e-3 relative at tol 1e-6, traces from identical probes to
1e-4 relative, landscapes to 1e-5 relative.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from fedlab.analysis import (
    HessianOperator,
    filter_normalized_direction,
    global_loss_fn,
    hessian_matrix,
    hessian_trace,
    hvp,
    slice_2d,
    top_eigenvalues,
)
from fedlab.analysis.hessian import TRACE_TOL
from fedlab.models import FlatModel, build_model
from fedlab import torch_generator


def _tiny_mlp() -> FlatModel:
    module = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    gen = torch_generator(0, "test-speed-mlp")
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return FlatModel(module)


@pytest.fixture(scope="module")
def mlp():
    model = _tiny_mlp()
    gen = torch_generator(0, "test-speed-data")
    x = torch.randn(50, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (50,), generator=gen)
    loss = global_loss_fn(model, [(x[:20], y[:20]), (x[20:], y[20:])], chunk_size=16)  # chunked, two clients
    theta = model.theta0()
    exact = torch.autograd.functional.hessian(lambda t: loss(t), theta)
    return loss, theta, exact


@pytest.fixture(scope="module")
def cnn():
    """The ``cnn`` (conv, GroupNorm, max-pool, linear) in float32 on 40 random 1×12×12 images."""
    model = FlatModel(build_model("cnn", (1, 12, 12), 5, seed=0))
    gen = torch_generator(0, "test-speed-cnn")
    x = torch.randn(40, 1, 12, 12, generator=gen)
    y = torch.randint(0, 5, (40,), generator=gen)
    return model, global_loss_fn(model, [(x, y)]), model.theta0()


def test_graph_products_equal_func_products_and_the_exact_hessian(mlp):
    loss, theta, exact = mlp
    vs = torch.randn(5, theta.numel(), generator=torch_generator(1, "v"), dtype=torch.float64)
    graph = HessianOperator(loss, theta)
    func = HessianOperator(loss, theta, backend="func")
    assert graph.backend == "graph" and func.backend == "func"
    for v in vs:
        torch.testing.assert_close(graph(v), exact @ v, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(graph(v), func(v), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(graph.batch(vs, chunk=3), vs @ exact.T, rtol=1e-10, atol=1e-12)  # batched = loop
    assert graph.n_products == 2 * 5 + 5
    torch.testing.assert_close(hessian_matrix(loss, theta), exact, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(hvp(loss, theta, vs[0], backend="func"), hvp(loss, theta, vs[0]), rtol=1e-10, atol=1e-12)


def test_graph_products_on_the_cnn_match_the_previous_path(cnn):
    _, loss, theta = cnn
    v = torch.randn(theta.numel(), generator=torch_generator(2, "v"))
    new, old = hvp(loss, theta, v), hvp(loss, theta, v, backend="func")
    assert float(torch.linalg.vector_norm(new - old) / torch.linalg.vector_norm(old)) < 1e-4


def test_affine_loss_has_zero_hessian_on_the_graph_backend():
    b = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64)
    theta = torch.ones(6, dtype=torch.float64)
    assert torch.equal(hvp(lambda t: b @ t, theta, torch.ones_like(theta)), torch.zeros_like(theta))


def test_lanczos_default_for_k_above_one_matches_exact_and_power_iteration(mlp):
    loss, theta, exact = mlp
    ref = torch.linalg.eigvalsh(exact).flip(0)[:3]
    new = top_eigenvalues(loss, theta, k=3, iters=60, tol=1e-10, generator=torch_generator(0, "e"))
    assert new.method == "lanczos" and all(new.converged)
    torch.testing.assert_close(new.values, ref, rtol=1e-8, atol=0)  # residual bound ≤ tol·|λ|
    old = top_eigenvalues(loss, theta, k=3, iters=2000, tol=1e-12, method="power", backend="func",
                          generator=torch_generator(0, "e"))
    torch.testing.assert_close(old.values, new.values, rtol=1e-4, atol=0)
    assert new.n_hvp < old.n_hvp  # one Krylov space for all three instead of one power run each
    one = top_eigenvalues(loss, theta, k=1, iters=500, tol=1e-12, generator=torch_generator(0, "e"))
    assert one.method == "power" and float(one.values[0]) == pytest.approx(float(ref[0]), rel=1e-6)


def test_cnn_eigenvalues_and_trace_new_path_equal_old_path(cnn):
    _, loss, theta = cnn
    gen = lambda: torch_generator(3, "eig")  # noqa: E731
    new = top_eigenvalues(loss, theta, k=2, iters=200, tol=1e-6, generator=gen())
    old = top_eigenvalues(loss, theta, k=2, iters=400, tol=1e-6, method="power", backend="func", generator=gen())
    assert new.method == "lanczos" and all(new.converged) and all(old.converged)
    torch.testing.assert_close(new.values, old.values, rtol=1e-3, atol=0)
    # the same probes: the two traces differ by float rounding of the products only
    t_new = hessian_trace(loss, theta, 12, generator=torch_generator(4, "tr"))
    t_old = hessian_trace(loss, theta, 12, generator=torch_generator(4, "tr"), backend="func")
    torch.testing.assert_close(t_new.values, t_old.values, rtol=1e-4, atol=1e-4)
    assert t_new.stderr > 0 and t_new.mean == pytest.approx(t_old.mean, rel=1e-4)


def test_landscape_channels_last_equals_nchw_and_keeps_an_exact_centre_when_asked(cnn):
    model, loss, theta = cnn
    d1 = filter_normalized_direction(model, theta, torch_generator(0, "d1"))
    d2 = filter_normalized_direction(model, theta, torch_generator(0, "d2"))
    fast = slice_2d(loss, theta, d1, d2, n=5, progress=False)  # CPU default: channels-last
    plain = slice_2d(loss, theta, d1, d2, n=5, channels_last=False, progress=False)
    np.testing.assert_allclose(fast.losses, plain.losses, rtol=1e-5, atol=0)
    with torch.no_grad():
        assert plain.center == float(loss(theta))
        assert fast.center == float(loss.with_channels_last(True)(theta))
    assert loss.with_channels_last(False) is loss and not loss.model.channels_last  # the loss itself is untouched


def test_bad_backend_and_mode_are_named(mlp):
    loss, theta, _ = mlp
    with pytest.raises(ValueError, match="backend='gpu' is invalid"):
        HessianOperator(loss, theta, backend="gpu")
    with pytest.raises(ValueError, match="mode='fwd' needs backend='func'"):
        top_eigenvalues(loss, theta, backend="graph", mode="fwd")
    with pytest.raises(ValueError, match="method='arnoldi' is invalid"):
        top_eigenvalues(loss, theta, method="arnoldi")
    with pytest.raises(ValueError, match="vs must be"):
        HessianOperator(loss, theta).batch(torch.ones(3))


def test_bench_analysis_quick_runs_and_agrees(tmp_path, capsys):
    pytest.importorskip("torchvision")
    from fedlab.data import DatasetNotFoundError, load_dataset

    try:
        load_dataset("fmnist", train_size=10, download=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST is not on disk")
    from lab.cli import main

    out = tmp_path / "a.json"
    assert main(["bench", "analysis", "--quick", "--solvers", "new", "lanczos", "old", "plain", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {r["solver"]: r for r in res["rows"]}
    assert set(rows) == {"new", "lanczos", "old", "plain"} and res["settings"]["n"] == 32
    assert rows["lanczos"]["eigenvalues"] == rows["new"]["eigenvalues"]  # k = 2: new is Lanczos too
    for r in rows.values():
        assert r["eig_hvps"] >= 2 and r["trace_hvps"] == 4 and r["eig_seconds"] > 0
        assert r["trace_diff_vs_ref_in_stderr"] < 1e-3  # identical probes
    assert rows["old"]["max_rel_eig_diff_vs_ref"] < 1e-3  # both power iterations from the same start
    assert rows["new"]["eig_hvps"] < rows["old"]["eig_hvps"]
    for r in rows.values():  # every result carries its flag; the trace's is the library's rule
        assert len(r["converged"]) == 2 and r["trace_converged"] == \
            (r["trace_stderr"] <= TRACE_TOL * (abs(r["trace"]) + 1e-6))
    # one line per estimator against the plain reference, on the same model and batch
    lines = {line["estimator"]: line for line in res["estimators"]}
    assert list(lines) == ["top-1 power", "top-1 lanczos", "top-k lanczos", "trace"]
    for line in lines.values():
        assert line["pairs"] == 1 and min(line["fedlab_seconds"], line["plain_seconds"], line["ratio"],
                                          line["cpu_ratio"]) > 0
        for side in ("fedlab", "plain"):
            assert len(line[f"{side}_converged"]) == len(line[f"{side}_values"]) >= 1
    assert lines["top-k lanczos"]["fedlab_values"] == rows["new"]["eigenvalues"]  # the call of the "new" row
    assert len(lines["top-k lanczos"]["plain_values"]) == 2 and len(lines["top-1 power"]["plain_values"]) == 1
    power = lines["top-1 power"]  # the same start and the same stopping rule (PyHessian's) on both sides
    assert power["fedlab_values"][0] == pytest.approx(power["plain_values"][0], rel=1e-3)
    assert abs(power["fedlab_hvps"] - power["plain_hvps"]) <= 2
    trace = lines["trace"]  # the same probes: the same estimate, to float rounding
    assert trace["fedlab_values"][0] == pytest.approx(trace["plain_values"][0], rel=1e-5)
    assert trace["fedlab_hvps"] == trace["plain_hvps"] == 4
    assert trace["fedlab_converged"] == trace["plain_converged"]
    land = {r["solver"]: r for r in res["landscape"]}
    assert set(land) == {"old", "old, all cores", "new, 1 thread", "new"}
    assert all(r["max_rel_diff_vs_old"] < 1e-5 and r["seconds"] > 0 for r in land.values())
    assert land["new, 1 thread"]["point_threads"] == 1 and land["old"]["max_rel_diff_vs_old"] == 0
    printed = capsys.readouterr().out
    assert "fedlab new vs old" in printed and "per estimator" in printed


def test_an_operator_is_reused_for_eigenvalues_and_trace(mlp):
    loss, theta, exact = mlp
    op = HessianOperator(loss, theta)
    eig = top_eigenvalues(op, theta, k=2, iters=60, tol=1e-10)
    tr = hessian_trace(op, theta, 5, generator=torch_generator(0, "t"))
    assert op.n_products == eig.n_hvp + 5
    torch.testing.assert_close(eig.values, torch.linalg.eigvalsh(exact).flip(0)[:2], rtol=1e-8, atol=0)
    torch.testing.assert_close(tr.values, hessian_trace(loss, theta, 5, generator=torch_generator(0, "t")).values,
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="another theta"):
        top_eigenvalues(op, theta + 1.0)


def test_landscape_on_cpu_evaluates_cache_sized_chunks(cnn):
    """The CPU default cuts the loss into chunks of CPU_EVAL_BATCH samples (values to float rounding);
    channels_last=False keeps the loss's own chunks, so its centre stays exact."""
    from fedlab.analysis.landscape import _in_layout
    from fedlab.engine.evaluate import CPU_EVAL_BATCH

    model, loss, theta = cnn
    big = global_loss_fn(model, [(loss.x.repeat(5, 1, 1, 1), loss.y.repeat(5))])  # 200 samples
    assert big.n_samples > CPU_EVAL_BATCH and big.chunk_size > CPU_EVAL_BATCH
    fast = _in_layout(big, theta, None)
    assert fast.chunk_size == CPU_EVAL_BATCH and fast.model.channels_last
    assert _in_layout(big, theta, False) is big
    d1 = filter_normalized_direction(model, theta, torch_generator(0, "d1"))
    d2 = filter_normalized_direction(model, theta, torch_generator(0, "d2"))
    chunked = slice_2d(big, theta, d1, d2, n=3, progress=False)
    whole = slice_2d(big, theta, d1, d2, n=3, channels_last=False, progress=False)
    np.testing.assert_allclose(chunked.losses, whole.losses, rtol=1e-5, atol=0)
    with torch.no_grad():
        assert whole.center == float(big(theta))
    with pytest.raises(ValueError, match="chunk_size"):
        big.with_chunk_size(0)
