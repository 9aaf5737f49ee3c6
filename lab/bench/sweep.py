"""Benchmark: the wall time of one sweep on each backend (sequential, local process pool, Ray).

``python -m lab bench sweep`` trains a 16-run slice of notebook 10's cpu profile — FedAvg, FedSAM,
SCAFFOLD and FedVSSAM × Dirichlet α ∈ {0.5, 0.1} × seeds {0, 1} on Fashion-MNIST with the ``cnn``,
100 clients, 10 % per round, K = 5, B = 32, evaluation on 2000 test samples at the end — with
``--rounds`` (default 3) rounds per run, once per backend, each into its own empty runs folder so
that nothing is loaded from a cache. Every run computes at one intra-op thread on every backend, so
the backends do the same arithmetic and must return the same bits, which is checked and printed.
The local pool and the Ray cluster get one worker per usable core. Wall times include each
backend's own start-up costs (spawning workers, importing torch, loading the dataset in every
worker); Ray's cluster start-up (``ray.init``) is timed separately and reported next to it.
``--quick`` is a seconds-long version for CI: digits, 8 clients, 2 methods × 2 seeds, 2 rounds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fedlab.config import Config
from fedlab.results import RunResult
from fedlab.sweep.grid import sweep
from fedlab.sweep.backends import BACKENDS, MissingExtraError, ray_init, usable_cores

__all__ = ["bench_sweep", "main", "slice_grid"]


def slice_grid(quick: bool, rounds: int | None) -> tuple[Config, dict[str, list[Any]], list[int]]:
    """(base, grid, seeds) of the benchmarked sweep."""
    if quick:
        base = Config(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=rounds or 2,
                      local_steps=2, batch_size=16, lr=0.05, partition="dirichlet", alpha=0.5, eval_every=2)
        return base, {"algorithm": ["fedavg", "fedsam"]}, [0, 1]
    base = Config(dataset="fmnist", model="cnn", n_clients=100, participation=0.1, rounds=rounds or 3,
                  local_steps=5, batch_size=32, lr=0.05, partition="dirichlet", eval_every=5, eval_subsample=2000)
    return base, {"algorithm": ["fedavg", "fedsam", "scaffold", "fedvssam"], "alpha": [0.5, 0.1]}, [0, 1]


def _same(a: RunResult, b: RunResult) -> bool:
    """Bit-identical final model and metrics (wall times aside)."""
    cols = [c for c in a.metrics.columns if c != "wall_seconds"]
    return bool(torch.equal(a.theta, b.theta)) and a.metrics[cols].equals(b.metrics[cols])


def bench_sweep(backends: list[str], quick: bool = False, rounds: int | None = None,
                progress: bool = True) -> list[dict[str, Any]]:
    """Time the slice on each backend; one row per backend (skipped ones say why)."""
    base, grid, seeds = slice_grid(quick, rounds)
    cores = usable_cores()
    rows: list[dict[str, Any]] = []
    reference: list[RunResult] | None = None
    for backend in backends:
        row: dict[str, Any] = {"backend": backend, "workers": 1 if backend == "sequential" else cores,
                               "load_before": round(os.getloadavg()[0], 2)}
        startup, owned_ray = 0.0, None
        if backend == "ray":
            try:
                import ray
            except ImportError:
                row["skipped"] = str(MissingExtraError("ray is not installed: pip install -e '.[distributed]'"))
                rows.append(row)
                continue
            if not ray.is_initialized():  # else someone else's cluster (a test's): use it, leave it running
                t0 = time.perf_counter()
                ray_init(ray, num_cpus=cores, include_dashboard=False)
                startup, owned_ray = time.perf_counter() - t0, ray
            row["workers"] = int(ray.cluster_resources().get("CPU", 0))
        with tempfile.TemporaryDirectory(prefix="fedlab-bench-sweep-") as tmp:
            t0 = time.perf_counter()
            results = sweep(base.replace(runs_dir=tmp), grid, seeds, backend=backend, progress=progress,
                            max_workers=cores if backend == "local" else None)
            wall = time.perf_counter() - t0
        if owned_ray is not None:
            owned_ray.shutdown()
        reference = reference or results
        row.update(runs=len(results), wall_s=wall, startup_s=startup,
                   identical_to_first=all(_same(a, b) for a, b in zip(reference, results)),
                   load_after=round(os.getloadavg()[0], 2))
        rows.append(row)
        print(f"  {backend}: {wall:.1f} s" + (f" (+ {startup:.1f} s ray.init)" if startup else ""), flush=True)
    first = next((r["wall_s"] for r in rows if "wall_s" in r), None)
    for r in rows:
        if "wall_s" in r and first:
            r["speedup"] = first / r["wall_s"]
            r["speedup_with_startup"] = first / (r["wall_s"] + r["startup_s"])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench sweep", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=["sequential", "local", "ray"],
                   help="backends to time, in this order (the first is the reference of speed-up and bits)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per run (default 3; --quick: 2)")
    p.add_argument("--quick", action="store_true", help="a seconds-long version for CI (digits, 4 runs)")
    p.add_argument("--no-progress", action="store_true", help="hide the sweep's progress bar")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # the sequential backend sets it per run too; this keeps the driver light
    base, grid, seeds = slice_grid(args.quick, args.rounds)
    n = len(seeds) * math.prod(len(v) for v in grid.values())
    load = os.getloadavg()
    print(f"machine: {usable_cores()} usable cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"slice: {n} runs ({' x '.join(f'{len(v)} {k}' for k, v in grid.items())} x {len(seeds)} seeds) on "
          f"{base.dataset} {base.model}, {base.n_clients} clients, participation {base.participation}, "
          f"{base.rounds} rounds of K={base.local_steps}, B={base.batch_size}; one intra-op thread per run")
    rows = bench_sweep(args.backends, args.quick, args.rounds, progress=not args.no_progress)
    print()
    print(f"{'backend':<12}{'workers':>8}{'wall s':>9}{'runs/min':>10}{'speed-up':>10}{'identical':>11}"
          f"{'load 1m':>14}   note")
    for r in rows:
        if "skipped" in r:
            print(f"{r['backend']:<12}{'-':>8}{'-':>9}{'-':>10}{'-':>10}{'-':>11}{'-':>14}   {r['skipped']}")
            continue
        note = (f"+ {r['startup_s']:.1f} s ray.init not included ({r['speedup_with_startup']:.2f}x with it)"
                if r["startup_s"] else "")
        print(f"{r['backend']:<12}{r['workers']:>8}{r['wall_s']:>9.1f}{60 * r['runs'] / r['wall_s']:>10.1f}"
              f"{r['speedup']:>9.2f}x{'yes' if r['identical_to_first'] else 'NO':>11}"
              f"{r['load_before']:>7.2f}>{r['load_after']:<6.2f}   {note}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cores": usable_cores(), "rows": rows}, indent=2))
        print(f"wrote {args.json}")
    return 0 if all(r.get("identical_to_first", True) for r in rows) else 1
