"""Collapse: a run that trains without diverging but never leaves chance level.

Rule (fedlab's, stated once here, and in the run key): a run that reached its last round is
**collapsed** when every evaluation in the last quarter of its rounds (rounds r > T − ⌈T/4⌉; at least the last evaluation)
has accuracy ≤ 1/C + ``CHANCE_MARGIN`` with C classes. On Fashion-MNIST (C = 10) that is ≤ 0.15.
Such a model has learned close to nothing — typically an almost input-independent network, as a too
large SAM radius produces on the GroupNorm CNN — so its accuracy is not a measurement of the method
at its best and must never be averaged silently into the method's mean. Diverged runs (non-finite
loss) stay ``diverged``; the rule only reclassifies runs that would otherwise be ``finished``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

CHANCE_MARGIN = 0.05
"""How far above chance (1/C) the last quarter may stay and still count as collapsed."""


def chance_threshold(n_classes: int, margin: float = CHANCE_MARGIN) -> float:
    """1/C + margin: the highest accuracy a collapsed run shows in its last quarter."""
    if n_classes < 2:
        raise ValueError(f"n_classes must be ≥ 2, got {n_classes}")
    return 1.0 / n_classes + margin


def is_collapsed(rounds: Sequence[int], accuracies: Sequence[float], total_rounds: int, n_classes: int,
                 margin: float = CHANCE_MARGIN) -> bool:
    """Whether the evaluations ``(round, accuracy)`` of a ``total_rounds``-round run meet the rule above.

    Rounds without evaluation may be passed as NaN accuracies; they are ignored. No evaluation at all
    is not a collapse (there is nothing to judge).
    """
    evaluated = [(int(r), float(a)) for r, a in zip(rounds, accuracies) if not math.isnan(float(a))]
    if not evaluated:
        return False
    start = total_rounds - math.ceil(total_rounds / 4)
    last_quarter = [a for r, a in evaluated if r > start] or [evaluated[-1][1]]
    return all(a <= chance_threshold(n_classes, margin) for a in last_quarter)
