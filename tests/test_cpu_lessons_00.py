"""Notebook 00's cpu paragraph (FedAvg, FedSAM, FedVSSAM at Dirichlet 0.1) against the committed cpu data,
recomputed with plain loops over the committed run records (gzip JSON, read here without the lab's loaders) and
``figures/00_quickstart_curves.csv`` (helpers: ``_cpu_lessons.py``).

The notebook reads every final accuracy through :func:`lab.evidence.protocol.final_metric` (issue 41): the mean test
accuracy over the last 20 % of the rounds. Here that window is taken from the rounds themselves (the last
⌈0.2·T⌉), and the paired difference's 95 % half-width from Student's t, so a change of metric in either place shows.
"""
from __future__ import annotations

import ast
import gzip
import json
import math
from collections import defaultdict

from scipy import stats

from _cpu_lessons import f, line, mean, rows, same

from lab.repro import FIGURES_DIR


def _final_by_seed(figure: str, keep) -> dict[str, dict[int, float]]:
    """algorithm -> seed -> the mean test accuracy (%) of the last 20 % of rounds, over the finished records that
    ``keep(config)`` keeps among those the figure's sidecar names."""
    keys = json.loads((FIGURES_DIR / f"{figure}.json").read_text())["records"]
    keys = ast.literal_eval(keys) if isinstance(keys, str) else keys
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for key in keys:
        payload = json.loads(gzip.decompress((FIGURES_DIR / "records" / f"{key}.json.gz").read_bytes()))
        cfg = payload["config"]["config"]
        if payload["summary"]["status"] != "finished" or not keep(cfg):
            continue
        cols = payload["metrics"]["columns"]
        acc = {int(r[cols.index("round")]): r[cols.index("test_acc")] for r in payload["metrics"]["data"]}
        total = int(cfg["rounds"])
        window = range(total - math.ceil(0.2 * total) + 1, total + 1)
        assert cfg["seed"] not in out[cfg["algorithm"]], f"{figure}: two records of {cfg['algorithm']} seed {cfg['seed']}"
        out[cfg["algorithm"]][cfg["seed"]] = 100 * mean(acc[r] for r in window)
    return out


def _paired(left: dict[int, float], right: dict[int, float]) -> tuple[list[float], float, float]:
    diffs = [left[s] - right[s] for s in sorted(left) if s in right]
    m, n = mean(diffs), len(diffs)
    sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1))
    return diffs, m, stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def test_00_paragraph_matches_the_committed_data():
    final = _final_by_seed("00_quickstart_curves", lambda cfg: True)
    table = rows("00_quickstart_curves", "per_seed")
    last = max(int(r["round"]) for r in table)
    loss = [f(r, "train_loss") for r in table if int(r["round"]) == last and r["train_loss"]]
    want = {"rounds": last, "fedavg": mean(final["fedavg"].values()), "loss_last": mean(loss),
            "spread": max(final["fedavg"].values()) - min(final["fedavg"].values())}
    for m, label in (("fedsam", "FedSAM"), ("fedvssam", "FedVSSAM")):
        diffs, d, half = _paired(final[m], final["fedavg"])
        reading = f"{label} higher" if d - half > 0 else f"{label} lower" if d + half < 0 else "no difference resolved"
        want[m] = {"mean": mean(final[m].values()), "diff": d, "half_width": half, "above": sum(x > 0 for x in diffs),
                   "seeds": len(diffs), "reading": reading}
    bench = _final_by_seed("10_benchmarks_bars_fmnist", lambda cfg: cfg["partition"] == "dirichlet"
                           and cfg["alpha"] == 0.1 and cfg["algorithm"] in ("fedavg", "scaffold", "feddyn"))
    want["drift"] = {m: _paired(bench[m], bench["fedavg"])[1] for m in ("scaffold", "feddyn")}
    got = line("00_quickstart")
    same(got, want, "00")
    assert got["final"] == ["mean of the last 20 % of rounds (rounds 81–100 of 100), full test set"]
    # the directions the paragraphs state
    assert min(want["drift"].values()) > max(want[m]["diff"] for m in ("fedsam", "fedvssam"))
    assert all(abs(want[m]["diff"]) < 2 for m in ("fedsam", "fedvssam"))
    assert max(abs(want[m]["diff"]) for m in ("fedsam", "fedvssam")) < want["spread"] and want["loss_last"] < 0.1
    assert want["fedsam"]["seeds"] == want["fedvssam"]["seeds"] == 6
