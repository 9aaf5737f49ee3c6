"""The shared curvature sample and λ_max with a convergence flag (issue 41, item 4).

Tolerances: λ_max of a quadratic ½ θᵀAθ is checked in float64 against A's known top eigenvalue to 1e-8
relative at tol 1e-10 (the residual bound guarantees 1e-10 to some eigenvalue; the Lanczos start is not
orthogonal to the top eigenvector, so it is the top one). Everything else is exact (indices, counts)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlab import torch_generator
from fedlab.analysis.curvature import convergence_line, curvature_loss, curvature_sample, lambda_max


def _labels(per_class: list[int], seed: int = 0) -> np.ndarray:
    """Labels with ``per_class[c]`` samples of class c, shuffled (so the sample cannot lean on the order)."""
    y = np.concatenate([np.full(n, c) for c, n in enumerate(per_class)])
    return np.random.default_rng(seed).permutation(y)


def test_sample_is_class_balanced_and_of_the_asked_size():
    y = _labels([500, 300, 260, 1000, 210, 400, 390, 250, 700, 220])
    idx = curvature_sample(y, 2000, seed=0)
    assert len(idx) == 2000 and len(np.unique(idx)) == 2000, "no index twice"
    assert np.all(np.diff(idx) > 0), "sorted"
    assert np.bincount(y[idx], minlength=10).tolist() == [200] * 10


def test_sample_is_deterministic_per_seed_and_differs_across_seeds():
    y = _labels([400] * 10)
    a, b = curvature_sample(y, 1000, seed=3), curvature_sample(y, 1000, seed=3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, curvature_sample(y, 1000, seed=4))
    # the global RNG is not read: drawing from it in between changes nothing
    np.random.seed(123)
    np.random.rand(10)
    torch.manual_seed(5)
    assert np.array_equal(a, curvature_sample(y, 1000, seed=3))


def test_sample_accepts_a_tensor_of_labels():
    y = _labels([300] * 10)
    assert np.array_equal(curvature_sample(torch.as_tensor(y), 2000, seed=1), curvature_sample(y, 2000, seed=1))


@pytest.mark.parametrize("size, words", [(2005, "not a multiple of the 10 classes"),
                                         (2500, "largest balanced size here is 2100"),
                                         (0, "size must be an integer >= 1")])
def test_sample_refuses_a_size_the_data_cannot_balance(size, words):
    y = _labels([500, 300, 260, 1000, 210, 400, 390, 250, 700, 220])  # class 4 holds 210: at most 2100 balanced
    with pytest.raises(ValueError, match="size") as err:
        curvature_sample(y, size, seed=0)
    assert words in str(err.value)


def test_lambda_max_of_a_quadratic_converges_to_the_top_eigenvalue():
    d = 40
    spectrum = torch.linspace(-2.0, 10.0, d, dtype=torch.float64)
    u, _ = torch.linalg.qr(torch.randn(d, d, generator=torch_generator(0, "test-curvature-u"), dtype=torch.float64))
    a = u @ torch.diag(spectrum) @ u.T

    def loss(theta):
        return 0.5 * theta @ a @ theta

    theta = torch.zeros(d, dtype=torch.float64)
    eig = lambda_max(loss, theta, tol=1e-10, max_iter=d)
    assert eig.converged[0]
    assert abs(float(eig.values[0]) - 10.0) <= 1e-8 * 10.0
    short = lambda_max(loss, theta, tol=1e-10, max_iter=3)  # three steps cannot resolve 40 spread eigenvalues
    assert not short.converged[0] and float(short.values[0]) < 10.0, "unconverged: flagged, and a lower estimate"


def test_curvature_loss_is_the_mean_loss_on_the_sample():
    from torch import nn

    from fedlab.models import FlatModel

    gen = torch_generator(0, "test-curvature-net")
    module = nn.Sequential(nn.Linear(4, 3)).double()
    model = FlatModel(module)
    x = torch.randn(60, 4, generator=gen, dtype=torch.float64)
    y = torch.as_tensor(_labels([20, 20, 20]))
    fn = curvature_loss(model, x, y, 30, seed=2)
    theta = model.theta0()
    keep = torch.as_tensor(curvature_sample(y, 30, seed=2))
    expected = nn.functional.cross_entropy(module(x[keep]), y[keep])
    assert torch.allclose(fn(theta), expected, rtol=1e-12, atol=0)


def test_convergence_line_counts():
    assert convergence_line([True, False, True], tol=1e-3, max_iter=50).startswith(
        "λ_max converged for 2 of 3 models (Lanczos, relative residual ≤ 0.001, at most 50 steps)")


def _parameter(path, name):
    """The default of ``name`` in the parameters cell of a jupytext notebook (``name = value  # ...``)."""
    import ast
    import re

    text = path.read_text()
    found = re.search(rf"^{name} = (.+?)(?:  #.*)?$", text, flags=re.M)
    assert found, f"{path.name} has no parameter {name}"
    return ast.literal_eval(found.group(1))


@pytest.mark.parametrize("profile", [None, "cpu", "paper"])
def test_02_and_09_measure_lambda_max_on_one_shared_sample(profile):
    """Both notebooks build λ_max's function with ``curvature_loss`` at one ``curvature_size`` ≥ 2,000 (the
    parameters' defaults, and each profile's file), and neither reads a run's ``.final_accuracy``."""
    import yaml

    from lab.repro import REPO_ROOT as ROOT

    nb = {k: ROOT / "notebooks" / f"{k}.py" for k in ("02_flatness_incompatibility", "09_sharpness_and_landscapes")}
    sizes = {}
    for key, path in nb.items():
        size = _parameter(path, "curvature_size")
        if profile is not None:
            size = yaml.safe_load((ROOT / "notebooks" / "params" / f"{key}.{profile}.yaml").read_text()).get(
                "curvature_size", size)
        sizes[key] = size
        text = path.read_text()
        assert "curvature_loss(" in text and "lambda_max(" in text, f"{key} measures λ_max on its own function"
        assert ".final_accuracy" not in text, f"{key} reads a final accuracy around final_metric"
    assert len(set(sizes.values())) == 1 and min(sizes.values()) >= 2000, sizes
