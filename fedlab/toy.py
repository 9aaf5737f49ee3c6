"""A dataset-free driver for any fedlab algorithm: federations defined by gradient oracles, whose
losses are known in closed form (e.g. f_i(θ) = ½ (θ − b_i)ᵀ A_i (θ − b_i), global optimum
(Σ A_i)⁻¹ Σ A_i b_i), for teaching and exact tests. A "batch" is whatever ``grad_fn(θ, batch) ->
(gradient, loss)`` understands."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedlab.algorithms.base import Algorithm, State
from fedlab.engine.clients import ClientJob, GivenBatches, RoundWork, run_clients_sequential
from fedlab.engine.round import round_info, run_round
from fedlab.engine.sampling import sample_clients
from fedlab.models.functional import GradFn

BatchFn = Callable[[int, int, int], Any]
"""``batch_fn(client, round, step) -> batch`` handed to ``grad_fn``."""


@dataclass
class ToyRun:
    server: State
    client_states: dict[int, State]
    trajectory: Tensor  # (rounds + 1, d): the global model before round 0 and after every round
    client_endpoints: list[Tensor]  # per round, (m, d) stack of θ_{i,K}
    losses: list[float]  # per round, mean local loss


def run_functional(algorithm: Algorithm, theta0: Tensor, grad_fn: GradFn, batch_fn: BatchFn, *, n_clients: int,
                   rounds: int, local_steps: int, lr: float, participation: float = 1.0, seed: int = 0,
                   weight_decay: float = 0.0, clip_norm: float | None = None, lr_decay: float = 1.0) -> ToyRun:
    """Run ``rounds`` rounds of ``algorithm`` with uniform client sampling; returns the trajectory."""
    server = algorithm.server_init(theta0)
    states: dict[int, State] = {}
    traj = [algorithm.global_model(server).clone()]
    endpoints, losses = [], []
    given = GivenBatches()
    for t in range(rounds):
        clients = sample_clients(t, n_clients, participation, seed=seed).tolist()
        # the exponential schedule η_t = η_0 · γ^t with γ = lr_decay (constant for lr_decay = 1)
        info = round_info(t, lr0=lr, schedule="exponential", rounds=rounds, decay=lr_decay,
                          client_steps=(local_steps,) * len(clients), n_clients=n_clients,
                          weight_decay=weight_decay, clip_norm=clip_norm, seed=seed)
        jobs = [ClientJob(i, [batch_fn(i, t, k) for k in range(local_steps)], None) for i in clients]
        done = run_round(algorithm, server, states, clients, theta0, info,
                         lambda msg, cstates: run_clients_sequential(
                             RoundWork(algorithm, msg, jobs, cstates, given, grad_fn, info)))
        server = done.server
        traj.append(algorithm.global_model(server).clone())
        endpoints.append(torch.stack([r.theta_final for r in done.results]))
        # every client runs local_steps steps, so the mean of the client means is the mean local loss
        losses.append(float(torch.stack([r.mean_loss for r in done.results]).mean()))
    return ToyRun(server, states, torch.stack(traj), endpoints, losses)


def quadratic_federation(
    n_clients: int, dim: int, *, seed: int = 0, heterogeneity: float = 1.0, noise: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> tuple[GradFn, BatchFn, Tensor, list[tuple[Tensor, Tensor]]]:
    """Clients f_i(θ) = ½ (θ − b_i)ᵀ A_i (θ − b_i) (+ optional gradient noise).

    Returns ``(grad_fn, batch_fn, theta_star, [(A_i, b_i)])`` with θ* = (Σ A_i)⁻¹ Σ A_i b_i the
    minimiser of F = mean_i f_i. A batch is the pair (client id, noise draw). Heterogeneity scales the
    spread of the b_i; distinct A_i make FedAvg's fixed point differ from θ* (client drift).
    """
    from fedlab._rng import torch_generator

    gen = torch_generator(seed, "quadratic")
    problems = []
    for _ in range(n_clients):
        q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=dtype))
        eig = torch.exp(torch.rand(dim, generator=gen, dtype=dtype) * 2.0 - 1.0)  # in [e^-1, e]
        a = q @ torch.diag(eig) @ q.T
        b = heterogeneity * torch.randn(dim, generator=gen, dtype=dtype)
        problems.append((a, b))
    a_all = torch.stack([p[0] for p in problems])
    b_all = torch.stack([p[1] for p in problems])
    theta_star = torch.linalg.solve(a_all.sum(0), (a_all @ b_all.unsqueeze(-1)).sum(0)).squeeze(-1)

    def grad_fn(theta: Tensor, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        i, eps = batch
        a, b = a_all[i], b_all[i]
        r = theta - b
        ar = a @ r
        return ar + noise * eps, 0.5 * (r @ ar)

    def batch_fn(client: int, round_: int, step: int) -> tuple[Tensor, Tensor]:
        g = torch_generator(seed, "quadratic-noise", client, round_, step)
        return torch.tensor(client), torch.randn(dim, generator=g, dtype=dtype)

    return grad_fn, batch_fn, theta_star, problems
