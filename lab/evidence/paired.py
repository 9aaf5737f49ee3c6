"""Paired comparisons over seeds: the per-seed differences of two arms, their t-interval and a sign-flip p.

Within one seed every method of a figure shares θ₀, the client sampling, the batch order and the test
subsample, so the seeds are common random numbers: the value of arm A at seed s and of arm B at the same
seed are a *pair*. A comparison therefore works on the differences of the seeds both arms have,

    d_s = left_s − right_s,   s ∈ S = seeds(left) ∩ seeds(right),   n = |S|,

never on two separate means (a seed present in only one arm is dropped, and said so). With d̄ the mean
and s_d the sample standard deviation (ddof = 1) of the d_s, the paired Student-t interval at level 1 − a is

    d̄ ± t_{1−a/2, n−1} · s_d / √n                                        (df = n − 1),

which equals the interval of ``scipy.stats.ttest_rel(left, right).confidence_interval()``. From
:data:`MIN_SEEDS_FOR_P` pairs on, a two-sided exact sign-flip (permutation) p-value is given beside it:
under H₀ "no difference" each d_s is as likely to be +|d_s| as −|d_s|, so over all 2ⁿ sign patterns
ε ∈ {−1, +1}ⁿ

    p = #{ε : |mean(ε · d)| ≥ |d̄|} / 2ⁿ,

(ties within a relative 1e-14 count as "≥", as in ``scipy.stats.permutation_test``). With fewer pairs
the smallest attainable p (2/2ⁿ = 0.25 at n = 3) says nothing, so the p-value is NaN.

Decision rule (declared once; ``[lo, hi]`` is the paired interval of ``left − right``):

================  ===========================  ==========================  ======================
op                reads                        holds when                  fails when
================  ===========================  ==========================  ======================
``>``             left above right             lo > 0                      hi < 0
``<``             left below right             hi < 0                      lo > 0
``much_greater``  left above by at least m     lo > m  (m = ``margin``)    hi < m
``>=``            left not worse by over δ     lo > −δ  (δ = ``margin``)   hi < −δ
``<=``            left not above by over δ     hi < δ  (δ = ``margin``)    lo > δ
``approx``        equal within ± tol           −tol ≤ lo and hi ≤ tol      lo > tol or hi < −tol
``abs_le``        one arm: |left| ≤ tol        as ``approx``, on left − 0  as ``approx``
================  ===========================  ==========================  ======================

Anything else is **inconclusive**. ``>=`` / ``<=`` are non-inferiority tests (δ = 0 makes them as strict
as ``>`` / ``<``: "not contradicted" is no longer enough), ``approx`` is an equivalence test (the whole
interval inside ± tol; close means with a wide interval are not evidence of equality), ``much_greater``
is the one-sided margin test Δ ≥ m. The interval decides only with enough pairs:

* n < :data:`MIN_SEEDS_TO_PRINT` (3): **too few seeds** — no interval is shown as evidence;
* :data:`MIN_SEEDS_TO_PRINT` ≤ n < :data:`MIN_SEEDS_TO_DECIDE` (6): **inconclusive (n < 6)**, even when the
  interval excludes the margin (the interval and what it *would* say are still reported);
* n ≥ :data:`MIN_SEEDS_TO_DECIDE`: the table above.

``min_seeds_to_decide`` can be lowered explicitly (e.g. to 3, to read the existing three-seed evidence "as
if decided") — the constant itself is the protocol.

**Error rates** (issue 41). The table above is the per-comparison 95 % reading. The claims are many, so the
claims table decides instead on Holm-adjusted p-values inside declared families (:func:`holm`): each
comparison's p is the two-sided paired t-test of H₀ "mean(left − right) = b", b the bound of its op (0 for
``>``/``<``, +m for ``much_greater``, −δ / +δ for ``>=`` / ``<=``; :func:`op_bound`, :func:`t_test_p`). Unadjusted,
p < 0.05 is the 95 % interval excluding b, so the table above is the one-comparison family. The exact sign-flip
p cannot fall below 2/2ⁿ (0.031 at n = 6, :func:`sign_flip_floor`): it is shown, never the decision.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedlab.uncertainty import Interval

__all__ = ["FAMILY_ALPHA", "MIN_SEEDS_FOR_P", "MIN_SEEDS_TO_DECIDE", "MIN_SEEDS_TO_PRINT", "PAIRED_OPS", "TOO_FEW",
           "PairedDifference", "decide", "holm", "holm_decision", "margin_test", "op_bound", "paired_difference",
           "sign_flip_floor", "sign_flip_p", "sign_flip_text", "t_test_p", "undecided"]

MIN_SEEDS_TO_PRINT = 3
MIN_SEEDS_TO_DECIDE = 6
MIN_SEEDS_FOR_P = 6
MAX_EXACT_SEEDS = 24  # 2^24 sign patterns, enumerated in blocks; beyond, the exact p is not attempted
PAIRED_OPS = (">", "<", ">=", "<=", "approx", "much_greater", "abs_le")
TOO_FEW = "too few seeds"
FAMILY_ALPHA = 0.05
"""The family-wise error rate at which Holm's step-down decides inside each family of claims."""


def undecided(min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE) -> str:
    """The verdict of an interval read from too few pairs to decide: ``"inconclusive (n < 6)"``."""
    return f"inconclusive (n < {min_seeds_to_decide})"


@dataclass(frozen=True)
class PairedDifference(Interval):
    """Mean of the per-seed differences ``left − right`` with its paired t-interval and sign-flip p."""

    mean: float
    half_width: float  # NaN with fewer than 2 pairs
    differences: tuple[tuple[Hashable, float], ...]  # (seed, left − right), in seed order
    p_value: float  # NaN below MIN_SEEDS_FOR_P pairs
    level: float = 0.95
    left_only: tuple[Hashable, ...] = ()  # seeds dropped: present in the left arm only
    right_only: tuple[Hashable, ...] = ()  # … in the right arm only
    pairs: tuple[tuple[float, float], ...] = ()  # (left_s, right_s) of the paired seeds, in seed order

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def seeds(self) -> tuple[Hashable, ...]:
        return tuple(s for s, _ in self.differences)

    @property
    def values(self) -> tuple[float, ...]:
        return tuple(d for _, d in self.differences)

    def note(self) -> str:
        """The seeds that could not be paired, in words (empty when every seed paired)."""
        parts = []
        if self.left_only:
            parts.append(f"seed(s) {', '.join(map(str, self.left_only))} only in the left arm, dropped")
        if self.right_only:
            parts.append(f"seed(s) {', '.join(map(str, self.right_only))} only in the right arm, dropped")
        return "; ".join(parts)

    def format(self, scale: float = 1.0, digits: int = 2, with_n: bool = True) -> str:
        """``"+3.10 ± 1.20 (n=3)"`` (times ``scale``); no interval: ``"+3.10 (n=1)"``; no pairs: ``"–"``."""
        if self.n == 0:
            return "–"
        text = f"{scale * self.mean:+.{digits}f}"
        if math.isfinite(self.half_width):
            text += f" ± {scale * self.half_width:.{digits}f}"
        return f"{text} (n={self.n})" if with_n else text


def _seed_key(seed: Hashable) -> tuple[int, object]:
    return (0, seed) if isinstance(seed, (int, float)) else (1, str(seed))


def sign_flip_p(differences: "np.ndarray | list[float] | tuple[float, ...]") -> float:
    """The two-sided exact sign-flip p-value of the mean of ``differences`` (see the module docstring).

    Enumerates all 2ⁿ sign patterns (in blocks of at most 2¹⁶). Raises ValueError above
    :data:`MAX_EXACT_SEEDS` values and for an empty input.
    """
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n == 0:
        raise ValueError("sign_flip_p needs at least one difference")
    if n > MAX_EXACT_SEEDS:
        raise ValueError(f"sign_flip_p enumerates 2^n patterns; n = {n} > {MAX_EXACT_SEEDS}")
    observed = abs(float(d.mean()))
    threshold = observed - 1e-14 * observed  # scipy's relative tie tolerance
    block = min(n, 16)  # the last `block` signs enumerated as a matrix, the others looped over
    tail = np.array(list(itertools.product((1.0, -1.0), repeat=block)))  # (2^block, block)
    tail_sums = tail @ d[n - block:]
    hits = 0
    for head in itertools.product((1.0, -1.0), repeat=n - block):
        head_sum = float(np.dot(head, d[: n - block])) if head else 0.0
        hits += int(np.count_nonzero(np.abs(head_sum + tail_sums) / n >= threshold))
    return hits / 2.0 ** n


def paired_difference(left: Mapping[Hashable, float], right: Mapping[Hashable, float], level: float = 0.95,
                      min_seeds_for_p: int = MIN_SEEDS_FOR_P) -> PairedDifference:
    """The paired comparison of two arms given as ``{seed: value}``: d_s = left_s − right_s over the seeds
    both have, d̄ ± t_{(1+level)/2, n−1} · s_d/√n, and from ``min_seeds_for_p`` pairs the exact sign-flip p.

    Seeds in only one arm are dropped and listed (``left_only``, ``right_only``). Raises ValueError for a
    non-finite value of a paired seed or a level outside (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    common = sorted(set(left) & set(right), key=_seed_key)
    diffs = tuple((s, float(left[s]) - float(right[s])) for s in common)
    bad = [s for s, v in diffs if not math.isfinite(v)]
    if bad:
        raise ValueError(f"paired_difference got non-finite values at seed(s) {bad}; drop diverged or missing runs")
    left_only = tuple(sorted(set(left) - set(right), key=_seed_key))
    right_only = tuple(sorted(set(right) - set(left), key=_seed_key))
    n = len(diffs)
    arr = np.array([v for _, v in diffs], dtype=float)
    mean = float(arr.mean()) if n else float("nan")
    half = float("nan")
    if n >= 2:
        half = float(stats.t.ppf(0.5 + level / 2, df=n - 1)) * float(arr.std(ddof=1)) / math.sqrt(n)
    p = sign_flip_p(arr) if min_seeds_for_p <= n <= MAX_EXACT_SEEDS else float("nan")
    pairs = tuple((float(left[s]), float(right[s])) for s in common)
    return PairedDifference(mean, half, diffs, p, level, left_only, right_only, pairs)


def margin_test(low: float, high: float, op: str, *, tol: float = 0.0, margin: float = 0.0) -> str:
    """holds / fails / inconclusive of ``left op right`` from the interval ``[low, high]`` of left − right,
    by the table of the module docstring (no gate on the number of pairs; see :func:`decide`)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    if op in ("<", "<="):  # mirror: left − right < c  ⇔  right − left > −c
        low, high = -high, -low
        op = op.replace("<", ">")
    if op == ">":
        bound = 0.0
    elif op == "much_greater":
        bound = margin
    elif op == ">=":
        bound = -margin
    elif op in ("approx", "abs_le"):
        return "holds" if -tol <= low and high <= tol else "fails" if (low > tol or high < -tol) else "inconclusive"
    else:
        raise ValueError(f"op {op!r} is not a paired comparison; allowed: {', '.join(PAIRED_OPS)}")
    return "holds" if low > bound else "fails" if high < bound else "inconclusive"


def decide(diff: PairedDifference, op: str, *, tol: float = 0.0, margin: float = 0.0,
           min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE) -> tuple[str, str]:
    """``(verdict, as_if)``: the gated verdict and what the interval says without the gate.

    verdict: :data:`TOO_FEW` below :data:`MIN_SEEDS_TO_PRINT` pairs, ``"inconclusive (n < N)"`` below
    ``min_seeds_to_decide`` pairs, else :func:`margin_test`. ``as_if`` is :func:`margin_test` at any n ≥ 2
    (``"inconclusive"`` below 2: no interval).
    """
    if min_seeds_to_decide < 2:
        raise ValueError(f"min_seeds_to_decide must be at least 2 (an interval needs df ≥ 1), "
                         f"got {min_seeds_to_decide}")
    as_if = margin_test(diff.low, diff.high, op, tol=tol, margin=margin) if diff.n >= 2 else "inconclusive"
    if diff.n < MIN_SEEDS_TO_PRINT:
        return TOO_FEW, as_if
    if diff.n < min_seeds_to_decide:
        return undecided(min_seeds_to_decide), as_if
    return as_if, as_if


# --- error rates: the bound of an op, the t-test against it, Holm's step-down -----------------------------
def op_bound(op: str, margin: float = 0.0) -> float:
    """The value b that ``left op right`` compares the mean paired difference with: 0 for ``>``/``<``, +m for
    ``much_greater``, −δ for ``>=`` and +δ for ``<=`` (``margin``). ``approx``/``abs_le`` test two bounds (an
    equivalence), which no single p-value decides: a ValueError."""
    if op in (">", "<"):
        return 0.0
    if op == "much_greater":
        return float(margin)
    if op == ">=":
        return -float(margin)
    if op == "<=":
        return float(margin)
    raise ValueError(f"op {op!r} has no single bound (an equivalence test); ops with one: >, <, >=, <=, much_greater")


def t_test_p(diff: PairedDifference, bound: float = 0.0) -> float:
    """The two-sided paired t-test p-value of H₀ "mean(left − right) = ``bound``": with t = (d̄ − b)/(s_d/√n),
    p = 2·P(T_{n−1} ≥ |t|). NaN below 2 pairs; with no spread (every d_s the same), 0 when d̄ ≠ b and 1 when equal."""
    values = np.asarray(diff.values, dtype=float)
    n = len(values)
    if n < 2:
        return float("nan")
    sd = float(values.std(ddof=1))
    gap = float(values.mean()) - float(bound)
    if sd == 0.0:
        return 1.0 if gap == 0.0 else 0.0
    return float(2.0 * stats.t.sf(abs(gap) / (sd / math.sqrt(n)), df=n - 1))


def holm(p_values: "list[float] | tuple[float, ...]") -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: with p_(1) ≤ … ≤ p_(m) sorted,
    p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j)). A hypothesis is rejected at family-wise level α when p̃ ≤ α,
    which is Holm's rule "reject while p_(j) ≤ α/(m − j + 1)". Raises ValueError for a p outside [0, 1] or NaN
    (an untested comparison belongs to no family)."""
    ps = [float(p) for p in p_values]
    bad = [p for p in ps if not (0.0 <= p <= 1.0)]
    if bad:
        raise ValueError(f"holm needs p-values in [0, 1], got {bad}; leave untested comparisons out of the family")
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def holm_decision(diff: PairedDifference, op: str, p_adjusted: float, *, margin: float = 0.0,
                  alpha: float = FAMILY_ALPHA) -> str:
    """holds / fails / inconclusive of ``left op right`` from its Holm-adjusted p (of :func:`t_test_p` against
    :func:`op_bound`): decided when p̃ ≤ ``alpha``, then holds when the mean lies on the claimed side of the bound
    (above it for ``>``, ``>=``, ``much_greater``; below it for ``<``, ``<=``) and fails when on the other."""
    if not (math.isfinite(p_adjusted) and p_adjusted <= alpha):
        return "inconclusive"
    gap = diff.mean - op_bound(op, margin)
    claimed_above = op in (">", ">=", "much_greater")
    if gap == 0.0:
        return "inconclusive"
    return "holds" if (gap > 0) == claimed_above else "fails"


def sign_flip_floor(n: int) -> float:
    """The smallest two-sided sign-flip p over n pairs: the observed pattern and its mirror, 2/2ⁿ (0.03125 at 6)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return 2.0 / 2.0 ** n


def sign_flip_text(p: float, n: int) -> str:
    """``"p = 0.031 (the floor at n = 6)"`` when ``p`` is the smallest value n pairs allow, else ``"p = 0.22"``;
    ``"p: –"`` when there is none (fewer than :data:`MIN_SEEDS_FOR_P` pairs)."""
    if not math.isfinite(p):
        return "p: –"
    if n >= 1 and math.isclose(p, sign_flip_floor(n), rel_tol=1e-9):
        return f"p = {p:.2g} (the floor at n = {n})"
    return f"p = {p:.2g}"
