"""Local training of the sampled clients of one round — the sequential reference path.

A :class:`ClientJob` holds everything one client needs in one round: its id, its minibatch index
lists and its augmentation generator. A :class:`RoundWork` is one round's local work as every
executor receives it: the algorithm, the broadcast message, the jobs, their client states, the data,
the gradient oracle and the round's info. :func:`run_clients_sequential` trains the jobs one by one
with the algorithm's pure ``local_step``; the vectorised and threaded executors
(``fedlab.engine.vectorised``, ``fedlab.engine.threads``) must give the same numbers.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from torch import Tensor

from fedlab.algorithms.base import Algorithm, RoundInfo, State, StepInfo
from fedlab.data.augment import apply_augment
from fedlab.models.functional import GradFn


@dataclass
class ClientJob:
    client: int
    batches: Sequence[Tensor]  # K index tensors (a (K, B) tensor in fixed-step mode)
    aug_generator: torch.Generator | None


@dataclass
class ClientResult:
    client: int
    theta_final: Tensor  # θ_{i,K}
    upload: State
    state: State  # the client's persistent state after the round
    mean_loss: Tensor  # mean of the K minibatch losses at the unperturbed iterates (0-d tensor)


@dataclass(frozen=True)
class LocalData:
    """The training tensors (on the run's device) and the augmentation applied to each batch.

    ``crop_prob``, ``crop_padding`` and ``flip_prob`` parametrise ``"crop_flip"``
    (:func:`fedlab.data.augment.random_crop_flip`); they come from the config fields of those names.
    """

    x: Tensor
    y: Tensor
    augment: str | None
    crop_prob: float = 1.0
    crop_padding: int = 4
    flip_prob: float = 0.5

    def batch(self, idx: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        x = self.x[idx]
        if self.augment is not None:
            x = apply_augment(self.augment, x, generator, padding=self.crop_padding, flip_p=self.flip_prob,
                              crop_p=self.crop_prob)
        return x, self.y[idx]


class BatchSource(Protocol):
    """What the sequential path asks of local data: job batch → what ``grad_fn`` takes
    (:class:`LocalData` on real tensors; an oracle federation's batches are already that)."""

    def batch(self, idx: Any, generator: torch.Generator | None) -> Any: ...


class GivenBatches:
    """The local data of an oracle federation (:mod:`fedlab.toy`, :mod:`fedlab.engine.accounting`): a job's
    batches are already what ``grad_fn`` takes."""

    def batch(self, batch: Any, generator: torch.Generator | None) -> Any:
        return batch


@dataclass(frozen=True)
class RoundWork:
    """One round's local work, as every executor receives it; ``states[j]`` is job j's persistent
    client state (so ``jobs`` and ``states`` have equal lengths: :meth:`check` says so otherwise)."""

    algorithm: Algorithm
    msg: State  # the broadcast message, shared by all jobs
    jobs: Sequence[ClientJob]
    states: Sequence[State]
    data: BatchSource
    grad_fn: GradFn
    info: RoundInfo

    def check(self) -> None:
        """ValueError unless there is one client state per job."""
        if len(self.jobs) != len(self.states):
            raise ValueError(f"{len(self.jobs)} jobs but {len(self.states)} client states")

    def part(self, start: int, stop: int) -> "RoundWork":
        """The same work for jobs ``start … stop−1`` (and their states) only."""
        return replace(self, jobs=self.jobs[start:stop], states=self.states[start:stop])

    def with_jobs(self, jobs: Sequence[ClientJob], states: Sequence[State]) -> "RoundWork":
        """The same work for other jobs and states (a probe, or one job of a worker thread)."""
        return replace(self, jobs=jobs, states=states)


def step_info(info: RoundInfo, k: int, K: int) -> StepInfo:
    return StepInfo(k=k, K=K, lr=info.lr, weight_decay=info.weight_decay, clip_norm=info.clip_norm,
                    round=info.round)


def run_clients_sequential(work: RoundWork) -> list[ClientResult]:
    """Train every job of ``work`` one after another, in job order."""
    work.check()
    algorithm, msg, data, grad_fn, info = work.algorithm, work.msg, work.data, work.grad_fn, work.info
    results = []
    for job, cstate in zip(work.jobs, work.states):
        theta0 = algorithm.client_start(msg, cstate, info)
        theta = theta0
        K = len(job.batches)
        losses = []
        for k in range(K):
            batch = data.batch(job.batches[k], job.aug_generator)
            theta, cstate, loss = algorithm.local_step(theta, cstate, msg, batch, grad_fn, step_info(info, k, K))
            losses.append(loss.detach())
        upload, cstate = algorithm.upload(theta0, theta, cstate, msg, info, K)
        results.append(ClientResult(job.client, theta.detach(), upload, cstate, torch.stack(losses).mean()))
    return results
