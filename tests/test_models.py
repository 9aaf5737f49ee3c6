"""Tests for fedlab.models: registry, architectures, parameter counts and the FlatModel bridge."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedlab.models import (
    MODELS,
    FlatModel,
    ParamSpec,
    build_model,
    count_parameters,
    flatten_params,
    load_flat_,
    model_info,
    param_spec,
)

CIFAR = (3, 32, 32)
FMNIST = (1, 28, 28)

# A valid (input_shape, n_classes) per model for the generic tests; small where the model allows.
SMALL_INPUT = {
    "mlp": ((60,), 10),
    "cnn": (FMNIST, 10),
    "lenet5": (CIFAR, 10),
    "resnet18_gn": (CIFAR, 10),
    "resnet18_gn_imagenet_stem": (CIFAR, 10),
    "wrn28_4_gn": (CIFAR, 100),
}


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_registry_lists_every_model_once():
    assert MODELS == ("mlp", "cnn", "lenet5", "resnet18_gn", "resnet18_gn_imagenet_stem", "wrn28_4_gn")
    assert set(SMALL_INPUT) == set(MODELS)


@pytest.mark.parametrize(
    ("name", "shape", "n_classes", "expected"),
    [
        ("lenet5", CIFAR, 10, 797_962),
        ("lenet5", CIFAR, 100, 815_332),
        ("resnet18_gn", CIFAR, 10, 11_173_962),
        ("resnet18_gn_imagenet_stem", CIFAR, 10, 11_181_642),
        ("wrn28_4_gn", CIFAR, 100, 5_872_180),
        ("wrn28_4_gn", CIFAR, 10, 5_849_050),
        ("cnn", FMNIST, 10, 220_330),
        ("cnn", CIFAR, 10, 282_346),
        ("mlp", FMNIST, 10, 199_210),
        ("mlp", (60,), 10, 54_410),
    ],
)
def test_exact_parameter_counts(name, shape, n_classes, expected):
    info = model_info(name, shape, n_classes)
    assert info["params"] == expected
    assert info["input_shape"] == shape and info["n_classes"] == n_classes
    assert info["description"]
    if name in ("lenet5", "cnn", "mlp"):  # cheap to build for real; the big ones are checked below
        model = build_model(name, shape, n_classes)
        assert count_parameters(model) == expected == param_spec(model).dim


def test_model_info_matches_real_build_for_resnet():
    model = build_model("resnet18_gn", CIFAR, 10)
    assert count_parameters(model) == 11_173_962 == model_info("resnet18_gn", CIFAR, 10)["params"]


def test_imagenet_stem_differs_from_cifar_stem_only_in_first_conv():
    cifar = build_model("resnet18_gn", CIFAR, 10)
    imnet = build_model("resnet18_gn_imagenet_stem", CIFAR, 10)
    shapes_c = {n: p.shape for n, p in cifar.named_parameters()}
    shapes_i = {n: p.shape for n, p in imnet.named_parameters()}
    assert shapes_c.keys() == shapes_i.keys()
    differing = {n for n in shapes_c if shapes_c[n] != shapes_i[n]}
    assert differing == {"conv1.weight"}
    assert shapes_i["conv1.weight"] == (64, 3, 7, 7)
    assert type(cifar.layer1[0]) is type(imnet.layer1[0])


def test_cnn_norm_none_has_conv_bias_and_no_groupnorm():
    plain = build_model("cnn", FMNIST, 10, norm="none")
    assert count_parameters(plain) == 220_234
    assert not any(isinstance(m, nn.GroupNorm) for m in plain.modules())
    assert plain.conv1.bias is not None
    grouped = build_model("cnn", FMNIST, 10, groups=4)
    norms = [m for m in grouped.modules() if isinstance(m, nn.GroupNorm)]
    assert [m.num_groups for m in norms] == [4, 4]
    assert grouped.conv1.bias is None


def test_lenet5_has_no_normalisation():
    model = build_model("lenet5", CIFAR, 10)
    assert not any(isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)) for m in model.modules())


@pytest.mark.parametrize("name", MODELS)
def test_forward_shape_and_no_buffers(name):
    shape, n_classes = SMALL_INPUT[name]
    model = build_model(name, shape, n_classes, seed=0)
    assert list(model.buffers()) == []
    if name not in ("mlp", "lenet5"):
        assert any(isinstance(m, nn.GroupNorm) for m in model.modules())
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, n_classes)
    assert torch.isfinite(out).all()
    FlatModel(model)  # must accept every registered model with the default norm


@pytest.mark.parametrize("shape", [FMNIST, CIFAR, (1, 8, 8)])
def test_cnn_accepts_several_image_sizes(shape):
    model = build_model("cnn", shape, 7)
    assert model(torch.randn(2, *shape)).shape == (2, 7)


def test_mlp_accepts_any_shape():
    for shape in [(60,), FMNIST, (2, 3, 4, 5)]:
        assert build_model("mlp", shape, 3)(torch.randn(4, *shape)).shape == (4, 3)


def test_batchnorm_variant_builds_but_flatmodel_rejects_it():
    model = build_model("resnet18_gn", CIFAR, 10, norm="batch")
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert len(list(model.buffers())) > 0
    with pytest.raises(ValueError, match="GroupNorm"):
        FlatModel(model)
    assert "FlatModel" in (build_model.__doc__ or "")


def test_same_seed_same_init_different_seed_different():
    for name in ("cnn", "mlp", "wrn28_4_gn"):
        shape, n_classes = SMALL_INPUT[name]
        a = flatten_params(build_model(name, shape, n_classes, seed=3))
        b = flatten_params(build_model(name, shape, n_classes, seed=3))
        c = flatten_params(build_model(name, shape, n_classes, seed=4))
        assert torch.equal(a, b)
        assert not torch.equal(a, c)


def test_seeded_build_leaves_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    build_model("cnn", FMNIST, 10, seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    # and an unseeded build does consume the global RNG (so the check above is meaningful)
    build_model("cnn", FMNIST, 10)
    assert not torch.equal(torch.random.get_rng_state(), before)


def _cnn_and_batch(n: int = 8, seed: int = 0):
    model = build_model("cnn", FMNIST, 10, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *FMNIST, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    return model, x, y


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet5", "resnet18_gn_imagenet_stem"])
def test_flat_forward_equals_module_forward(name):
    shape, n_classes = SMALL_INPUT[name]
    model = build_model(name, shape, n_classes, seed=1)
    flat = FlatModel(model)
    x = torch.randn(2, *shape)
    with torch.no_grad():
        assert torch.equal(flat.forward(flat.theta0(), x), model(x))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_grad_fn_matches_autograd(name):
    shape, n_classes = SMALL_INPUT[name]
    model = build_model(name, shape, n_classes, seed=2)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, *shape, generator=gen)
    y = torch.randint(0, n_classes, (6,), generator=gen)
    flat = FlatModel(model)
    grad, loss = flat.grad_fn(flat.theta0(), (x, y))

    model.zero_grad()
    ref_loss = F.cross_entropy(model(x), y)
    ref_loss.backward()
    ref_grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert grad.shape == (flat.dim,)
    assert torch.allclose(loss, ref_loss.detach(), atol=1e-6)
    assert torch.allclose(grad, ref_grad, atol=1e-6, rtol=1e-6)
    assert grad.abs().sum() > 0


def test_unflatten_flatten_round_trip_and_load_flat():
    model, _, _ = _cnn_and_batch()
    spec = param_spec(model)
    assert isinstance(spec, ParamSpec)
    theta = flatten_params(model)
    assert theta.shape == (spec.dim,)
    parts = spec.unflatten(theta)
    assert list(parts) == [n for n, _ in model.named_parameters()]
    for n, p in model.named_parameters():
        assert torch.equal(parts[n], p.detach())
    assert torch.equal(torch.cat([t.reshape(-1) for t in parts.values()]), theta)

    new = torch.randn(spec.dim)
    load_flat_(model, new)
    assert torch.equal(flatten_params(model), new)
    with pytest.raises(ValueError):
        load_flat_(model, torch.zeros(spec.dim + 1))


def test_vmap_over_three_thetas_matches_separate_calls():
    model, x, y = _cnn_and_batch(n=4)
    flat = FlatModel(model)
    theta0 = flat.theta0()
    gen = torch.Generator().manual_seed(9)
    thetas = torch.stack([theta0 + 0.05 * k * torch.randn(flat.dim, generator=gen) for k in range(3)])
    grads, losses = torch.func.vmap(flat.grad_fn, in_dims=(0, None))(thetas, (x, y))
    assert grads.shape == (3, flat.dim) and losses.shape == (3,)
    for k in range(3):
        g, l = flat.grad_fn(thetas[k], (x, y))
        assert torch.allclose(grads[k], g, atol=1e-6)
        assert torch.allclose(losses[k], l, atol=1e-6)
    assert not torch.allclose(grads[0], grads[2])  # rows really differ


def test_unknown_model_raises_with_allowed_names():
    with pytest.raises(ValueError, match="unknown model 'vgg11'; allowed: mlp, cnn, lenet5"):
        build_model("vgg11", CIFAR, 10)
    with pytest.raises(ValueError, match="unknown model"):
        model_info("vgg11", CIFAR, 10)


def test_unknown_or_disallowed_norm_raises():
    with pytest.raises(ValueError, match=r"unknown norm 'layer'; allowed: group, none, batch"):
        build_model("cnn", FMNIST, 10, norm="layer")
    with pytest.raises(ValueError, match=r"norm 'batch' is not available for model 'cnn'; allowed: group, none"):
        build_model("cnn", FMNIST, 10, norm="batch")


@pytest.mark.parametrize(
    ("name", "shape", "accepted"),
    [
        ("cnn", (784,), r"\(C, H, W\) with H, W >= 4"),
        ("cnn", (1, 2, 2), r"\(C, H, W\) with H, W >= 4"),
        ("resnet18_gn", (1, 8, 8), r"\(C, H, W\) with H, W >= 16"),
        ("resnet18_gn_imagenet_stem", (3, 32), r"\(C, H, W\) with H, W >= 16"),
        ("wrn28_4_gn", (3, 8, 8), r"\(C, H, W\) with H, W >= 16"),
        ("lenet5", (3, 12, 12), r"\(C, H, W\) with H, W >= 16"),
        ("mlp", (), "any non-empty shape"),
    ],
)
def test_incompatible_input_shape_raises(name, shape, accepted):
    with pytest.raises(ValueError, match=rf"input_shape .*{accepted}"):
        build_model(name, shape, 10)


def test_bad_groups_and_classes_raise():
    with pytest.raises(ValueError, match="groups"):
        build_model("cnn", FMNIST, 10, groups=3)  # 3 does not divide 32
    with pytest.raises(ValueError, match="groups"):
        build_model("cnn", FMNIST, 10, groups=0)
    with pytest.raises(ValueError, match="n_classes"):
        build_model("cnn", FMNIST, 0)
