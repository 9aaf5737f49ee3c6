"""Vectorised local training: the sampled clients of a round trained together with ``torch.func.vmap``.

:func:`run_clients_vectorised` gives the same numbers as the sequential reference path
(:func:`fedlab.engine.clients.run_clients_sequential`) up to float rounding: it splits the jobs into
chunks of ``chunk`` clients and, for each chunk,

1. computes θ_{i,0} = ``client_start(msg, c_i, info)`` client by client and stacks them (and the
   client states, a dict of tensors each, into one dict of ``(chunk, ...)`` tensors);
2. for k = 0 … K−1 gathers client i's batch exactly as the sequential path does — each client's own
   augmentation generator, drawn in the same order — stacks the batches to ``(chunk, B, ...)`` and
   calls ``vmap(lambda θ, c, b: local_step(θ, c, msg, b, grad_fn, step))`` (``msg`` is shared, not
   batched);
3. calls ``upload`` client by client on the rows of the stacked result.

Only the local steps are vmapped: they hold all the work. ``client_start`` and ``upload`` are a
handful of vector operations per client, and running them one by one keeps every algorithm's
bookkeeping exactly as in the reference path.

Batched convolutions under vmap become grouped convolutions, so the summation order differs from the
sequential path: results agree to ~1e-7 relative on CPU, not bit for bit.

The chunk size of ``Config(parallel_clients="auto")`` is chosen by :mod:`fedlab.engine.chunking`.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedlab.algorithms.base import Algorithm, State, StepInfo
from fedlab.engine.clients import ClientJob, ClientResult, LocalData, RoundWork, step_info
from fedlab.models.functional import Batch, GradFn


# ------------------------------------------------------------------------------------------------
# stacking helpers
# ------------------------------------------------------------------------------------------------
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
    """Step k's batches of all jobs, stacked: ``((chunk, B, ...), (chunk, B))``.

    With augmentation, every client's batch is built by ``data.batch`` with its own generator — the
    same calls, in the same per-client order, as the sequential path. Without augmentation a batch
    is a pure index gather, so one gather with a ``(chunk, B)`` index gives identical tensors.
    """
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


# ------------------------------------------------------------------------------------------------
# the executor
# ------------------------------------------------------------------------------------------------
def run_clients_vectorised(work: RoundWork, chunk: int) -> list[ClientResult]:
    """Train the jobs of ``work`` ``chunk`` clients at a time with ``torch.func.vmap``; same results
    as sequential, in job order.

    ``work.data`` must be a :class:`~fedlab.engine.clients.LocalData` and ``work.grad_fn`` a
    vmap-able (functorch) oracle. All jobs must have the same K and batch shapes (fixed-step mode).
    The last chunk holds the remainder when ``chunk`` does not divide m.
    """
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
