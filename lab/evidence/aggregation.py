"""What weight the engine's server gives each client, measured on one round (issue 41, item 6).

Prose about averaging ("a large client weighs more in every average") is a claim about
:func:`fedlab.engine.round.run_round` and the method's ``aggregate``. :func:`aggregation_weights` measures it
instead of restating it: it runs one FedAvg round of a federation with every non-empty client sampled and solves
θ¹ − θ⁰ = Σ_i w_i Δ_i for the weights w, Δ_i = θ_{i,K} − θ⁰ being client i's displacement. With d ≫ N the
displacements are linearly independent, so w is determined and the solve is exact up to rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedlab.config import Config

__all__ = ["AggregationWeights", "aggregation_weights"]


@dataclass(frozen=True)
class AggregationWeights:
    """One round's measured server weights and the sizes of the clients they belong to (same order)."""

    weights: np.ndarray  # w_i, solved from θ¹ − θ⁰ = Σ w_i Δ_i
    sizes: np.ndarray  # n_i, each client's number of training samples
    residual: float  # ‖θ¹ − θ⁰ − Σ w_i Δ_i‖ / ‖θ¹ − θ⁰‖: how exactly the weights reproduce the round

    def uniform(self, tol: float = 1e-6) -> bool:
        """Every weight within ``tol`` of 1/m (m clients): the unweighted mean."""
        return bool(np.all(np.abs(self.weights - 1.0 / len(self.weights)) <= tol))

    def by_size(self, tol: float = 1e-6) -> bool:
        """Every weight within ``tol`` of n_i / Σ n_j: McMahan et al.'s data-size weights."""
        return bool(np.all(np.abs(self.weights - self.sizes / self.sizes.sum()) <= tol))


def aggregation_weights(config: Config) -> AggregationWeights:
    """The weights with which one FedAvg round of ``config``'s federation (its dataset, model, partition, K, B, η;
    the algorithm is set to FedAvg at server step 1) averages its clients, every non-empty client taking part.

    Nothing is written: the round runs in memory, never through ``runs/``.
    """
    from fedlab.engine import Simulation

    sim = Simulation.build(config.replace(algorithm="fedavg", algorithm_params={}))
    sizes = np.array([len(ix) for ix in sim.partition.client_indices])
    clients = np.flatnonzero(sizes > 0)
    state = sim.initial_state()
    theta0 = state.server["theta"].detach().clone()
    outcome = sim.train_round(state, 0, clients=clients)
    # float64: the solve should not add rounding of its own to the float32 training's
    deltas = torch.stack([r.theta_final.detach() for r in outcome.results]).double() - theta0.double()
    step = state.server["theta"].detach().double() - theta0.double()
    w = torch.linalg.lstsq(deltas.T, step.unsqueeze(1)).solution.squeeze(1)
    residual = float(torch.linalg.vector_norm(deltas.T @ w - step) / torch.linalg.vector_norm(step))
    order = [int(r.client) for r in outcome.results]
    return AggregationWeights(w.numpy(), sizes[order].astype(float), residual)
