"""The paragraphs that read the committed cpu run (notebooks 02 and 03) against the committed cpu data (the
other notebooks' in ``test_cpu_lessons_<NN>.py``, with the helpers of ``_cpu_lessons.py``).

Each of these notebooks prints the numbers of its cpu paragraphs as one ``cpu_lessons: {...}`` line, computed in
the notebook from ``figures/<name>.csv`` and checked there by asserts on every direction the paragraphs state.
This module reads that line from the committed ``.ipynb`` and recomputes every number another way, from the same
CSV files, with plain loops over the rows (02's accuracies from the run records the figure names, which are the
evidence: the CSV's own column holds the models retrained for their θ). A rerun that changes the committed data without rebuilding the notebook,
or a paragraph whose numbers no longer match the figure it sits beside, fails here; the directions are checked
again on the recomputed numbers.
"""
from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict

import pytest
from _cpu_lessons import f as _f
from _cpu_lessons import line as _line
from _cpu_lessons import mean as _mean
from _cpu_lessons import rows as _rows
from _cpu_lessons import same as _same

from lab.repro import FIGURES_DIR


def test_02_misalignment_paragraph_matches_the_committed_data():
    rows = _rows("02_misalignment", "per_seed")
    want = {"seeds": len(rows), "cosine": _mean(_f(r, "cosine") for r in rows),
            "cosine_full": _mean(_f(r, "cosine_full") for r in rows),
            "cosine_max": max(max(_f(r, "cosine"), _f(r, "cosine_full")) for r in rows),
            "batch_excess": _mean(1 - _f(r, "misalignment_full") / _f(r, "misalignment") for r in rows),
            "missed_fraction": _mean(_f(r, "missed_sharpness") / _f(r, "global_sharpness") for r in rows),
            "missed_positive": sum(_f(r, "missed_sharpness") > 0 for r in rows)}
    _same(_line("02_flatness_incompatibility")["misalignment"], want, "02 misalignment")
    assert want["cosine_max"] < 0.5 and abs(want["batch_excess"]) < 0.1
    assert want["missed_positive"] == want["seeds"] and want["missed_fraction"] > 0.5


def _record_accuracy(figure: str) -> dict[tuple[str, float, int], float]:
    """(algorithm, α, seed) -> the final accuracy of each run record behind ``figure``, recomputed from the record
    file itself: the mean test accuracy of the last 20 % of the rounds (every round is evaluated on the full test
    set in the rerun's regime; the notebook reads it through lab.evidence.protocol.final_metric)."""
    sidecar = json.loads((FIGURES_DIR / f"{figure}.json").read_text())
    out = {}
    for key in sidecar["records"]:
        with gzip.open(FIGURES_DIR / "records" / f"{key}.json.gz", "rt") as fh:
            record = json.load(fh)
        cfg, cols = record["config"]["config"], record["metrics"]["columns"]
        by_round = {int(row[cols.index("round")]): row[cols.index("test_acc")] for row in record["metrics"]["data"]}
        last = [by_round[r] for r in range(int(0.8 * cfg["rounds"]) + 1, cfg["rounds"] + 1)]
        assert all(v is not None and math.isfinite(v) for v in last), f"{key}: the last 20 % of rounds not evaluated"
        out[(cfg["algorithm"], float(cfg["alpha"]), int(cfg["seed"]))] = sum(last) / len(last)
    return out


def test_02_sharpness_paragraph_matches_the_committed_data():
    # the accuracy from the run records (issue 41: the CSV's column is that of the models retrained for their θ)
    acc_of = _record_accuracy("02_sharpness_vs_alpha")
    cells = defaultdict(dict)  # (alpha, seed) -> method -> row
    for r in _rows("02_sharpness_vs_alpha", "per_seed"):
        if r["status"] == "finished":
            r = dict(r, final_test_acc=acc_of[(r["method"], float(r["alpha"]), int(float(r["seed"])))])
            cells[(float(r["alpha"]), int(float(r["seed"])))][r["method"]] = r
    got = _line("02_flatness_incompatibility")["sharpness"]
    alphas = sorted({a for a, _ in cells})
    assert sorted(got, key=float) == [f"{a:g}" for a in alphas]
    for a in alphas:
        pairs = [m for (b, _), m in cells.items() if b == a and {"fedavg", "fedsam"} <= set(m)]
        lam = {k: [_f(m[k], "lambda_max") for m in pairs] for k in ("fedavg", "fedsam")}
        dd = {k: [_f(m[k], "flatness_distance") for m in pairs] for k in ("fedavg", "fedsam")}
        acc = [100 * (_f(m["fedsam"], "final_test_acc") - _f(m["fedavg"], "final_test_acc")) for m in pairs]
        want = {"seeds": len(pairs), "lambda_fedavg": _mean(lam["fedavg"]), "lambda_fedsam": _mean(lam["fedsam"]),
                "lambda_lower": sum(s < v for v, s in zip(lam["fedavg"], lam["fedsam"])),
                "reduction": 1 - _mean(lam["fedsam"]) / _mean(lam["fedavg"]), "acc_diff": _mean(acc),
                "dd_fedavg": _mean(dd["fedavg"]), "dd_fedsam": _mean(dd["fedsam"]),
                "dd_higher": sum(s > v for v, s in zip(dd["fedavg"], dd["fedsam"]))}
        _same(got[f"{a:g}"], want, f"02 sharpness α = {a:g}")
        assert want["lambda_lower"] == want["seeds"] == 6 and want["dd_higher"] == want["seeds"]
        assert want["acc_diff"] > 0 and got[f"{a:g}"]["acc_low"] <= want["acc_diff"] <= got[f"{a:g}"]["acc_high"]
    assert got[f"{alphas[0]:g}"]["reduction"] >= got[f"{alphas[-1]:g}"]["reduction"]
    assert got[f"{alphas[0]:g}"]["acc_low"] > 0
    for key in ("dd_fedavg", "dd_fedsam"):
        values = [got[f"{a:g}"][key] for a in alphas]
        assert values == sorted(values)


def test_03_decomposition_paragraph_matches_the_committed_data():
    rows = _rows("03_decomposition", "per_seed")
    shares = [_f(r, "heterogeneity_share") for r in rows]
    want = {"seeds": len(rows), "share": _mean(shares), "share_min": min(shares), "share_max": max(shares),
            "ratio": _mean(_f(r, "delta_sq") / _f(r, "zeta_sq") for r in rows),
            "cross_max": max(abs(_f(r, "cross_normalized")) for r in rows)}
    _same(_line("03_friendly_adversary")["decomposition"], want, "03 decomposition")
    assert want["share_min"] > 0.75 and want["cross_max"] < 0.02


def test_03_pairs_paragraph_matches_the_committed_data():
    counts = defaultdict(lambda: [0, 0])
    for r in _rows("03_friendly_pairs"):
        counts[r["pair"]][0] += 1
        counts[r["pair"]][1] += _f(r, "loss_change") < 0
    want = {k: {"pairs": n, "friendly": f} for k, (n, f) in counts.items()}
    _same(_line("03_friendly_adversary")["pairs"], want, "03 pairs")
    assert want["same batch (A = B)"]["friendly"] == 0
    w, c = want["same client, other batch"], want["other client"]
    assert w["friendly"] <= 0.02 * w["pairs"] and c["friendly"] >= 0.3 * c["pairs"]


@pytest.mark.parametrize("panel,key", [("vs_alpha", "alpha"), ("vs_batch_size", "batch_size")])
def test_03_rates_paragraph_matches_the_committed_data(panel, key):
    groups = defaultdict(list)
    for r in _rows("03_friendly_rates", panel):
        groups[float(r[key])].append(r)
    got = _line("03_friendly_adversary")["rates"][key]
    assert sorted(got, key=float) == [f"{k:g}" for k in sorted(groups)]
    for k, rs in groups.items():
        want = {c: _mean(_f(r, c) for r in rs)
                for c in ("cross_client_rate", "within_client_rate", "heterogeneity_share")}
        _same(got[f"{k:g}"], want, f"03 rates {key} = {k:g}")
    share = [got[f"{k:g}"]["heterogeneity_share"] for k in sorted(groups)]
    if key == "alpha":
        cross = [got[f"{k:g}"]["cross_client_rate"] for k in sorted(groups)]
        assert all(b < a for a, b in zip(cross, cross[1:])) and all(b < a for a, b in zip(share, share[1:]))
        assert all(_f(r, "within_client_rate") == 0 for k, rs in groups.items() if k <= 0.1 for r in rs)
    else:
        assert all(b > a for a, b in zip(share, share[1:]))


def test_03_fedsam_trajectory_paragraph_matches_the_committed_data():
    """Section 5b: FedSAM's own runs measured every few rounds, against section 3's rates at FedAvg's models."""
    rows = _rows("03_friendly_fedsam_trajectory")
    params = json.loads((FIGURES_DIR / "03_friendly_fedsam_trajectory.json").read_text())["parameters"]
    by_round = defaultdict(list)
    for r in rows:
        by_round[int(float(r["round"]))].append(r)
    mean = {t: {c: _mean(_f(r, c) for r in rs) for c in ("cross_client_rate", "within_client_rate")}
            for t, rs in by_round.items()}
    trained = {t: v for t, v in mean.items() if t > 0}
    pairs = defaultdict(lambda: [0, 0])
    for r in _rows("03_friendly_pairs"):
        pairs[r["pair"]][0] += 1
        pairs[r["pair"]][1] += _f(r, "loss_change") < 0
    fa_cross = pairs["other client"][1] / pairs["other client"][0]
    last = max(mean)
    want = {"seeds": len({r["seed"] for r in rows}), "rho": float(params["rho"]), "every": params["fedsam_every"],
            "points": len(trained), "last_round": last,
            "cross_min": min(v["cross_client_rate"] for v in trained.values()),
            "cross_max": max(v["cross_client_rate"] for v in trained.values()),
            "cross_last": mean[last]["cross_client_rate"],
            "within_max": max(_f(r, "within_client_rate") for r in rows if float(r["round"]) > 0),
            "within_mean": _mean(_f(r, "within_client_rate") for r in rows if float(r["round"]) > 0),
            "within_zero": sum(_f(r, "within_client_rate") == 0 for r in rows if float(r["round"]) > 0),
            "measurements": sum(float(r["round"]) > 0 for r in rows),
            "within_last": mean[last]["within_client_rate"], "fedavg_cross": fa_cross,
            "fedavg_within": pairs["same client, other batch"][1] / pairs["same client, other batch"][0],
            "cross_above_fedavg": sum(v["cross_client_rate"] > fa_cross for v in trained.values())}
    _same(_line("03_friendly_adversary")["fedsam_trajectory"], want, "03 FedSAM trajectory")
    assert want["seeds"] >= 3 and len(rows) == want["seeds"] * len(mean)
    assert want["cross_min"] > want["within_max"]
