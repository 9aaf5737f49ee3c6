"""Name → algorithm class registry. Modules register their class with ``@register``."""
from __future__ import annotations

from typing import Any

from fedlab.algorithms.base import Algorithm

_REGISTRY: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"algorithm name '{cls.name}' registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def algorithm_names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def algorithm_classes() -> tuple[type[Algorithm], ...]:
    """Every registered class in the order figures and tables show them (their ``order``, then name)."""
    return tuple(sorted(_REGISTRY.values(), key=lambda cls: (cls.order, cls.name)))


def algorithm_class(name: str) -> type[Algorithm]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown algorithm '{name}'; allowed: {', '.join(algorithm_names())}"
        ) from None


def get_algorithm(name: str, params: dict[str, Any] | None = None, **overrides: Any) -> Algorithm:
    """Instantiate a registered algorithm with hyperparameter overrides (and an optional ``preset``)."""
    return algorithm_class(name)({**(params or {}), **overrides})
