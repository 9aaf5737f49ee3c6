"""What bf16 autocast (``amp=True``) does to accuracy, next to what a change of seed does.

``python -m lab bench --amp-check`` trains FedAvg and FedSAM (ρ = 0.02) on Fashion-MNIST,
Dirichlet 0.1, 100 clients, 10 % participation, K = 10, B = 32, lr 0.05, for 50 rounds, three times
each: float32 with seed 0, bf16 with seed 0, float32 with seed 1. It prints the accuracy curves
(every 5 rounds, all 10,000 test images), the largest and mean gap between the bf16 and float32
curves, the same for the two float32 seeds (the yardstick: bf16 rounding perturbs every step, so
the two precisions separate the way two seeds do), and the wall time of each run. ``--quick`` is a
seconds-long version on the bundled digits data for CI. Runs go to a temporary directory.
"""
from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedlab.config import Config

AMP_CHECK_METHODS: tuple[tuple[str, dict[str, float]], ...] = (("fedavg", {}), ("fedsam", {"rho": 0.02}))
RUNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("float32 seed 0", {}), ("bf16 seed 0", {"amp": True}), ("float32 seed 1", {"seed": 1}))


def amp_check_config(*, quick: bool, rounds: int | None, client_threads: int) -> Config:
    """The float32 seed-0 configuration both checks start from (``--quick``: digits, 4 rounds)."""
    if quick:
        return Config(dataset="digits", model="cnn", n_clients=10, participation=0.5, partition="dirichlet",
                      alpha=0.5, rounds=rounds or 4, local_steps=3, batch_size=16, lr=0.05, eval_every=1,
                      client_threads=client_threads, channels_last=True)
    return Config(dataset="fmnist", model="cnn", n_clients=100, participation=0.1, partition="dirichlet",
                  alpha=0.1, rounds=rounds or 50, local_steps=10, batch_size=32, lr=0.05, eval_every=5,
                  client_threads=client_threads, channels_last=True)


def curve_gap(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(max, mean) of |a − b| over two accuracy curves of equal length."""
    gap = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    return float(gap.max()), float(gap.mean())


def amp_check(base: Config, *, progress: bool = False) -> list[dict[str, Any]]:
    """Train every method of :data:`AMP_CHECK_METHODS` in every variant of :data:`RUNS`.

    Returns one row per method: the three accuracy curves, final accuracies, wall seconds, and the
    bf16-vs-float32 and seed-1-vs-seed-0 gaps.
    """
    import fedlab
    from lab.evidence.protocol import final_metric

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, params in AMP_CHECK_METHODS:
            curves: dict[str, list[float]] = {}
            finals: dict[str, float] = {}
            seconds: dict[str, float] = {}
            for label, change in RUNS:
                cfg = base.replace(algorithm=name, algorithm_params=params, runs_dir=tmp, **change)
                t0 = time.perf_counter()
                result = fedlab.run(cfg, progress=progress)
                seconds[label] = time.perf_counter() - t0
                curves[label] = result.metrics["test_acc"].dropna().tolist()
                finals[label] = final_metric(result).value  # the evidence's final accuracy (labelled fallback)
                print(f"  {name:<7} {label:<15} final accuracy {finals[label]:.4f}  "
                      f"({seconds[label]:.0f} s)", flush=True)
            f32, bf16, seed1 = (curves[label] for label, _ in RUNS)
            rows.append({"algorithm": name, "params": params, "curves": curves, "seconds": seconds,
                         "final": finals,
                         "bf16_gap": curve_gap(bf16, f32), "seed_gap": curve_gap(seed1, f32)})
    return rows


def amp_check_main(quick: bool, rounds: int | None, client_threads: int) -> list[dict[str, Any]]:
    """``python -m lab bench --amp-check``: run :func:`amp_check` and print its table."""
    base = amp_check_config(quick=quick, rounds=rounds, client_threads=client_threads)
    print(f"bf16 accuracy check{' (quick)' if quick else ''}: {base.dataset}, {base.partition} "
          f"{base.alpha}, {base.n_clients} clients, participation {base.participation}, K={base.local_steps}, "
          f"B={base.batch_size}, lr {base.lr}, {base.rounds} rounds, test accuracy every {base.eval_every}; "
          f"client_threads={base.client_threads}, channels_last")
    rows = amp_check(base)
    print(f"\n{'method':<9}{'float32':>9}{'bf16':>9}{'|bf16-f32| max/mean':>22}{'|seed1-seed0| max/mean':>25}"
          f"{'wall f32 -> bf16':>20}")
    for r in rows:
        f = r["final"]
        s = r["seconds"]
        print(f"{r['algorithm']:<9}{f['float32 seed 0']:>9.4f}{f['bf16 seed 0']:>9.4f}"
              f"{r['bf16_gap'][0]:>13.3f} / {r['bf16_gap'][1]:.3f}{r['seed_gap'][0]:>16.3f} / {r['seed_gap'][1]:.3f}"
              f"{s['float32 seed 0']:>11.0f} s -> {s['bf16 seed 0']:.0f} s")
    for r in rows:
        for label, curve in r["curves"].items():
            print(f"  {r['algorithm']:<7} {label:<15} {' '.join(f'{a:.3f}' for a in curve)}")
    return rows
