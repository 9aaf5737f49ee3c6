"""The failure map's analysis: its pre-registered estimands and decisions, computed from committed records.

For a split s, local work K and radius ρ, over the seeds j (each its own partition; seed j's runs pair
across arms and cells), with final(·) the protocol's final metric (:func:`lab.evidence.protocol.final_metric`):

    G_j(s,K,ρ) = final(FedSAM_ρ | s,K,j) − final(FedAvg | s,K,j)          SAM's effect in the cell
    I_j(s,K,ρ) = G_j(s,K,ρ) − G_j(iid,K,ρ)                                 the heterogeneity interaction
    H_j(s,K)   = final(FedAvg | iid,K,j) − final(FedAvg | s,K,j)          what the split costs FedAvg

each reported as mean ± the 95 % paired Student-t half-width (n − 1 degrees of freedom) with the two-sided
one-sample t-test p-value. The Gs form one family and the Is another; Holm's step-down
(:func:`lab.evidence.paired.holm`) adjusts each family at family-wise error 0.05. "Local SAM fails" in a cell
at ρ when G < 0 and I < 0 are both decided and G is at most minus the smallest effect of interest
(the study file's ``decision`` block says this in words; this module is its only implementation).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fedlab.uncertainty import Interval
from lab.evidence.map_table import FAILS, HELPS, NOT_SHOWN
from lab.study.spec import Study

__all__ = ["BELOW_DRIFT", "Effect", "FixRow", "MapCell", "NOT_MORE", "RECOVERS", "analyse", "estimate_of", "fails_anywhere",
           "fix_verdict", "map_verdict", "stage2_rows"]

T = TypeVar("T")

Values = Mapping[tuple[str, str, int], float]
"""(cell name, arm name, seed) → final metric in points."""


@dataclass(frozen=True)
class Effect(Interval):
    """Mean of per-seed values with its paired t-interval (``low``/``high`` from :class:`Interval`) and
    two-sided t-test p, Holm-adjusted inside its family once :func:`analyse` has run."""

    values: tuple[float, ...]
    mean: float
    half_width: float
    p: float
    p_holm: float = math.nan

    @property
    def n(self) -> int:
        return len(self.values)

    def text(self) -> str:
        if self.n == 0:
            return "no data"
        hw = f" ± {self.half_width:.2f}" if math.isfinite(self.half_width) else ""
        return f"{self.mean:+.2f}{hw} (n={self.n})"


def estimate_of(values: Sequence[float], level: float = 0.95) -> Effect:
    """Mean ± t_{(1+level)/2, n−1} · s/√n and the two-sided t-test p of mean = 0, through the one paired reading
    of the claims (:func:`lab.evidence.paired.paired_difference`, :func:`~lab.evidence.paired.t_test_p`); NaN
    below 2 values."""
    from lab.evidence.paired import paired_difference, t_test_p

    if not values:
        return Effect((), math.nan, math.nan, math.nan)
    diff = paired_difference(dict(enumerate(values)), dict.fromkeys(range(len(values)), 0.0), level=level,
                             min_seeds_for_p=len(values) + 1)  # the sign-flip p is not this reading's
    return Effect(tuple(float(v) for v in values), diff.mean, diff.half_width, t_test_p(diff))


@dataclass(frozen=True)
class MapCell:
    """One (split, K, ρ) of the map: SAM's effect G, the interaction I, FedAvg's heterogeneity cost H,
    the arms not tested (diverged or missing) and the pre-registered verdict."""

    split: str
    local_steps: int
    arm: str
    gap: Effect
    interaction: Effect
    cost: Effect
    untested: tuple[str, ...]
    verdict: str = ""


def _paired(values: Values, a: tuple[str, str], b: tuple[str, str], seeds: Sequence[int]) -> list[float]:
    return [values[(*a, s)] - values[(*b, s)] for s in seeds if (*a, s) in values and (*b, s) in values]


def map_verdict(cell: MapCell, smallest: float, alpha: float = 0.05) -> str:
    """The pre-registered outcome of one cell (``fails here``, ``hurts everywhere``, or not failing) or ``not
    tested`` with the reason. The study file's ``not_failing`` is "any other decided or undecided outcome"; it is
    written in three words so that a second reader sees which: SAM's gain decided (``does not fail: SAM helps
    here``), a loss decided but smaller than the smallest effect of interest, or nothing decided (``failure not
    shown``) — a G of −0.4 ± 0.3 undecided after Holm is not "does not fail"."""
    if cell.untested:
        return f"not tested ({'; '.join(cell.untested)})"
    g, i = cell.gap, cell.interaction
    g_decided = g.p_holm < alpha
    i_below = i.p_holm < alpha and i.mean < 0
    if g_decided and g.mean < 0 and g.mean <= -smallest:
        return FAILS if i_below else "SAM hurts here, as much in the IID federation"
    if g_decided:
        return HELPS if g.mean > 0 else "does not fail: SAM loses less than the smallest effect"
    return NOT_SHOWN


def analyse(study: Study, values: Values, *, untested: Mapping[tuple[str, str], str] | None = None,
            holm: Callable[[Sequence[float]], list[float]] | None = None) -> list[MapCell]:
    """Every non-reference (split, K, SAM arm) of ``study`` from the final metrics ``values``; ``untested``
    maps (cell name, arm) to why that arm is not read there (a diverged or missing run). Holm's adjustment
    runs over the whole declared family, an untested cell counted with p = 1."""
    if holm is None:
        from lab.evidence.paired import holm as holm_adjust

        holm = holm_adjust
    untested = dict(untested or {})
    seeds, base, ref = list(study.seeds), study.baseline_arm, study.reference_split
    sam_arms = [a.name for a in study.arms if a.name != base]
    smallest = float(study.raw["decision"]["smallest_effect_of_interest"])
    cells = []
    for k in study.local_steps:
        ref_cell = f"{ref}-K{k}"
        for split in study.splits:
            if split == ref:
                continue
            cell = f"{split}-K{k}"
            cost = estimate_of(_paired(values, (ref_cell, base), (cell, base), seeds))
            for arm in sam_arms:
                why = tuple(f"{c} {a}: {untested[(c, a)]}" for c in (cell, ref_cell) for a in (arm, base)
                            if (c, a) in untested)
                gap_cell = _paired(values, (cell, arm), (cell, base), seeds)
                gap_ref = {s: values[(ref_cell, arm, s)] - values[(ref_cell, base, s)] for s in seeds
                           if (ref_cell, arm, s) in values and (ref_cell, base, s) in values}
                inter = [values[(cell, arm, s)] - values[(cell, base, s)] - gap_ref[s] for s in seeds
                         if s in gap_ref and (cell, arm, s) in values and (cell, base, s) in values]
                if len(gap_cell) < len(seeds) or len(inter) < len(seeds):
                    why += (f"{min(len(gap_cell), len(inter))}/{len(seeds)} seeds recorded",)
                cells.append(MapCell(split, k, arm, estimate_of(gap_cell), estimate_of(inter), cost, why))
    # One Holm family each, of the size the file declares: a cell not tested yet enters with p = 1, so a verdict
    # read while the map is incomplete is never looser than the one the whole family will allow.
    for field in ("gap", "interaction"):
        cells = _holm_family(cells, field, holm)
    return [dataclasses.replace(c, verdict=map_verdict(c, smallest)) for c in cells]


def _holm_family(rows: list[T], field: str, holm: Callable[[Sequence[float]], list[float]]) -> list[T]:
    """``rows`` with the :class:`Effect` in ``field`` Holm-adjusted over all of them: a row not tested (``untested``)
    enters with p = 1, so a family read while incomplete is never looser than the whole one, and keeps its NaN."""
    whole = holm([getattr(r, field).p if not r.untested else 1.0 for r in rows])
    out = []
    for r, p in zip(rows, whole):
        e = getattr(r, field)
        out.append(r if r.untested else dataclasses.replace(r, **{field: Effect(e.values, e.mean, e.half_width, e.p, p)}))
    return out


def failing(cells: Sequence[MapCell]) -> list[MapCell]:
    """The cells whose pre-registered verdict is that local SAM fails there."""
    return [c for c in cells if c.verdict == FAILS]


def not_shown(cells: Sequence[MapCell]) -> list[MapCell]:
    """The tested cells where FedSAM − FedAvg is not decided either way (so neither failing nor not failing)."""
    return [c for c in cells if c.verdict == NOT_SHOWN]


def fails_anywhere(cells: Sequence[MapCell]) -> bool:
    return bool(failing(cells))


RECOVERS = "recovers more than drift correction"
BELOW_DRIFT = "below the drift correction"
NOT_MORE = "not more than drift correction (not decided)"


@dataclass(frozen=True)
class FixRow:
    """One fix F of stage 2 in one cell where local SAM fails: F − FedAvg, F − the better drift reference (by
    mean, in that cell), both Holm-adjusted across the fixes of the cell, F − FedSAM at the failing radius
    (descriptive), and the pre-registered reading."""

    cell: str
    fix: str
    reference: str
    over_fedavg: Effect
    over_reference: Effect
    over_sam: Effect
    untested: tuple[str, ...]
    verdict: str = ""


def stage2_rows(study: Study, values: Values, failing_cells: Sequence[MapCell], *,
                untested: Mapping[tuple[str, str], str] | None = None,
                holm: Callable[[Sequence[float]], list[float]] | None = None) -> list[FixRow]:
    """The stage-2 table of the map's amendments (``study.stage2``; values keyed (cell, arm, seed) as the map's):
    per cell, the references ``stage2.references`` and the fixes ``stage2.methods`` of the study file. The
    better reference is chosen by its mean over the seeds in that cell (the file's "max(SCAFFOLD, FedDyn)");
    each family (F − FedAvg; F − reference) is the cell's fixes, Holm at 0.05; a fix or reference with a
    diverged run or a missing seed is not tested, and its fix's reading says so."""
    if holm is None:
        from lab.evidence.paired import holm as holm_adjust

        holm = holm_adjust
    untested = dict(untested or {})
    declared = study.raw["stage2"]
    fixes, refs = list(declared["methods"]), list(declared["references"])
    seeds, base = list(study.seeds), study.baseline_arm
    out: list[FixRow] = []
    for cell in dict.fromkeys(a.cell.name for a in study.stage2 if a.cell is not None):
        def mean(arm: str) -> float:
            got = [values[(cell, arm, s)] for s in seeds if (cell, arm, s) in values]
            return sum(got) / len(got) if len(got) == len(seeds) and (cell, arm) not in untested else -math.inf
        ref = max(refs, key=mean)
        sam = next((c.arm for c in failing_cells if f"{c.split}-K{c.local_steps}" == cell), None)
        rows = []
        for fix in fixes:
            why = tuple(f"{a}: {untested[(cell, a)]}" for a in (fix, ref, base) if (cell, a) in untested)
            missing = [a for a in (fix, ref, base) if sum((cell, a, s) in values for s in seeds) < len(seeds)
                       and (cell, a) not in untested]
            why += tuple(f"{a}: {sum((cell, a, s) in values for s in seeds)}/{len(seeds)} seeds recorded"
                         for a in missing)
            rows.append(FixRow(cell, fix, ref, estimate_of(_paired(values, (cell, fix), (cell, base), seeds)),
                               estimate_of(_paired(values, (cell, fix), (cell, ref), seeds)),
                               estimate_of(_paired(values, (cell, fix), (cell, sam), seeds)) if sam else estimate_of([]),
                               why))
        for field in ("over_fedavg", "over_reference"):
            rows = _holm_family(rows, field, holm)
        out += [dataclasses.replace(r, verdict=fix_verdict(r)) for r in rows]
    return out


def fix_verdict(row: FixRow, alpha: float = 0.05) -> str:
    """The pre-registered reading of one fix: it recovers more than drift correction when F − the better
    reference is decided above 0 (Holm across the cell's fixes); decided below 0, it is below the drift
    correction; otherwise not more; not tested when a run it needs diverged or is missing."""
    if row.untested:
        return f"not tested ({'; '.join(row.untested)})"
    e = row.over_reference
    if e.p_holm < alpha:
        return RECOVERS if e.mean > 0 else BELOW_DRIFT
    return NOT_MORE
