"""Where a benchmark's numbers come from: the machine, described once for every benchmark.

The device synchronisation and the usable cores are the engine's (:mod:`fedlab.engine.hardware`),
re-exported here for the benchmarks.
"""
from __future__ import annotations

import os
import platform
from typing import Any

import torch

from fedlab.engine.hardware import sync, usable_cores

__all__ = ["load_average", "machine_description", "machine_info", "sync", "usable_cores"]


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
