"""Client gradients at one point θ: minibatch g_{i,b}, full-batch ∇F_i and the global
∇F = (1/N) Σ_i ∇F_i — the raw material of the flatness-incompatibility and friendly-adversary
analyses (FedVSSAM, arXiv 2605.09144), computed once and shared. Memory: O((N·B + N)·d) floats."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import vmap
from tqdm import tqdm

from fedlab.analysis._checks import check_clients, check_count
from fedlab.analysis.federation import client_loss_fn, sample_batches
from fedlab.analysis.points import resolve_chunk
from fedlab.models.functional import FlatModel
from fedlab._rng import torch_generator

__all__ = ["ClientGradients", "client_gradients", "gradients_at"]


@dataclass
class ClientGradients:
    """Gradients of every client at θ (detached, on θ's device): ``batch[i, b]`` = g_{i,b}, ``full[i]`` =
    ∇F_i, ``global_grad`` = ∇F; ``batch_indices[i]``, ``batch_losses[i, b]`` and ``full_losses[i]`` = F_i(θ)."""

    theta: Tensor
    full: Tensor  # (N, d)
    batch: Tensor  # (N, B, d)
    global_grad: Tensor  # (d,)
    batch_indices: list[Tensor]
    batch_losses: Tensor  # (N, B)
    full_losses: Tensor  # (N,)
    batch_size: int
    seed: int

    @property
    def n_clients(self) -> int:
        return int(self.full.shape[0])

    @property
    def n_batches(self) -> int:
        return int(self.batch.shape[1])

    @property
    def global_loss(self) -> float:
        """F(θ) = mean_i F_i(θ)."""
        return float(self.full_losses.mean())


def _batch_grads(model: FlatModel, theta: Tensor, xb: Tensor, yb: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """(grads (B, d), losses (B,)) of each minibatch ``(xb[b], yb[b])``; ``vmap`` over batches."""
    if chunk == 1:
        pairs = [model.grad_fn(theta, (xb[b], yb[b])) for b in range(xb.shape[0])]
        return torch.stack([g for g, _ in pairs]).detach(), torch.stack([v for _, v in pairs]).detach()
    gs, ls = [], []
    for s in range(0, xb.shape[0], chunk):
        g, v = vmap(model.grad_fn, in_dims=(None, (0, 0)))(theta, (xb[s:s + chunk], yb[s:s + chunk]))
        gs.append(g.detach())
        ls.append(v.detach())
    return torch.cat(gs), torch.cat(ls)


def client_gradients(
    model: FlatModel,
    clients: Sequence[tuple[Tensor, Tensor]],
    theta: Tensor,
    *,
    batches: int = 4,
    batch_size: int = 32,
    seed: int = 0,
    vmap_chunk: int | None = None,
    progress: bool = False,
) -> ClientGradients:
    """Full-batch and minibatch gradients of every client at θ. Client i's minibatches come from
    ``torch_generator(seed, "analysis-batches", i)`` (:func:`~fedlab.analysis.federation.sample_batches`);
    they are vmapped over data in chunks of ``vmap_chunk`` (default: all of a client's at once)."""
    check_clients(clients)
    if theta.ndim != 1 or theta.numel() != model.dim:
        raise ValueError(f"theta must be a 1-D tensor of the model's {model.dim} parameters, got {tuple(theta.shape)}")
    check_count("batches", batches)
    check_count("batch_size", batch_size)
    chunk = batches if vmap_chunk is None else resolve_chunk(vmap_chunk, theta)
    theta = theta.detach()
    full, full_losses, batch, batch_losses, indices = [], [], [], [], []
    for i, (x, y) in enumerate(tqdm(clients, desc="client gradients", disable=not progress, leave=False)):
        value, g = client_loss_fn(model, (x, y)).value_and_grad(theta)
        full.append(g)
        full_losses.append(value)
        idx = sample_batches(x.shape[0], batches, batch_size, torch_generator(seed, "analysis-batches", i))
        idx = idx.to(x.device)
        gb, lb = _batch_grads(model, theta, x[idx], y[idx], chunk)
        batch.append(gb)
        batch_losses.append(lb)
        indices.append(idx)
    full_t = torch.stack(full)
    return ClientGradients(theta, full_t, torch.stack(batch), full_t.mean(dim=0), indices,
                           torch.stack(batch_losses), torch.stack(full_losses), batch_size, seed)


def gradients_at(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], theta: Tensor,
                 grads: ClientGradients | None, *, batches: int, batch_size: int, seed: int,
                 progress: bool) -> ClientGradients:
    """``grads`` when they were computed for these clients at this θ, :func:`client_gradients` when None."""
    if grads is None:
        return client_gradients(model, clients, theta, batches=batches, batch_size=batch_size, seed=seed,
                                progress=progress)
    if grads.n_clients != len(clients) or not torch.equal(grads.theta, theta.detach()):
        raise ValueError("grads must come from client_gradients(model, clients, theta) at this theta")
    return grads
