"""Mean ± 95 % Student-t interval over seeds."""
from __future__ import annotations

import math

import pytest

from fedlab.uncertainty import mean_interval


def test_t_interval_matches_the_table_value():
    # n = 3: t_{0.975, 2} = 4.3027 (any t table); s = 1 for (1, 2, 3)
    e = mean_interval([1.0, 2.0, 3.0])
    assert e.mean == 2.0 and e.n == 3 and e.values == (1.0, 2.0, 3.0)
    assert e.half_width == pytest.approx(4.3027 / math.sqrt(3), abs=1e-4)
    # n = 5, s = sqrt(2.5): t_{0.975, 4} = 2.7764
    e5 = mean_interval([1, 2, 3, 4, 5])
    assert e5.half_width == pytest.approx(2.7764 * math.sqrt(2.5) / math.sqrt(5), abs=1e-4)
    # a 90 % interval is narrower: t_{0.95, 2} = 2.9200
    assert mean_interval([1, 2, 3], level=0.90).half_width == pytest.approx(2.9200 / math.sqrt(3), abs=1e-4)


def test_one_seed_has_no_interval_and_bad_input_is_named():
    e = mean_interval([0.7])
    assert math.isnan(e.half_width) and e.format(100) == "70.00 (n=1)"
    assert mean_interval([0.7, 0.72, 0.74]).format(100) == "72.00 ± 4.97 (n=3)"
    with pytest.raises(ValueError, match="at least one"):
        mean_interval([])
    with pytest.raises(ValueError, match="non-finite"):
        mean_interval([0.5, float("nan")])


def test_overlap():
    a, b = mean_interval([0.70, 0.71, 0.72]), mean_interval([0.80, 0.81, 0.82])
    assert not a.overlaps(b) and a.overlaps(mean_interval([0.70, 0.75, 0.80]))


def test_difference_interval_is_welchs():
    from scipy import stats

    from fedlab.uncertainty import difference_interval

    lo, hi = difference_interval(mean_interval([1.0, 2.0, 3.0]), mean_interval([1.0, 2.0, 3.0]))
    # ν = 4 (equal variances and sizes), se = √(2/3): t_{0.975, 4} · 0.8165 = 2.2669
    assert (lo, hi) == pytest.approx((-2.2669, 2.2669), abs=1e-4)
    a, b = [0.70, 0.75, 0.81, 0.72], [0.60, 0.61, 0.65]
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert difference_interval(mean_interval(a), mean_interval(b)) == pytest.approx((ref.low, ref.high), rel=1e-9)
    nan = difference_interval(mean_interval([0.7]), mean_interval(b))
    assert all(v != v for v in nan)  # one value: no interval
