"""``python -m lab bench store --quick``: the disk store's traffic bench runs and both stores end equal."""
from __future__ import annotations

import re

from lab.bench.store import main


def test_store_bench_quick_prints_both_stores_and_agrees(capsys):
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = dict(re.findall(r"^(memory|disk)\s+([0-9.]+)$", out, flags=re.M))
    assert set(rows) == {"memory", "disk"} and all(float(v) > 0 for v in rows.values())
    assert re.search(r"disk / memory \(median of the pairs' ratios\): [0-9.]+", out)
    assert "both stores hold the same states: True" in out
