"""Evaluating a loss at many points at once: a list of parameter vectors, or the points θ + Σ c_k d_k of
an affine grid (landscapes, interpolations), batched with ``vmap`` in chunks or spread over threads.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import torch
from torch import Tensor

from fedlab.analysis._checks import check_count


def resolve_chunk(vmap_chunk: int | None, theta: Tensor) -> int:
    """``vmap_chunk=None`` → 16 points per ``vmap`` call on CUDA, 1 (a loop) elsewhere: on CPU, vmap over
    parameters makes grouped convolutions, measured slower than a loop."""
    if vmap_chunk is None:
        return 16 if theta.is_cuda else 1
    check_count("vmap_chunk", vmap_chunk)
    return int(vmap_chunk)


@torch.no_grad()
def evaluate_points(fn: Callable[[Tensor], Tensor], thetas: Tensor, *, vmap_chunk: int | None = None,
                    progress: bool = False, desc: str = "points") -> Tensor:
    """``stack([fn(θ) for θ in thetas])`` — by ``torch.func.vmap`` in chunks of ``vmap_chunk`` points."""
    from tqdm import tqdm

    if thetas.ndim != 2:
        raise ValueError(f"thetas must be a (points, d) tensor, got shape {tuple(thetas.shape)}")
    chunk = resolve_chunk(vmap_chunk, thetas)
    outs = []
    starts = range(0, thetas.shape[0], chunk)
    for start in tqdm(starts, desc=desc, disable=not progress, leave=False):
        block = thetas[start:start + chunk]
        if chunk == 1:
            outs.append(torch.stack([fn(t) for t in block]))
        else:
            outs.append(torch.func.vmap(fn)(block))
    return torch.cat(outs)


@torch.no_grad()
def evaluate_affine(fn: Callable[[Tensor], Tensor], base: Tensor, coeffs: Tensor, directions: Tensor, *,
                    vmap_chunk: int | None = None, workers: Sequence[Callable[[Tensor], Tensor]] = (),
                    progress: bool = False, desc: str = "points") -> Tensor:
    """``fn(base + Σ_k coeffs[p, k] · directions[k])`` for every row p of ``coeffs``.

    Points are built one chunk at a time (memory ``chunk × d``); a zero row gives ``base`` exactly.
    ``workers``: copies of ``fn`` sharing no module (:meth:`EmpiricalLoss.replica`); with them the CPU
    loop runs ``1 + len(workers)`` threads at one intra-op thread each, bit-identical to the loop under
    ``torch.set_num_threads(1)`` (``tests/test_analysis_landscape.py``)."""
    from tqdm import tqdm

    if directions.ndim != 2 or directions.shape[1] != base.numel() or coeffs.ndim != 2 \
            or coeffs.shape[1] != directions.shape[0]:
        raise ValueError(f"directions must be (k, d) and coeffs (points, k); got {tuple(directions.shape)}, "
                         f"{tuple(coeffs.shape)} for d={base.numel()}")
    chunk = resolve_chunk(vmap_chunk, base)
    c = coeffs.to(device=base.device, dtype=base.dtype)
    if workers and chunk == 1 and base.device.type == "cpu" and c.shape[0] > 1:
        return _evaluate_affine_threaded([fn, *workers], base, c, directions, progress=progress, desc=desc)
    outs = []
    for start in tqdm(range(0, c.shape[0], chunk), desc=desc, disable=not progress, leave=False):
        block = base[None] + c[start:start + chunk] @ directions
        outs.append(torch.stack([fn(t) for t in block]) if chunk == 1 else torch.func.vmap(fn)(block))
    return torch.cat(outs)


def _evaluate_affine_threaded(fns: Sequence[Callable[[Tensor], Tensor]], base: Tensor, coeffs: Tensor,
                              directions: Tensor, *, progress: bool, desc: str) -> Tensor:
    """:func:`evaluate_affine`'s loop on ``len(fns)`` threads, thread w calling ``fns[w]``; results in order."""
    import itertools
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    slot = threading.local()
    numbers = itertools.count()  # next() on a count is atomic under the GIL

    def start_worker() -> None:
        slot.fn = fns[next(numbers)]

    def point(p: int) -> Tensor:
        with torch.no_grad():  # grad mode is per thread
            return slot.fn((base[None] + coeffs[p:p + 1] @ directions)[0])  # the loop's own arithmetic

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with ThreadPoolExecutor(max_workers=len(fns), initializer=start_worker) as pool:
            values = list(tqdm(pool.map(point, range(coeffs.shape[0])), total=coeffs.shape[0], desc=desc,
                               disable=not progress, leave=False))
    finally:
        torch.set_num_threads(previous)
    return torch.stack(values)
