"""Shared fixtures: tiny federations that train in well under a second per round."""
from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def tiny(tmp_path):
    """A function returning a digits/cnn Config with small, fast defaults (override by keyword)."""
    from fedlab import Config

    def make(**overrides):
        values = dict(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=4,
                      local_steps=3, batch_size=16, lr=0.05, partition="dirichlet", alpha=0.5,
                      eval_every=2, runs_dir=str(tmp_path / "runs"), checkpoint_every=2)
        values.update(overrides)
        return Config(**values)

    return make


RAY_FIXTURES = {"ray_turn", "ray_cluster", "two_nodes"}
"""The fixtures that start a Ray cluster or hold the Ray lock: a test that takes one is marked ``ray``."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ray)


@pytest.fixture
def ray_turn(tmp_path_factory):
    """The suite's Ray lock held for the test: no other test's Ray cluster starts or runs meanwhile."""
    from _ray_procs import one_ray_at_a_time

    with one_ray_at_a_time(tmp_path_factory):
        yield


@pytest.fixture
def one_thread():
    """One intra-op thread for the test (what each client thread uses), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fmnist_or_skip():
    """Skip (with the loader's message) where the Fashion-MNIST files are not installed."""
    from fedlab.data import DatasetNotFoundError, load_dataset

    try:
        load_dataset("fmnist", train_size=100, test_size=100, download=False)
    except DatasetNotFoundError as err:
        pytest.skip(str(err))
