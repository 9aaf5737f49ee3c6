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
