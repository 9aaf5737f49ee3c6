"""Vectorised local training: the sampled clients of a round trained together with ``torch.func.vmap``.

Per chunk of clients: θ_{i,0} = ``client_start`` client by client, stacked with the client states;
for k = 0 … K−1 each client's batch is gathered exactly as on the sequential path (its own
augmentation generator, same order) and ``vmap(local_step)`` runs over the stack (``msg`` shared);
then ``upload`` client by client. Only the local steps, which hold the work, are vmapped, so every
algorithm's bookkeeping is the reference path's. Batched convolutions become grouped ones: results
agree with :func:`fedlab.engine.clients.run_clients_sequential` to ~1e-7 relative on CPU, not bit for
bit. ``parallel_clients="auto"`` chooses the chunk (:mod:`fedlab.engine.chunking`)."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedlab.algorithms.base import Algorithm, State, StepInfo
from fedlab.engine.clients import ClientJob, ClientResult, LocalData, RoundWork, step_info
from fedlab.models.functional import Batch, GradFn


# --- stacking helpers ---
def stack_states(states: Sequence[State]) -> State:
    """``[{k: t_i}]`` → ``{k: stack(t_i)}``; every client state must have the same keys."""
    keys = list(states[0])
    for j, s in enumerate(states):
        if set(s) != set(keys):
            raise ValueError(f"client states differ in their keys: job 0 has {sorted(keys)}, "
                             f"job {j} has {sorted(s)}; the vectorised path needs equal keys")
    return {k: torch.stack([s[k] for s in states]) for k in keys}


def row_of(stacked: State, i: int) -> State:
    """Client i's slice of a stacked state (views)."""
    return {k: v[i] for k, v in stacked.items()}


def _own(state: State) -> State:
    """Copy tensors that are views, so a kept client state does not pin the whole chunk's storage."""
    return {k: (v.clone() if v._base is not None else v) for k, v in state.items()}


def _check_fixed_k(jobs: Sequence[ClientJob]) -> int:
    """K, after checking that all jobs have the same number of equally shaped batches."""
    lengths = {len(job.batches) for job in jobs}
    if len(lengths) != 1:
        raise ValueError(
            "the vectorised path needs the same number of local steps K for every client, got K in "
            f"{sorted(lengths)}; use fixed local_steps=K (local_epochs=None) or parallel_clients=1")
    K = lengths.pop()
    for k in range(K):
        shapes = {tuple(job.batches[k].shape) for job in jobs}
        if len(shapes) != 1:
            raise ValueError(
                f"the vectorised path needs equal batch shapes across clients; step {k} has shapes "
                f"{sorted(shapes)} (epoch mode gives partial batches: use parallel_clients=1)")
    return K


def _batch_indices(jobs: Sequence[ClientJob]) -> Tensor | None:
    """A ``(chunk, K, B)`` index tensor when every job holds a ``(K, B)`` tensor, else None."""
    if all(isinstance(job.batches, Tensor) and job.batches.ndim == 2 for job in jobs):
        return torch.stack([job.batches for job in jobs])  # type: ignore[misc]
    return None


def gather_batch(data: LocalData, jobs: Sequence[ClientJob], k: int, idx: Tensor | None = None) -> Batch:
    """Step k's batches of all jobs, stacked: ``((chunk, B, ...), (chunk, B))``; with augmentation each
    client's via ``data.batch`` and its own generator, without it one index gather (identical tensors)."""
    if data.augment is None:
        rows = idx[:, k] if idx is not None else torch.stack([job.batches[k] for job in jobs])
        return data.x[rows], data.y[rows]
    xs, ys = zip(*(data.batch(job.batches[k], job.aug_generator) for job in jobs))
    return torch.stack(xs), torch.stack(ys)


def vmapped_step(algorithm: Algorithm, msg: State, grad_fn: GradFn, step: StepInfo):
    """``(θ[c], state[c], batch[c]) -> (θ'[c], state'[c], loss[c])``: one local step of c clients."""

    def one_client(theta: Tensor, cstate: State, batch: Batch):
        return algorithm.local_step(theta, cstate, msg, batch, grad_fn, step)

    return torch.func.vmap(one_client, in_dims=(0, 0, 0))


# --- the executor ---
def run_clients_vectorised(work: RoundWork, chunk: int) -> list[ClientResult]:
    """Train the jobs of ``work`` ``chunk`` clients at a time with ``vmap`` (results in job order).
    Needs a vmap-able oracle and equal K and batch shapes (fixed-step mode); the last chunk holds the rest."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an integer ≥ 1 (got {chunk!r})")
    work.check()
    if not work.jobs:
        return []
    K = _check_fixed_k(work.jobs)
    results: list[ClientResult] = []
    for start in range(0, len(work.jobs), chunk):
        results.extend(_run_chunk(work.part(start, start + chunk), K))
    return results


def _run_chunk(work: RoundWork, K: int) -> list[ClientResult]:
    algorithm, msg, jobs, info = work.algorithm, work.msg, work.jobs, work.info
    theta0 = torch.stack([algorithm.client_start(msg, s, info) for s in work.states])
    cstate = stack_states(work.states)
    idx = _batch_indices(jobs)
    theta = theta0
    losses = []
    for k in range(K):
        batch = gather_batch(work.data, jobs, k, idx)
        step = vmapped_step(algorithm, msg, work.grad_fn, step_info(info, k, K))
        theta, cstate, loss = step(theta, cstate, batch)
        losses.append(loss.detach())
    theta = theta.detach()
    mean_loss = torch.stack(losses).mean(dim=0)  # (chunk,): mean over the K steps, per client
    out = []
    for i, job in enumerate(jobs):
        upload, new_state = algorithm.upload(theta0[i], theta[i], row_of(cstate, i), msg, info, K)
        out.append(ClientResult(job.client, theta[i], upload, _own(new_state), mean_loss[i]))
    return out
