"""The GPU check: one script that measures what the speed goals are about on a CUDA device.

    python -m lab bench gpu                     # on a CUDA machine, ≤ 8 minutes on one H200
    python -m lab bench gpu --dry-run           # the same code paths on CPU at a tiny size (CI)

Parts, each a call into fedlab's own benchmarks (only torch and fedlab; no network):

1. ``bench --speed`` for the ``cnn`` on Fashion-MNIST at 10 and 20 clients per round and for
   ResNet-18-GN (``resnet18_gn_imagenet_stem`` on random 3×32×32 data) at 10 — modes conventional
   loop, sequential, vectorised (one chunk of m), ``auto``, and bf16 autocast (``conventional_bf16``,
   ``auto_bf16``) — FedAvg and FedSAM (:mod:`lab.bench.speed`);
2. the curvature benchmark (:mod:`lab.bench.curvature`: fedlab new, old, plain autograd);
3. one round of the ``paper`` profile of notebook 04 (ResNet-18-GN, 100 clients, 10 %, K = 50, B = 50,
   ``parallel_clients="auto"``) for FedAvg and FedSAM on synthetic CIFAR-shaped data (random tensors
   of CIFAR-10's size, so no dataset is needed), after one warm-up round, plus one evaluation of the
   10,000 test images.

It writes everything to one JSON file (``--out``) and prints a table of the issue's goals next to the
measurements: the vectorised path ≥ 10× the conventional loop for the ``cnn`` at 20 clients per
round, ResNet-18 within 1.5× of its FLOP floor per round (FLOP floor = the round's model FLOPs at the
rate of a plain float32 matmul), SAM/FedAvg ≤ 2.05, and fedlab's curvature at least as fast as the
plain-autograd reference. ``--dry-run`` uses the CPU, ``bench --quick``, the quick curvature setting
and a 4-client, 1-step, B = 2 version of the paper round; its numbers mean nothing, it only keeps the
script from rotting.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lab.repro import REPO_ROOT

PAPER_PARAMS = REPO_ROOT / "notebooks" / "params" / "04_sam_baselines.paper.yaml"
SPEED_MODES = ("conventional", "sequential", "vectorised", "auto", "conventional_bf16", "auto_bf16")
GOALS = {
    "cnn_m20_speedup_over_conventional": ("≥", 10.0),
    "resnet18_m10_round_over_flop_floor": ("≤", 1.5),
    "sam_over_fedavg": ("≤", 2.05),
    "curvature_new_over_plain_seconds": ("≤", 1.0),
}


def _speed(device: str, dry_run: bool, out: Path) -> dict[str, Any]:
    from lab.bench.speed import main as bench_main

    common = ["--speed", "--device", device, "--algorithms", "fedavg", "fedsam", "--modes"]
    runs: list[list[str]] = []
    if dry_run:
        runs.append(["--quick", *common, "conventional", "sequential", "auto", "--json"])
    else:
        runs.append([*common, *SPEED_MODES, "--models", "cnn", "--clients-per-round", "10", "20", "--json"])
        runs.append([*common, *SPEED_MODES, "--models", "resnet18", "--clients-per-round", "10", "--json"])
    merged: dict[str, Any] = {"rows": [], "speedup_over_conventional": [], "sam_fedavg_ratio": [], "runs": []}
    for i, argv in enumerate(runs):
        path = out.with_name(f"{out.stem}.speed{i}.json")
        bench_main([*argv, str(path)])
        part = json.loads(path.read_text())
        for key in ("rows", "speedup_over_conventional", "sam_fedavg_ratio"):
            merged[key].extend(part[key])
        merged["runs"].append({k: part[k] for k in ("machine", "settings", "matmul_flops_per_s", "total_seconds")})
    return merged


def _curvature(device: str, dry_run: bool) -> dict[str, Any]:
    from lab.bench.curvature import print_report, run_benchmark

    kw: dict[str, Any] = dict(n=32, tol=1e-3, cap=30, probes=4, grid=3, landscape_n=32) if dry_run else \
        dict(n=512, tol=1e-5, cap=200, probes=100, grid=21, landscape_n=512)
    res = run_benchmark(solvers=("new", "power", "old", "plain"), device=device, repeats=1, **kw)
    print_report(res)
    return res


def paper_config(algorithm: str, device: str, dry_run: bool, runs_dir: str) -> Any:
    """Notebook 04's ``paper`` profile as a ``Config`` (tiny with ``dry_run``)."""
    import yaml

    from fedlab.config import Config

    params = yaml.safe_load(PAPER_PARAMS.read_text())
    fields = {f: params[f] for f in ("model", "n_clients", "participation", "partition", "alpha", "local_steps",
                                     "batch_size", "lr", "parallel_clients") if f in params}
    algo_params = {"rho": params["rho"]} if algorithm == "fedsam" and "rho" in params else {}
    if dry_run:
        fields.update(n_clients=4, participation=0.5, local_steps=1, batch_size=2, parallel_clients=1,
                      partition="iid", alpha=None)
    return Config(algorithm=algorithm, algorithm_params=algo_params, dataset="cifar10", rounds=2, eval_every=2,
                  device=device, runs_dir=runs_dir, **fields)


def _paper_round(device: str, dry_run: bool) -> dict[str, Any]:
    from lab.bench.machine import sync
    from lab.bench.workload import random_dataset
    from fedlab.engine import Simulation
    from fedlab.engine.evaluate import evaluate

    dev = torch.device(device)
    out: dict[str, Any] = {}
    for algorithm in ("fedavg", "fedsam"):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = paper_config(algorithm, device, dry_run, tmp)
            n_train = 16 if dry_run else 50_000
            data = random_dataset((3, 32, 32), n_train, n_test=8 if dry_run else 10_000, device=device)
            sim = Simulation.build(cfg, dataset=data)
            state = sim.initial_state()
            walls = []
            for t in range(2):  # round 0 is the warm-up (it also holds auto's chunk measurement)
                sync(dev)
                t0 = time.perf_counter()
                outcome = sim.train_round(state, t)
                sync(dev)
                walls.append(time.perf_counter() - t0)
            theta = sim.algorithm.global_model(state.server)
            sync(dev)
            t0 = time.perf_counter()
            acc, _ = evaluate(sim.model, theta, data.x_test, data.y_test)
            sync(dev)
            eval_s = time.perf_counter() - t0
            choice = sim.chunk_choice
            out[algorithm] = {"warmup_s": walls[0], "round_s": walls[1], "eval_s": eval_s,
                              "clients": len(outcome.clients), "chunk": choice.chunk if choice else cfg.parallel_clients,
                              "config": {k: v for k, v in cfg.to_dict().items() if k != "runs_dir"}}
            print(f"paper round {algorithm}: {walls[1]:.2f} s (warm-up {walls[0]:.2f} s, {len(outcome.clients)} "
                  f"clients, chunk {out[algorithm]['chunk']}), evaluation of {data.x_test.shape[0]} images "
                  f"{eval_s:.2f} s", flush=True)
    out["sam_over_fedavg"] = out["fedsam"]["round_s"] / out["fedavg"]["round_s"]
    return out


def goals_table(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, each with its measurement (``None`` where the run lacks the cell)."""
    speed = res.get("speed", {})
    su = [s for s in speed.get("speedup_over_conventional", []) if s["precision"] == "float32"]
    cnn20 = [s["speedup"] for s in su if s["setting"] in ("cnn", "cnn-quick") and s["m"] == max(
        (x["m"] for x in su if x["setting"] in ("cnn", "cnn-quick")), default=0)]
    rn = [r for r in speed.get("rows", []) if r["setting"] == "resnet18" and r["m"] == 10 and not r["amp"]
          and r["mode"] != "conventional"]
    best_fraction = max((r["matmul_fraction"] for r in rn), default=None)
    fedlab_ratios = [r["ratio"] for r in speed.get("sam_fedavg_ratio", []) if r["mode"] in ("auto", "vectorised")]
    curv = {r["solver"]: r for r in res.get("curvature", {}).get("rows", [])}
    measured = {
        "cnn_m20_speedup_over_conventional": max(cnn20) if cnn20 else None,
        "resnet18_m10_round_over_flop_floor": 1.0 / best_fraction if best_fraction else None,
        "sam_over_fedavg": max(fedlab_ratios + ([res["paper"]["sam_over_fedavg"]] if "paper" in res else []),
                               default=None),
        "curvature_new_over_plain_seconds": (curv["new"]["eig_seconds"] + curv["new"]["trace_seconds"]) /
        (curv["plain"]["eig_seconds"] + curv["plain"]["trace_seconds"]) if {"new", "plain"} <= set(curv) else None,
    }
    rows = []
    for name, (op, target) in GOALS.items():
        value = measured[name]
        met = None if value is None else (value >= target if op == "≥" else value <= target)
        rows.append({"goal": name, "target": f"{op} {target:g}", "measured": value, "met": met})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench gpu", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: checks the code paths only")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --dry-run)")
    p.add_argument("--out", type=Path, default=Path("bench_gpu.json"), help="JSON results")
    p.add_argument("--parts", nargs="+", default=["speed", "curvature", "paper"], choices=["speed", "curvature", "paper"])
    args = p.parse_args(list(argv) if argv is not None else None)
    device = args.device or ("cpu" if args.dry_run else "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        p.error("no CUDA device: run on a GPU machine, or pass --dry-run for the CPU check")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"device": device, "dry_run": args.dry_run, "torch": torch.__version__,
                           "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None, "parts": {}}
    for part in args.parts:
        t_part = time.perf_counter()
        print(f"\n=== {part} ===", flush=True)
        if part == "speed":
            res["speed"] = _speed(device, args.dry_run, args.out)
        elif part == "curvature":
            res["curvature"] = _curvature(device, args.dry_run)
        else:
            res["paper"] = _paper_round(device, args.dry_run)
        res["parts"][part] = time.perf_counter() - t_part
        args.out.write_text(json.dumps(res, indent=2, default=str))  # partial results survive a time-out
    res["goals"] = goals_table(res)
    res["total_seconds"] = time.perf_counter() - t0
    args.out.write_text(json.dumps(res, indent=2, default=str))
    print(f"\n{'goal':<38} {'target':>8} {'measured':>10}  met")
    for g in res["goals"]:
        value = "-" if g["measured"] is None else f"{g['measured']:.2f}"
        met = "-" if g["met"] is None else ("yes" if g["met"] else "no")
        print(f"{g['goal']:<38} {g['target']:>8} {value:>10}  {met}")
    print(f"(total {res['total_seconds']:.0f} s; parts: " +
          ", ".join(f"{k} {v:.0f} s" for k, v in res["parts"].items()) + f"; wrote {args.out})")
    if args.dry_run:
        print("dry run: CPU at a tiny size; the numbers check the code paths, not the goals")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
