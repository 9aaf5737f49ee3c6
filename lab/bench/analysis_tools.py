"""Benchmark of the analysis tools: seconds for (a) the top Hessian eigenvalue and (b) a 2-D loss
landscape, for the ``cnn`` model on Fashion-MNIST.

    python -m lab.bench.analysis_tools                       # defaults below
    python -m lab.bench.analysis_tools --train-size 500 --grid 11 --device cuda --json

The objective is the federated F = (1/N) Σ_i F_i over an IID split of a class-balanced training
subset (``--train-size`` samples, ``--clients`` clients), at the model's initial weights. Each
timing follows one untimed warm-up call (one Hessian-vector product, one loss evaluation), so it
measures steady-state work, not ``torch.func`` tracing. Prints the settings, the machine and the
seconds; wall times on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from lab.bench.machine import machine_info, sync


def run_benchmark(
    *,
    train_size: int = 1000,
    clients: int = 10,
    iters: int = 20,
    tol: float = 1e-3,
    grid: int = 21,
    span: float = 1.0,
    device: str = "cpu",
    vmap_chunk: int | None = None,
    chunk_size: int = 2048,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Time the top eigenvalue and a ``grid``×``grid`` landscape; returns settings, machine and seconds."""
    from fedlab.analysis.federation import client_data, global_loss_fn
    from fedlab.analysis.hessian import hvp, top_eigenvalues
    from fedlab.analysis.landscape import filter_normalized_direction, slice_2d
    from fedlab.data import load_dataset, make_partition
    from fedlab.models import FlatModel, build_model
    from fedlab import torch_generator

    dev = torch.device(device)
    data = load_dataset("fmnist", train_size=train_size, device=dev, seed=seed)
    part = make_partition("iid", data.y_train.cpu().numpy(), clients, seed=seed)
    model = FlatModel(build_model("cnn", data.input_shape, data.n_classes, seed=seed).to(dev))
    fed = client_data(data, part)
    loss = global_loss_fn(model, fed, chunk_size=chunk_size)
    theta = model.theta0()

    hvp(loss, theta, torch.ones_like(theta))  # warm-up (not timed)
    with torch.no_grad():
        loss(theta)
    sync(dev)
    t0 = time.perf_counter()
    eig = top_eigenvalues(loss, theta, 1, iters=iters, tol=tol, generator=torch_generator(seed, "bench-eig"),
                          progress=progress)
    sync(dev)
    eig_seconds = time.perf_counter() - t0

    d1 = filter_normalized_direction(model, theta, torch_generator(seed, "bench-d1"))
    d2 = filter_normalized_direction(model, theta, torch_generator(seed, "bench-d2"))
    sync(dev)
    t0 = time.perf_counter()
    land = slice_2d(loss, theta, d1, d2, span=span, n=grid, vmap_chunk=vmap_chunk, progress=progress)
    sync(dev)
    land_seconds = time.perf_counter() - t0

    return {
        "settings": {"dataset": "fmnist", "model": "cnn", "d": model.dim, "train_size": data.n_train,
                     "clients": len(fed), "iters": iters, "tol": tol, "grid": f"{grid}x{grid}", "span": span,
                     "device": str(dev), "vmap_chunk": vmap_chunk, "chunk_size": chunk_size, "seed": seed},
        "machine": machine_info(),
        "top_eigenvalue": {"seconds": eig_seconds, "value": float(eig.values[0]), "hvps": eig.n_hvp,
                           "converged": bool(eig.converged[0]),
                           "seconds_per_hvp": eig_seconds / max(eig.n_hvp, 1)},
        "landscape": {"seconds": land_seconds, "points": grid * grid,
                      "seconds_per_point": land_seconds / (grid * grid), "center_loss": land.center,
                      "min_loss": float(land.losses.min()), "max_loss": float(land.losses.max())},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.analysis_tools", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--train-size", type=int, default=1000, help="training samples (class-balanced subset)")
    parser.add_argument("--clients", type=int, default=10, help="IID clients sharing them")
    parser.add_argument("--iters", type=int, default=20, help="power-iteration steps (Hessian-vector products)")
    parser.add_argument("--tol", type=float, default=1e-3, help="relative stopping tolerance of the power iteration")
    parser.add_argument("--grid", type=int, default=21, help="landscape grid points per axis")
    parser.add_argument("--span", type=float, default=1.0, help="landscape half-width in filter-normalised units")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--vmap-chunk", type=int, default=None, help="grid points per vmap call (default: auto)")
    parser.add_argument("--chunk-size", type=int, default=2048, help="samples per forward pass")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    res = run_benchmark(train_size=args.train_size, clients=args.clients, iters=args.iters, tol=args.tol,
                        grid=args.grid, span=args.span, device=args.device, vmap_chunk=args.vmap_chunk,
                        chunk_size=args.chunk_size, seed=args.seed, progress=args.progress)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    s, e, land = res["settings"], res["top_eigenvalue"], res["landscape"]
    print("settings: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    print("machine:  " + ", ".join(f"{k}={v}" for k, v in res["machine"].items()))
    print(f"top Hessian eigenvalue: {e['seconds']:.2f} s  (λ_max = {e['value']:.4g}, {e['hvps']} HVPs, "
          f"{e['seconds_per_hvp'] * 1e3:.0f} ms/HVP, converged={e['converged']})")
    print(f"loss landscape {s['grid']}: {land['seconds']:.2f} s  ({land['seconds_per_point'] * 1e3:.0f} ms/point, "
          f"loss at centre {land['center_loss']:.4f}, range [{land['min_loss']:.3g}, {land['max_loss']:.3g}])")
    print("note: wall times on a shared machine are noisy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
