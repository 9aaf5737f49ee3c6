"""Notebook 10's cpu paragraphs (the benchmark, its last rounds, its cost to target) against the committed cpu data.

The notebook computes them with pandas pivots; here every number is recomputed with plain loops over the rows of
``figures/10_*.csv`` (helpers: ``_cpu_lessons.py``) and the directions its text states are asserted again.
"""
from __future__ import annotations

import csv
from collections import defaultdict

from _cpu_lessons import f, line, mean, rows, same, stated_window

from lab.evidence.protocol import final_rounds
from lab.repro import FIGURES_DIR

STEM = "10_benchmarks"


def _against_fedavg(split: str) -> dict:
    acc, status = defaultdict(dict), defaultdict(dict)  # method -> seed -> value
    for r in rows("10_benchmarks_bars_fmnist", "per_seed"):
        if r["split"] == split:
            status[r["method"]][r["seed"]] = r["status"]
            if r["status"] == "finished":
                acc[r["method"]][r["seed"]] = f(r, "final_acc")
    out = {}
    for m, by_seed in acc.items():
        diffs = [100 * (v - acc["fedavg"][s]) for s, v in by_seed.items() if s in acc["fedavg"]]
        out[m] = {"mean": 100 * mean(by_seed.values()), "diff": mean(diffs), "above": sum(d > 0 for d in diffs),
                  "equal": sum(d == 0 for d in diffs), "largest": max(abs(d) for d in diffs), "paired": len(diffs),
                  "seeds": len(status[m]),
                  "lost": sum(v != "finished" for v in status[m].values())}
    return out


def test_10_bars_paragraph_matches_the_committed_data():
    got = line(STEM)["bars"]
    b01, b05 = _against_fedavg("Dir 0.1"), _against_fedavg("Dir 0.5")
    same(got["dir01"], b01, "10 bars Dir 0.1")
    same(got["dir05"], b05, "10 bars Dir 0.5")
    assert set(got["dir01"]) == set(b01) and set(got["dir05"]) == set(b05)
    for m in ("scaffold", "feddyn"):
        assert b01[m]["above"] == b01[m]["paired"] == 6
    assert b01["fedsam"]["above"] == b01["fedsam"]["paired"]
    assert 0 < b01["fedsam"]["diff"] < min(b01["scaffold"]["diff"], b01["feddyn"]["diff"])
    assert b01["mofedsam"]["above"] == 0 and b05["mofedsam"]["above"] == 0
    ranked = sorted((m for m in b01 if b01[m]["lost"] == 0), key=lambda m: b01[m]["mean"], reverse=True)
    # the best of the methods run on every seed (FedSpeed and the adaptive FedSMOO ran on fewer, no claim judging them)
    assert next(m for m in ranked if b01[m]["seeds"] == b01["fedavg"]["seeds"]) == "fedgmt"
    drift = {"scaffold", "fedgamma", "fedmoswa", "feddyn", "fedspeed", "fedsmoo", "fedgmt"}
    assert set(ranked[:5]) <= drift
    assert set(sorted((m for m in b05 if m not in ("fedavg", "mofedsam")), key=lambda m: b05[m]["mean"],
                      reverse=True)[:3]) <= drift
    assert {m for m in b01 if m != "fedavg" and b01[m]["equal"] >= b01[m]["paired"] - 1
            and b01[m]["largest"] < 0.25} == {"fedlesam", "fedswa"}
    assert b01["fedgf"]["mean"] < 20 and b01["fedgf"]["lost"] >= 1
    assert 0 < b01["fedgamma"]["diff"] - b01["scaffold"]["diff"] < 1
    assert 0 < b01["fedsmoo"]["diff"] - b01["feddyn"]["diff"] < 1
    assert max(abs(v["diff"]) for m, v in b05.items() if m not in ("fedavg", "mofedsam")) < b01["scaffold"]["diff"]


def test_10_final_round_paragraph_matches_the_committed_data():
    runs = defaultdict(list)  # (split, method, seed) -> [(round, acc)]
    for r in rows("10_benchmarks_curves_fmnist"):
        if r["status"] == "finished":
            runs[(r["split"], r["method"], r["seed"])].append((int(r["round"]), f(r, "test_acc")))
    last = max(rnd for points in runs.values() for rnd, _ in points)
    gaps = defaultdict(list)
    for (split, _, _), points in runs.items():
        points.sort()
        tail = [a for rnd, a in points if rnd > 0.8 * last]
        gaps[split].append(100 * (points[-1][1] - mean(tail)))
    want = {s: {"runs": len(g), "mean": mean(g), "largest": max(abs(x) for x in g), "below": sum(x < 0 for x in g)}
            for s, g in gaps.items()}
    same(line(STEM)["final_round"], want, "10 final round")
    assert want["Dir 0.1"]["largest"] > 2 * want["Dir 0.5"]["largest"]


def test_10_cost_paragraph_matches_the_committed_data():
    with open(FIGURES_DIR / "10_benchmarks_cpu.csv", newline="") as fh:
        target = 100 * float(next(csv.DictReader(fh))["target"])
    first = {}
    for r in sorted(rows("10_cost_accuracy_fmnist"), key=lambda r: int(r["round"])):
        if f(r, "acc_pct") >= target and r["algorithm"] not in first:
            first[r["algorithm"]] = {"round": int(r["round"]), "grads": f(r, "grad_evals"), "mb": f(r, "comm_mb")}
    same(line(STEM)["to_target"], {"target": target, **first}, "10 to target")
    assert min(first, key=lambda m: first[m]["grads"]) == "scaffold"
    assert first["scaffold"]["mb"] > first["fedavg"]["mb"]
    assert first["fedsam"]["grads"] == max(v["grads"] for v in first.values())
    assert min(first, key=lambda m: (first[m]["round"], first[m]["mb"])) == "fednsam"
    assert first["fednsam"]["mb"] == min(v["mb"] for v in first.values())


def _step_comparison(k: int) -> dict:
    """FedVSSAM − FedSAM at η = γ_l·η (Dir 0.1), paired by seed, on the mean test accuracy (points) of the last k
    rounds of each committed record of 10_claim_arms_fmnist: mean and its 95 % paired t-interval."""
    import gzip
    import json

    from scipy import stats

    sidecar = json.loads((FIGURES_DIR / "10_claim_arms_fmnist.json").read_text())
    step = sidecar["parameters"]["small_step"]
    arms: dict = defaultdict(dict)  # arm -> seed -> value
    for key in sidecar["records"]:
        with gzip.open(FIGURES_DIR / "records" / f"{key}.json.gz", "rt") as fh:
            record = json.load(fh)
        cfg, cols = record["config"]["config"], record["metrics"]["columns"]
        arm = ("vssam" if cfg["algorithm"] == "fedvssam" else "step" if cfg["algorithm"] == "fedsam"
               and cfg["lr"] == step else None)  # FedSAM at its tuned ρ, at the small step
        if arm is None or cfg["alpha"] != 0.1 or record["summary"]["status"] != "finished":
            continue
        acc = {int(r[cols.index("round")]): r[cols.index("test_acc")] for r in record["metrics"]["data"]}
        arms[arm].setdefault(int(cfg["seed"]), 100 * mean(acc[cfg["rounds"] - j] for j in range(k)))
    diffs = [arms["vssam"][s] - arms["step"][s] for s in sorted(arms["vssam"]) if s in arms["step"]]
    half = stats.t.ppf(0.975, len(diffs) - 1) * stats.tstd(diffs) / len(diffs) ** 0.5
    return {"diff": mean(diffs), "low": mean(diffs) - half, "high": mean(diffs) + half, "n": len(diffs)}


def test_10_claim_arms_paragraph_matches_the_committed_data():
    import json

    diff = defaultdict(dict)  # arm -> seed -> points above FedAvg
    for r in rows("10_claim_arms_fmnist"):
        if r["status"] == "finished":
            diff[r["arm"]][r["seed"]] = f(r, "diff_points")
    step = json.loads((FIGURES_DIR / "10_claim_arms_fmnist.json").read_text())["parameters"]["small_step"]
    names = {"sam": "FedSAM", "vssam": "FedVSSAM", "rho01": "FedSAM, ρ = 0.1", "step": f"FedSAM, η = γ_l·η = {step:g}"}
    want = {k: {"diff": mean(diff[v].values()), "above": sum(x > 0 for x in diff[v].values()), "seeds": len(diff[v])}
            for k, v in names.items()}
    gaps = [x - diff[names["step"]][s] for s, x in diff[names["vssam"]].items()]
    want["vssam_minus_step"] = {"diff": mean(gaps), "above": sum(g > 0 for g in gaps), "seeds": len(gaps)}
    with open(FIGURES_DIR / "claims_cpu.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == "fedvssam_above_fedsam_small_step")
    k = stated_window(STEM, 100)
    if k == len(final_rounds(100)):  # the notebook quotes the claims table as it is
        want["protocol_vs_step"] = {"diff": float(row["mean"]), "low": float(row["low"]), "high": float(row["high"]),
                                    "n": int(row["n"]), "verdict": row["paired_verdict"]}
    else:  # outputs executed before issue 41: the same comparison over the last k rounds, from the records
        want["protocol_vs_step"] = _step_comparison(k) | {"verdict": row["paired_verdict"]}
    same(line(STEM)["claim_arms"], want, "10 claim arms")
    assert want["rho01"]["diff"] > 0 and want["step"]["diff"] < want["sam"]["diff"] and want["vssam"]["diff"] < want["sam"]["diff"]
    # the figure plots the protocol's final metric: its paired difference is the claims table's (6 significant digits)
    assert abs(want["vssam_minus_step"]["diff"] - want["protocol_vs_step"]["diff"]) < 1e-3
    assert want["protocol_vs_step"]["low"] < 0 < want["protocol_vs_step"]["high"]
