"""What keeping client states on disk costs: one round's state traffic, in RAM against on disk.

    python -m lab bench store                   # the regime's MLP (d = 199,210), N = 2,000, 100 clients a round
    python -m lab bench store --quick           # seconds (CI): a 1,000-float state, N = 50

A stateful method's round reads the state of each sampled client and writes its new one back
(:func:`fedlab.engine.round.run_round`); with ``client_store="disk"`` both go through
:class:`fedlab.store.client_states.DiskClientStates` and every checkpoint makes them durable. Timed here,
with the engine's own store objects and a SCAFFOLD-shaped state (one θ-sized vector ``c_i``): a round of
``m`` clients drawn without replacement from N (a new draw per round, each client's state its previous one
plus 1), each client read then written, then — on disk — the checkpoint. The in-memory dict and the disk
store take turns round by round in pairs (:func:`lab.bench.machine.paired_times`), so a drift of the
machine lands on both; reported are the median milliseconds per client of each, their ratio, and, for
scale, the median milliseconds of one plain local SGD step of the same model on a batch of 32 (so a reader
sees the disk's cost against the K steps a client trains). The first rounds fill the stores; both hold the
same numbers at the end (checked).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path

import numpy as np
import torch

from fedlab import build_model
from fedlab.store.client_states import DiskClientStates
from lab.bench.machine import load_average, machine_description, paired_times

State = dict[str, torch.Tensor]


def round_of_traffic(store: MutableMapping[int, State], d: int, n: int, m: int,
                     rng: np.random.Generator) -> Callable[[], None]:
    """A round of state traffic on ``store``: m of n clients read (a zero state if new), +1, written back."""

    def run() -> None:
        for i in rng.choice(n, size=m, replace=False).tolist():
            state = store.get(i) or {"c_i": torch.zeros(d)}
            store[i] = {"c_i": state["c_i"] + 1}
        if isinstance(store, DiskClientStates):
            store.committed(store.checkpoint())

    return run


def step_ms(model_name: str, input_shape: tuple[int, ...], batch: int, repeats: int) -> float:
    """Median ms of one plain SGD step (forward, backward, update) of ``model_name`` on a random batch."""
    gen = torch.Generator().manual_seed(0)
    module = build_model(model_name, input_shape, 10, seed=0)
    opt = torch.optim.SGD(module.parameters(), lr=0.05)
    x, y = torch.randn((batch, *input_shape), generator=gen), torch.randint(0, 10, (batch,), generator=gen)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(module(x), y).backward()
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench store", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", help="the model whose θ a client state holds (Fashion-MNIST shapes)")
    p.add_argument("--n-clients", type=int, default=2000)
    p.add_argument("--per-round", type=int, default=100, help="clients read and written per round")
    p.add_argument("--pairs", type=int, default=15, help="timed rounds of each store")
    p.add_argument("--quick", action="store_true", help="a 1,000-float state, N = 50, 10 a round, 3 pairs")
    args = p.parse_args(argv)
    shape = (1, 28, 28)
    if args.quick:
        d, args.n_clients, args.per_round, args.pairs = 1000, 50, 10, 3
    else:
        d = sum(q.numel() for q in build_model(args.model, shape, 10, seed=0).parameters())
    with tempfile.TemporaryDirectory() as tmp:
        memory: dict[int, State] = {}
        disk = DiskClientStates.create(Path(tmp), args.n_clients, {"c_i": torch.zeros(d)})
        # the same draws for both: each store gets its own generator with the same seed
        mem_round = round_of_traffic(memory, d, args.n_clients, args.per_round, np.random.default_rng(0))
        disk_round = round_of_traffic(disk, d, args.n_clients, args.per_round, np.random.default_rng(0))
        mem_t, disk_t, _, _ = paired_times(mem_round, disk_round, args.pairs, torch.device("cpu"))
        same = sorted(memory) == sorted(disk) and all(torch.equal(memory[i]["c_i"], disk[i]["c_i"]) for i in memory)
        disk.close()
    per = 1000 / args.per_round
    mem_ms = [w * per for w, _ in mem_t]
    disk_ms = [w * per for w, _ in disk_t]
    ratio = statistics.median(b / a for a, b in zip(mem_ms, disk_ms))
    print(f"machine: {machine_description()}; load average {load_average()}")
    print(f"state: {d:,} float32 ({4 * d / 2**20:.2f} MiB) per client; N = {args.n_clients:,}, "
          f"{args.per_round} clients a round, {args.pairs} timed rounds of each store in pairs")
    print(f"{'store':<8} {'ms per client (median)':>24}")
    print(f"{'memory':<8} {statistics.median(mem_ms):>24.3f}")
    print(f"{'disk':<8} {statistics.median(disk_ms):>24.3f}")
    print(f"disk / memory (median of the pairs' ratios): {ratio:.2f}")
    if not args.quick:
        print(f"one plain SGD step of {args.model} on 32 images: {step_ms(args.model, shape, 32, 15):.2f} ms")
    print(f"both stores hold the same states: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
