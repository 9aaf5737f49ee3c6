"""What decides whether float32 results can be compared bit for bit: the arithmetic's hardware path.

PyTorch picks its CPU kernels at run time (ATen's vectorised code by instruction set, oneDNN's
convolutions and MKL's GEMMs by their own dispatch), so the same program gives other float32 bits on
another CPU, or on the same CPU with ``ATEN_CPU_CAPABILITY``/``ONEDNN_MAX_CPU_ISA``/
``MKL_ENABLE_INSTRUCTIONS`` set. Tests that pin exact bits key them by :func:`fingerprint` and fall
back to a tolerance elsewhere; tests of bf16 accuracy ask :func:`has_native_bf16`.
"""
from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import torch

KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE")


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, instruction-set flags) of the first CPU; empty where /proc/cpuinfo is absent."""
    model, flags = "", set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor(), flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
        if model and flags:
            break
    return model, flags


def has_native_bf16() -> bool:
    """True where the CPU computes bf16 dot products in hardware (AVX512-BF16 or AMX-BF16)."""
    return bool({"avx512_bf16", "amx_bf16"} & _cpuinfo()[1])


def fingerprint() -> str:
    """A short, stable name for this process's float32 arithmetic path.

    It covers the torch build, ATen's chosen capability, the CPU's model and instruction flags and the
    environment variables that force another kernel path. Two processes with the same fingerprint
    run the same kernels; a different fingerprint may or may not (hence the tolerance fallback).
    """
    import os

    model, flags = _cpuinfo()
    forced = ",".join(f"{k}={os.environ[k]}" for k in KERNEL_ENV if os.environ.get(k))
    parts = [torch.__version__, torch.backends.cpu.get_cpu_capability(), platform.machine(), model,
             " ".join(sorted(flags)), forced]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def describe() -> str:
    """One line for skip reasons and reports: what :func:`fingerprint` summarises."""
    import os

    model, _ = _cpuinfo()
    forced = " ".join(f"{k}={os.environ[k]}" for k in KERNEL_ENV if os.environ.get(k))
    return (f"{model or platform.machine()}, torch {torch.__version__}, ATen {torch.backends.cpu.get_cpu_capability()}"
            + (f", {forced}" if forced else "") + f", native bf16: {'yes' if has_native_bf16() else 'no'}")
