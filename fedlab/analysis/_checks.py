"""The argument checks the analysis tools share: each raises ``ValueError`` naming the argument."""
from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from torch import Tensor


def check_count(name: str, value: Any, least: int = 1, *, optional: bool = False) -> None:
    """``value`` must be an integer ≥ ``least`` (bools are not integers), or None when ``optional``."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        allowed = f"None or an integer >= {least}" if optional else f"an integer >= {least}"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def check_rho(rho: Any) -> float:
    """ρ as a float, a finite number > 0."""
    try:
        value = float(rho)
    except (TypeError, ValueError):
        raise ValueError(f"rho must be a number > 0, got {rho!r}") from None
    if not (value > 0) or value == float("inf"):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    return value


def check_theta(theta: Any, name: str = "theta") -> None:
    """A non-empty 1-D floating-point tensor."""
    if not isinstance(theta, Tensor) or theta.ndim != 1 or theta.numel() == 0:
        shape = tuple(theta.shape) if isinstance(theta, Tensor) else type(theta).__name__
        raise ValueError(f"{name} must be a non-empty 1-D tensor, got {shape}")
    if not theta.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {theta.dtype}")


def check_like(theta: Tensor, v: Any, name: str) -> None:
    """A tensor of θ's shape (a direction, a probe vector, a second point)."""
    if not isinstance(v, Tensor) or v.shape != theta.shape:
        shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"{name} must have theta's shape {tuple(theta.shape)}, got {shape}")


def check_clients(clients: Any, name: str = "clients") -> None:
    """A non-empty list of (x, y) tensor pairs, each with ≥ 1 sample and one label per input."""
    if not isinstance(clients, Sequence) or len(clients) == 0:
        raise ValueError(f"{name} must be a non-empty list of (x, y) tensor pairs")
    for i, pair in enumerate(clients):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"{name}[{i}] must be an (x, y) pair of tensors")
        x, y = pair
        if not (isinstance(x, Tensor) and isinstance(y, Tensor)):
            raise ValueError(f"{name}[{i}] must hold tensors, got {type(x).__name__}, {type(y).__name__}")
        if x.shape[0] == 0:
            raise ValueError(f"{name}[{i}] is empty (no samples)")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise ValueError(f"{name}[{i}] has {x.shape[0]} inputs but labels of shape {tuple(y.shape)}")
