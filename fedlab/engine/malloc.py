"""Fixed glibc allocator thresholds, so that evaluation does not page-fault its buffers in again.

glibc's mmap and trim thresholds move with the allocation history, so one computation can land in
either of two regimes: activations served from the heap and reused, or mapped, zero-filled by page
faults and returned, batch after batch (``python -m lab bench flsim``: 0 or 732,583 minor faults per
evaluation of LeNet-5 at batch 128, ~1.5 s of kernel time). :func:`stable_malloc` fixes both
(``mallopt``: :data:`MMAP_THRESHOLD`, :data:`TRIM_THRESHOLD`), which also stops the adjustment, at
the cost of keeping up to 512 MiB of freed memory. Linux/glibc only; ``FEDLAB_MALLOC=default``
disables it. Opt-in: a library must not change its host process's allocator, so only the command
lines (``python -m fedlab``, ``python -m lab``) call it. Timing only, never a number."""
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
