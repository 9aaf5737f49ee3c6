"""Fixed glibc allocator thresholds, so that evaluation does not page-fault its buffers in again.

glibc ``malloc`` serves a request above its *mmap threshold* with a fresh ``mmap`` (unmapped on
``free``) and returns free memory at the top of the heap to the OS once it exceeds the *trim
threshold*. Both thresholds start at 128 KiB / 256 KiB and move with the allocation history: when
a freed ``mmap`` chunk is larger than the threshold, the threshold rises to its size (capped at
32 MiB) and the trim threshold to twice that. So the same computation can land in either of two
regimes within one process: evaluation batches whose activations (25 MB per tensor for LeNet-5 on
3×32×32 at batch 128) are served from the heap and reused, or are mapped, zero-filled by page
faults, and returned, batch after batch. Measured with ``python -m lab bench flsim`` on the
5,000-image union: 0 or 732,583 minor page faults per evaluation at batch 128 depending on what the
process had done before (FedAvg vs FedSAM rounds), ~1.5 s of kernel time per evaluation in the
faulting regime; with the thresholds fixed, 0–8 faults per evaluation at batches 64, 128 (the CPU
default) and 256. A batch whose working set exceeds :data:`TRIM_THRESHOLD` (LeNet-5 at batch 1000:
~600 MB) is still returned and faulted in again each time: the price of bounding what is kept.

:func:`stable_malloc` fixes them (``mallopt``): requests up to :data:`MMAP_THRESHOLD` come from the
heap and up to :data:`TRIM_THRESHOLD` of free memory is kept at its top. Setting the mmap threshold
explicitly also switches glibc's dynamic adjustment off, so the regime no longer depends on
history. The cost is that a process keeps up to 512 MiB of freed memory. Linux/glibc only;
elsewhere, or with ``FEDLAB_MALLOC=default`` in the environment, nothing is changed.

Opt-in: building or running a simulation never calls it (a library must not change the allocator of
the process it is imported into). ``python -m fedlab ...`` calls it at start, and so does the
repository's lab (``python -m lab ...``, its notebooks and ``make run``); call it yourself in a
program that evaluates on the CPU and wants the same timings. It changes timing only, never a number.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

MMAP_THRESHOLD = 256 * 2**20
"""Requests up to this size come from the heap (glibc's default: dynamic, at most 32 MiB)."""
TRIM_THRESHOLD = 512 * 2**20
"""Free memory kept at the top of the heap before it is returned to the OS."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
_state: dict[str, bool] = {}


def stable_malloc() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once); returns whether they are fixed."""
    if "applied" in _state:
        return _state["applied"]
    applied = False
    name = ctypes.util.find_library("c")
    if platform.system() == "Linux" and name and os.environ.get("FEDLAB_MALLOC", "") != "default":
        try:
            libc = ctypes.CDLL(name)
            applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
                bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        except (OSError, AttributeError):
            applied = False
    _state["applied"] = applied
    return applied
