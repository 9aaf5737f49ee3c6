"""Where a benchmark's numbers come from: the machine, described once for every benchmark, and the clock.

The device synchronisation and the usable cores are the engine's (:mod:`fedlab.engine.hardware`),
re-exported here for the benchmarks; :func:`paired_times` times two ways of doing one thing in turns.
"""
from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from fedlab.engine.hardware import sync, usable_cores

__all__ = ["load_average", "machine_description", "machine_info", "paired_times", "sync", "usable_cores"]

A = TypeVar("A")
B = TypeVar("B")


def machine_info(device: torch.device | None = None) -> dict[str, Any]:
    """Python, torch, platform, CPU count and threads, processor; the GPU's name when ``device`` is
    CUDA (or, with no device given, when CUDA is available)."""
    cuda = device.type == "cuda" if device is not None else torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }


def machine_description() -> str:
    """One line: processor, torch threads, GPU (or ``no GPU``), torch version."""
    info = machine_info()
    return f"{info['processor']}, {info['torch_threads']} torch threads, {info['gpu'] or 'no GPU'}, torch {info['torch']}"


def load_average() -> str:
    """``uptime``'s three load averages (the machine may be shared), or ``"n/a"``."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def paired_times(first: Callable[[], A], second: Callable[[], B], pairs: int, device: torch.device, *,
                 warmup: bool = True) -> tuple[list[tuple[float, float]], list[tuple[float, float]], A, B]:
    """(wall, CPU) seconds of each call of ``first`` and of ``second`` over ``pairs`` pairs, and their last outputs.

    With ``warmup``, one untimed call of each first. Pair i runs ``first`` before ``second`` when i is even,
    after it when i is odd, so a drift of the machine's speed lands on both; CPU seconds are the process's
    (``time.process_time``), steadier than wall seconds where other processes share the cores."""
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    fns: tuple[Callable[[], Any], Callable[[], Any]] = (first, second)
    out: list[Any] = [first(), second()] if warmup else [None, None]
    times: list[list[tuple[float, float]]] = [[], []]
    for i in range(pairs):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            sync(device)
            c0, t0 = time.process_time(), time.perf_counter()
            out[j] = fns[j]()
            sync(device)
            times[j].append((time.perf_counter() - t0, time.process_time() - c0))
    return times[0], times[1], out[0], out[1]
