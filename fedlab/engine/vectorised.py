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

:func:`choose_chunk` picks the chunk size for ``Config(parallel_clients="auto")`` by timing two
local steps per candidate chunk size and skipping candidates whose memory exceeds a budget; see its
docstring for how memory is measured.
"""
from __future__ import annotations

import math
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fedlab.algorithms.base import Algorithm, RoundInfo, State, StepInfo
from fedlab.engine.clients import ClientJob, ClientResult, LocalData, step_info
from fedlab.models.functional import Batch, GradFn
from fedlab.engine.hardware import sync

MIB = 2**20
"""``memory_budget_mb`` is in MiB (2^20 bytes)."""

DEFAULT_CANDIDATES: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
"""Chunk sizes :func:`choose_chunk` tries (those ≤ m, plus m itself)."""


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
def run_clients_vectorised(
    algorithm: Algorithm, msg: State, jobs: Sequence[ClientJob], states: Sequence[State],
    data: LocalData, grad_fn: GradFn, info: RoundInfo, chunk: int,
) -> list[ClientResult]:
    """Train the jobs ``chunk`` clients at a time with ``torch.func.vmap``; same results as sequential.

    ``states[j]`` is job j's persistent client state. All jobs must have the same K and batch shapes
    (fixed-step mode). The last chunk holds the remainder when ``chunk`` does not divide m.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an integer ≥ 1 (got {chunk!r})")
    if len(jobs) != len(states):
        raise ValueError(f"{len(jobs)} jobs but {len(states)} client states")
    if not jobs:
        return []
    K = _check_fixed_k(jobs)
    results: list[ClientResult] = []
    for start in range(0, len(jobs), chunk):
        results.extend(_run_chunk(algorithm, msg, jobs[start:start + chunk], states[start:start + chunk],
                                  data, grad_fn, info, K))
    return results


def _run_chunk(algorithm: Algorithm, msg: State, jobs: Sequence[ClientJob], states: Sequence[State],
               data: LocalData, grad_fn: GradFn, info: RoundInfo, K: int) -> list[ClientResult]:
    theta0 = torch.stack([algorithm.client_start(msg, s, info) for s in states])
    cstate = stack_states(states)
    idx = _batch_indices(jobs)
    theta = theta0
    losses = []
    for k in range(K):
        batch = gather_batch(data, jobs, k, idx)
        theta, cstate, loss = vmapped_step(algorithm, msg, grad_fn, step_info(info, k, K))(theta, cstate, batch)
        losses.append(loss.detach())
    theta = theta.detach()
    mean_loss = torch.stack(losses).mean(dim=0)  # (chunk,): mean over the K steps, per client
    out = []
    for i, job in enumerate(jobs):
        upload, new_state = algorithm.upload(theta0[i], theta[i], row_of(cstate, i), msg, info, K)
        out.append(ClientResult(job.client, theta[i], upload, _own(new_state), mean_loss[i]))
    return out


# ------------------------------------------------------------------------------------------------
# memory measurement
# ------------------------------------------------------------------------------------------------
class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of tensor storage created inside the ``with`` block and still alive (CPU estimate).

    Every tensor an operator returns is seen here (below ``vmap``/``grad``, i.e. the real batched
    tensors); its storage is counted once when first seen and released by a ``weakref.finalize``
    when the last tensor seen on it dies. ``peak`` is the high-water mark of the bytes alive:
    activations saved for backward, gradients, temporaries. Storage created outside the block
    (parameters, data, inputs) is not counted; add it yourself.
    """

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


def measure_chunk(algorithm: Algorithm, msg: State, jobs: Sequence[ClientJob], states: Sequence[State],
                  data: LocalData, grad_fn: GradFn, info: RoundInfo, chunk: int,
                  steps: int = 2) -> tuple[float, int]:
    """(seconds per local step of ``chunk`` clients, peak bytes of training ``chunk`` clients).

    Runs the real executor — ``run_clients_sequential`` for ``chunk == 1``, else
    ``run_clients_vectorised`` with one chunk — on the first ``chunk`` jobs cut to ``steps`` local
    steps (:func:`probe_jobs`), so per-client overheads (batch gathering, stacking, uploads) are
    included. The first run is a warm-up that also measures memory; then the run is timed once, or
    twice (keeping the faster) when it takes under 0.5 s, where noise matters most. Memory is

    * CUDA: ``torch.cuda.max_memory_allocated`` during the run minus what was allocated before;
    * CPU: the peak bytes of tensors created during the run and still alive, tracked by
      :class:`LiveTensorBytes` — stacked θ_{i,0}, states and batches, activations, gradients,
      uploads. The data set, the message and the states passed in are not counted (they exist
      whatever the chunk); allocator overhead and framework scratch buffers are not included.
    """
    from fedlab.engine.clients import run_clients_sequential

    jobs, states = list(jobs[:chunk]), list(states[:chunk])
    steps = max(1, min(steps, len(jobs[0].batches)))
    device = data.x.device

    def run() -> None:
        p_jobs = probe_jobs(jobs, steps)
        if chunk == 1:
            run_clients_sequential(algorithm, msg, p_jobs, states, data, grad_fn, info)
        else:
            run_clients_vectorised(algorithm, msg, p_jobs, states, data, grad_fn, info, chunk=chunk)

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

    def describe(self) -> str:
        budget = "none" if self.budget_bytes is None else f"{self.budget_bytes / MIB:.1f} MiB"
        lines = [f"chunk {self.chunk} of m={self.m} (budget {budget}; memory: {self.memory_method}; "
                 f"probe {self.probe_seconds:.2f} s)"]
        for c in self.measurements:
            t = "-" if c.seconds_per_step is None else f"{1000 * c.seconds_per_step:.1f} ms/step"
            mem = "-" if c.peak_bytes is None else f"{c.peak_bytes / MIB:.1f} MiB"
            lines.append(f"  chunk {c.chunk:>4}: {t:>16}  peak {mem:>12}  {c.status}")
        return "\n".join(lines)


def candidate_chunks(m: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to m, and m itself."""
    return sorted({c for c in DEFAULT_CANDIDATES if c <= m} | {m})


def choose_chunk(
    algorithm: Algorithm, msg: State, jobs: Sequence[ClientJob], states: Sequence[State], data: LocalData,
    grad_fn: GradFn, info: RoundInfo, *, budget_mb: float | None = None,
    candidates: Sequence[int] | None = None, sequential_grad_fn: GradFn | None = None,
) -> ChunkChoice:
    """Choose how many clients to vmap together, by measurement, within a memory budget.

    For each candidate c (default :func:`candidate_chunks`, ascending) c clients are trained for two
    local steps through the real executor (a warm-up that also measures memory, then timed; see
    :func:`measure_chunk`). Once c = 1 and c = 2 are measured, the memory of a larger c is first
    predicted linearly (peak(1) + (c−1)·(peak(2)−peak(1))) and c is skipped without running when the
    prediction exceeds the budget; a measured peak over the budget also rules c out. Among the rest
    the chunk with the smallest ⌈m/c⌉ · t(c) wins. If not even c = 1 fits, 1 is returned with a
    warning. No job's generators or states are changed.

    ``budget_mb`` (MiB) defaults to :func:`default_budget_bytes`. ``sequential_grad_fn`` is the
    oracle the engine's sequential path would use for c = 1 (default ``grad_fn``), so that c = 1 is
    timed as it would run.
    """
    t_start = time.perf_counter()
    m = len(jobs)
    if m == 0:
        raise ValueError("choose_chunk needs at least one job")
    _check_fixed_k(jobs)
    device = data.x.device
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
            fn = sequential_grad_fn if (c == 1 and sequential_grad_fn is not None) else grad_fn
            seconds, peak = measure_chunk(algorithm, msg, jobs, states, data, fn, info, c)
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
