"""Milliseconds per local step: fedlab's engine against a plain PyTorch loop doing the same math.

    python -m lab bench step                      # FedAvg, FedSAM x mlp, cnn, resnet18_gn
    python -m lab bench step --models mlp --pairs 31 --json out.json
    python -m lab bench step --quick              # seconds (CI): mlp and cnn on 1x8x8, K = 3, B = 8

What is timed is one client's K local steps of round 0, from the same θ on the same batches, each batch
gathered by index from one tensor of random inputs (timing does not depend on the pixel values):

* **fedlab** — ``Simulation.run_clients`` with the client's job: the engine's sequential path, the one
  every round runs per client (``client_start``, K × the algorithm's ``local_step`` on the flat θ with
  the plain-autograd gradient oracle, ``upload``);
* **plain** — :meth:`lab.bench.conventional.ConventionalFL.train_on`: a deep copy of the ``nn.Module``,
  ``torch.optim.SGD(lr, weight_decay)``, then per batch ``loss.backward()`` (FedSAM: the usual two-pass
  SAM on the same batch), ``clip_grad_norm_`` and ``optimizer.step()``.

Both include the client's start and end (fedlab's ``client_start``/``upload``, the plain loop's copy and
optimiser), spread over the K steps. The two take turns in pairs, fedlab first in even pairs and plain
first in odd ones, after one untimed run of each, so a drift of the machine's speed (a shared machine,
a CPU changing clock) lands on both. Reported per model and algorithm: the median over the pairs of
wall and CPU (``process_time``) milliseconds per step of each, and the median of the pairs' ratios
fedlab ÷ plain (below 1: fedlab faster) — the headline, since the two halves of a pair saw the same
machine. The CPU ratio is the steadier one where other processes share the cores. Last column: how far
apart the two loops end, ‖θ_fedlab − θ_plain‖ ÷ ‖θ_K − θ_0‖ (float32 rounding when the math agrees;
``tests/test_bench_step.py`` holds it below :data:`AGREEMENT`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lab.bench.machine import load_average, machine_description, paired_times

ALGORITHMS: tuple[str, ...] = ("fedavg", "fedsam")
LR = 0.05  # the regime's local learning rate; weight decay 1e-3 and clipping 10 are Config's defaults
AGREEMENT = 1e-2
"""The most ‖θ_fedlab − θ_plain‖ may be, as a share of the client's update ‖θ_K − θ_0‖, for the two loops
to count as doing the same math (float32 rounding in other kernels stays far below it)."""


@dataclass(frozen=True)
class StepSetting:
    """One model on random inputs of one shape: K local steps of B samples, timed in ``pairs`` pairs."""

    model: str
    input_shape: tuple[int, ...]
    local_steps: int
    batch_size: int
    pairs: int


SETTINGS: dict[str, StepSetting] = {
    "mlp": StepSetting("mlp", (1, 28, 28), 50, 32, 15),  # the regime's MLP: K = 50, B = 32
    "cnn": StepSetting("cnn", (1, 28, 28), 10, 32, 11),
    "resnet18_gn": StepSetting("resnet18_gn", (3, 32, 32), 2, 32, 5),  # CIFAR stem, ~0.5 s a step on a core
}
QUICK: dict[str, StepSetting] = {
    "mlp": StepSetting("mlp", (1, 8, 8), 3, 8, 3),
    "cnn": StepSetting("cnn", (1, 8, 8), 3, 8, 3),
}


class OneClient:
    """Client 0 of a one-client federation on ``setting``: its K local steps in round 0, two ways.

    :meth:`fedlab` and :meth:`plain` each return the client's final θ (flat, in the model's parameter
    order); :attr:`theta0` is where both start.
    """

    def __init__(self, algorithm: str, setting: StepSetting, runs_dir: str, *, lr: float = LR, seed: int = 0) -> None:
        from fedlab.config import Config
        from fedlab.engine import Simulation
        from lab.bench.conventional import ConventionalFL
        from lab.bench.workload import random_dataset

        K, B = setting.local_steps, setting.batch_size
        cfg = Config(algorithm=algorithm, dataset="custom", model=setting.model, n_clients=1, participation=1.0,
                     partition="iid", rounds=1, local_steps=K, batch_size=B, lr=lr, augment=False, eval_every=1,
                     seed=seed, runs_dir=runs_dir)
        self.sim = Simulation.build(cfg, dataset=random_dataset(setting.input_shape, K * B, seed=seed))
        state = self.sim.initial_state()
        self.theta0 = state.theta0
        self.jobs = self.sim.client_jobs(0, self.sim.sample(0), self.sim.client_indices)
        self.info = self.sim.round_info(0, (K,))
        self.msg = self.sim.algorithm.broadcast(state.server, self.info)
        self.cstates = [self.sim.algorithm.client_init(state.theta0)]
        self.baseline = ConventionalFL.from_simulation(self.sim)

    def fedlab(self) -> Tensor:
        """θ_K through the engine's local work for this client."""
        (result,) = self.sim.run_clients(self.msg, self.jobs, self.cstates, self.sim.local_data, self.info)
        return result.theta_final

    def plain(self) -> Tensor:
        """θ_K through the plain loop, on the same index batches and learning rate."""
        data = self.sim.local_data
        state, _ = self.baseline.train_on((data.batch(idx, None) for idx in self.jobs[0].batches), self.info.lr)
        return torch.cat([state[name].reshape(-1) for name in self.sim.model.spec.names])


def measure(algorithm: str, setting: StepSetting, *, pairs: int | None = None, lr: float = LR,
            seed: int = 0) -> dict[str, Any]:
    """One row: median ms per local step (wall and CPU) of fedlab and the plain loop, their paired ratios,
    and how far apart the two loops end relative to the client's update."""
    n = setting.pairs if pairs is None else pairs
    with tempfile.TemporaryDirectory() as tmp:
        client = OneClient(algorithm, setting, tmp, lr=lr, seed=seed)
        device = client.theta0.device
        ours, plain, theta_ours, theta_plain = paired_times(client.fedlab, client.plain, n, device)
    K = setting.local_steps

    def per_step(times: Sequence[tuple[float, float]], which: int) -> float:
        return 1e3 * statistics.median(t[which] for t in times) / K

    moved = float(torch.linalg.vector_norm(theta_ours - client.theta0))
    return {"model": setting.model, "algorithm": algorithm, "input_shape": list(setting.input_shape),
            "local_steps": K, "batch_size": setting.batch_size, "pairs": n, "d": client.theta0.numel(),
            "fedlab_ms": per_step(ours, 0), "plain_ms": per_step(plain, 0),
            "fedlab_cpu_ms": per_step(ours, 1), "plain_cpu_ms": per_step(plain, 1),
            "ratio": statistics.median(a[0] / b[0] for a, b in zip(ours, plain)),
            "cpu_ratio": statistics.median(a[1] / b[1] for a, b in zip(ours, plain)),
            "param_gap": float(torch.linalg.vector_norm(theta_ours - theta_plain)) / moved if moved else float("nan")}


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    """The table: one line per model and algorithm."""
    head = (f"{'model':<12} {'algorithm':<9} {'K':>3} {'B':>3} {'pairs':>5} {'fedlab ms':>10} {'plain ms':>9} "
            f"{'ratio':>6} {'fedlab cpu':>10} {'plain cpu':>9} {'cpu ratio':>9} {'gap/update':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<12} {r['algorithm']:<9} {r['local_steps']:>3} {r['batch_size']:>3} {r['pairs']:>5} "
              f"{r['fedlab_ms']:>10.2f} {r['plain_ms']:>9.2f} {r['ratio']:>6.2f} {r['fedlab_cpu_ms']:>10.2f} "
              f"{r['plain_cpu_ms']:>9.2f} {r['cpu_ratio']:>9.2f} {r['param_gap']:>10.1e}")
    print("ms: median milliseconds per local step over the pairs (wall, then CPU); ratio: median over the pairs of\n"
          "fedlab ÷ plain (below 1: fedlab faster); gap/update: ‖θ_fedlab − θ_plain‖ ÷ ‖θ_K − θ_0‖ at the end")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench step", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", nargs="+", default=None, choices=sorted(SETTINGS), help="default: all")
    p.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    p.add_argument("--pairs", type=int, default=None, help="timed pairs per row (default: the setting's)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads, for both loops")
    p.add_argument("--quick", action="store_true", help="seconds-long version: mlp and cnn on 1x8x8, K 3, B 8, 3 pairs")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.pairs is not None and args.pairs < 1:
        p.error(f"--pairs must be >= 1, got {args.pairs}")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    table = QUICK if args.quick else SETTINGS
    settings = [table[m] for m in (args.models or table) if m in table]
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        before = load_average()
        print(f"machine: {machine_description()}; load average {before}")
        print(f"one client's K local steps, fedlab's engine vs the plain loop, taking turns in pairs "
              f"(lr {LR}, weight decay 1e-3, clipping 10; random inputs){' (quick)' if args.quick else ''}", flush=True)
        rows = []
        for s in settings:
            for alg in args.algorithms:
                r = measure(alg, s, pairs=args.pairs)
                rows.append(r)
                print(f"  {s.model} {alg}: {r['fedlab_ms']:.2f} vs {r['plain_ms']:.2f} ms/step", flush=True)
        after = load_average()
    finally:
        torch.set_num_threads(threads)
    print()
    print_rows(rows)
    print(f"load average {before} → {after}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine_description(), "threads": args.threads, "quick": args.quick,
                                         "lr": LR, "load_average": {"before": before, "after": after},
                                         "settings": [asdict(s) for s in settings], "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
