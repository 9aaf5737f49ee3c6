"""Benchmarks that print numbers: milliseconds per round for each algorithm.

``python -m fedlab bench`` trains a few rounds of each algorithm through the real engine (same data
path, same model, same sampling) and reports the median wall time per round, excluding the first
(warm-up) round and the last round (the only one that evaluates), plus the cost relative to FedAvg.
Defaults are the issue's setting: Fashion-MNIST, ``cnn``, 100 clients, 10 % participation, K = 10,
B = 32.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fedlab.algorithms import RoundInfo, StepInfo, algorithm_class, algorithm_names, get_algorithm


def communication_vectors(name: str, dim: int = 10_000) -> tuple[float, float]:
    """(uplink, downlink) per client per round in units of d, measured from what the method sends.

    Runs one client through broadcast → local steps → upload on a quadratic oracle of dimension
    ``dim`` and counts the floats of the upload and of the message.
    """
    alg = get_algorithm(name)
    theta0 = torch.zeros(dim)
    target = torch.linspace(-1.0, 1.0, dim)

    def grad_fn(theta: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        r = theta - target
        return r, 0.5 * (r * r).sum()

    server = alg.server_init(theta0)
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, local_steps=2, n_clients=4, n_sampled=1,
                     weight_decay=0.0, clip_norm=None)
    msg = alg.broadcast(server, info)
    cstate = alg.client_init(theta0)
    start = alg.client_start(msg, cstate, info)
    theta = start
    for k in range(2):
        theta, cstate, _ = alg.local_step(theta, cstate, msg, None, grad_fn,
                                          StepInfo(k=k, K=2, lr=0.1, weight_decay=0.0, clip_norm=None))
    upload, _ = alg.upload(start, theta, cstate, msg, info, 2)
    up = sum(v.numel() for v in upload.values()) / dim
    down = sum(v.numel() for v in msg.values()) / dim
    return round(up, 2), round(down, 2)


def time_algorithm(name: str, *, rounds: int = 5, **config: Any) -> dict[str, Any]:
    """Median ms per round of ``name`` through the engine (first and last round excluded)."""
    from fedlab.config import Config
    from fedlab.engine import Simulation

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(algorithm=name, rounds=rounds, eval_every=rounds, runs_dir=tmp, **config)
        result = Simulation.build(cfg).run(progress=False)
    walls = result.metrics["wall_seconds"].tolist()[1:-1]
    return {"algorithm": name, "ms_per_round": 1000 * statistics.median(walls),
            "ms_min": 1000 * min(walls), "rounds_timed": len(walls),
            "grad_evals_per_step": algorithm_class(name).grad_evals_per_step}


def machine_description() -> str:
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
            f"{dev}, torch {torch.__version__}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedlab bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithms", nargs="+", default=["fedavg", "fedsam"],
                   help="algorithms to time, or 'all'")
    p.add_argument("--dataset", default="fmnist")
    p.add_argument("--model", default="cnn")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--participation", type=float, default=0.1)
    p.add_argument("--local-steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5, help="rounds per algorithm (first and last not timed)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--parallel-clients", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="also write the table as JSON here")
    args = p.parse_args(argv)
    names = list(algorithm_names()) if args.algorithms == ["all"] else args.algorithms
    if args.rounds < 3:
        p.error("--rounds must be at least 3 (one warm-up, one timed, one evaluated)")
    print(f"machine: {machine_description()}")
    print(f"setting: {args.dataset} {args.model}, {args.clients} clients, participation {args.participation}, "
          f"K={args.local_steps}, B={args.batch_size}, parallel_clients={args.parallel_clients}")
    rows = []
    t0 = time.perf_counter()
    for name in names:
        rows.append(time_algorithm(name, rounds=args.rounds, dataset=args.dataset, model=args.model,
                                   n_clients=args.clients, participation=args.participation,
                                   local_steps=args.local_steps, batch_size=args.batch_size,
                                   device=args.device, parallel_clients=args.parallel_clients))
        print(f"  timed {name}: {rows[-1]['ms_per_round']:.1f} ms/round", flush=True)
    base = next((r["ms_per_round"] for r in rows if r["algorithm"] == "fedavg"), None)
    print()
    print(f"{'algorithm':<18}{'ms/round':>10}{'x FedAvg':>10}{'grads/step':>12}")
    for r in rows:
        r["relative_to_fedavg"] = r["ms_per_round"] / base if base else None
        rel = f"{r['relative_to_fedavg']:.2f}" if base else "n/a"
        print(f"{r['algorithm']:<18}{r['ms_per_round']:>10.1f}{rel:>10}{r['grad_evals_per_step']:>12}")
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_description(), "settings": vars(args) | {"json": str(args.json)},
                                         "rows": rows}, indent=2))
    return 0
