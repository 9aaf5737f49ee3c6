"""The divergence rule, beside the collapse rule (:mod:`lab.evidence.collapse`), at the level of the evidence.

The engine labels a run ``diverged`` only when its loss becomes non-finite, and ``collapsed`` when its last quarter
stays at chance. A run can do neither and still have left the method behind: FedGF in the rerun's regime trains
at a loss of a few hundred from round 2 (its round-1 loss is about 0.3) and ends near chance, labelled
``finished``. Such a run measures a blow-up, not the method, so a claim must not count it as the method failing.

Rule (issue 41; the failure map's ``validity.diverged`` in ``lab/study/failure_map.yaml`` says the same): a run is
**diverged** when

1. its status is ``diverged``; or
2. its sampled clients' mean training loss (the ``train_loss`` column) is non-finite in some round, or exceeds
   :data:`DIVERGENCE` ``loss_factor`` (10) × its round-1 value in some round; or
3. its final metric (:func:`lab.evidence.protocol.final_metric`) is at most ``chance_factor`` (1.5) × chance,
   1/C for C classes (15 % on 10 classes), or not finite.

The first branch that applies is the reason given. A run without a ``train_loss`` column is not judged on branch 2,
one whose summary does not name its number of classes (``n_classes``) not on branch 3 (every committed record
names both).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DIVERGENCE", "diverged", "divergence_reason", "run_divergence"]

DIVERGENCE: dict[str, float] = {"loss_factor": 10.0, "chance_factor": 1.5}
"""The rule's two thresholds: a training loss above ``loss_factor`` × its round-1 value, a final accuracy at most
``chance_factor`` × chance."""


def divergence_reason(status: str, rounds: Sequence[int], train_loss: Sequence[float] | None, final: float,
                      n_classes: int | None, rule: Mapping[str, float] | None = None) -> str | None:
    """Why a run is diverged by the rule of the module docstring, or None when it is not.

    ``rounds`` and ``train_loss`` are the run's per-round training loss (None: no such column), ``final`` its final
    metric (a fraction), ``n_classes`` its number of classes (None: the chance branch is not judged)."""
    r = dict(DIVERGENCE if rule is None else rule)
    if status == "diverged":
        return "status diverged"
    if train_loss is not None:
        losses = sorted((int(t), float(v)) for t, v in zip(rounds, train_loss) if v is not None)
        bad = next((t for t, v in losses if not math.isfinite(v)), None)
        if bad is not None:
            return f"training loss not finite in round {bad}"
        if losses:
            first_round, first = losses[0]
            cap = r["loss_factor"] * first
            above = next(((t, v) for t, v in losses if v > cap), None)
            if above is not None:
                return (f"training loss {above[1]:.3g} in round {above[0]}, above {r['loss_factor']:g} × its "
                        f"round-{first_round} value {first:.3g}")
    if not math.isfinite(final):
        return "final metric not finite"
    if n_classes is not None:
        floor = r["chance_factor"] / int(n_classes)
        if final <= floor:
            return f"final metric {100 * final:.1f} % ≤ {r['chance_factor']:g} × chance ({100 * floor:.3g} %)"
    return None


def run_divergence(result: Any, rule: Mapping[str, float] | None = None) -> str | None:
    """:func:`divergence_reason` of a :class:`~fedlab.results.RunResult` (or a committed record loaded as one): its
    status, ``train_loss`` by round, :func:`~lab.evidence.protocol.final_metric` and ``summary['n_classes']``."""
    from lab.evidence.protocol import final_metric

    metrics = result.metrics
    rounds: list[int] = []
    loss: list[float] | None = None
    if "train_loss" in metrics.columns:  # every round trains: a missing (NaN) loss is a non-finite one
        rows = metrics[["round", "train_loss"]].dropna(subset=["round"])
        rounds, loss = list(rows["round"].astype(int)), list(rows["train_loss"].astype(float))
    n_classes = (result.summary or {}).get("n_classes")
    return divergence_reason(str(result.status), rounds, loss, final_metric(result).value,
                             None if n_classes is None else int(n_classes), rule)


def diverged(result: Any, rule: Mapping[str, float] | None = None) -> bool:
    """Whether ``result`` is diverged by the rule (:func:`run_divergence` gives the reason)."""
    return run_divergence(result, rule) is not None
