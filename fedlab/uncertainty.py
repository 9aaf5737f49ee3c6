"""Uncertainty over seeds: mean ± a Student-t confidence interval, keeping every per-seed value.

For n independent seeds (mean x̄, sample std s) the two-sided interval at level 1 − a is
x̄ ± t_{1−a/2, n−1} · s / √n — wider than the papers' "mean ± std" at n = 3 (t_{0.975, 2} ≈ 4.30).
One seed gives no interval (NaN half-width), never a made-up spread."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["Estimate", "Interval", "difference_interval", "mean_interval"]


class Interval:
    """The bounds of ``mean ± half_width``: ``low = mean − half_width``, ``high = mean + half_width`` (NaN
    when there is no interval). Shared by :class:`Estimate` and the paired difference
    (the paired difference of the lab's claims)."""

    mean: float
    half_width: float

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


@dataclass(frozen=True)
class Estimate(Interval):
    """A mean over seeds with its confidence interval and the values it came from."""

    mean: float
    half_width: float  # NaN with fewer than 2 values
    values: tuple[float, ...]
    level: float = 0.95

    @property
    def n(self) -> int:
        return len(self.values)

    def overlaps(self, other: "Estimate") -> bool:
        """Whether the two intervals share a point (a single value is its own degenerate interval)."""
        lo_a, hi_a = _bounds(self)
        lo_b, hi_b = _bounds(other)
        return lo_a <= hi_b and lo_b <= hi_a

    def format(self, scale: float = 1.0, digits: int = 2) -> str:
        """``"72.31 ± 1.20 (n=3)"`` (times ``scale``, e.g. 100 for percent); one value: ``"72.31 (n=1)"``."""
        if self.n == 0:
            return "–"
        text = f"{scale * self.mean:.{digits}f}"
        if math.isfinite(self.half_width):
            text += f" ± {scale * self.half_width:.{digits}f}"
        return f"{text} (n={self.n})"


def _bounds(e: Estimate) -> tuple[float, float]:
    if math.isfinite(e.half_width):
        return e.low, e.high
    return e.mean, e.mean


def mean_interval(values: Iterable[float], level: float = 0.95) -> Estimate:
    """The mean of ``values`` and the Student-t half-width at ``level`` (NaN values are an error).

    Raises ValueError for an empty input, a non-finite value or a level outside (0, 1).
    """
    vals = tuple(float(v) for v in values)
    if not vals:
        raise ValueError("mean_interval needs at least one value")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"mean_interval got non-finite values {vals}; drop diverged or missing runs first")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    arr = np.asarray(vals)
    if len(arr) < 2:
        return Estimate(float(arr.mean()), float("nan"), vals, level)
    t = float(stats.t.ppf(0.5 + level / 2, df=len(arr) - 1))
    half = t * float(arr.std(ddof=1)) / math.sqrt(len(arr))
    return Estimate(float(arr.mean()), half, vals, level)


def difference_interval(a: Estimate, b: Estimate, level: float = 0.95) -> tuple[float, float]:
    """Welch's interval for ā − b̄: ± t_{1−a/2, ν} · √(s_a²/n_a + s_b²/n_b), ν by Welch–Satterthwaite,
    ν = (s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a−1) + (s_b²/n_b)²/(n_b−1)). What an equivalence claim
    ("within 1 point") needs; fewer than two values in an arm gives NaN bounds."""
    diff = a.mean - b.mean
    if a.n < 2 or b.n < 2:
        return float("nan"), float("nan")
    va = float(np.var(a.values, ddof=1)) / a.n
    vb = float(np.var(b.values, ddof=1)) / b.n
    if va + vb == 0.0:
        return diff, diff
    dof = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df=dof)) * math.sqrt(va + vb)
    return diff - half, diff + half
