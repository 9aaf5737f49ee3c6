"""What the speed benchmarks run on and measure against: random data, model FLOPs, a matmul's rate, glibc.

:func:`random_dataset` stands in for a dataset where only shapes matter (timing); :func:`model_flops` and
:func:`matmul_flops_per_second` give the FLOPs of a step and the rate it is compared with; :func:`tune_malloc`
keeps glibc from mapping every large tensor afresh. Used by :mod:`lab.bench.speed`, :mod:`~lab.bench.step`,
:mod:`~lab.bench.flsim` and :mod:`~lab.bench.gpu`.
"""
from __future__ import annotations

import platform
import statistics
import time

import torch

from lab.bench.machine import sync

__all__ = ["matmul_flops_per_second", "model_flops", "random_dataset", "tune_malloc"]

def random_dataset(input_shape: tuple[int, ...], n_train: int, n_test: int = 100, n_classes: int = 10,
                   *, device: str = "cpu", seed: int = 0):
    """A fedlab ``Dataset`` of standard-normal images and uniform labels (for timing only)."""
    from fedlab.data import Dataset
    from fedlab import torch_generator

    gen = torch_generator(seed, "bench", "random-data")
    channels = input_shape[0]
    return Dataset(
        name="random" + "x".join(str(s) for s in input_shape),
        x_train=torch.randn((n_train, *input_shape), generator=gen).to(device),
        y_train=torch.randint(0, n_classes, (n_train,), generator=gen).to(device),
        x_test=torch.randn((n_test, *input_shape), generator=gen).to(device),
        y_test=torch.randint(0, n_classes, (n_test,), generator=gen).to(device),
        n_classes=n_classes, augment=None, mean=(0.0,) * channels, std=(1.0,) * channels,
    )


def matmul_flops_per_second(device: str | torch.device = "cpu", n: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of a plain n×n float32 matmul (2n³ FLOPs), median of ``repeats`` after a warm-up."""
    device = torch.device(device)
    n = n or (8192 if device.type == "cuda" else 2048)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    a @ b
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2.0 * n**3 / statistics.median(times)


def model_flops(model_name: str, input_shape: tuple[int, ...], batch_size: int, n_classes: int = 10,
                device: str | torch.device = "cpu") -> int:
    """FLOPs of one forward + backward of a batch (``FlopCounterMode``: matmuls and convolutions)."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from fedlab.models import build_model

    module = build_model(model_name, input_shape, n_classes, seed=0).to(device)
    x = torch.randn((batch_size, *input_shape), device=device)
    y = torch.randint(0, n_classes, (batch_size,), device=device)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(module(x), y).backward()
    return int(counter.get_total_flops())


def tune_malloc() -> bool:
    """Keep freed memory in glibc's heap instead of returning it to the OS (Linux/glibc only).

    glibc serves every allocation above 32 MiB (the cap of its mmap threshold) with a fresh ``mmap``
    and unmaps it on free, so each new d-sized tensor of a large model (45 MB for ResNet-18) is
    page-faulted in again: fedlab's flat-vector updates allocate several per step. ``M_MMAP_MAX = 0``
    and a huge ``M_TRIM_THRESHOLD`` (``mallopt``) stop that for the rest of the process; the same as
    running with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296``. Returns whether it applied.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if platform.system() != "Linux" or not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        m_trim_threshold, m_mmap_max = -1, -4
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))
    except (OSError, AttributeError):
        return False
