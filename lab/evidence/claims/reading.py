"""The claims read by seed pairs: the one reading of a claim (issue 26), decided in Holm families (issue 41).

Within a seed every method of a figure shares θ₀, client sampling, batch order and test subsample, so a claim
compares the per-seed differences left_s − right_s of the seeds both arms finished (records pair by
``config.seed``, a figure's CSV by its ``seed`` column), with the paired t-interval, the sign-flip p-value and the
margin rules and seed gates of :mod:`lab.evidence.paired`; a claim that cannot be paired says so
(:data:`NOT_PAIRED`). An arm that no committed record matches is **no data** (declared for the rerun), never an
error; a claim whose figure has no committed evidence yet is **not run**. Against a list of arms, a claim holds
only if it holds against each (:func:`combine`).

**What counts** (issue 41). A verdict is counted only when the comparison tests the claim: holds / fails /
inconclusive. Four other classes are listed apart with their reason (:mod:`lab.evidence.validity`): ``not tested —
degenerate arm`` (an arm tuned into another method), ``not tested — diverged`` (a run of an arm diverged,
:mod:`lab.evidence.divergence`), ``confounded`` (a control the claim ``requires`` has no record) and ``not testable —
headroom`` (a ``much_greater`` margin above the room to its ``ceiling``). A failed comparison still refutes a claim
against several arms; otherwise one untested comparison leaves the claim untested.

**Error rates.** Each claim belongs to a ``family`` declared in ``figures/claims.yaml`` (``families``; a claim without
one is its own family). The decided comparisons of a family (n ≥ 6 pairs, arms tested) are one Holm family at
family-wise α = 0.05 (:func:`lab.evidence.paired.holm`), on the two-sided paired t-test p against the op's bound;
the verdict is decided on the adjusted p. A non-inferiority claim (``>=``, ``<=``) states its ``smallest_effect``
with its reason: a number, or a share of another claim's measured effect (``of``, ``times``).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedlab.results import RunResult
from lab.evidence.claims.evidence import Evidence, arm_runs, cost_check, evidence_of, final_how, run_value
from lab.evidence.claims.spec import CLAIMS_FILE, NO_DATA, Claim, arm_name, figures_root, load_claims
from lab.evidence.paired import (MIN_SEEDS_TO_DECIDE, MIN_SEEDS_TO_PRINT, TOO_FEW, PairedDifference, decide, holm,
                                 holm_decision, op_bound, paired_difference, t_test_p)
from lab.evidence.validity import (CONFOUNDED, NOT_TESTABLE_HEADROOM, NOT_TESTABLE_SCOPE, NOT_TESTED_DEGENERATE,
                                   NOT_TESTED_DIVERGED, UNTESTED, RecordPool, companion_runs, degenerate, diverged_arm,
                                   headroom)

__all__ = ["NOT_PAIRED", "TESTED", "PairedComparison", "PairedVerdict", "combine", "evaluate_claim_paired",
           "evaluate_claims_paired", "verdict_rank"]

TESTED = ("holds", "fails", "inconclusive")
"""The verdicts of a comparison that tested the claim: the only ones counted (an ``inconclusive (n < N)`` too)."""
NOT_PAIRED = "not paired"  # the verdict when the evidence has no seed to pair by
_PAIRED_ORDER = {"holds": 0, "inconclusive": 1, TOO_FEW: 3, NOT_PAIRED: 4, NO_DATA: 5, "not run": 5, "fails": 6}
_PENDING = ""  # a comparison's verdict before the family is adjusted (never left in a returned verdict)


def verdict_rank(verdict: str) -> int:
    """holds < inconclusive < inconclusive (n < N) < too few seeds < not paired, an untested class < not run
    < fails."""
    if verdict.startswith("inconclusive (n < "):
        return 2
    return 4 if verdict in UNTESTED else _PAIRED_ORDER[verdict]


def combine(verdicts: Sequence[str]) -> str:
    """A claim against several arms: fails if any comparison fails (one decided failure refutes "better than
    each"); else, if a comparison did not test the claim, the first such class (in :data:`UNTESTED` order);
    holds only if every one holds; else the weakest of the others (inconclusive < inconclusive (n < N) < too
    few seeds < not paired < not run)."""
    if not verdicts:
        return "not run"
    if "fails" in verdicts:
        return "fails"
    untested = [u for u in UNTESTED if u in verdicts]
    return untested[0] if untested else max(verdicts, key=verdict_rank)


@dataclass(frozen=True)
class PairedComparison:
    """``left − right`` of one right arm, paired by seed (for a one-arm ``abs_le`` claim: the left arm's
    per-seed values against 0)."""

    right: dict[str, Any]
    difference: PairedDifference | None  # None: the arms could not be paired (see note)
    verdict: str  # gated by the number of pairs, decided on the Holm-adjusted p, or an untested class
    as_if: str  # what the interval says without the gate on the number of pairs
    note: str = ""
    p: float = math.nan  # two-sided paired t-test p against the op's bound (NaN: not in a family)
    p_holm: float = math.nan  # … Holm-adjusted in the claim's family
    bound: float = math.nan  # the op's bound b the p tests (0, +m, −δ, +δ), in the metric's unit

    @property
    def tested(self) -> bool:
        """Whether the comparison was decided in its family (n ≥ the gate, both arms tested)."""
        return math.isfinite(self.p_holm)


@dataclass
class PairedVerdict:
    """A claim's verdict, read by seed pairs, with what it was read from."""

    claim: Claim
    verdict: str
    as_if: str  # the verdict with no gate on the number of pairs
    comparisons: list[PairedComparison] = field(default_factory=list)
    min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE
    note: str = ""
    final_how: str = ""  # how the final accuracy was computed (lab.evidence.protocol.final_metric), if accuracy
    margin: float = 0.0  # the margin the comparisons were read with (a >= / <= claim's resolved smallest effect)
    untested: str = ""  # why the claim is not tested (its untested class's reasons), "" when tested
    family_size: int = 0  # the comparisons Holm adjusted together in the claim's family
    # the figure's runs or table the claim was read from (None: not run); kept for the findings about the same
    # data (lab.evidence.claims.unpaired), never compared: two verdicts are equal by what they say
    evidence: Evidence | None = field(default=None, repr=False, compare=False)

    @property
    def scale(self) -> float:
        """100 for accuracies (shown in %), 1 otherwise."""
        return 100.0 if self.claim.metric == "final_test_acc" else 1.0

    @property
    def unit(self) -> str:
        return "%" if self.scale == 100.0 else ""

    @property
    def tested(self) -> bool:
        """Whether the verdict counts: holds, fails or inconclusive (gated or not) — a test that ran."""
        return self.verdict in TESTED or self.verdict.startswith("inconclusive (n < ")

    def differences(self, with_n: bool = True) -> str:
        """``"vs FedSAM +3.10 ± 1.20 % (n=3)"`` per comparison, joined by ``"; "``; '–' where nothing paired,
        ``"– (too few seeds: n=2)"`` below :data:`~lab.evidence.paired.MIN_SEEDS_TO_PRINT` pairs (the numbers
        stay in :func:`paired_table`)."""
        digits = 2 if self.scale == 100.0 else 4
        parts = []
        for c in self.comparisons:
            d = c.difference
            if d is None or d.n == 0:
                text = "–"
            elif d.n < MIN_SEEDS_TO_PRINT:
                text = f"– ({TOO_FEW}: n={d.n})"
            else:
                text = d.format(self.scale, digits, with_n=False) + (f" {self.unit}" if self.unit else "") \
                    + (f" (n={d.n})" if with_n else "")
            parts.append(f"vs {arm_name(c.right)} {text}" if c.right else text)
        return "; ".join(parts)


def _one_arm(claim: Claim, evidence: Evidence, min_seeds_to_decide: int,
             level: float) -> tuple[PairedComparison, list[str]]:
    """``abs_le``: nothing to pair; the per-seed values (a seed's mean over its rows) against 0, with the
    one-sample interval over seeds and the same gate on the number of seeds (an equivalence: in no family)."""
    values, note = evidence.seeds(claim, claim.left, average=True)
    notes = [note] if note else []
    if values == {} and not note:
        return PairedComparison({}, None, NO_DATA, NO_DATA, NO_DATA), [f"{NO_DATA} (no committed value)"]
    if values is None:
        return PairedComparison({}, None, NOT_PAIRED, NOT_PAIRED, note), notes
    diff = paired_difference(values, {s: 0.0 for s in values}, level)
    verdict, as_if = decide(diff, "abs_le", tol=claim.tol, min_seeds_to_decide=min_seeds_to_decide)
    notes.append("one arm: nothing to pair; the interval is over per-seed values")
    return PairedComparison({}, diff, verdict, as_if), notes


@dataclass
class _Reading:
    """A claim read up to its decision (:func:`_read`): its paired differences, what keeps a comparison or the
    whole claim from testing it, and the notes. Comparisons still to decide carry the verdict :data:`_PENDING`."""

    claim: Claim
    evidence: Evidence | None = None  # None: not run
    comparisons: list[PairedComparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    untested: list[tuple[str, str]] = field(default_factory=list)  # claim-level (class, reason)
    final_how: str = ""
    not_run: str = ""  # why there is no evidence at all
    decided: bool = False  # an abs_le claim: decided on its own interval, in no family


def _arm_validity(claim: Claim, arm: Mapping[str, Any], runs: Sequence[RunResult], pool: RecordPool) -> tuple[str, str]:
    """``(class, reason)`` when the arm does not test the claim (a diverged run, a degenerate method), else
    ``("", "")``."""
    chosen = arm_runs(runs, claim, arm)
    why = diverged_arm(arm_name(arm), chosen)
    if why:
        return NOT_TESTED_DIVERGED, why
    why = degenerate(arm_name(arm), arm, chosen, pool)
    return (NOT_TESTED_DEGENERATE, why) if why else ("", "")


def _seed_values(claim: Claim, runs: Mapping[Hashable, RunResult]) -> dict[Hashable, float]:
    return {s: run_value(r, claim.metric) for s, r in runs.items() if r.status == "finished"}


def _read(claim: Claim, figures_dir: Path, pool: RecordPool, min_seeds_to_decide: int, level: float) -> _Reading:
    """Phase 1 of the paired reading: the evidence, each comparison's paired difference, the arms' validity
    (:mod:`lab.evidence.validity`), the required controls and the ceiling's room; no decision yet."""
    if claim.not_testable:  # declared outside fedlab's reach: no evidence is read, every comparison takes the class
        reading = _Reading(claim, comparisons=[PairedComparison(a, None, NOT_TESTABLE_SCOPE, NOT_TESTABLE_SCOPE, "")
                                               for a in claim.right])
        reading.untested.append((NOT_TESTABLE_SCOPE, claim.not_testable))
        return reading
    evidence = evidence_of(claim, figures_dir)
    if isinstance(evidence, str):
        return _Reading(claim, not_run=evidence)
    reading = _Reading(claim, evidence, final_how=final_how(claim, evidence))
    if claim.op == "abs_le":
        comparison, notes = _one_arm(claim, evidence, min_seeds_to_decide, level)
        reading.comparisons, reading.notes, reading.decided = [comparison], notes, True
        return reading
    runs = list(evidence.runs or [])
    validity = {id(a): _arm_validity(claim, a, runs, pool) if runs else ("", "") for a in [claim.left, *claim.right]}
    left, note = evidence.seeds(claim, claim.left)
    notes = reading.notes
    notes += [note] if note else []
    left_absent = left == {} and not note  # no record of the arm at all (not: all collapsed)
    if left_absent:
        notes.append(f"{arm_name(claim.left)}: {NO_DATA} (no committed record)")
    # (the arm as shown, its {seed: value}, a note, its validity class)
    arms: list[tuple[dict[str, Any], dict[Hashable, float] | None, str, str]] = []
    for arm in claim.right:
        right, note = evidence.seeds(claim, arm)
        arms.append((dict(arm), right, note, validity[id(arm)][0]))
    left_runs = arm_runs(runs, claim, claim.left)
    for required in claim.requires:  # a control the claim needs, read from the whole records folder
        found = companion_runs(pool, required, left_runs) if left_runs else {}
        name = f"{arm_name(required)} (required control)"
        if found and len(found) < min_seeds_to_decide:  # a control still training confounds like a missing one
            reading.untested.append((CONFOUNDED, f"the control {arm_name(required)} has {len(found)} of the "
                                                 f"{min_seeds_to_decide} seeds a verdict needs (figures/claims.yaml "
                                                 "requires)"))
        if found:
            why = diverged_arm(name, list(found.values()))
            if why:
                validity[id(required)] = (NOT_TESTED_DIVERGED, why)
            arms.append(({**required, "label": name}, _seed_values(claim, found), "", validity.get(id(required),
                                                                                                  ("", ""))[0]))
        elif left_runs:
            reading.untested.append((CONFOUNDED, f"the control {arm_name(required)} has no committed record in the "
                                                 "claim's federation (figures/claims.yaml requires)"))
    left_class = validity[id(claim.left)][0]
    for arm, right, note, right_class in arms:
        if note:
            notes.append(note)
        if left_absent or (right == {} and not note):
            if right == {} and not note:
                notes.append(f"{arm_name(arm)}: {NO_DATA} (no committed record)")
            reading.comparisons.append(PairedComparison(arm, None, NO_DATA, NO_DATA, NO_DATA))
            continue
        if left is None or right is None:
            reading.comparisons.append(PairedComparison(arm, None, NOT_PAIRED, NOT_PAIRED, note))
            continue
        diff = paired_difference(left, right, level)
        if diff.note():
            notes.append(f"vs {arm_name(arm)}: {diff.note()}")
        cls = left_class or right_class  # either arm not what the claim names: the comparison tests nothing
        reading.comparisons.append(PairedComparison(arm, diff, cls or _PENDING, cls or _PENDING, diff.note()))
    for cls, why in (v for v in validity.values() if v[0]):
        notes.append(f"{cls}: {why}")
    if claim.ceiling and runs:
        _check_headroom(claim, evidence, runs, pool, reading)
    return reading


def _check_headroom(claim: Claim, evidence: Evidence, runs: Sequence[RunResult], pool: RecordPool,
                    reading: _Reading) -> None:
    """A ``much_greater`` claim: the room from each right arm to its ``ceiling`` (the same federation with the
    ceiling's ``config`` fields), :func:`lab.evidence.validity.headroom`; a margin above it makes the claim not
    testable, and a missing ceiling record is said."""
    scale, unit = (100.0, " points") if claim.metric == "final_test_acc" else (1.0, "")
    for arm in claim.right:
        right_runs = arm_runs(runs, claim, arm)
        ceiling = _seed_values(claim, companion_runs(pool, claim.ceiling, right_runs, claim.ceiling.get("config")))
        right, _ = evidence.seeds(claim, arm)
        room, n = headroom(ceiling, right or {})
        name = arm_name(claim.ceiling)
        if n == 0:
            reading.notes.append(f"headroom could not be checked: no committed record of the ceiling {name} in the "
                                 f"federation of {arm_name(arm)}")
        elif claim.margin > room:
            reading.untested.append((NOT_TESTABLE_HEADROOM, f"the margin {scale * claim.margin:g}{unit} exceeds the "
                                     f"room {scale * room:.2f}{unit} from {arm_name(arm)} to the ceiling {name} "
                                     f"(mean over {n} seeds)"))
        else:
            reading.notes.append(f"room to the ceiling {name}: {scale * room:.2f}{unit} (n = {n}), above the margin")


def _resolved_margin(claim: Claim, readings: Mapping[str, _Reading]) -> tuple[float, str]:
    """The margin a claim's comparisons are read with, and a note: a ``>=`` / ``<=`` claim's ``smallest_effect``
    (its value, or ``times`` × |mean paired difference| of claim ``of``'s first comparison), else ``margin``."""
    se = claim.smallest_effect
    if not se:
        return claim.margin, ""
    if "value" in se:
        return float(se["value"]), ""
    ref = readings.get(se["of"])
    if ref is None:
        raise ValueError(f"claim {claim.id!r}: smallest_effect.of={se['of']!r} is not among the claims evaluated")
    diffs = [c.difference for c in ref.comparisons if c.difference is not None and c.difference.n]
    if not diffs:
        return math.nan, f"smallest effect unresolved: claim {se['of']} has no paired difference"
    return float(se["times"]) * abs(diffs[0].mean), ""


def _family_p(reading: _Reading, margin: float, min_seeds_to_decide: int) -> list[PairedComparison]:
    """Phase 2: each pending comparison gated by its number of pairs; from the gate on, its t-test p against the
    op's bound (entered into the family), below it the undecided verdict with what the interval says."""
    claim, out = reading.claim, []
    for c in reading.comparisons:
        if c.verdict != _PENDING:
            out.append(c)
            continue
        d = c.difference
        assert d is not None
        gated, as_if = decide(d, claim.op, tol=claim.tol, margin=margin, min_seeds_to_decide=min_seeds_to_decide)
        if d.n < min_seeds_to_decide or not math.isfinite(margin):
            out.append(dataclasses.replace(c, verdict=gated if math.isfinite(margin) else "inconclusive",
                                           as_if=as_if if math.isfinite(margin) else "inconclusive"))
            continue
        bound = op_bound(claim.op, margin)
        out.append(dataclasses.replace(c, verdict=_PENDING, as_if=_PENDING, p=t_test_p(d, bound), bound=bound))
    return out


def _finish(reading: _Reading, comparisons: list[PairedComparison], margin: float, family_size: int,
            min_seeds_to_decide: int, extra: str) -> PairedVerdict:
    """Phase 4: the claim's verdict from its comparisons (:func:`_combine`), its untested class first, the cost
    check last."""
    claim, notes = reading.claim, list(reading.notes) + ([extra] if extra else [])
    if reading.not_run:
        return PairedVerdict(claim, "not run", "not run", [], min_seeds_to_decide, reading.not_run)
    untested = sorted(reading.untested, key=lambda u: UNTESTED.index(u[0]))
    if untested:  # the claim as a whole does not test what it says: its comparisons are not read as verdicts
        cls = untested[0][0]
        comparisons = [c if c.verdict in (NO_DATA, NOT_PAIRED) else dataclasses.replace(c, verdict=cls, as_if=cls)
                       for c in comparisons]
        notes += [f"{u}: {why}" for u, why in untested]
    verdicts, as_ifs = [c.verdict for c in comparisons], [c.as_if for c in comparisons]
    if claim.cost:
        ok, note = cost_check(claim)
        notes.append(note)
        if not ok:
            verdicts.append("fails")
            as_ifs.append("fails")
    verdict, as_if = combine(verdicts), combine(as_ifs)
    why = "; ".join(w for u, w in untested if u == verdict) if verdict in UNTESTED else ""
    if verdict in UNTESTED and not why:  # an arm's class: its reason is among the notes
        why = "; ".join(n.removeprefix(f"{verdict}: ") for n in notes if n.startswith(f"{verdict}: "))
    return PairedVerdict(claim, verdict, as_if, comparisons, min_seeds_to_decide,
                         "; ".join(dict.fromkeys(n for n in notes if n)), reading.final_how, margin, why,
                         family_size, reading.evidence)


def evaluate_claim_paired(claim: Claim, figures_dir: Path | None = None, *,
                          min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE, level: float = 0.95) -> PairedVerdict:
    """One claim read by seed pairs, as the claims table reads it: :func:`evaluate_claims_paired` of the claim,
    its family read beside it (the peers of ``<figures>/claims.yaml``) so that its Holm adjustment is the table's."""
    return evaluate_claims_paired([claim], figures_dir, min_seeds_to_decide=min_seeds_to_decide, level=level)[0]


def _with_peers(claims: Sequence[Claim], figures_dir: Path) -> list[Claim]:
    """``claims`` and what their reading needs from ``<figures>/claims.yaml``: the other claims of their families
    (one Holm family is adjusted whole) and the claims their ``smallest_effect`` is a share of."""
    path = figures_dir / CLAIMS_FILE.name
    out = list(claims)
    if not path.exists():
        return out
    pool = [c for c in load_claims(path) if c.id not in {x.id for x in claims}]
    while True:
        families = {c.family for c in out if c.family}
        refs = {c.smallest_effect["of"] for c in out if c.smallest_effect.get("of")}
        more = [c for c in pool if c not in out and (c.family in families or c.id in refs)]
        if not more:
            return out
        out += more


def evaluate_claims_paired(claims: Sequence[Claim] | None = None, figures_dir: Path | None = None, *,
                           min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE,
                           level: float = 0.95) -> list[PairedVerdict]:
    """Every claim of ``<figures>/claims.yaml`` (or ``claims``), read by seed pairs.

    Per claim and right arm the per-seed differences d_s = left_s − R_s over the seeds both arms finished give
    d̄ ± t_{(1+level)/2, n−1}·s_d/√n and the exact sign-flip p (:mod:`lab.evidence.paired`). A comparison whose
    arms do not test the claim takes its class (:mod:`lab.evidence.validity`); one with fewer pairs than
    ``min_seeds_to_decide`` is undecided (``too few seeds`` below 3); the others enter their claim's family
    with the two-sided t-test p against the op's bound, and are decided on the Holm-adjusted p at
    :data:`~lab.evidence.paired.FAMILY_ALPHA`. A claim's verdict combines its comparisons (:func:`_combine`); a
    claim with a cost check fails when the cost ratio is not as claimed. Claims of ``claims`` are returned, in
    order; their family peers are read to adjust the families whole (:func:`_with_peers`).
    """
    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    claims = load_claims(figures_dir / "claims.yaml") if claims is None else list(claims)
    universe = _with_peers(claims, figures_dir)
    pool = RecordPool(figures_dir / "records")
    readings = {c.id: _read(c, figures_dir, pool, min_seeds_to_decide, level) for c in universe}
    margins = {i: _resolved_margin(r.claim, readings) for i, r in readings.items()}
    staged = {i: (r.comparisons if r.decided else _family_p(r, margins[i][0], min_seeds_to_decide))
              for i, r in readings.items()}
    families: dict[str, list[tuple[str, int]]] = {}
    for i, comparisons in staged.items():
        if readings[i].untested:  # a claim that does not test what it says enters no family
            continue
        for j, c in enumerate(comparisons):
            if c.verdict == _PENDING:
                families.setdefault(readings[i].claim.family_name, []).append((i, j))
    for members in families.values():
        adjusted = holm([staged[i][j].p for i, j in members])
        for (i, j), p in zip(members, adjusted):
            c, claim = staged[i][j], readings[i].claim
            assert c.difference is not None
            decided = holm_decision(c.difference, claim.op, p, margin=margins[i][0])
            staged[i][j] = dataclasses.replace(c, verdict=decided, as_if=decided, p_holm=p)
    out = []
    for c in claims:
        reading = readings[c.id]
        # an untested claim's pending comparisons were never adjusted: they take its class in _finish
        comparisons = [x if x.verdict != _PENDING else dataclasses.replace(x, verdict="inconclusive",
                                                                           as_if="inconclusive")
                       for x in staged[c.id]]
        size = len(families.get(c.family_name, []))
        out.append(_finish(reading, comparisons, margins[c.id][0], size, min_seeds_to_decide, margins[c.id][1]))
    return out
