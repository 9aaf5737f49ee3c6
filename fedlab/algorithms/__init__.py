"""Federated algorithms, one module per method, registered by name.

Every public module in this package is imported (in sorted order) so that its ``@register``
decorator runs; ``get_algorithm("fedsam", rho=0.05)`` then builds an instance.
"""
from __future__ import annotations

import importlib
import pkgutil

from fedlab.algorithms._registry import algorithm_class, algorithm_classes, algorithm_names, get_algorithm, register
from fedlab.algorithms.base import Algorithm, HParams, RoundInfo, State, StepInfo, clip_by_norm, descend, normalized
from fedlab.algorithms.sam import sam_gradient, sam_perturbation

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _mod.startswith("_") and _mod not in {"base", "sam"}:
        importlib.import_module(f"{__name__}.{_mod}")

ALGORITHMS: tuple[str, ...] = algorithm_names()

__all__ = [
    "ALGORITHMS", "Algorithm", "HParams", "RoundInfo", "State", "StepInfo", "algorithm_class",
    "algorithm_classes", "algorithm_names", "clip_by_norm", "descend", "get_algorithm", "normalized", "register",
    "sam_gradient", "sam_perturbation",
]
