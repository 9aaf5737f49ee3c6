"""What the engine, the sweeps and the benchmarks ask of the machine, in one place.

``sync`` waits for a device's queued kernels (CUDA runs asynchronously: a clock read without it
times the launch, not the work); ``usable_cores`` is the CPU cores this process may run on (its
affinity mask, which a container or ``taskset`` may make smaller than ``os.cpu_count()``).
"""
from __future__ import annotations

import os

import torch

__all__ = ["sync", "usable_cores"]


def sync(device: torch.device) -> None:
    """Block until ``device`` has finished its queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
