"""How the study pages write their numbers: an estimate or an en dash, a paired difference, whether Holm's rule
decides an effect, and how long a study's workers were busy (read by the map's pages, its stage 2's and the regime's)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["busy_seconds", "decided", "number", "paired_text"]


def busy_seconds(rows: Sequence[Mapping[str, Any]]) -> float:
    """Wall time during which at least one of the runs trained: the length of the union of the intervals
    [finished − seconds, finished]. What the study took on its workers, the gaps between sessions left out."""
    import datetime

    spans = sorted((end - r["seconds"], end) for r in rows
                   for end in [datetime.datetime.strptime(r["finished"], "%Y-%m-%dT%H:%M:%SZ").timestamp()])
    total, reach = 0.0, -math.inf
    for start, end in spans:
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def decided(effect: Any, alpha: float = 0.05) -> bool:
    return effect.n > 0 and effect.p_holm < alpha


def number(value: float, spec: str = ".2f") -> str:
    """``value`` as a decision page writes it, or an en dash where there is none (NaN: a missing or diverged run)."""
    return format(value, spec) if math.isfinite(value) else "–"


def paired_text(diff: Any) -> str:
    """A paired difference (:class:`lab.evidence.paired.PairedDifference`) as the regime's pages write it, or an
    en dash where the runs to pair are missing."""
    return "–" if diff is None else diff.format(digits=2)
