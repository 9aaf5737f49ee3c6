"""Flatness incompatibility, the δ/ζ decomposition, friendly-adversary rates."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlab
from fedlab.analysis import (
    client_data,
    client_gradients,
    federation_from_config,
    flatness_incompatibility,
    friendly_adversary,
    friendly_vs_alpha,
    friendly_vs_batch_size,
    gradient_decomposition,
    mixing_sweep,
)
from fedlab.data import make_partition
from fedlab.models import FlatModel, build_model
from fedlab import torch_generator

N_CLASSES, DIM = 4, 10


@pytest.fixture(scope="module")
def gaussian():
    """800 samples of 4 well-separated Gaussian classes and an MLP at its initialisation."""
    gen = torch_generator(0, "test-gauss")
    means = 1.5 * torch.randn(N_CLASSES, DIM, generator=gen)
    y = torch.arange(800) % N_CLASSES
    x = means[y] + torch.randn(800, DIM, generator=gen)
    model = FlatModel(build_model("mlp", (DIM,), N_CLASSES, seed=0))
    return model, x, y, model.theta0()


def _federation(x, y, scheme, **kw):
    part = make_partition(scheme, y.numpy(), 8, seed=0, **kw)
    return [(x[torch.tensor(ix)], y[torch.tensor(ix)]) for ix in part.client_indices]


@pytest.fixture(scope="module")
def iid(gaussian):
    model, x, y, theta = gaussian
    clients = _federation(x, y, "iid")
    return clients, client_gradients(model, clients, theta, batches=4, batch_size=16)


@pytest.fixture(scope="module")
def non_iid(gaussian):
    model, x, y, theta = gaussian
    clients = _federation(x, y, "pathological", classes_per_client=1)  # one class per client
    return clients, client_gradients(model, clients, theta, batches=4, batch_size=16)


# --- flatness incompatibility ---------------------------------------------------------------------
def test_identical_clients_full_batch_are_perfectly_aligned(gaussian):
    model, x, y, theta = gaussian
    clients = [(x[:200], y[:200])] * 4
    rep = flatness_incompatibility(model, clients, theta, rho=0.05, batches=3, batch_size=16)
    assert np.abs(rep.misalignment_full).max() < 1e-12
    assert rep.cosine_full == pytest.approx(np.ones(4), abs=1e-6)
    assert rep.missed_sharpness_full == pytest.approx(0.0, abs=1e-6)
    assert rep.misalignment.mean() > 1e-6  # minibatches still disagree (batch noise)
    assert rep.missed_sharpness > 0


def test_mixing_gamma_zero_with_true_gradient_has_no_misalignment(gaussian, non_iid):
    model, _, _, theta = gaussian
    clients, grads = non_iid
    sweep = mixing_sweep(model, clients, theta, rho=0.05, gammas=[0.0, 0.5, 1.0], grads=grads)
    table = sweep.summary()
    assert table["gamma"].tolist() == [0.0, 0.5, 1.0]
    first = table.iloc[0]
    assert first["misalignment"] < 1e-12 and first["misalignment_full"] < 1e-12
    assert first["missed_sharpness"] == pytest.approx(0.0, abs=1e-6)
    assert first["cosine"] == pytest.approx(1.0, abs=1e-6)
    # misalignment grows with γ_l, and γ_l = 1 is plain FedSAM
    assert table["misalignment"].is_monotonic_increasing
    plain = flatness_incompatibility(model, clients, theta, rho=0.05, grads=grads).summary().iloc[0]
    last = table.iloc[-1]
    for col in ("misalignment", "misalignment_full", "cosine", "missed_sharpness"):
        assert last[col] == pytest.approx(plain[col], rel=1e-6, abs=1e-12)
    assert len(sweep.to_frame()) == 3 * len(clients)
    with pytest.raises(ValueError, match="h must"):
        mixing_sweep(model, clients, theta, grads=grads, h=torch.zeros(3))
    with pytest.raises(ValueError, match="gammas"):
        mixing_sweep(model, clients, theta, grads=grads, gammas=[1.5])


def test_missed_sharpness_matches_first_order_and_heterogeneity(gaussian, iid, non_iid):
    model, _, _, theta = gaussian
    reports = {}
    for name, (clients, grads) in {"iid": iid, "non_iid": non_iid}.items():
        reports[name] = flatness_incompatibility(model, clients, theta, rho=0.01, grads=grads).summary().iloc[0]
    for row in reports.values():
        assert row["missed_sharpness"] == pytest.approx(row["missed_sharpness_first_order"], rel=0.15)
    assert reports["non_iid"]["misalignment_full"] > 5 * reports["iid"]["misalignment_full"]
    assert reports["non_iid"]["missed_sharpness"] > reports["iid"]["missed_sharpness"]
    frame = flatness_incompatibility(model, non_iid[0], theta, rho=0.01, grads=non_iid[1]).to_frame()
    assert len(frame) == 8 and {"misalignment", "cosine_full", "missed_sharpness"} <= set(frame.columns)


# --- decomposition --------------------------------------------------------------------------------
def test_decomposition_identity_holds_on_the_sample(gaussian, non_iid):
    model, _, _, theta = gaussian
    clients, grads = non_iid
    dec = gradient_decomposition(model, clients, theta, grads=grads)
    lhs = dec.total_sq.sum()
    rhs = (dec.delta_sq[:, None] + dec.zeta_sq + dec.cross).sum()
    assert lhs == pytest.approx(rhs, rel=1e-12)
    assert dec.identity_residual < 1e-9 * dec.total_sq.max()
    # and the terms are what they claim to be
    delta0 = grads.full[0].double() - grads.global_grad.double()
    assert dec.delta_sq[0] == pytest.approx(float(delta0 @ delta0), rel=1e-12)


def test_cross_term_is_small_on_iid_batches(gaussian, iid):
    model, _, _, theta = gaussian
    clients, grads = iid
    s = gradient_decomposition(model, clients, theta, grads=grads).summary().iloc[0]
    assert abs(s["cross_normalized"]) < 0.1
    assert s["zeta_sq"] > s["delta_sq"]  # IID: batch noise dominates heterogeneity
    assert s["total_sq"] == pytest.approx(s["delta_sq"] + s["zeta_sq"] + s["cross"], rel=1e-10)


# --- friendly adversary ---------------------------------------------------------------------------
def test_own_batch_is_never_friendly_for_small_rho(gaussian, non_iid):
    model, _, _, theta = gaussian
    clients, grads = non_iid
    rep = friendly_adversary(model, clients, theta, rho=1e-3, grads=grads)
    assert rep.same_batch_rate == 0.0
    assert (rep.same_batch > 0).all()
    # the within-client matrix has the same-batch entries on its diagonal
    np.testing.assert_array_equal(np.stack([np.diag(w) for w in rep.within]), rep.same_batch)


def test_cross_client_friendly_rate_rises_with_heterogeneity(gaussian, iid, non_iid):
    model, _, _, theta = gaussian
    rate = {}
    for name, (clients, grads) in {"iid": iid, "non_iid": non_iid}.items():
        rate[name] = friendly_adversary(model, clients, theta, rho=0.05, grads=grads).cross_client_rate
    assert rate["iid"] < 0.1 and rate["non_iid"] > 0.5
    # a random subset of targets gives a similar picture
    clients, grads = non_iid
    sub = friendly_adversary(model, clients, theta, rho=0.05, grads=grads, cross_targets=10, seed=1)
    assert sub.cross.shape == (32, 10) and sub.cross_client_rate > 0.5
    batched = friendly_adversary(model, clients, theta, rho=0.05, grads=grads, cross_targets=10, seed=1, vmap_chunk=8)
    np.testing.assert_allclose(batched.cross, sub.cross, atol=1e-5)  # vmap over points == loop
    assert len(sub.to_frame()) == 8 and "cross_client_rate" in sub.summary().columns


def test_friendly_sweeps(gaussian, tiny):
    model, x, y, theta = gaussian
    clients = _federation(x, y, "iid")[:4]
    by_size = friendly_vs_batch_size(model, clients, theta, [4, 64], batches=3)
    assert by_size["batch_size"].tolist() == [4, 64]
    assert by_size["zeta_sq"].iloc[0] > by_size["zeta_sq"].iloc[1]  # bigger batches, less batch noise
    cfg = tiny(model="mlp", n_clients=6)
    by_alpha = friendly_vs_alpha(cfg, [0.05, 100.0], batches=2, batch_size=8, max_per_client=40)
    assert by_alpha["alpha"].tolist() == [0.05, 100.0]
    assert by_alpha["delta_sq"].iloc[0] > by_alpha["delta_sq"].iloc[1]  # small α: more heterogeneity
    assert (by_alpha["identity_residual"] < 1e-8).all()


def test_bad_input_names_the_argument(gaussian, non_iid):
    model, _, _, theta = gaussian
    clients, grads = non_iid
    for rho in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="rho"):
            flatness_incompatibility(model, clients, theta, rho=rho, grads=grads)
        with pytest.raises(ValueError, match="rho"):
            friendly_adversary(model, clients, theta, rho=rho, grads=grads)
    with pytest.raises(ValueError, match=r"clients\[1\] is empty"):
        client_gradients(model, [clients[0], (clients[1][0][:0], clients[1][1][:0])], theta)
    with pytest.raises(ValueError, match="theta"):
        client_gradients(model, clients, theta[:-1])
    with pytest.raises(ValueError, match="batches"):
        client_gradients(model, clients, theta, batches=0)
    with pytest.raises(ValueError, match="grads"):
        flatness_incompatibility(model, clients[:3], theta, grads=grads)


def test_federation_from_config_matches_the_partition(tiny):
    cfg = tiny(n_clients=5)
    model, clients, (x_test, y_test) = federation_from_config(cfg)
    sim = fedlab.Simulation.build(cfg)
    assert len(clients) == 5 and x_test.shape[0] == y_test.shape[0] > 0
    for (x, y), idx in zip(clients, sim.partition.client_indices):
        assert torch.equal(y, sim.dataset.y_train[torch.tensor(idx)])
    assert torch.equal(model.theta0(), sim.model.theta0())
    small = client_data(sim.dataset, sim.partition, max_per_client=7, seed=1)
    assert max(x.shape[0] for x, _ in small) <= 7
    again = client_data(sim.dataset, sim.partition, max_per_client=7, seed=1)
    assert all(torch.equal(a[1], b[1]) for a, b in zip(small, again))
    with pytest.raises(ValueError, match="max_per_client"):
        client_data(sim.dataset, sim.partition, max_per_client=0)
