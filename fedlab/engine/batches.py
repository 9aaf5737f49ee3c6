"""Minibatch index streams for one client in one round (per-client epoch shuffling).

Fixed-K mode (the theory setting): the client walks through fresh random permutations of its data,
one after another, taking B indices per step, for K steps; every batch has exactly B samples (a
client smaller than B sees some samples twice in a batch), which also keeps shapes equal across
clients for the vectorised path.

Epoch mode (the reference codes): E passes, each a fresh permutation cut into ⌈n_i/B⌉ batches, the
last one partial — K_i = E·⌈n_i/B⌉.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def fixed_step_batches(indices: Tensor, steps: int, batch_size: int, generator: torch.Generator) -> Tensor:
    """(K, B) int64 tensor of sample indices, from consecutive permutations of ``indices``."""
    n = indices.numel()
    if n == 0:
        raise ValueError("a client with no samples cannot take local steps (the engine never samples one)")
    need = steps * batch_size
    perms = [torch.randperm(n, generator=generator, device=generator.device) for _ in range(math.ceil(need / n))]
    order = torch.cat(perms)[:need]
    return indices[order.to(indices.device)].view(steps, batch_size)


def epoch_batches(indices: Tensor, epochs: int, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    """List of K_i = E·⌈n_i/B⌉ index tensors; the last batch of each epoch may be smaller."""
    if indices.numel() == 0:
        raise ValueError("a client with no samples has no local epoch (the engine never samples one)")
    out: list[Tensor] = []
    for _ in range(epochs):
        perm = indices[torch.randperm(indices.numel(), generator=generator, device=generator.device)
                       .to(indices.device)]
        out.extend(perm.split(batch_size))
    return out
