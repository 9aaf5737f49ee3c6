"""Basin maps on a toy federation (lab.tools.basins): the stacked run is the per-start run, row by row."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlab
from fedlab.algorithms.base import descend
from fedlab.algorithms.fedavg import FedAvg
from fedlab.toy import run_functional
from lab.tools.basins import ELSEWHERE, assign_basins, basin_shares, run_from_starts, start_grid

F64 = torch.float64
# two clients, each with a wide well of its own and a narrow shared one: a small relative of notebook 02's toy
CENTRES = torch.tensor([[-1.5, 0.0], [1.5, 0.5]], dtype=F64)


def _loss(theta: torch.Tensor, i: int) -> torch.Tensor:
    own = -torch.exp(-((theta - CENTRES[i]) ** 2).sum(-1) / 2.0)
    shared = -0.6 * torch.exp(-(theta**2).sum(-1) / (2 * 0.3**2))
    return 0.02 * (theta**2).sum(-1) + own + shared


def _row_grad(theta: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row gradient: the rows of θ are independent, so the gradient of the sum is each row's own."""
    t = theta.detach().requires_grad_(True)
    with torch.enable_grad():
        loss = _loss(t, i)
        (g,) = torch.autograd.grad(loss.sum(), t)
    return g, loss.detach()


def _client(c: int, t: int, k: int) -> int:
    return c


STARTS = torch.tensor([[0.4, 0.9], [-2.0, 1.0], [0.05, -0.1], [2.5, -1.0], [1.0, 0.0]], dtype=F64)
RUN = dict(n_clients=2, rounds=4, local_steps=6, lr=0.3, seed=3)


@pytest.mark.parametrize("name, params", [("fedavg", {}), ("fedsam", {"rho": 0.2}), ("fedvssam", {"rho": 0.2}),
                                          ("fedvssam", {"rho": 0.0}), ("fedacg", {}), ("fedacg", {"beta": 0.0})])
def test_stacked_run_is_the_run_from_each_start(name, params):
    alg = fedlab.get_algorithm(name, **params)
    stacked = run_from_starts(alg, STARTS, _row_grad, _client, **RUN)
    assert stacked.trajectory.shape == (RUN["rounds"] + 1, len(STARTS), 2)
    for r, start in enumerate(STARTS):
        alone = run_functional(alg, start, _row_grad, _client, **RUN)
        torch.testing.assert_close(stacked.trajectory[:, r], alone.trajectory, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(stacked.client_endpoints[-1][:, r], alone.client_endpoints[-1],
                                   rtol=1e-9, atol=1e-12)
    # the starts really go different ways (else the comparison above would prove little)
    assert torch.cdist(stacked.trajectory[-1], stacked.trajectory[-1]).max() > 0.5


class _GlobalNormFedAvg(FedAvg):
    """FedAvg stepping along g/‖g‖ with the norm over the whole tensor: stacked starts are coupled."""

    name = "global_norm_fedavg"

    def local_step(self, theta, cstate, msg, batch, grad_fn, step):
        g, loss = grad_fn(theta, batch)
        return descend(theta, g / torch.linalg.vector_norm(g), step), cstate, loss


def test_a_method_that_couples_the_starts_is_refused():
    with pytest.raises(ValueError, match="couples the stacked start points"):
        run_from_starts(_GlobalNormFedAvg(), STARTS, _row_grad, _client, **RUN)
    # a single start cannot be coupled to anything
    run_from_starts(_GlobalNormFedAvg(), STARTS[:1], _row_grad, _client, **RUN)


def test_start_grid_rows_reshape_to_an_image_with_y_as_row_index():
    grid = start_grid([-1.0, 0.0], [1.0, 4.0], 5)
    assert grid.shape == (25, 2)
    img = grid.reshape(5, 5, 2)
    assert torch.equal(img[3, 1], torch.tensor([-0.5, 3.0], dtype=F64))
    with pytest.raises(ValueError, match="n must"):
        start_grid([0, 0], [1, 1], 1)
    with pytest.raises(ValueError, match="lo and hi"):
        start_grid([0, 2], [1, 1], 4)


def test_assign_basins_and_shares():
    minima = {"flat": torch.tensor([0.0, 2.0], dtype=F64), "sharp": torch.tensor([0.0, 0.0], dtype=F64)}
    pts = torch.tensor([[0.1, 1.8], [0.0, 0.2], [0.0, 0.9], [3.0, 3.0]], dtype=F64)
    labels = assign_basins(pts, minima, radius=0.5)
    assert list(labels) == ["flat", "sharp", ELSEWHERE, ELSEWHERE]
    assert list(assign_basins(pts, minima, radius=1.5)) == ["flat", "sharp", "sharp", ELSEWHERE]
    pair = {**minima, "side": torch.tensor([[-3.0, 3.0], [3.0, 3.0]], dtype=F64)}
    assert list(assign_basins(torch.cat([pts, -pts[3:]]), pair, radius=0.5)) == ["flat", "sharp", ELSEWHERE, "side",
                                                                                 ELSEWHERE]
    assert list(assign_basins(torch.tensor([[-2.9, 3.1]], dtype=F64), pair, radius=0.5)) == ["side"]
    shares = basin_shares({"a": labels, "b": np.array(["flat"] * 4, dtype=object)}, ["flat", "sharp", ELSEWHERE])
    assert shares.loc["a"].tolist() == [0.25, 0.25, 0.5] and shares.loc["b"].tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="radius"):
        assign_basins(pts, minima, radius=0.0)
    with pytest.raises(ValueError, match="minima"):
        assign_basins(pts, {}, radius=1.0)
    with pytest.raises(ValueError, match="categories"):
        basin_shares({"a": labels}, ["flat", "sharp"])
