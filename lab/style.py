"""Each method's label and colour for every notebook, figure and claims table of the lab (the house plot
style, :mod:`lab.tools.plots`, draws with them), read from its class in the registry (``label``, ``color``,
``order``: :class:`fedlab.algorithms.Algorithm`), where a method states them once.
"""
from __future__ import annotations

from fedlab.algorithms import algorithm_class, algorithm_classes, algorithm_names

METHOD_ORDER = tuple(cls.name for cls in algorithm_classes())
METHOD_LABELS = {cls.name: cls.label for cls in algorithm_classes()}
METHOD_COLORS = {cls.name: cls.color for cls in algorithm_classes()}
PALETTE = list(METHOD_COLORS.values())  # by position, also for lines that are not a method


def method_label(name: str) -> str:
    """The name a figure or table shows for ``name`` (the registry name itself if it has none)."""
    return algorithm_class(name).label if name in algorithm_names() else name


def method_color(name: str) -> str:
    """``name``'s colour in every figure (dark grey for a name that is not a method)."""
    return algorithm_class(name).color if name in algorithm_names() else "#333333"
