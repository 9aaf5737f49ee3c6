"""Loss landscapes: filter normalisation, reproducible grids, exact centres and endpoints, plots."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from fedlab.analysis import (  # noqa: E402
    filter_normalized_direction,
    global_loss_fn,
    interpolate,
    plot_contour,
    plot_surface,
    slice_1d,
    slice_2d,
)
from fedlab.models import FlatModel, build_model  # noqa: E402
from fedlab import torch_generator  # noqa: E402


@pytest.fixture(scope="module")
def cnn_federation():
    """A GroupNorm CNN on 8×8 images (conv, linear and 1-D norm parameters) and three clients."""
    model = FlatModel(build_model("cnn", (1, 8, 8), 4, seed=0))
    gen = torch_generator(0, "test-landscape-data")
    x = torch.randn(36, 1, 8, 8, generator=gen)
    y = torch.randint(0, 4, (36,), generator=gen)
    clients = [(x[:10], y[:10]), (x[10:22], y[10:22]), (x[22:], y[22:])]
    return model, clients, global_loss_fn(model, clients), model.theta0()


def test_filter_normalisation_preserves_per_filter_norms(cnn_federation):
    model, _, _, theta = cnn_federation
    d = filter_normalized_direction(model, theta, torch_generator(0, "dir"))
    assert d.shape == theta.shape
    params_d = model.spec.unflatten(d)
    params_t = model.spec.unflatten(theta)
    seen_filters = seen_zero = 0
    for name in model.spec.names:
        dp, tp = params_d[name], params_t[name]
        if dp.ndim >= 2:
            nd = torch.linalg.vector_norm(dp.reshape(dp.shape[0], -1), dim=1)
            nt = torch.linalg.vector_norm(tp.reshape(tp.shape[0], -1), dim=1)
            torch.testing.assert_close(nd, nt, rtol=1e-5, atol=1e-6)
            seen_filters += dp.shape[0]
        else:  # biases and GroupNorm parameters: zero by default
            assert torch.count_nonzero(dp) == 0
            seen_zero += 1
    assert seen_filters > 0 and seen_zero > 0
    # the other options for 1-D parameters
    copied = model.spec.unflatten(filter_normalized_direction(model, theta, torch_generator(0, "dir"), one_dim="copy"))
    normed = model.spec.unflatten(filter_normalized_direction(model.module, theta, torch_generator(0, "dir"),
                                                              one_dim="normalize"))
    for name in model.spec.names:
        if params_t[name].ndim == 1:
            assert torch.equal(copied[name], params_t[name])
            assert float(torch.linalg.vector_norm(normed[name])) == pytest.approx(
                float(torch.linalg.vector_norm(params_t[name])), rel=1e-5)
        else:  # filters unaffected by the 1-D option
            assert torch.equal(copied[name], params_d[name])


def test_directions_reproducible_from_seed(cnn_federation):
    model, _, _, theta = cnn_federation
    a = filter_normalized_direction(model.spec, theta, torch_generator(5, "dir"))
    b = filter_normalized_direction(model.spec, theta, torch_generator(5, "dir"))
    c = filter_normalized_direction(model.spec, theta, torch_generator(6, "dir"))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_slice_2d_reproducible_centred_and_oriented(cnn_federation):
    model, _, loss, theta = cnn_federation

    def grid(seed):
        d1 = filter_normalized_direction(model, theta, torch_generator(seed, "d1"))
        d2 = filter_normalized_direction(model, theta, torch_generator(seed, "d2"))
        return d1, d2, slice_2d(loss, theta, d1, d2, span=0.5, n=5, progress=False)

    d1, d2, s = grid(0)
    _, _, again = grid(0)
    np.testing.assert_array_equal(s.losses, again.losses)
    assert s.losses.shape == (5, 5) and s.alphas.tolist() == [-0.5, -0.25, 0.0, 0.25, 0.5]
    with torch.no_grad():
        at_theta = float(loss(theta))
        corner = float(loss(theta + 0.5 * d1 - 0.25 * d2))  # α = +0.5, β = −0.25
    assert s.center == at_theta and s.losses[2, 2] == at_theta
    assert s.losses[1, 4] == pytest.approx(corner, rel=1e-6)  # rows follow β, columns α
    assert not np.array_equal(s.losses, grid(1)[2].losses)
    frame = s.to_frame()
    assert len(frame) == 25 and set(frame.columns) == {"alpha", "beta", "loss"}


def test_vmap_evaluation_equals_loop(cnn_federation):
    model, _, loss, theta = cnn_federation
    d = filter_normalized_direction(model, theta, torch_generator(0, "dir"))
    loop = slice_1d(loss, theta, d, n=7, vmap_chunk=1)
    batched = slice_1d(loss, theta, d, n=7, vmap_chunk=3)
    np.testing.assert_allclose(batched.losses, loop.losses, rtol=1e-5)


def test_slice_1d_and_interpolate_exact_points(cnn_federation):
    model, clients, loss, theta = cnn_federation
    d = filter_normalized_direction(model, theta, torch_generator(0, "dir"))
    s = slice_1d(loss, theta, d, span=1.0, n=21)
    with torch.no_grad():
        assert s.losses[10] == float(loss(theta)) and s.alphas[10] == 0.0
    theta_b = theta + 0.3 * d
    path = interpolate(loss, theta, theta_b, n=21, extend=0.25)
    assert len(path.alphas) == 31 and path.alphas[0] == pytest.approx(-0.25) and path.alphas[-1] == pytest.approx(1.25)
    i0, i1 = int(np.flatnonzero(path.alphas == 0.0)[0]), int(np.flatnonzero(path.alphas == 1.0)[0])
    with torch.no_grad():
        assert path.losses[i0] == float(loss(theta))
        assert path.losses[i1] == float(loss(theta_b))
    assert list(path.to_frame().columns) == ["alpha", "loss"]


def test_plots_draw_labelled_axes(cnn_federation):
    model, clients, loss, theta = cnn_federation
    d1 = filter_normalized_direction(model, theta, torch_generator(0, "d1"))
    d2 = filter_normalized_direction(model, theta, torch_generator(0, "d2"))
    s2 = slice_2d(loss, theta, d1, d2, n=5, progress=False)
    fig, ax = plt.subplots(figsize=(3, 3))
    plot_contour(ax, s2)
    assert ax.get_xlabel() and ax.get_ylabel()
    assert len(fig.axes) == 2  # the contour plot added a colorbar
    surf = plot_surface(plt.figure(), s2)
    assert surf is not None
    plt.close("all")


def test_bad_input_names_the_argument(cnn_federation):
    model, _, loss, theta = cnn_federation
    d = torch.zeros_like(theta)
    with pytest.raises(ValueError, match="direction"):
        slice_1d(loss, theta, d[:-1])
    with pytest.raises(ValueError, match="d2"):
        slice_2d(loss, theta, d, d[:3])
    with pytest.raises(ValueError, match="span"):
        slice_1d(loss, theta, d, span=0.0)
    with pytest.raises(ValueError, match="n must"):
        slice_1d(loss, theta, d, n=1)
    with pytest.raises(ValueError, match="one_dim"):
        filter_normalized_direction(model, theta, torch_generator(0, "x"), one_dim="keep")
    with pytest.raises(ValueError, match="theta"):
        filter_normalized_direction(model, theta[:-1], torch_generator(0, "x"))


def test_point_threads_give_the_one_thread_loop_bit_for_bit(cnn_federation, one_thread):
    """``threads=k`` spreads the points over k threads with model replicas; the values and their order
    are the plain loop's exactly (both at one intra-op thread)."""
    model, clients, loss, theta = cnn_federation
    d1 = filter_normalized_direction(model, theta, torch_generator(0, "d1"))
    d2 = filter_normalized_direction(model, theta, torch_generator(0, "d2"))
    loop = slice_2d(loss, theta, d1, d2, span=0.5, n=7, threads=1, progress=False)
    for k in (2, 3):
        threaded = slice_2d(loss, theta, d1, d2, span=0.5, n=7, threads=k, progress=False)
        np.testing.assert_array_equal(threaded.losses, loop.losses)
    assert torch.get_num_threads() == 1  # the caller's intra-op threads are restored
    np.testing.assert_array_equal(slice_1d(loss, theta, d1, n=9, threads=2).losses,
                                  slice_1d(loss, theta, d1, n=9, threads=1).losses)
    np.testing.assert_array_equal(interpolate(loss, theta, theta + 0.3 * d1, n=9, threads=3).losses,
                                  interpolate(loss, theta, theta + 0.3 * d1, n=9, threads=1).losses)
    assert not np.array_equal(loop.losses[0], loop.losses[-1])  # the points differ, so order is tested
    with pytest.raises(ValueError, match="threads must be"):
        slice_2d(loss, theta, d1, d2, n=3, threads=0, progress=False)


def test_a_loss_replica_shares_data_not_the_module(cnn_federation):
    model, _, loss, theta = cnn_federation
    twin = loss.replica()
    assert twin.model.module is not loss.model.module and twin.x is loss.x
    with torch.no_grad():
        assert float(twin(theta)) == float(loss(theta))
