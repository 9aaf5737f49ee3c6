"""Benchmarks that print numbers: milliseconds per round for each algorithm.

``python -m lab bench`` trains a few rounds of each algorithm through the real engine (same data
path, same model, same sampling) and reports the median wall time per round, excluding the first
(warm-up) round and the last round (the only one that evaluates), plus the cost relative to FedAvg.
Defaults are the issue's setting: Fashion-MNIST, ``cnn``, 100 clients, 10 % participation, K = 10,
B = 32.

``python -m lab bench --speed`` (or ``--quick``, a seconds-long version for CI) compares execution
modes instead: the conventional loop of :mod:`lab.bench.conventional` (FedAvg/FedSAM only),
fedlab's sequential path, fedlab's vectorised path (chunk = m, and ``parallel_clients="auto"``) and,
on CPU, fedlab's client threads (``client_threads`` = the usable cores, one client per core),
alone and with ``channels_last=True``; and, as a separate precision, bf16 autocast (``amp=True``) for
the conventional loop and fedlab's best CPU mode (``threads_cl_bf16``; on CUDA ``auto_bf16``),
for FedAvg, FedSAM, SCAFFOLD and FedVSSAM (those registered), on Fashion-MNIST ``cnn`` and on a
CIFAR-shaped ``resnet18_gn_imagenet_stem`` fed with random 3×32×32 tensors, at 10 and 20 clients per
round. Rounds are timed without evaluation (sampling, local work, upload, aggregation), the modes of
one algorithm taking turns round by round (so a drift of the machine's speed hits them alike); the
first round is a warm-up (it also holds ``auto``'s measurement) and is excluded; the median over the
remaining ≥ 3 rounds is reported. It also prints the SAM/FedAvg cost ratio per mode, the speed-up of
fedlab's best mode over the conventional loop (float32 against float32, bf16 against bf16, and bf16
against the float32 loop, labelled as such), the fraction of a plain float32 matmul's FLOP rate
that each mode achieves (model FLOPs from ``torch.utils.flop_counter.FlopCounterMode``), and the peak
memory of the vectorised path per chunk size (see :mod:`fedlab.engine.chunking`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from fedlab.algorithms import algorithm_class, algorithm_names
from lab.bench.machine import machine_description, sync, usable_cores
from lab.bench.workload import matmul_flops_per_second, model_flops, random_dataset, tune_malloc


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


# ------------------------------------------------------------------------------------------------
# --speed: execution modes compared (conventional loop, fedlab sequential, fedlab vectorised)
# ------------------------------------------------------------------------------------------------
SPEED_ALGORITHMS: tuple[str, ...] = ("fedavg", "fedsam", "scaffold", "fedvssam")
"""Algorithms the speed comparison times (those registered at run time)."""

@dataclass(frozen=True)
class Mode:
    """One execution mode of the speed comparison: how the same rounds are run."""

    name: str
    conventional: bool = False  # the loop of lab.bench.conventional instead of fedlab's engine
    parallel: str = "one"  # fedlab: "one" (parallel_clients=1), "m" (one vmapped chunk), "auto"
    threads: bool = False  # client_threads = --client-threads (CPU only)
    channels_last: bool = False
    amp: bool = False  # bf16 autocast of the gradients (a precision change: compare with the _bf16 baseline)
    cpu_only: bool = False
    default_on: tuple[str, ...] = ("cpu", "cuda")  # devices whose default mode list includes it


_MODES: tuple[Mode, ...] = (
    Mode("conventional", conventional=True),
    Mode("sequential"),
    Mode("vectorised", parallel="m"),
    Mode("auto", parallel="auto"),
    Mode("threads", threads=True, cpu_only=True),
    Mode("threads_cl", threads=True, channels_last=True, cpu_only=True),
    Mode("conventional_bf16", conventional=True, amp=True),
    Mode("threads_cl_bf16", threads=True, channels_last=True, amp=True, cpu_only=True),
    Mode("auto_bf16", parallel="auto", amp=True, default_on=("cuda",)),
)
MODE_SPECS: dict[str, Mode] = {md.name: md for md in _MODES}
MODES: tuple[str, ...] = tuple(MODE_SPECS)
"""conventional = :mod:`lab.bench.conventional` (FedAvg/FedSAM only); sequential =
``parallel_clients=1``; vectorised = ``parallel_clients=m`` (one vmapped chunk); auto =
``parallel_clients="auto"``; threads = ``client_threads=--client-threads``; threads_cl = the same
with ``channels_last=True`` (the threads modes are CPU only). The ``_bf16`` modes add ``amp=True``
(bf16 autocast of the gradients; the conventional loop autocasts its forward passes): a different
precision, so their speed-ups are reported against ``conventional_bf16`` as well as ``conventional``."""

FEDLAB_MODES: tuple[str, ...] = tuple(md.name for md in _MODES if not md.conventional)
CPU_ONLY_MODES: tuple[str, ...] = tuple(md.name for md in _MODES if md.cpu_only)


def default_modes(device: torch.device) -> list[str]:
    """The modes ``--speed`` runs on ``device`` when ``--modes`` is not given."""
    return [md.name for md in _MODES if device.type in md.default_on and not (md.cpu_only and device.type != "cpu")]


@dataclass(frozen=True)
class SpeedSetting:
    """One model × data combination of the speed comparison."""

    key: str
    label: str
    model: str
    data: str  # "fmnist" (the real dataset) or "random" (random tensors of input_shape)
    input_shape: tuple[int, ...]
    n_clients: int = 100


SPEED_SETTINGS: dict[str, SpeedSetting] = {
    "cnn": SpeedSetting("cnn", "Fashion-MNIST cnn", "cnn", "fmnist", (1, 28, 28)),
    "resnet18": SpeedSetting("resnet18", "random 3x32x32 resnet18_gn_imagenet_stem",
                             "resnet18_gn_imagenet_stem", "random", (3, 32, 32)),
}
QUICK_SETTING = SpeedSetting("cnn-quick", "random 1x16x16 cnn", "cnn", "random", (1, 16, 16), n_clients=20)


def fedlab_round_runner(sim: Any) -> Callable[[int], None]:
    """``run(t)`` = round t of ``sim`` through the engine, without evaluation or checkpoints.

    Each round is what ``Simulation.run`` does before evaluating: sample, broadcast, local work
    (``sim.run_clients``: sequential, vectorised, auto or threads), upload, aggregate.
    """
    state = sim.initial_state()

    def run(t: int) -> None:
        sim.train_round(state, t)

    return run


def interleaved_round_seconds(runners: dict[str, Callable[[int], None]], rounds: int,
                              device: torch.device) -> dict[str, list[float]]:
    """Wall seconds of rounds 0 … rounds−1 of every runner, the runners taking turns round by round.

    Round t runs every runner once, starting at a different runner each round. Timing one mode for
    all its rounds and then the next would let slow drifts of the machine (a VM's CPU changing speed,
    another process waking up) land on one mode; taking turns spreads them over all modes alike.
    """
    names = list(runners)
    walls: dict[str, list[float]] = {n: [] for n in names}
    for t in range(rounds):
        shift = t % len(names)
        for n in names[shift:] + names[:shift]:
            sync(device)
            t0 = time.perf_counter()
            runners[n](t)
            sync(device)
            walls[n].append(time.perf_counter() - t0)
    return walls


def _release_memory(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def speed_main(args: argparse.Namespace) -> int:
    """``python -m lab bench --speed`` / ``--quick``: see the module docstring."""
    from lab.bench.conventional import CONVENTIONAL_ALGORITHMS, ConventionalFL
    from fedlab.config import Config
    from fedlab.data import load_dataset
    from fedlab.engine import Simulation

    device = torch.device(args.device)
    gpu = device.type == "cuda"
    quick = args.quick
    settings = [QUICK_SETTING] if quick else [SPEED_SETTINGS[k] for k in (args.models or SPEED_SETTINGS)]
    ms_values = args.clients_per_round or ([10] if quick else [10, 20])
    K = args.local_steps or (2 if quick else 10)
    B = args.batch_size or (8 if quick else (50 if gpu else 32))
    rounds = args.rounds or 4
    if rounds < 4:
        raise ValueError("--rounds must be at least 4 with --speed (one warm-up, at least 3 timed)")
    modes = args.modes or default_modes(device)
    if gpu and set(modes) & set(CPU_ONLY_MODES):
        raise ValueError(f"--modes {' '.join(CPU_ONLY_MODES)} are CPU execution modes; drop them with --device cuda")
    client_threads = args.client_threads or usable_cores()
    registered = set(algorithm_names())
    wanted = SPEED_ALGORITHMS if args.algorithms is None else (
        algorithm_names() if args.algorithms == ["all"] else tuple(args.algorithms))
    unknown = [a for a in wanted if a not in registered and args.algorithms is not None]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; registered: {', '.join(sorted(registered))}")
    names = [a for a in wanted if a in registered]
    missing = [a for a in wanted if a not in registered]

    tuned = tune_malloc() if args.tune_malloc else False
    print(f"machine: {machine_description()}" + (", glibc malloc tuned (no mmap per large tensor)" if tuned else ""))
    print(f"speed comparison{' (quick)' if quick else ''}: device {device}, K={K}, B={B}, "
          f"{rounds} rounds per cell (first = warm-up, not timed; median of {rounds - 1})"
          + (f"; threads modes: {client_threads} client threads" if set(modes) & set(CPU_ONLY_MODES) else ""))
    print(f"algorithms: {' '.join(names)}" + (f"  (not registered, skipped: {' '.join(missing)})" if missing else ""))
    matmul = matmul_flops_per_second(device, n=1024 if quick else None, repeats=3 if quick else 5)
    print(f"float32 matmul reference: {matmul / 1e9:.1f} GFLOP/s")
    mem_method = ("torch.cuda.max_memory_allocated" if gpu else
                  "CPU estimate: peak bytes of live tensors in a 2-step probe run (LiveTensorBytes)")

    rows: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    t_total = time.perf_counter()
    for setting in settings:
        if setting.data == "fmnist":
            dataset = load_dataset("fmnist", device=str(device))
        else:
            per_client = K * B
            dataset = random_dataset(setting.input_shape, setting.n_clients * per_client, device=str(device))
        flops_fb = model_flops(setting.model, setting.input_shape, B, dataset.n_classes, device)
        print(f"\n[{setting.label}] {dataset.n_train} training samples, {setting.n_clients} clients (iid), "
              f"{flops_fb / 1e9:.3f} GFLOP per forward+backward of {B}", flush=True)
        for m in ms_values:
            for name in names:
                grads = algorithm_class(name).grad_evals_per_step
                flops_round = flops_fb * K * m * grads
                cells = [md for md in modes if not (MODE_SPECS[md].conventional and name not in CONVENTIONAL_ALGORITHMS)]
                sims: dict[str, Any] = {}
                runners: dict[str, Callable[[int], None]] = {}
                with contextlib.ExitStack() as stack:
                    for mode in cells:
                        spec = MODE_SPECS[mode]
                        cfg = Config(algorithm=name, dataset="fmnist" if setting.data == "fmnist" else "cifar10",
                                     model=setting.model, n_clients=setting.n_clients,
                                     participation=m / setting.n_clients, partition="iid", rounds=rounds,
                                     local_steps=K, batch_size=B, device=str(device), augment=False,
                                     parallel_clients={"m": m, "auto": "auto"}.get(spec.parallel, 1),
                                     memory_budget_mb=args.memory_budget_mb,
                                     client_threads=client_threads if spec.threads else 1,
                                     channels_last=spec.channels_last, amp=spec.amp, eval_every=rounds,
                                     runs_dir=stack.enter_context(tempfile.TemporaryDirectory()))
                        sims[mode] = Simulation.build(cfg, dataset=dataset)
                        runners[mode] = (ConventionalFL.from_simulation(sims[mode]).run_round if spec.conventional
                                         else fedlab_round_runner(sims[mode]))
                    print(f"  m={m:<3} {name:<10} timing {len(cells)} modes, taking turns for {rounds} rounds ...",
                          flush=True)
                    walls = interleaved_round_seconds(runners, rounds, device)
                for mode in cells:
                    spec, cfg, choice = MODE_SPECS[mode], sims[mode].config, sims[mode].chunk_choice
                    timed = walls[mode][1:]
                    sec = statistics.median(timed)
                    row = {"setting": setting.key, "label": setting.label, "model": setting.model, "m": m,
                           "algorithm": name, "mode": mode,
                           "chunk": choice.chunk if choice is not None else cfg.parallel_clients,
                           "client_threads": cfg.client_threads, "channels_last": cfg.channels_last,
                           "amp": cfg.amp, "ms_per_round": 1000 * sec, "ms_min": 1000 * min(timed),
                           "rounds_per_second": 1.0 / sec, "rounds_timed": len(timed),
                           "warmup_ms": 1000 * walls[mode][0], "grads_per_step": grads,
                           "flops_per_round": flops_round, "achieved_flops_per_s": flops_round / sec,
                           "matmul_fraction": flops_round / sec / matmul}
                    rows.append(row)
                    extra = f" (auto chose chunk {choice.chunk}, probe {choice.probe_seconds:.1f} s)" if choice else ""
                    print(f"  m={m:<3} {name:<10} {mode:<18} {row['ms_per_round']:9.1f} ms/round{extra}", flush=True)
                    if choice is not None:
                        for c in choice.measurements:
                            memory.append({"setting": setting.key, "m": m, "algorithm": name, "chunk": c.chunk,
                                           "peak_mib": None if c.peak_bytes is None else c.peak_bytes / 2**20,
                                           "ms_per_step": None if c.seconds_per_step is None
                                           else 1000 * c.seconds_per_step,
                                           "status": c.status, "chosen": c.chunk == choice.chunk})
                del sims, runners
                _release_memory(device)
        del dataset
        _release_memory(device)

    def cell(setting: str, m: int, alg: str, mode: str) -> dict[str, Any] | None:
        return next((r for r in rows if (r["setting"], r["m"], r["algorithm"], r["mode"]) == (setting, m, alg, mode)),
                    None)

    print(f"\n{'setting':<10}{'m':>4}  {'algorithm':<11}{'mode':<19}{'chunk':>6}{'ms/round':>11}{'rounds/s':>10}"
          f"{'% matmul':>10}")
    for r in rows:
        print(f"{r['setting']:<10}{r['m']:>4}  {r['algorithm']:<11}{r['mode']:<19}{str(r['chunk']):>6}"
              f"{r['ms_per_round']:>11.1f}{r['rounds_per_second']:>10.2f}{100 * r['matmul_fraction']:>9.1f}%")
    print("(% matmul: the model's FLOPs per second as a share of the float32 matmul reference; the bf16 modes\n"
          " are measured against the same float32 reference)")

    ratios = []
    print("\nSAM / FedAvg cost ratio (FedSAM ms per round ÷ FedAvg ms per round)")
    for s in settings:
        for m in ms_values:
            for mode in modes:
                a, b = cell(s.key, m, "fedsam", mode), cell(s.key, m, "fedavg", mode)
                if a and b:
                    ratios.append({"setting": s.key, "m": m, "mode": mode,
                                   "ratio": a["ms_per_round"] / b["ms_per_round"]})
                    print(f"  {s.key:<10} m={m:<3} {mode:<18} {ratios[-1]['ratio']:.2f}")

    speedups = []
    comparisons = (  # (label, fedlab modes, baseline mode)
        ("float32", [md for md in FEDLAB_MODES if not MODE_SPECS[md].amp], "conventional"),
        ("bf16 vs bf16", [md for md in FEDLAB_MODES if MODE_SPECS[md].amp], "conventional_bf16"),
        ("bf16 vs float32", [md for md in FEDLAB_MODES if MODE_SPECS[md].amp], "conventional"),
    )
    print("\nSpeed-up of fedlab's best mode over the conventional loop (same precision first; the bf16 modes\n"
          "round the gradients to 8 mantissa bits, so 'bf16 vs float32' is not a like-for-like comparison)")
    for s in settings:
        for m in ms_values:
            for alg in CONVENTIONAL_ALGORITHMS:
                for label, ours_modes, base_mode in comparisons:
                    conv = cell(s.key, m, alg, base_mode)
                    ours = [r for r in (cell(s.key, m, alg, md) for md in ours_modes) if r]
                    if conv and ours:
                        best = min(ours, key=lambda r: r["ms_per_round"])
                        speedups.append({"setting": s.key, "m": m, "algorithm": alg, "precision": label,
                                         "baseline_mode": base_mode, "best_mode": best["mode"],
                                         "conventional_ms": conv["ms_per_round"], "best_ms": best["ms_per_round"],
                                         "speedup": conv["ms_per_round"] / best["ms_per_round"]})
                        print(f"  {s.key:<10} m={m:<3} {alg:<8} {label:<16} {speedups[-1]['speedup']:.2f}x  "
                              f"({best['mode']} {best['ms_per_round']:.1f} ms vs {base_mode} "
                              f"{conv['ms_per_round']:.1f} ms)")

    print(f"\nPeak memory of the vectorised path per chunk size ({mem_method}; from the auto mode's probe)")
    if not memory:
        print("  (none: the auto mode was not run)")
    for entry in memory:
        mib = "-" if entry["peak_mib"] is None else f"{entry['peak_mib']:.1f} MiB"
        ms = "-" if entry["ms_per_step"] is None else f"{entry['ms_per_step']:.1f} ms/step"
        print(f"  {entry['setting']:<10} m={entry['m']:<3} {entry['algorithm']:<10} chunk {entry['chunk']:>4}: "
              f"{mib:>12} {ms:>16}  {entry['status']}{'  <- chosen' if entry['chosen'] else ''}")
    total = time.perf_counter() - t_total
    print(f"\n(total {total:.0f} s)")
    if args.json:
        settings_out = {"device": str(device), "local_steps": K, "batch_size": B, "rounds": rounds,
                        "clients_per_round": ms_values, "modes": modes, "algorithms": names, "quick": quick,
                        "settings": [asdict(s) for s in settings],
                        "memory_budget_mb": args.memory_budget_mb, "malloc_tuned": tuned,
                        "client_threads": client_threads if set(modes) & set(CPU_ONLY_MODES) else None}
        args.json.write_text(json.dumps({
            "machine": machine_description(), "settings": settings_out, "matmul_flops_per_s": matmul,
            "memory_method": mem_method, "rows": rows, "sam_fedavg_ratio": ratios,
            "speedup_over_conventional": speedups,
            "vectorised_peak_memory": memory, "total_seconds": total}, indent=2))
        print(f"wrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(argv) if argv is not None else None
    if argv and argv[0] == "--":  # `python -m lab bench -- --help` passes the separator along
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="python -m lab bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithms", nargs="+", default=None,
                   help="algorithms to time, or 'all' (default: fedavg fedsam; with --speed: "
                        f"{' '.join(SPEED_ALGORITHMS)} where registered)")
    p.add_argument("--dataset", default="fmnist")
    p.add_argument("--model", default="cnn")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--participation", type=float, default=0.1)
    p.add_argument("--local-steps", type=int, default=None, help="K (default 10; --quick: 2)")
    p.add_argument("--batch-size", type=int, default=None, help="default 32; with --speed 32 on CPU, 50 on GPU")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per algorithm (default 5, first and last not timed; with --speed default 4, "
                        "first not timed)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--parallel-clients", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="also write the table as JSON here")
    speed = p.add_argument_group("execution-mode comparison (--speed / --quick; --dataset, --model, --clients, "
                                 "--participation and --parallel-clients do not apply)")
    speed.add_argument("--speed", action="store_true",
                       help="compare conventional / sequential / vectorised execution (see module doc)")
    speed.add_argument("--quick", action="store_true",
                       help="a tiny --speed run for CI: cnn on random 1x16x16 data, m=10, K=2, B=8, 4 rounds")
    speed.add_argument("--models", nargs="+", default=None, choices=sorted(SPEED_SETTINGS),
                       help="settings to run (default: all)")
    speed.add_argument("--clients-per-round", type=int, nargs="+", default=None, help="m values (default: 10 20)")
    speed.add_argument("--modes", nargs="+", default=None, choices=MODES,
                       help="execution modes (default: all of the device's; auto_bf16 only on CUDA)")
    speed.add_argument("--client-threads", type=int, default=None,
                       help="threads of the threads modes (default: the cores this process may use)")
    speed.add_argument("--memory-budget-mb", type=float, default=None,
                       help="memory budget (MiB) for the auto mode's chunk choice (default: the device's)")
    speed.add_argument("--tune-malloc", action="store_true",
                       help="CPU: stop glibc from mmap-ing (and page-faulting) every large tensor; applies to "
                            "all modes alike (see lab.bench.workload.tune_malloc)")
    check = p.add_argument_group("bf16 accuracy check (--amp-check; with --quick a seconds-long version; "
                                 "--rounds, --client-threads and --json apply)")
    check.add_argument("--amp-check", action="store_true",
                       help="FedAvg and FedSAM in float32, bf16 and float32 with another seed on Fashion-MNIST "
                            "(see lab.bench.amp)")
    args = p.parse_args(argv)
    if args.amp_check:
        from lab.bench.amp import amp_check_main

        t0 = time.perf_counter()
        print(f"machine: {machine_description()}")
        rows = amp_check_main(args.quick, args.rounds, args.client_threads or usable_cores())
        print(f"\n(total {time.perf_counter() - t0:.0f} s)")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine_description(), "rows": rows}, indent=2))
            print(f"wrote {args.json}")
        return 0
    if args.speed or args.quick:
        return speed_main(args)
    args.batch_size = 32 if args.batch_size is None else args.batch_size
    args.local_steps = 10 if args.local_steps is None else args.local_steps
    args.rounds = 5 if args.rounds is None else args.rounds
    args.algorithms = args.algorithms or ["fedavg", "fedsam"]
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


if __name__ == "__main__":
    raise SystemExit(main())
