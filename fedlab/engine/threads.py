"""Client-parallel local training on CPU threads: one client per core, one core per client.

A small model's convolutions cannot keep several cores busy inside one operator, and ``vmap`` turns
them into slow grouped convolutions; clients are independent, so :func:`run_clients_threaded` trains
several at once, each on its own thread at one intra-op thread (PyTorch releases the GIL inside
operators). Each worker owns an oracle over its own module replica (``functional_call`` swaps
parameters into the module). Each client's arithmetic is the sequential path's at one intra-op
thread and results are collected in job order, so the output is bit-identical to the sequential path
under ``torch.set_num_threads(1)`` whatever the scheduling (``tests/test_threads.py``)."""
from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import torch

from fedlab.algorithms.base import State
from fedlab.engine.clients import ClientJob, ClientResult, RoundWork, run_clients_sequential
from fedlab.models.functional import GradFn


def run_clients_threaded(work: RoundWork, grad_fns: Sequence[GradFn]) -> list[ClientResult]:
    """Train the jobs of ``work`` on ``len(grad_fns)`` threads (worker w uses ``grad_fns[w]``, none sharing
    a module); results in job order. CPU only (one CUDA stream serialises anyway); the caller's intra-op
    thread count is restored."""
    threads = len(grad_fns)
    if threads < 1:
        raise ValueError("grad_fns must hold one gradient oracle per worker thread (got none)")
    work.check()
    if work.data.x.device.type != "cpu":
        raise ValueError(f"client threads are a CPU execution mode; the data lives on {work.data.x.device}")
    if not work.jobs:
        return []
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        if threads == 1 or len(work.jobs) == 1:
            return run_clients_sequential(replace(work, grad_fn=grad_fns[0]))
        slot = threading.local()
        numbers = itertools.count()  # next() on a count is atomic under the GIL

        def start_worker() -> None:
            slot.index = next(numbers)
            torch.set_num_threads(1)  # the OpenMP thread count is per thread: set it in every worker

        def train(job: ClientJob, state: State) -> ClientResult:
            one = replace(work, jobs=[job], states=[state], grad_fn=grad_fns[slot.index])
            return run_clients_sequential(one)[0]

        with ThreadPoolExecutor(max_workers=min(threads, len(work.jobs)), initializer=start_worker,
                                thread_name_prefix="fedlab-client") as pool:
            futures = [pool.submit(train, job, state) for job, state in zip(work.jobs, work.states)]
            return [f.result() for f in futures]
    finally:
        torch.set_num_threads(previous)
