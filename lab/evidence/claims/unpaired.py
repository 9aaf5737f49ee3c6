"""A finding beside the claims: how each claim reads *unpaired*, from two separate intervals over seeds.

This is not a reading of the claims (that is :mod:`lab.evidence.claims.reading`, by seed pairs); it answers one
question about that reading: what pairing decides that the overlap of two intervals would leave open. Notebook 08
states it for FedVSSAM's ablations, and the claims table keeps its verdict in a column (``unpaired_verdict``). For
each arm the mean ± 95 % interval over its seeds (:func:`fedlab.uncertainty.mean_interval`), compared:

* ``>`` / ``<`` — **holds** when the intervals are disjoint in the claimed order, **fails** when they are disjoint
  the other way, **inconclusive** when they overlap;
* ``>=`` / ``<=`` — holds unless contradicted: holds when the means are in the claimed order (or the intervals are
  disjoint in it), fails when disjoint the other way, inconclusive otherwise;
* ``approx`` (tolerance ``tol``) — an equivalence test on Welch's 95 % interval of the difference of the means
  (:func:`~fedlab.uncertainty.difference_interval`): holds when the whole interval lies within [−tol, tol],
  fails when it lies wholly outside, inconclusive otherwise;
* ``much_greater`` (``margin``) — holds when left − margin is above right with disjoint intervals, fails when
  left.mean − right.mean < margin and the shifted intervals are disjoint, else inconclusive;
* ``abs_le`` (``tol``, one arm) — holds when the whole interval of |left| is ≤ tol, fails when it is wholly above,
  inconclusive otherwise.

An arm with fewer than :data:`MIN_SEEDS` finished seeds is inconclusive; against a list of arms the claim holds only
if it holds against each (fails if any fails, otherwise the weakest verdict wins).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedlab.uncertainty import Estimate, difference_interval, mean_interval
from lab.evidence.claims.evidence import Evidence, cost_check, evidence_of, finished_runs, run_value, table_rows
from lab.evidence.claims.spec import NO_DATA, OPS, Claim, figures_root

__all__ = ["MIN_SEEDS", "UnpairedVerdict", "compare", "evaluate_unpaired", "unpaired_verdict"]

MIN_SEEDS = 2
_ORDER = {"holds": 0, "inconclusive": 1, "not run": 2, NO_DATA: 2, "fails": 3}


@dataclass
class UnpairedVerdict:
    """A claim read unpaired: its verdict, each arm's mean ± interval over seeds, and a note."""

    claim: Claim
    verdict: str
    left: Estimate | None = None
    right: list[Estimate | None] = field(default_factory=list)
    note: str = ""


def _arm(evidence: Evidence, claim: Claim, arm: Mapping[str, Any]) -> tuple[Estimate | None, str]:
    """The arm's mean ± interval over its values, and a note."""
    if evidence.table is not None:
        rows, note = table_rows(evidence.table, claim, arm)
        values = rows[claim.metric["column"]].dropna()
        return (mean_interval(values) if len(values) else None), note
    ok, note = finished_runs(evidence.runs or [], claim, arm)
    return (mean_interval(run_value(r, claim.metric) for r in ok) if ok else None), note


def compare(left: Estimate, right: Estimate | None, op: str, *, tol: float = 0.0, margin: float = 0.0) -> str:
    """The verdict of ``left op right`` from two estimates (see the module docstring)."""
    def bounds(e: Estimate, shift: float = 0.0) -> tuple[float, float]:
        return (e.low - shift, e.high - shift) if math.isfinite(e.half_width) else (e.mean - shift, e.mean - shift)

    if op == "abs_le":
        lo, hi = bounds(left)
        worst, best = max(abs(lo), abs(hi)), (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)))
        return "holds" if worst <= tol else "fails" if best > tol else "inconclusive"
    assert right is not None
    if op in ("<", "<="):  # mirror: a < b  ⇔  −a > −b
        left = Estimate(-left.mean, left.half_width, left.values, left.level)
        right = Estimate(-right.mean, right.half_width, right.values, right.level)
        op = op.replace("<", ">")
    shift = margin if op == "much_greater" else 0.0
    llo, lhi = bounds(left, shift)
    rlo, rhi = bounds(right)
    above, below = llo > rhi, lhi < rlo
    if op in (">", "much_greater"):
        return "holds" if above else "fails" if below else "inconclusive"
    if op == ">=":
        return "fails" if below else "holds" if (above or left.mean >= right.mean) else "inconclusive"
    if op == "approx":
        lo, hi = difference_interval(left, right)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return "inconclusive"
        return "holds" if -tol <= lo and hi <= tol else "fails" if (lo > tol or hi < -tol) else "inconclusive"
    raise ValueError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")


def _few(est: Estimate | None) -> bool:
    return est is not None and est.n < MIN_SEEDS


def unpaired_verdict(claim: Claim, evidence: Evidence | str | None) -> UnpairedVerdict:
    """``claim`` read unpaired from ``evidence`` (:func:`~lab.evidence.claims.evidence.evidence_of`, or what a paired
    verdict was read from: :attr:`~lab.evidence.claims.reading.PairedVerdict.evidence`); not run without any."""
    if not isinstance(evidence, Evidence):
        return UnpairedVerdict(claim, "not run", note=evidence or "")
    left, note_l = _arm(evidence, claim, claim.left)
    rights, notes = [], [note_l] if note_l else []
    for a in claim.right:
        est, note = _arm(evidence, claim, a)
        rights.append(est)
        if note:
            notes.append(note)
    if left is None or (claim.op != "abs_le" and any(r is None for r in rights)):
        verdict = "inconclusive" if notes else NO_DATA
        return UnpairedVerdict(claim, verdict, left, rights, "; ".join(notes + ([f"{NO_DATA}: no committed record of an arm"
                                                                         if verdict == NO_DATA else
                                                                         "no finished run of an arm"])))
    if _few(left) or any(_few(r) for r in rights):
        notes.append(f"fewer than {MIN_SEEDS} seeds")
        return UnpairedVerdict(claim, "inconclusive", left, rights, "; ".join(notes))
    verdicts = [compare(left, r, claim.op, tol=claim.tol, margin=claim.margin) for r in (rights or [None])]
    if claim.cost:
        ok, note = cost_check(claim)
        notes.append(note)
        if not ok:
            verdicts.append("fails")
    verdict = "fails" if "fails" in verdicts else max(verdicts, key=_ORDER.__getitem__)
    return UnpairedVerdict(claim, verdict, left, rights, "; ".join(notes))


def evaluate_unpaired(claim: Claim, figures_dir: Path | None = None) -> UnpairedVerdict:
    """``claim`` read unpaired from the committed evidence in ``figures_dir`` (default ``figures/``)."""
    return unpaired_verdict(claim, evidence_of(claim, figures_root() if figures_dir is None else Path(figures_dir)))
