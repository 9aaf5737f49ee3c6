"""The paragraphs of notebook 08 that read the committed cpu run, against the committed cpu data.

Notebook 08 prints the numbers of its cpu paragraphs (sections 1, 3, 4 and 5) as one ``cpu_lessons: {...}`` line,
computed there from ``figures/08_fedvssam_*.csv`` (and, for the protocol's final metric, through the claims
evaluator from the committed run records) and checked by asserts on every direction the paragraphs state. This
module reads that line from the committed ``.ipynb`` and recomputes every number another way: plain loops over the
CSV rows, and for the protocol's metric the run records themselves (``figures/records/*.json.gz``, the test
accuracy of the last rounds averaged by hand), paired by seed here. The directions are checked again on the
recomputed numbers.
"""
from __future__ import annotations

import gzip
import json
import math
import statistics
from collections import defaultdict

from _cpu_lessons import f as _f
from _cpu_lessons import stated_window as _stated_window
from _cpu_lessons import line as _line
from _cpu_lessons import mean as _mean
from _cpu_lessons import rows as _rows
from _cpu_lessons import same as _same
from scipy import stats

from lab.repro import FIGURES_DIR

STEM = "08_fedvssam"
FULL, BASE, GU = "full (LF + LU + GU)", "base (= FedSAM)", "GU only"
VS = {"gu_only": GU, "lu_gu": "LU + GU", "lf_lu": "LF + LU", "base": BASE}


def _paired(left: dict, right: dict) -> dict:
    """Mean of left − right over the common seeds, its 95 % t-interval and the count of positive differences."""
    diffs = [left[s] - right[s] for s in sorted(set(left) & set(right))]
    n = len(diffs)
    m = sum(diffs) / n
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    return {"mean": m, "low": m - half, "high": m + half, "positive": sum(d > 0 for d in diffs), "n": n}


def _figure_accuracy() -> dict[str, dict[int, float]]:
    acc: dict[str, dict[int, float]] = defaultdict(dict)
    for r in _rows("08_fedvssam_ablation", "per_seed"):
        if r["status"] == "finished":
            acc[r["row"]][int(float(r["seed"]))] = 100 * _f(r, "final_acc")
    return acc


def _protocol_accuracy() -> dict[str, dict[int, float]]:
    """Each ablation row's final metric per seed, from its committed run records: the mean test accuracy of the
    last k rounds (every round is evaluated on the full test set in the rerun's regime), k the window the
    notebook states."""
    sidecar = json.loads((FIGURES_DIR / "08_fedvssam_ablation.json").read_text())
    k = 0
    acc: dict[str, dict[int, float]] = defaultdict(dict)
    for key in sidecar["records"]:
        with gzip.open(FIGURES_DIR / "records" / f"{key}.json.gz", "rt") as fh:
            record = json.load(fh)
        cfg = record["config"]["config"]
        k = k or _stated_window(STEM, int(cfg["rounds"]))
        cols = record["metrics"]["columns"]
        by_round = {int(row[cols.index("round")]): row[cols.index("test_acc")] for row in record["metrics"]["data"]}
        last = [by_round[cfg["rounds"] - j] for j in range(k)]
        assert all(v is not None and math.isfinite(v) for v in last), f"{key}: the last {k} rounds not all evaluated"
        acc[sidecar["configs"][key]["name"]][int(cfg["seed"])] = 100 * sum(last) / k
    return acc


def test_08_ablation_paragraph_matches_the_committed_data():
    got = _line(STEM)["ablation"]
    for name, acc in (("figure", _figure_accuracy()), ("protocol", _protocol_accuracy())):
        want = {k: _paired(acc[FULL], acc[row]) for k, row in VS.items()}
        want["gu_only_vs_base"] = _paired(acc[GU], acc[BASE])
        _same(got[name], want, f"08 ablation ({name})")
        assert all(v["n"] == got["seeds"] == 6 for v in want.values())
        assert want["gu_only"]["high"] < 0
        assert want["lu_gu"]["high"] < 0 and want["lu_gu"]["positive"] == 0
        assert want["lf_lu"]["low"] > 0 and want["lf_lu"]["positive"] == 6
        assert want["gu_only_vs_base"]["low"] > 0 and want["gu_only_vs_base"]["positive"] == 6
        assert want["base"]["low"] < 0 < want["base"]["high"] and want["base"]["high"] < 4
    # the figure plots the protocol's metric: its 6-digit CSV and the records agree to 1e-3 points
    for k in got["figure"]:
        assert all(abs(got["figure"][k][q] - got["protocol"][k][q]) < 1e-3 for q in ("mean", "low", "high")), k
    # the paired verdicts the paragraph names follow from these intervals
    assert got["paired_verdicts"] == {"fedvssam_full_above_ablations": "fails",
                                      "fedvssam_full_above_base": "inconclusive",
                                      "fedvssam_gu_only_above_base": "holds"}


def test_08_h_tracking_paragraph_matches_the_committed_data():
    rows = _rows("08_fedvssam_h_tracking", "h_tracking")
    later = [r for r in rows if int(float(r["round"])) > 0]
    fresh = [r for r in rows if r["|d - gradF|^2"] != ""]
    rel = [_f(r, "|h - gradF|^2") / _f(r, "|gradF|^2") for r in later]
    params = json.loads((FIGURES_DIR / "08_fedvssam_h_tracking.json").read_text())["parameters"]
    want = {"rounds": len(later), "beta_T": params["gamma_l"] * params["gamma_g"] * params["rounds"],
            "beats_zero": sum(_f(r, "|h - gradF|^2") < _f(r, "|gradF|^2") for r in later),
            "rel_median": statistics.median(rel), "rel_min": min(rel), "rel_max": max(rel),
            "h_share_median": statistics.median(_f(r, "|h|^2") / _f(r, "|gradF|^2") for r in later),
            "cos_median": statistics.median(_f(r, "cos(h, gradF)") for r in later),
            "cos_positive": sum(_f(r, "cos(h, gradF)") > 0 for r in later),
            "d_rounds": len(fresh), "d_cos_median": statistics.median(_f(r, "cos(d, gradF)") for r in fresh),
            "d_beats_zero": sum(_f(r, "|d - gradF|^2") < _f(r, "|gradF|^2") for r in fresh),
            "d_rel_median": statistics.median(_f(r, "|d - gradF|^2") / _f(r, "|gradF|^2") for r in fresh)}
    _same(_line(STEM)["h_tracking"], want, "08 h tracking")
    assert want["beats_zero"] < want["rounds"] / 2 and 0.9 < want["rel_min"] and want["rel_max"] < 1.1
    assert want["h_share_median"] < 0.01 and want["cos_median"] < 0 and want["cos_positive"] < want["rounds"] / 2
    assert want["d_cos_median"] > 0 and want["d_beats_zero"] > want["d_rounds"] / 2 and 0.5 < want["d_rel_median"] < 1


def test_08_step_mse_paragraph_matches_the_committed_data():
    """Section 4 pools every client sampled in the last round of the tracked seeds' runs: the pooled rows and
    ratios are recomputed here from the per-client rows (means and sums by hand)."""
    cells = _rows("08_fedvssam_step_mse", "step_error_cells")
    err = {(_f(r, "gamma_l"), r["direction"]): r for r in _rows("08_fedvssam_step_mse", "step_error")}
    rat = {(_f(r, "gamma_l"), r["num"], r["den"]): r for r in _rows("08_fedvssam_step_mse", "ratios")}
    params = json.loads((FIGURES_DIR / "08_fedvssam_step_mse.json").read_text())["parameters"]
    by_cell: dict[tuple[float, str], dict[tuple[int, int], dict]] = defaultdict(dict)
    for r in cells:
        by_cell[_f(r, "gamma_l"), r["direction"]][int(float(r["seed"])), int(float(r["client"]))] = r
    keys = sorted(by_cell[1.0, "FedSAM, step η"])
    assert len(keys) == params["cells"] and {s for s, _ in keys} == set(params["seeds"])
    for (gl, direction), per in by_cell.items():  # the pooled row is the mean over the clients
        assert sorted(per) == keys
        for col in ("MSE", "bias^2", "Var"):
            assert math.isclose(_f(err[gl, direction], col), _mean([_f(per[k], col) for k in keys]), rel_tol=1e-4)
    plain = by_cell[1.0, "FedSAM, step η"]
    by = {}
    for gl in sorted({g for g, _, _ in rat}):
        assert gl < 1
        pick = {"rescaled": ("FedSAM, step γ_l·η", "FedSAM, step η"),
                "vs_rescaled": ("FedVSSAM", "FedSAM, step γ_l·η"),
                "vs_momentum": ("FedVSSAM", "FedSAM, step γ_l·η + (1−γ_l)·h")}
        by[f"{gl:g}"] = {}
        for k, (n, d) in pick.items():
            num, den = by_cell[gl, n], by_cell[gl, d]
            ratio = sum(_f(num[c], "MSE") for c in keys) / sum(_f(den[c], "MSE") for c in keys)
            assert math.isclose(ratio, _f(rat[gl, n, d], "ratio"), rel_tol=1e-4)
            per_cell = [_f(num[c], "MSE") / _f(den[c], "MSE") for c in keys]
            by[f"{gl:g}"][k] = {"ratio": ratio, "verdict": rat[gl, n, d]["verdict"], "cell_min": min(per_cell),
                                "cell_max": max(per_cell), "cells_lower": int(float(rat[gl, n, d]["cells_lower"])),
                                "cells_higher": int(float(rat[gl, n, d]["cells_higher"]))}
        snrs = [_f(by_cell[gl, "FedVSSAM"][c], "SNR") for c in keys]
        by[f"{gl:g}"]["snr"] = _mean([v for v in snrs if math.isfinite(v)])
    want = {"cells": len(keys), "seeds": len({s for s, _ in keys}), "batches": params["variance_batches"],
            "bias_share": sum(_f(plain[c], "bias^2") for c in keys) / sum(_f(plain[c], "MSE") for c in keys),
            "snr_fedsam": _mean([v for v in (_f(plain[c], "SNR") for c in keys) if math.isfinite(v)]),
            "bias_most": sum(_f(plain[c], "bias^2") > _f(plain[c], "Var") for c in keys),
            "against": sum(_f(plain[c], "cos(mean, gradF)") < 0 for c in keys), "by_gamma": by,
            "gap_max": max(abs(v["vs_rescaled"]["ratio"] - 1) for v in by.values()),
            "cell_gap_max": max(max(abs(v["vs_rescaled"]["cell_min"] - 1), abs(v["vs_rescaled"]["cell_max"] - 1))
                                for v in by.values()),
            "momentum_gap_max": max(abs(v["vs_momentum"]["ratio"] - 1) for v in by.values())}
    _same(_line(STEM)["step_mse"], want, "08 step MSE")
    assert want["seeds"] >= 3 and want["bias_share"] > 0.5 and want["gap_max"] < 0.02
    for v in by.values():
        assert v["rescaled"]["verdict"] == "lower" and v["rescaled"]["ratio"] < 1
        assert v["vs_rescaled"]["ratio"] >= 1, "the paragraph says mixing h in never lowers the pooled error"
        assert v["snr"] <= want["snr_fedsam"]
    assert want["momentum_gap_max"] < 0.001


def test_08_gamma_sweep_paragraph_matches_the_committed_data():
    acc: dict[float, dict[int, float]] = defaultdict(dict)
    for r in _rows("08_fedvssam_gamma_variance", "sweep_per_seed"):
        if r["status"] == "finished":
            acc[_f(r, "gamma_l")][int(float(r["seed"]))] = 100 * _f(r, "final_acc")
    seeds = sorted(next(iter(acc.values())))
    assert all(sorted(v) == seeds for v in acc.values())
    fedavg = _figure_accuracy()["FedAvg"]
    tuned = json.loads((FIGURES_DIR / "08_fedvssam_ablation.json").read_text())["parameters"]["gamma_l"]
    means = {f"{gl:g}": _mean(v.values()) for gl, v in acc.items()}
    low = min(acc)
    rest = [_mean(v.values()) for gl, v in acc.items() if gl >= tuned]
    var_all = _rows("08_fedvssam_gamma_variance", "variance")
    fedsam_var = next(_f(r, "Var[u]") for r in var_all if _f(r, "gamma_l") == 1.0)  # γ_l = 1: u = g̃ of FedSAM
    var = [r for r in var_all if _f(r, "gamma_l") < 1]
    want = {"seeds": len(seeds), "mean": means, "fedavg": _mean(fedavg[s] for s in seeds), "lowest": low,
            "tuned": float(tuned),
            "lowest_every_seed": sum(min(acc, key=lambda gl: acc[gl][s]) == low for s in seeds),
            "spread_from_tuned": max(rest) - min(rest),
            "var_ratio_min": min(_f(r, "Var[g~]/Var[g~]_FedSAM") for r in var),
            "var_ratio_max": max(_f(r, "Var[g~]/Var[g~]_FedSAM") for r in var),
            "var_contains_1": sum(_f(r, "ratio_low") <= 1 <= _f(r, "ratio_high") for r in var), "var_gammas": len(var),
            "step_share": {f"{_f(r, 'gamma_l'):g}": _f(r, "Var[u]") / fedsam_var for r in var}}
    _same(_line(STEM)["gamma_sweep"], want, "08 γ_l sweep")
    assert want["lowest_every_seed"] == want["seeds"] and means[f"{low:g}"] == min(means.values())
    assert want["spread_from_tuned"] < 1.0
    assert max(abs(want["var_ratio_min"] - 1), abs(want["var_ratio_max"] - 1)) < 1e-3
    assert all(abs(v - float(k) ** 2) < 0.01 * float(k) ** 2 for k, v in want["step_share"].items())
