"""Derived random generators: the one source of randomness of every fedlab run.

Every random choice in fedlab draws from its own generator, derived from the experiment seed and a
*purpose* tuple such as ``("batches", round, client)``. The derivation goes through SHA-256 of the
textual key, so it is independent of ``PYTHONHASHSEED``, dict order and the global RNG state, and a
resumed run re-creates exactly the generators an uninterrupted run would have used.

This module sits on the ground floor (models, data, engine and analysis import it; it imports nothing
of fedlab). Its three functions are on the numeric path: the run key hashes them
(:mod:`fedlab.store.code_digest`).
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *purpose: object) -> int:
    """A 63-bit seed derived from ``seed`` and a purpose tuple (stable across processes)."""
    key = repr((int(seed),) + tuple(str(p) for p in purpose)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1


def torch_generator(seed: int, *purpose: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` for one purpose."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *purpose))
    return gen


def numpy_generator(seed: int, *purpose: object) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` (PCG64) for one purpose."""
    return np.random.default_rng(derive_seed(seed, *purpose))
