"""The engine's server averages its clients with equal weights, whatever their sizes (issue 41, item 6).

Notebook 01 once said that under notebook 10's per-class splits "a large client weighs more in every average";
the engine weighs every sampled client 1/m (notebook 01b, §1). These tests measure the weights of one real round
(:func:`lab.evidence.aggregation.aggregation_weights`) on a federation whose clients differ in size, so the
sentence's class — prose about how the server averages — is checked against the code that averages.
"""
from __future__ import annotations

import numpy as np
import torch

import fedlab
from fedlab.algorithms.fedavg import FedAvg
from lab.evidence.aggregation import aggregation_weights

# Relative rounding of one float32 round's sum, solved in float64: the weights come out to ~1e-7 of 1/m.
WEIGHT_TOL = 1e-5


def _unequal(tmp_path) -> fedlab.Config:
    """Three clients of a per-class Dirichlet split (α = 0.1): their sizes differ by far more than WEIGHT_TOL."""
    return fedlab.Config(dataset="fmnist", model="mlp", train_size=600, test_size=200, n_clients=3, participation=1.0,
                         partition="dirichlet", alpha=0.1, rounds=1, local_steps=3, batch_size=16, lr=0.05, seed=0,
                         partition_seed=0, runs_dir=str(tmp_path))


def test_server_average_is_unweighted_for_clients_of_different_sizes(tmp_path):
    got = aggregation_weights(_unequal(tmp_path))
    by_size = got.sizes / got.sizes.sum()
    assert np.ptp(by_size) > 0.05, f"the clients must differ in size for the test to tell the rules apart: {got.sizes}"
    assert got.residual < 1e-4, "the weights reproduce the round's step"
    assert got.uniform(WEIGHT_TOL), f"weights {got.weights} are not 1/m for sizes {got.sizes}"
    assert not got.by_size(WEIGHT_TOL)
    assert not any(tmp_path.iterdir()), "measuring the weights writes nothing under runs/"


def test_a_size_weighted_server_is_reported_as_such(tmp_path, monkeypatch):
    """The measurement can fail: a FedAvg that weighs by data size (McMahan et al.) is seen as that."""
    sizes: dict[str, torch.Tensor] = {}

    def weighted(self, server, uploads, info):
        w = sizes["n"] / sizes["n"].sum()
        return {**server, "theta": server["theta"] + (w.unsqueeze(1) * uploads["delta"]).sum(dim=0)}

    cfg = _unequal(tmp_path)
    split = fedlab.engine.build_partition(cfg, fedlab.engine.build_dataset(cfg))
    sizes["n"] = torch.tensor([float(len(ix)) for ix in split.client_indices])  # every client sampled, in order
    monkeypatch.setattr(FedAvg, "aggregate", weighted)
    got = aggregation_weights(cfg)
    assert got.by_size(WEIGHT_TOL) and not got.uniform(WEIGHT_TOL), got.weights


def test_notebook_10_splits_are_averaged_uniformly(tmp_path):
    """The federation of notebook 10's cpu profile (per-class Dirichlet), shrunk to a few clients: equal weights."""
    from lab.evidence.protocol import profile_federation

    cpu = profile_federation("cpu")
    assert cpu.partition == "dirichlet", "the split whose sizes differ (per class)"
    small = cpu.replace(train_size=800, test_size=200, n_clients=4, participation=1.0, rounds=1, local_steps=2,
                        runs_dir=str(tmp_path))
    got = aggregation_weights(small)
    assert np.ptp(got.sizes) > 0 and got.uniform(WEIGHT_TOL), (got.sizes, got.weights)
