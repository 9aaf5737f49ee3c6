"""The chunk size of the vectorised executor for ``Config(parallel_clients="auto")``, and the memory
tracker it measures with (:class:`LiveTensorBytes`, a ``TorchDispatchMode``: the one place fedlab
depends on that private torch module)."""
from __future__ import annotations

import math
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fedlab.engine.clients import ClientJob, RoundWork
from fedlab.engine.hardware import sync
from fedlab.engine.vectorised import _check_fixed_k, run_clients_vectorised
from fedlab.models.functional import GradFn

MIB = 2**20
"""``memory_budget_mb`` is in MiB (2^20 bytes)."""

DEFAULT_CANDIDATES: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
"""Chunk sizes :func:`choose_chunk` tries (those ≤ m, plus m itself)."""


# --- memory measurement ---
class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of tensor storage created inside the ``with`` block and still alive (CPU estimate).

    Every tensor an operator returns (below ``vmap``/``grad``) is counted once per storage and released
    by a ``weakref.finalize``; ``peak`` is the high-water mark. Storage made outside the block
    (parameters, data, inputs) is not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[Any, list[int]] = {}

    def _release(self, key: Any) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self._live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key = (storage.device.type, storage.data_ptr()) if storage.data_ptr() else ("id", id(t))
                entry = self._live.get(key)
                if entry is None:
                    entry = self._live[key] = [storage.nbytes(), 0]
                    self.current += entry[0]
                    self.peak = max(self.peak, self.current)
                entry[1] += 1
                weakref.finalize(t, self._release, key)
        return out


def default_budget_bytes(device: torch.device) -> int | None:
    """Budget when none is configured: 90 % of free CUDA memory; on CPU half of ``MemAvailable``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(0.9 * free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return None


def _copy_generator(gen: torch.Generator | None) -> torch.Generator | None:
    if gen is None:
        return None
    twin = torch.Generator(device=gen.device)
    twin.set_state(gen.get_state())
    return twin


def probe_jobs(jobs: Sequence[ClientJob], steps: int) -> list[ClientJob]:
    """The jobs cut to their first ``steps`` batches, with copies of their augmentation generators
    (so probing leaves the real jobs' random streams untouched)."""
    return [ClientJob(job.client, job.batches[:steps], _copy_generator(job.aug_generator)) for job in jobs]


def measure_chunk(work: RoundWork, chunk: int, steps: int = 2) -> tuple[float, int]:
    """(seconds per local step of ``chunk`` clients, peak bytes of training them).

    Runs the real executor (sequential for ``chunk == 1``, else vectorised with one chunk) on the first
    ``chunk`` jobs cut to ``steps`` steps (:func:`probe_jobs`), so per-client overheads count: a warm-up
    that measures memory, then one timed run (two under 0.5 s, the faster kept). Memory: CUDA's
    ``max_memory_allocated`` minus what was allocated before; on CPU :class:`LiveTensorBytes`."""
    from fedlab.engine.clients import run_clients_sequential

    first = work.part(0, chunk)
    steps = max(1, min(steps, len(first.jobs[0].batches)))
    device = work.data.x.device

    def run() -> None:
        probe = first.with_jobs(probe_jobs(first.jobs, steps), first.states)
        if chunk == 1:
            run_clients_sequential(probe)
        else:
            run_clients_vectorised(probe, chunk=chunk)

    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        run()
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
    else:
        with LiveTensorBytes() as tracker:
            run()
        peak = tracker.peak
    seconds = math.inf
    for _ in range(2):
        sync(device)
        t0 = time.perf_counter()
        run()
        sync(device)
        seconds = min(seconds, time.perf_counter() - t0)
        if seconds >= 0.5:
            break
    return seconds / steps, int(peak)


@dataclass
class ChunkMeasurement:
    chunk: int
    seconds_per_step: float | None  # one local step of the whole chunk, per-client overheads included
    peak_bytes: int | None
    status: str  # ok | over budget | predicted over budget | out of memory


@dataclass
class ChunkChoice:
    """What ``parallel_clients="auto"`` chose, and the measurements it chose from."""

    chunk: int
    m: int
    budget_bytes: int | None
    memory_method: str
    measurements: list[ChunkMeasurement] = field(default_factory=list)
    probe_seconds: float = 0.0

    def score(self, c: ChunkMeasurement) -> float:
        """Estimated seconds per local step of all m clients: ⌈m/c⌉ chunk steps of c clients."""
        return math.ceil(self.m / c.chunk) * (c.seconds_per_step or math.inf)


def candidate_chunks(m: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to m, and m itself."""
    return sorted({c for c in DEFAULT_CANDIDATES if c <= m} | {m})


def choose_chunk(work: RoundWork, *, budget_mb: float | None = None, candidates: Sequence[int] | None = None,
                 sequential_grad_fn: GradFn | None = None) -> ChunkChoice:
    """Choose how many clients to vmap together, by measurement, within a memory budget.

    Each candidate c (:func:`candidate_chunks`, ascending) is trained for two local steps
    (:func:`measure_chunk`). After c = 1 and 2, a larger c is skipped unmeasured when its linear memory
    prediction peak(1) + (c−1)·(peak(2) − peak(1)) exceeds the budget (or ruled out by its measured
    peak); the smallest ⌈m/c⌉ · t(c) wins. If not even 1 fits, 1 with a warning. No job's generators or
    states change. ``budget_mb`` defaults to :func:`default_budget_bytes`; ``sequential_grad_fn`` is the
    oracle c = 1 would run with."""
    t_start = time.perf_counter()
    m = len(work.jobs)
    if m == 0:
        raise ValueError("choose_chunk needs at least one job")
    _check_fixed_k(work.jobs)
    device = work.data.x.device
    budget = int(budget_mb * MIB) if budget_mb is not None else default_budget_bytes(device)
    method = ("torch.cuda.max_memory_allocated" if device.type == "cuda"
              else "peak live tensor bytes of a probe run (LiveTensorBytes)")
    choice = ChunkChoice(chunk=1, m=m, budget_bytes=budget, memory_method=method)
    cands = sorted({int(c) for c in (candidates or candidate_chunks(m)) if 1 <= int(c) <= m})
    peaks: dict[int, int] = {}
    for c in cands:
        if budget is not None and 1 in peaks and 2 in peaks and c > 2:
            predicted = peaks[1] + (c - 1) * max(0, peaks[2] - peaks[1])
            if predicted > budget:
                choice.measurements.append(ChunkMeasurement(c, None, predicted, "predicted over budget"))
                continue
        try:
            probe = replace(work, grad_fn=sequential_grad_fn) if c == 1 and sequential_grad_fn is not None else work
            seconds, peak = measure_chunk(probe, c)
        except torch.OutOfMemoryError:
            if device.type == "cuda":
                torch.cuda.empty_cache()
            choice.measurements.append(ChunkMeasurement(c, None, None, "out of memory"))
            break
        peaks[c] = peak
        status = "ok" if budget is None or peak <= budget else "over budget"
        choice.measurements.append(ChunkMeasurement(c, seconds, peak, status))
    ok = [c for c in choice.measurements if c.status == "ok"]
    if ok:
        choice.chunk = min(ok, key=choice.score).chunk
    else:
        warnings.warn(f"memory budget {budget} bytes is below even one client's estimated need; "
                      "using chunk 1 (the sequential path)", RuntimeWarning, stacklevel=2)
        choice.chunk = 1
    choice.probe_seconds = time.perf_counter() - t_start
    return choice
