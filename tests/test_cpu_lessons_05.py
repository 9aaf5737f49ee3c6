"""The cpu paragraphs of notebook 05 (FedSMOO) against the committed cpu data.

The notebook prints the numbers of its cpu paragraphs as one ``cpu_lessons: {...}`` line, computed there with
pandas from ``figures/05_*.csv`` (and the rerun's tuning file of the blog variant) and checked by asserts on every
direction the paragraphs state. Each test below reads that line from the committed ``.ipynb`` and recomputes its
numbers another way — plain loops over the rows of the same files — then checks the directions again on the
recomputed numbers.
"""
from __future__ import annotations

import json
from collections import defaultdict

from _cpu_lessons import f as _f
from _cpu_lessons import final_window as _final_window
from _cpu_lessons import line as _line
from _cpu_lessons import mean as _mean
from _cpu_lessons import rows as _rows
from _cpu_lessons import same as _same

from lab.repro import FIGURES_DIR

TUNING = "rerun/tuning/dirichlet-0.1/fedsmoo_adaptive"


def _got(key: str) -> dict:
    return _line("05_fedsmoo")[key]


def _params(figure: str) -> dict:
    return json.loads((FIGURES_DIR / f"{figure}.json").read_text())["parameters"]["algorithm_params"]


def _final_accuracy() -> dict[str, dict[int, float]]:
    """The claims table's final metric per method and seed: the mean test accuracy (%) of the last k rounds, k the
    window the notebook's committed line states (_cpu_lessons.final_window)."""
    table = _rows("05_fedsmoo_curves", "test_acc_pct_per_seed")
    last = max(int(r["round"]) for r in table)
    k = _final_window(_got("curves")["k"], last, "05 curves")
    tails: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in table:
        if int(r["round"]) > last - k:
            tails[r["method"]][int(float(r["seed"]))].append(_f(r, "test_acc_pct"))
    assert all(len(v) == k for seeds in tails.values() for v in seeds.values())
    return {m: {s: _mean(v) for s, v in seeds.items()} for m, seeds in tails.items()}


def _paired(values: dict[str, dict[int, float]], left: str, right: str) -> dict:
    diffs = [values[left][s] - values[right][s] for s in sorted(values[left]) if s in values[right]]
    return {"seeds": len(diffs), "mean": _mean(diffs), "min": min(diffs), "max": max(diffs),
            "positive": sum(d > 0 for d in diffs)}


def test_05_quadratic_paragraph_matches_the_committed_data():
    table = _rows("05_quadratic_drift")
    last = max(int(r["round"]) for r in table)
    final = {r["method"]: _f(r, "distance") for r in table if int(r["round"]) == last}
    _same(_got("quadratic"), {"rounds": last, "final": final}, "05 quadratic")
    assert abs(final["fedsam"] - final["fedavg"]) < 0.05 * final["fedavg"]
    assert final["fedsmoo_adaptive"] > 1.5 * final["fedavg"]
    assert final["feddyn"] < 1e-9 < final["fedspeed"] < final["fedsmoo"] < 0.1 * final["fedavg"]


def test_05_curves_paragraph_matches_the_committed_data():
    final = _final_accuracy()
    params = _params("05_fedsmoo_curves")
    warmup = int(params["fedsmoo_adaptive"]["warmup_rounds"])
    same_in_warmup, compared = True, 0
    for panel, col in (("train_loss_per_seed", "train_loss"), ("test_acc_pct_per_seed", "test_acc_pct")):
        values: dict[tuple, dict[str, float]] = defaultdict(dict)
        for r in _rows("05_fedsmoo_curves", panel):
            if int(r["round"]) <= warmup:
                values[(int(float(r["seed"])), int(r["round"]))][r["method"]] = _f(r, col)
        for v in values.values():
            if "fedsmoo_adaptive" in v:
                compared += 1
                same_in_warmup &= v["fedsmoo_adaptive"] == v["fedavg"]
    assert compared == 2 * warmup * len(final["fedsmoo_adaptive"])
    want = {"k": _got("curves")["k"], "warmup": warmup, "warmup_is_fedavg": same_in_warmup,
            "lam": {m: float(params[m]["lam"]) for m in ("feddyn", "fedspeed", "fedsmoo")},
            "pairs": {f"{a}-{b}": _paired(final, a, b) for a, b in (
                ("fedsmoo", "fedsam"), ("feddyn", "fedsam"), ("fedsmoo", "feddyn"), ("fedspeed", "feddyn"),
                ("fedsmoo", "fedspeed"), ("fedsmoo_adaptive", "fedavg"), ("fedsmoo_adaptive", "fedsmoo"))}}
    _same(_got("curves"), want, "05 curves")
    p = want["pairs"]
    assert p["fedsmoo-fedsam"]["positive"] == p["fedsmoo-fedsam"]["seeds"] == 6
    assert p["feddyn-fedsam"]["positive"] == p["feddyn-fedsam"]["seeds"]
    assert 0 < p["fedsmoo-feddyn"]["mean"] < 0.1 * p["fedsmoo-fedsam"]["mean"]
    assert 0 < p["fedsmoo-feddyn"]["positive"] < p["fedsmoo-feddyn"]["seeds"]
    assert 0 < p["fedspeed-feddyn"]["positive"] < p["fedspeed-feddyn"]["seeds"]
    assert p["fedsmoo-fedspeed"]["positive"] == 0 and p["fedsmoo_adaptive-fedsmoo"]["positive"] == 0
    assert p["fedsmoo_adaptive-fedavg"]["positive"] == p["fedsmoo_adaptive-fedavg"]["seeds"]
    assert want["warmup_is_fedavg"] and want["lam"]["fedspeed"] == want["lam"]["fedsmoo"]


def test_05_adaptive_paragraph_matches_the_committed_data():
    params = _params("05_adaptive_lambda_rho")
    warmup, rho_max = int(params["warmup_rounds"]), float(params["rho_max"])
    lam_ceiling = 0.3  # fedsmoo_adaptive's clip range [0.01, 0.3], as the notebook's §3 states
    post = [r for r in _rows("05_adaptive_lambda_rho", "per_seed") if int(r["round"]) > warmup]
    lams = [_f(r, "lambda_k_mean") for r in post]
    by_round: dict[int, list[float]] = defaultdict(list)
    for r in post:
        by_round[int(r["round"])].append(_f(r, "lambda_k_mean"))
    per_round = [_mean(by_round[k]) for k in sorted(by_round)]
    grid = sorted(_rows(TUNING), key=lambda r: _f(r, "rho_max"))
    meta = json.loads((FIGURES_DIR / f"{TUNING}.json").read_text())
    want = {"seeds": len({r["seed"] for r in _rows("05_adaptive_lambda_rho", "per_seed")}), "warmup": warmup,
            "rho_max": rho_max, "lam_ceiling": lam_ceiling,
            "score_floor": 100 * _f(grid[0], "score"), "score_top": 100 * _f(grid[-1], "score"),
            "lam_min": min(lams), "lam_max": max(lams), "at_ceiling": sum(v >= lam_ceiling - 1e-6 for v in lams),
            "lam_first10": _mean(per_round[:10]), "lam_last10": _mean(per_round[-10:]),
            "rho_min": min(_f(r, "rho_k_mean") for r in post), "rho_max_seen": max(_f(r, "rho_k_mean") for r in post),
            "fedsam_rho": float(_params("05_fedsmoo_curves")["fedsam"]["rho"])}
    got = _got("adaptive")
    _same(got, want, "05 adaptive")
    assert got["grid"] == [_f(r, "rho_max") for r in grid]
    assert got["declared"] == meta["protocol"]["declared_grid"]["rho_max"]
    assert rho_max == min(got["grid"]) < min(got["declared"]) and "rho_max" in meta["protocol"]["on_edge"]
    assert all(_f(b, "score") < _f(a, "score") for a, b in zip(grid, grid[1:]))
    assert want["at_ceiling"] == 0 and want["lam_max"] < lam_ceiling
    assert want["lam_last10"] > want["lam_first10"] and want["rho_max_seen"] < rho_max
