"""Notebook 00's cpu paragraph (FedAvg, FedSAM, FedVSSAM at Dirichlet 0.1) against the committed cpu data,
recomputed with plain loops over ``figures/00_quickstart_curves.csv`` (helpers: ``_cpu_lessons.py``)."""
from __future__ import annotations

from collections import defaultdict

from _cpu_lessons import f, line, mean, rows, same


def test_00_paragraph_matches_the_committed_data():
    table = rows("00_quickstart_curves", "per_seed")
    last = max(int(r["round"]) for r in table)
    acc, loss = defaultdict(dict), []
    for r in table:
        if int(r["round"]) == last:
            if r["test_acc"]:
                acc[r["algorithm"]][r["seed"]] = 100 * f(r, "test_acc")
            if r["train_loss"]:
                loss.append(f(r, "train_loss"))
    want = {"rounds": last, "fedavg": mean(acc["fedavg"].values()), "loss_last": mean(loss),
            "spread": max(acc["fedavg"].values()) - min(acc["fedavg"].values())}
    for m in ("fedsam", "fedvssam"):
        gaps = [v - acc["fedavg"][s] for s, v in acc[m].items()]
        want[m] = {"mean": mean(acc[m].values()), "diff": mean(gaps), "above": sum(g > 0 for g in gaps),
                   "seeds": len(gaps)}
    bench = defaultdict(dict)
    for r in rows("10_benchmarks_bars_fmnist", "per_seed"):
        if r["split"] == "Dir 0.1" and r["status"] == "finished":
            bench[r["method"]][r["seed"]] = 100 * f(r, "final_acc")
    want["drift"] = {m: mean(v - bench["fedavg"][s] for s, v in bench[m].items()) for m in ("scaffold", "feddyn")}
    same(line("00_quickstart"), want, "00")
    assert min(want["drift"].values()) > want["fedvssam"]["diff"]
    assert 0 < want["fedsam"]["diff"] < want["fedvssam"]["diff"] < 2
    assert want["fedvssam"]["diff"] < want["spread"] and want["loss_last"] < 0.1
    assert want["fedsam"]["seeds"] == want["fedvssam"]["seeds"] == 6
