"""Command line: ``python -m fedlab run | sweep | algorithms | bench``.

Every ``run`` option maps one-to-one onto a :class:`fedlab.Config` field; ``--help`` lists them with
their defaults. Algorithm hyperparameters go through repeated ``--param name=value``. ``sweep`` runs a
grid file (format: :mod:`fedlab.sweep_file`) on a local process pool or a Ray cluster.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from fedlab.config import DATASETS, LR_SCHEDULES, PARTITIONS, SAMPLINGS, Config, ConfigError

_HELP = {
    "algorithm": "federated method (see `python -m fedlab algorithms`)",
    "dataset": "dataset name",
    "model": "model name (GroupNorm CNNs/ResNets)",
    "train_size": "class-balanced subset of the training set (default: all)",
    "test_size": "class-balanced subset of the test set (default: all)",
    "as_cifar_shape": "pad 28x28 images to 32x32 and repeat channels (lenet5/ResNets on Fashion-MNIST)",
    "augment": "force on-device augmentation on/off (default: the dataset's own: crop+flip for CIFAR)",
    "partition": "how the training set is split among clients",
    "alpha": "Dirichlet concentration (dirichlet: per class over clients; dirichlet_client: per-client class prior)",
    "classes_per_client": "c for the pathological partition",
    "shards_per_client": "shards per client for the shards partition",
    "n_clients": "number of clients N",
    "participation": "fraction of clients per round, in (0, 1]",
    "sampling": "uniform = exactly m without replacement; bernoulli = FL-Simulator's; schedule = replay a file",
    "schedule_path": "JSON list of per-round client-id lists (with --sampling schedule)",
    "rounds": "communication rounds T",
    "local_steps": "local steps K per round",
    "local_epochs": "if given, K_i = E*ceil(n_i/B) local steps (the reference codes' epoch mode)",
    "batch_size": "local minibatch size B",
    "lr": "initial local learning rate",
    "lr_schedule": "per-round learning-rate schedule",
    "lr_decay": "per-round decay factor for the exponential schedule",
    "weight_decay": "L2 weight decay of the local SGD",
    "clip_norm": "global-norm gradient clipping (0 or less = off)",
    "eval_every": "evaluate the global model every this many rounds (and at the end)",
    "eval_subsample": "evaluate on a fixed class-balanced subset of this many test samples",
    "seed": "the one seed every generator is derived from",
    "device": "cpu, cuda, cuda:N or mps",
    "parallel_clients": "clients trained together with torch.func.vmap (1 = sequential reference path, "
                        "'auto' = chosen by a short measurement)",
    "memory_budget_mb": "MiB a vmapped chunk may use when --parallel-clients auto (default: device-dependent)",
    "client_threads": "CPU: train this many clients at once, one per thread with one intra-op thread each "
                      "(bit-identical to the sequential path at one thread)",
    "channels_last": "run convolutions in NHWC memory layout (faster kernels; same function, last-bit differences)",
    "amp": "bf16 autocast of the local gradients (CUDA, or a CPU with native bf16); evaluation stays float32",
    "checkpoint_every": "write a checkpoint every this many rounds",
    "runs_dir": "where run directories live (default: <repo>/runs)",
    "name": "label for plots and summaries",
}
_CHOICES = {"dataset": DATASETS, "partition": PARTITIONS, "sampling": SAMPLINGS, "lr_schedule": LR_SCHEDULES}


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _int_or_auto(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _key_values(items: list[str], flag: str) -> dict[str, Any]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{flag} expects name=value (got {item!r})")
        key, value = item.split("=", 1)
        out[key.strip()] = _parse_value(value.strip())
    return out


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="train one federated experiment (resumes or loads it if it exists)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    defaults = Config()
    for f in dataclasses.fields(Config):
        if f.name in ("algorithm_params", "partition_params"):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kwargs: dict[str, Any] = {"default": default, "help": _HELP.get(f.name, f.name)}
        if f.name in _CHOICES:
            kwargs["choices"] = _CHOICES[f.name]
        if isinstance(default, bool) or f.name in ("augment",):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(default, int) and not isinstance(default, bool):
            kwargs["type"] = int
        elif isinstance(default, float):
            kwargs["type"] = float
        elif f.name in ("train_size", "test_size", "local_epochs", "eval_subsample", "classes_per_client"):
            kwargs["type"] = int
        elif f.name == "memory_budget_mb":
            kwargs["type"] = float
        if f.name == "parallel_clients":
            kwargs["type"] = _int_or_auto
        p.add_argument(flag, **kwargs)
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="algorithm hyperparameter, repeatable (e.g. --param rho=0.05 --param preset=high)")
    p.add_argument("--partition-param", action="append", default=[], metavar="NAME=VALUE",
                   help="partitioner option, repeatable (min_size, balance_cap, concentration, "
                        "reuse_on_exhaustion, path)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _config_from_args(args: argparse.Namespace) -> Config:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
              if f.name not in ("algorithm_params", "partition_params")}
    if values["clip_norm"] is not None and values["clip_norm"] <= 0:
        values["clip_norm"] = None
    values["algorithm_params"] = _key_values(args.param, "--param")
    values["partition_params"] = _key_values(args.partition_param, "--partition-param")
    return Config(**values)


def _cmd_run(args: argparse.Namespace) -> int:
    from fedlab.engine import run

    config = _config_from_args(args)
    result = run(config, progress=not args.no_progress)
    s = result.summary
    print(f"method    {config.name or config.algorithm} on {config.dataset} ({config.partition}, "
          f"{config.n_clients} clients)")
    print(f"run       {result.run_dir}")
    print(f"status    {result.status} after {s['rounds_done']}/{s['rounds']} rounds")
    fin = s["final_test_acc"]
    best = s["best_test_acc"]
    print(f"accuracy  final {fin:.4f}  best {best:.4f}" if fin is not None else "accuracy  n/a")
    print(f"time      {s['mean_round_seconds'] * 1000:.1f} ms per round")
    print(f"uplink    {s['uplink_floats_total']:,} floats in total")
    return 0 if result.status == "finished" else 3


def _cmd_algorithms(args: argparse.Namespace) -> int:
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.bench import communication_vectors

    rows = []
    for name in algorithm_names():
        cls = algorithm_class(name)
        up, down = communication_vectors(name)
        rows.append((name, cls.paper, cls.state_where, f"{up:g}", f"{down:g}", str(cls.grad_evals_per_step)))
    header = ("name", "paper", "state kept where", "up", "down", "grads/step")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print("\nup/down: model-sized vectors per client per round in real FL (client-kept state is not sent).")
    return 0


def _add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    import fedlab.sweep_file
    from fedlab.sweep_backends import BACKENDS

    p = sub.add_parser("sweep", help="run a grid file (configs x seeds) on a local process pool or on Ray",
                       description="Run every combination of a grid file's values, once per seed, through "
                                   "fedlab.run (finished runs load from the results store, interrupted ones "
                                   "resume), then print the summary table.",
                       epilog="grid file format (fedlab.sweep_file):\n\n" + fedlab.sweep_file.EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("grid_file", metavar="GRID.yaml", help="the grid file")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="local: a pool of worker processes here (default); ray: one Ray task per run; "
                        "sequential: one after another in this process")
    p.add_argument("--address", default=None,
                   help="ray: the cluster to join ('auto': the one `ray start` made on this node; default: "
                        "start a local one)")
    p.add_argument("--cpus-per-run", type=int, default=1,
                   help="cores (and intra-op threads) per run (default 1: one run per core)")
    p.add_argument("--gpus-per-run", type=float, default=0,
                   help="ray: GPUs per run, fractions share a GPU (0.25: four runs per GPU; default 0)")
    p.add_argument("--max-workers", type=int, default=None,
                   help="local: worker processes (default: usable cores / cores per run)")
    p.add_argument("--runs-dir", default=None, help="override the grid file's runs_dir")
    p.add_argument("--fail-fast", action="store_true", help="start no new run after the first failure")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fedlab.sweep import SweepError, summary_table, sweep
    from fedlab.sweep_file import load_grid_file

    spec = load_grid_file(args.grid_file, runs_dir=args.runs_dir)
    n = len(spec.configs)
    print(f"sweep     {spec.path}: {n} runs ({n // len(spec.seeds)} combinations x {len(spec.seeds)} seeds) "
          f"on backend {args.backend}", flush=True)
    try:
        results = sweep(spec.base, spec.grid, spec.seeds, progress=not args.no_progress, backend=args.backend,
                        address=args.address, cpus_per_run=args.cpus_per_run, gpus_per_run=args.gpus_per_run,
                        max_workers=args.max_workers, fail_fast=args.fail_fast)
        failed = None
    except SweepError as err:
        results, failed = [r for r in err.results if r is not None], err
    if results:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(summary_table(results, target=spec.target).round(4).to_string(index=False))
    print(f"runs      {results[0].run_dir.parent if results else '-'} (logs in sweep-logs/ there)")
    if failed is not None:
        print(f"\n{failed}", file=sys.stderr)
        return 1
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.bench_args[:1] == ["sweep"]:  # `bench sweep`: the backends' wall time (fedlab.bench_sweep)
        from fedlab.bench_sweep import main as bench_sweep_main

        return bench_sweep_main(args.bench_args[1:])
    from fedlab.bench import main as bench_main

    return bench_main(args.bench_args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_sweep_parser(sub)
    sub.add_parser("algorithms", help="list registered algorithms: paper, state, communication, cost")
    b = sub.add_parser("bench", help="timings: ms per round per algorithm, speed modes (`bench --help`), "
                                     "sweep backends (`bench sweep --help`)",
                       add_help=False)
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the benchmark has its own parser: pass its options through untouched
        return _cmd_bench(argparse.Namespace(bench_args=[a for a in argv[1:] if a != "--"]))
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "sweep":
            return _cmd_sweep(args)
        if args.command == "algorithms":
            return _cmd_algorithms(args)
        return _cmd_bench(args)
    except (ConfigError, ValueError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
