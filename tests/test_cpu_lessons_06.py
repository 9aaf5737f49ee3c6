"""The paragraphs of notebook 06 that read the committed cpu run, against the committed cpu data.

The notebook prints the numbers of its cpu paragraphs (§1, §5, §6, §7) as one ``cpu_lessons: {...}`` line, computed
with pandas from ``figures/06_*.csv`` and checked there by asserts. Each test here reads that line from the committed
``.ipynb`` and recomputes its numbers another way, with plain loops over the CSV rows (helpers in
``_cpu_lessons.py``), then checks again every direction the paragraphs state.
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

from _cpu_lessons import f as _f
from _cpu_lessons import final_window as _final_window
from _cpu_lessons import line as _line
from _cpu_lessons import mean as _mean
from _cpu_lessons import rows as _rows
from _cpu_lessons import same as _same

from lab.repro import FIGURES_DIR

STEM = "06_fedswa_fedmoswa"


def _params(name: str) -> dict:
    return json.loads((FIGURES_DIR / f"{name}.json").read_text())["parameters"]


def _final(name: str) -> dict:
    """method -> seed -> the mean test accuracy (%) over the last k rounds of its curve, k the window the notebook's
    committed line states (_cpu_lessons.final_window)."""
    curve = _rows(name, "test_acc_pct_per_seed")
    last = max(int(r["round"]) for r in curve)
    k = _final_window(_line(STEM)["fedswa_vs_fedsam"]["k"], last, f"06 {name}")
    acc = defaultdict(lambda: defaultdict(list))
    for r in curve:
        if int(r["round"]) > last - k:
            acc[r["method"]][int(float(r["seed"]))].append(_f(r, "test_acc_pct"))
    return {m: {s: _mean(v) for s, v in by_seed.items()} for m, by_seed in acc.items()}


def test_06_cyclic_lr_paragraph_matches_the_committed_data():
    par, table = _params("06_cyclic_lr"), _rows("06_cyclic_lr")
    k = int(par["local_steps"])
    last = {f"{float(r['rho']):g}": _f(r, "eta") for r in table if int(r["step"]) == k - 1}
    rho1 = [_f(r, "eta") for r in table if float(r["rho"]) == 1.0]
    swa = _params("06_fedswa_vs_fedsam")["algorithm_params"]["fedswa"]
    want = {"K": k, "lr": float(par["lr"]), "last_eta": last, "rho1_spread": max(rho1) - min(rho1),
            "tuned_rho": float(swa["rho"]), "tuned_alpha": float(swa["alpha"])}
    _same(_line(STEM)["cyclic_lr"], want, "06 cyclic lr")
    assert want["rho1_spread"] == 0 and last["1"] == want["lr"] and last["0.1"] < 0.2 * want["lr"]
    assert want["tuned_rho"] == 1.0


def _record_losses(name: str) -> dict:
    """(algorithm, seed) -> the training loss of every round, at full precision, read with gzip and json from the
    records the figure's sidecar names (not through lab's loader)."""
    out = {}
    for key in json.loads((FIGURES_DIR / f"{name}.json").read_text())["records"]:
        with gzip.open(FIGURES_DIR / "records" / f"{key}.json.gz", "rt") as fh:
            rec = json.load(fh)
        cols = rec["metrics"]["columns"]
        table = [dict(zip(cols, row)) for row in rec["metrics"]["data"]]
        out[rec["config"]["config"]["algorithm"], rec["meta"]["seed"]] = {r["round"]: r["train_loss"] for r in table}
    return out


def test_06_fedswa_vs_fedsam_paragraph_matches_the_committed_data():
    fin = _final("06_fedswa_vs_fedsam")
    curves = defaultdict(dict)  # (panel, seed, round) -> method -> value
    for panel, col in (("test_acc_pct_per_seed", "test_acc_pct"), ("train_loss_per_seed", "train_loss")):
        for r in _rows("06_fedswa_vs_fedsam", panel):
            curves[panel, r["seed"], r["round"]][r["method"]] = _f(r, col)
    assert all({"fedavg", "fedswa"} <= set(v) for v in curves.values())
    par = _params("06_fedswa_vs_fedsam")["algorithm_params"]
    seeds = sorted(fin["fedsam"])
    gaps = [fin["fedsam"][s] - fin["fedswa"][s] for s in seeds]
    want = {"seeds": len(seeds), "k": _line(STEM)["fedswa_vs_fedsam"]["k"], "swa_rho": float(par["fedswa"]["rho"]),
            "swa_alpha": float(par["fedswa"]["alpha"]), "sam_rho": float(par["fedsam"]["rho"]),
            "curve_diff": max(abs(v["fedswa"] - v["fedavg"]) for v in curves.values()),
            **_parting(_record_losses("06_fedswa_vs_fedsam")),
            "final": {m: _mean(fin[m].values()) for m in ("fedavg", "fedsam", "fedswa")},
            "sam_minus_swa": _mean(gaps), "sam_ahead": sum(g > 0 for g in gaps), "gap_min": min(gaps),
            "gap_max": max(gaps)}
    _same(_line(STEM)["fedswa_vs_fedsam"], want, "06 FedSWA vs FedSAM")
    assert (want["swa_rho"], want["swa_alpha"]) == (1.0, 1.0)
    assert want["same_seeds"] >= 1 and float(want["first_rel"]) < 1e-6 and want["first_round"] != 1
    assert want["sam_ahead"] == want["seeds"] == 6 and 0 < want["gap_min"] and want["gap_max"] < 1


def _parting(loss: dict) -> dict:
    seeds = sorted(s for a, s in loss if a == "fedswa")
    parted, first, rel = [], [], []
    for s in seeds:
        rounds = [r for r in sorted(loss["fedavg", s]) if loss["fedswa", s][r] != loss["fedavg", s][r]]
        if rounds:
            a, b = loss["fedswa", s][rounds[0]], loss["fedavg", s][rounds[0]]
            parted.append(s), first.append(rounds[0]), rel.append(abs(a - b) / b)
    return {"same_seeds": len(seeds) - len(parted), "parted_seeds": parted, "first_round": min(first, default=0),
            "first_rel": f"{max(rel, default=0.0):.0e}"}


def test_06_ablation_paragraph_matches_the_committed_data():
    cell = {(float(r["rho"]), float(r["alpha"])): 100 * _f(r, "mean") for r in _rows("06_swa_ablation", "mean")}
    acc = {(float(r["rho"]), float(r["alpha"]), int(float(r["seed"]))): _f(r, "final_acc")
           for r in _rows("06_swa_ablation", "per_seed")}
    rhos = sorted({r for r, _ in cell})
    seeds = sorted({s for _, _, s in acc})
    for (r, a), m in cell.items():  # the figure's mean panel is the mean of its per-seed panel
        assert abs(m - 100 * _mean(acc[r, a, s] for s in seeds)) < 1e-3  # the CSV keeps 6 digits
    fin = _final("06_fedswa_vs_fedsam")  # §5's final accuracies (%), recomputed from its curves
    cost = [cell[r, 1.0] - cell[r, 1.5] for r in rhos]
    best = max(cell, key=cell.get)
    want = {"seeds": len(seeds), "cells": {f"{r:g}": {f"{a:g}": cell[r, a] for a in (1.0, 1.5)} for r in rhos},
            "alpha_cost_min": min(cost), "alpha_cost_max": max(cost),
            "alpha_lower": sum(acc[r, 1.5, s] < acc[r, 1.0, s] for r in rhos for s in seeds),
            "pairs": len(rhos) * len(seeds),
            "rho_spread": max(cell[r, 1.0] for r in rhos) - min(cell[r, 1.0] for r in rhos),
            "best_rho": best[0], "best_alpha": best[1], "paper_gap": cell[best] - cell[0.1, 1.5],
            # the CSV keeps 6 digits of a fraction: 1e-3 points
            "fedavg_same": sum(abs(100 * acc[1.0, 1.0, s] - fin["fedavg"][s]) < 1e-3 for s in seeds),
            "fedswa_same": sum(abs(100 * acc[1.0, 1.0, s] - fin["fedswa"][s]) < 1e-3 for s in seeds)}
    _same(_line(STEM)["ablation"], want, "06 ablation")
    assert want["alpha_lower"] == want["pairs"] == 18 and want["rho_spread"] < 0.5 < want["alpha_cost_min"]
    assert best == (1.0, 1.0) and want["fedswa_same"] == want["seeds"]
    assert want["fedavg_same"] == _line(STEM)["fedswa_vs_fedsam"]["same_seeds"]
    assert max(cell[r, 1.5] for r in rhos) < min(cell[r, 1.0] for r in rhos)


def test_06_fedmoswa_paragraph_matches_the_committed_data():
    fin = _final("06_fedmoswa_vs_scaffold")
    par = _params("06_fedmoswa_vs_scaffold")["algorithm_params"]["fedmoswa"]
    seeds = sorted(fin["fedmoswa"])
    vs_swa = [fin["fedmoswa"][s] - fin["fedswa"][s] for s in seeds]
    vs_scaffold = [fin["fedmoswa"][s] - fin["scaffold"][s] for s in seeds]
    want = {"seeds": len(seeds), "rho": float(par["rho"]), "gamma": float(par["gamma"]),
            "final": {m: _mean(fin[m].values()) for m in ("fedavg", "fedswa", "scaffold", "fedmoswa")},
            "vs_fedswa": _mean(vs_swa), "ahead_fedswa": sum(d > 0 for d in vs_swa),
            "vs_scaffold": _mean(vs_scaffold), "ahead_scaffold": sum(d > 0 for d in vs_scaffold),
            "scaffold_vs_fedavg": _mean(fin["scaffold"][s] - fin["fedavg"][s] for s in seeds)}
    _same(_line(STEM)["fedmoswa"], want, "06 FedMoSWA")
    assert want["ahead_fedswa"] == want["seeds"] == 6
    assert abs(want["vs_scaffold"]) < 0.5 and 0 < want["ahead_scaffold"] < want["seeds"]
    assert want["scaffold_vs_fedavg"] > 3 * abs(want["vs_scaffold"])
