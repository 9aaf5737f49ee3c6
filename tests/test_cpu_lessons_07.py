"""The paragraphs of notebook 07 that read the committed cpu data, against that data.

The notebook prints the numbers of its cpu paragraphs (§1's toy, §3's Fashion-MNIST runs) as one
``cpu_lessons: {...}`` line, computed with pandas from ``figures/07_*.csv`` and checked there by asserts. Each test
here reads that line from the committed ``.ipynb`` and recomputes its numbers another way, with plain loops over the
CSV rows (helpers in ``_cpu_lessons.py``), then checks again every direction the paragraphs state.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict

from _cpu_lessons import f as _f
from _cpu_lessons import final_window as _final_window
from _cpu_lessons import line as _line
from _cpu_lessons import mean as _mean
from _cpu_lessons import rows as _rows
from _cpu_lessons import same as _same

from lab.repro import FIGURES_DIR

STEM = "07_fednsam"
NAME = "07_fednsam_accuracy_flatness"
CODE, PAPER, BUG = "FedNSAM (code)", "FedNSAM (paper)", "FedNSAM (official bug)"
RHO0, ACG = "FedNSAM (code), ρ = 0", "FedACG, β = 0"


def _tail_means(panel: str, column: str, rounds_from_end: int) -> dict:
    """method -> seed -> the mean of ``column`` over the last ``rounds_from_end`` rounds of its curve."""
    table = _rows(NAME, panel)
    last = max(int(r["round"]) for r in table)
    out = defaultdict(lambda: defaultdict(list))
    for r in table:
        if int(r["round"]) > last - rounds_from_end:
            out[r["method"]][int(float(r["seed"]))].append(_f(r, column))
    return {m: {s: _mean(v) for s, v in by_seed.items()} for m, by_seed in out.items()}


def test_07_accuracy_flatness_paragraph_matches_the_committed_data():
    rounds = max(int(r["round"]) for r in _rows(NAME, "test_acc_pct_per_seed"))
    k = _final_window(_line(STEM)["accuracy_flatness"]["k"], rounds, "07 accuracy and flatness")
    acc = _tail_means("test_acc_pct_per_seed", "test_acc_pct", k)
    dd = _tail_means("flatness_distance_per_seed", "flatness_distance", math.ceil(rounds / 4))
    methods = json.loads((FIGURES_DIR / f"{NAME}.json").read_text())["parameters"]["methods"]
    seeds = sorted(acc["FedSAM"])
    bug_seeds = sorted(acc[BUG])

    def count(table, a, b):  # seeds on which method a is below method b
        return sum(table[a][s] < table[b][s] for s in seeds)

    want = {"seeds": len(seeds), "k": k, "rho": float(methods[CODE][1]["rho"]),
            "acc": {m: _mean(v.values()) for m, v in acc.items()}, "dd": {m: _mean(v.values()) for m, v in dd.items()},
            "code_vs_sam": _mean(acc[CODE][s] - acc["FedSAM"][s] for s in seeds),
            "code_ahead": count(acc, "FedSAM", CODE),
            "paper_vs_sam": _mean(acc[PAPER][s] - acc["FedSAM"][s] for s in seeds),
            "paper_below": count(acc, PAPER, "FedSAM"),
            "dd_code_above_sam": count(dd, "FedSAM", CODE), "dd_paper_below_sam": count(dd, PAPER, "FedSAM"),
            "dd_avg_below_sam": count(dd, "FedAvg", "FedSAM"), "dd_paper_below_avg": count(dd, PAPER, "FedAvg"),
            "bug_seeds": len(bug_seeds), "bug_acc": _mean(acc[BUG][s] for s in bug_seeds),
            "bug_code_acc": _mean(acc[CODE][s] for s in bug_seeds),
            "bug_dd_ratio": _mean(dd[BUG][s] for s in bug_seeds) / _mean(dd[CODE][s] for s in bug_seeds),
            "controls": sum(a == "fedacg" or p.get("rho") == 0.0 for a, p in methods.values()),
            "dd_code_above_controls": sum(dd[CODE][s] > max(dd[RHO0][s], dd[ACG][s]) for s in seeds),
            "code_vs_rho0": _mean(acc[CODE][s] - acc[RHO0][s] for s in seeds),
            "code_ahead_rho0": count(acc, RHO0, CODE)}
    _same(_line(STEM)["accuracy_flatness"], want, "07 accuracy and flatness")
    n = want["seeds"]
    assert n == 6 and want["bug_seeds"] == 3 and want["controls"] == 2
    assert want["dd_code_above_controls"] == n and want["code_vs_rho0"] > 0
    assert all(abs(want["dd"][c] / want["dd"]["FedAvg"] - 1) < 0.1 for c in (RHO0, ACG))
    assert 0 < want["code_vs_sam"] < 5 and want["code_ahead"] > n / 2
    assert want["paper_vs_sam"] < 0 and want["paper_below"] == n
    assert want["dd_paper_below_sam"] == want["dd_code_above_sam"] == want["dd_avg_below_sam"] == n
    assert want["dd_paper_below_avg"] < n
    assert want["dd"][CODE] == max(v for m, v in want["dd"].items() if m != BUG)
    assert want["bug_acc"] < want["bug_code_acc"] - 5 and want["bug_dd_ratio"] > 2


def test_07_toy_paragraph_matches_the_committed_data():
    curve = defaultdict(dict)  # (participation, method) -> round -> distance
    for r in _rows("07_toy_momentum"):
        curve[float(r["participation"]), r["method"]][int(r["round"])] = _f(r, "distance")
    full = {m: [d[t] for t in sorted(d)] for (p, m), d in curve.items() if p == 1.0}
    half = {m: [d[t] for t in sorted(d)] for (p, m), d in curve.items() if p == 0.5}
    last = 10
    target = full["FedAvg"][-1]
    want = {"rounds": len(full["FedAvg"]) - 1, "last": last,
            "falling": {m: sum(full[m][t] < full[m][t - 1] for t in range(len(full[m]) - last, len(full[m])))
                        for m in ("FedAvg", "FedSAM")},
            "earlier": {m: full[m][-1 - last] for m in ("FedAvg", "FedSAM")},
            "final": {m: full[m][-1] for m in ("FedAvg", "FedSAM", PAPER)},
            "catch_up": next(t for t, d in enumerate(full[CODE]) if d <= target),
            "paper_closest": min(full[PAPER]),
            "half_floor": {m: _mean(half[m][-last:]) for m in ("FedAvg", CODE, BUG)},
            "full_floor_code": _mean(full[CODE][-last:])}
    _same(_line(STEM)["toy"], want, "07 toy")
    assert want["falling"] == {"FedAvg": last, "FedSAM": last}, "FedAvg and FedSAM still approach θ* at the end"
    assert 0 < want["catch_up"] < want["rounds"]
    assert want["final"][PAPER] > 1.5 * want["paper_closest"]
    hf = want["half_floor"]
    assert hf[CODE] > 2 * max(want["full_floor_code"], hf["FedAvg"]) and hf["FedAvg"] < hf[BUG] < hf[CODE]
