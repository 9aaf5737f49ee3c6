"""Command line: ``python -m fedlab run | sweep | algorithms | bench | flower-sim | claims | figures --dry-run``.

Every ``run`` option maps one-to-one onto a :class:`fedlab.Config` field; ``--help`` lists them with
their defaults. Algorithm hyperparameters go through repeated ``--param name=value``. Options must be
spelled out (no abbreviations: ``--alp`` is an error, not ``--alpha``). ``sweep`` runs a grid
file (format: :mod:`fedlab.sweep.gridfile`) on a local process pool or a Ray cluster.

Errors: every fedlab error (an invalid value, a corrupted run file, a missing dataset, a path that
cannot be used) is one line ``error: ...`` on stderr and the exit code in :data:`EXIT_CODES`; a
Python traceback only with ``--debug``.

Why ~400 lines: one parser and one handler per subcommand. The ``run`` help is derived from the Config
fields' own descriptions (:func:`fedlab.config.help_text`).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import threading
import typing
from collections.abc import Iterator
from typing import Any, NoReturn

from fedlab.config import LR_SCHEDULES, SAMPLINGS, Config, ConfigError, dataset_names, help_text, partition_names
from fedlab.data.datasets import DatasetError, DatasetNotFoundError
from fedlab.data.partition import PARTITION_OPTIONS
from fedlab.evidence.integrity import EvidenceError
from fedlab.results import CheckpointError

EXIT_CODES: dict[int, str] = {
    0: "the run finished or collapsed (a completed measurement; the status line says which), or was loaded so",
    1: "sweep: some runs failed (each is named with its error and log file; the others finished)",
    2: "invalid input: a config value, hyperparameter, schedule or partition file (the message names it)",
    3: "the run ended without finishing: diverged, or stopped early",
    4: "a run file is corrupted or belongs to another run (CheckpointError; nothing was changed)",
    5: "the dataset is not on disk and could not be downloaded, or its files are corrupt (the message names the file)",
    6: "a file system error (a path that cannot be read or written)",
    130: "interrupted (Ctrl-C): a run stops at a round boundary and checkpoints there (a second Ctrl-C stops "
         "at once, back to the last checkpoint); the same command resumes it",
}
# Most specific first: DatasetNotFoundError is a FileNotFoundError (an OSError), ConfigError a ValueError.
_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (CheckpointError, 4), (EvidenceError, 4), (DatasetNotFoundError, 5), (DatasetError, 5), (ValueError, 2),
    (OSError, 6), (ImportError, 2))
"""fedlab's errors and their exit codes (an ImportError is a missing optional extra, named in its message)."""

_CLI_NOTES = {
    # what only the command line does differently; every field's description is Config's (help_text)
    "local_steps": f"default {Config().local_steps}; leave it unset with --local-epochs",
    "clip_norm": "on the command line 0 or less = off",
}


def _help(name: str) -> str:
    note = _CLI_NOTES.get(name)
    return help_text(name) + (f" ({note})" if note else "")


_CHOICES = {"dataset": dataset_names(), "partition": partition_names(), "sampling": SAMPLINGS,
            "lr_schedule": LR_SCHEDULES}


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _int_or_auto(text: str) -> int | str:
    return text if text == "auto" else int(text)


_ARG_KINDS: dict[frozenset, Any] = {
    # a Config field's annotation (without None) → how argparse reads the flag; str needs nothing
    frozenset({bool}): bool, frozenset({int}): int, frozenset({float}): float, frozenset({int, str}): _int_or_auto,
}


def _types_of(hint: Any) -> frozenset:
    """The types an annotation admits, None left out: ``int | None`` → {int}, ``int`` → {int}."""
    return frozenset(typing.get_args(hint) or (hint,)) - {type(None)}


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
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False,
                       epilog=_exit_code_text())
    defaults = Config()
    hints = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        if f.name in ("algorithm_params", "partition_params"):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kwargs: dict[str, Any] = {"default": default, "help": _help(f.name)}
        if f.name in _CHOICES:
            kwargs["choices"] = _CHOICES[f.name]
        kind = _ARG_KINDS.get(_types_of(hints[f.name]))
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind is not None:
            kwargs["type"] = kind
        if f.name == "local_steps":  # unset = the default K, or epoch mode when --local-epochs is given
            kwargs.update(default=None, type=int)
        p.add_argument(flag, **kwargs)
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="algorithm hyperparameter, repeatable (e.g. --param rho=0.05 --param preset=high)")
    p.add_argument("--partition-param", action="append", default=[], metavar="NAME=VALUE",
                   help=f"partitioner option, repeatable ({', '.join(PARTITION_OPTIONS)})")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the Python traceback of an error")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (its default prints the whole usage first), exit code 2."""

    def error(self, message: str) -> "NoReturn":
        self.exit(2, f"error: {self.prog}: {_one_line(Exception(message))} (see {self.prog} --help)\n")


def _exit_code_text() -> str:
    return "exit codes: " + "; ".join(f"{code} = {what}" for code, what in EXIT_CODES.items())


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _config_from_args(args: argparse.Namespace) -> Config:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
              if f.name not in ("algorithm_params", "partition_params")}
    if values["local_steps"] is None and values["local_epochs"] is None:
        values["local_steps"] = Config().local_steps
    if values["clip_norm"] is not None and values["clip_norm"] <= 0:
        values["clip_norm"] = None
    values["algorithm_params"] = _key_values(args.param, "--param")
    values["partition_params"] = _key_values(args.partition_param, "--partition-param")
    return Config(**values)


INTERRUPTED = 130
"""The exit code of an interrupted command (128 + SIGINT, as a shell reports a Ctrl-C)."""


@contextlib.contextmanager
def _stop_on_ctrl_c(stop: threading.Event) -> Iterator[None]:
    """While inside: the first Ctrl-C sets ``stop`` (the run then checkpoints at its next round boundary
    and raises RunInterrupted), a second one interrupts at once (KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def first(signum: int, frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _cmd_run(args: argparse.Namespace) -> int:
    from fedlab.engine import run

    config = _config_from_args(args)
    stop = threading.Event()
    with _stop_on_ctrl_c(stop):
        result = run(config, progress=not args.no_progress, stop=stop)
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
    if result.status == "collapsed":
        from fedlab.evidence.collapse import CHANCE_MARGIN

        print(f"note      collapsed: the last quarter's accuracy stayed within {CHANCE_MARGIN} of chance")
    # a collapsed run is a completed measurement (exit 0, status printed); a diverged one is an error
    return 0 if result.status in ("finished", "collapsed") else 3


def _cmd_algorithms(args: argparse.Namespace) -> int:
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.algorithms.accounting import communication_vectors

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
    import fedlab.sweep.gridfile
    from fedlab.sweep.backends import BACKENDS

    p = sub.add_parser("sweep", help="run a grid file (configs x seeds) on a local process pool or on Ray",
                       allow_abbrev=False,
                       description="Run every combination of a grid file's values, once per seed, through "
                                   "fedlab.run (finished runs load from the results store, interrupted ones "
                                   "resume), then print the summary table.",
                       epilog="grid file format (fedlab.sweep.gridfile):\n\n" + fedlab.sweep.gridfile.EXAMPLE,
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
    from fedlab.sweep.grid import SweepError, summary_table, sweep
    from fedlab.sweep.gridfile import load_grid_file

    spec = load_grid_file(args.grid_file, runs_dir=args.runs_dir)
    n = len(spec.configs)
    print(f"sweep     {spec.path}: {n} runs ({n // len(spec.seeds)} combinations x {len(spec.seeds)} seeds) "
          f"on backend {args.backend}", flush=True)
    try:
        results = sweep(spec.base, spec.grid, spec.seeds, progress=not args.no_progress, backend=args.backend,
                        address=args.address, cpus_per_run=args.cpus_per_run, gpus_per_run=args.gpus_per_run,
                        max_workers=args.max_workers, fail_fast=args.fail_fast, max_runs=spec.max_runs)
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


_FLOWER_DEFAULTS: dict[str, Any] = dict(algorithm="fedvssam", dataset="fmnist", model="cnn", n_clients=10,
                                        participation=0.5, rounds=5, local_steps=10, batch_size=32, lr=0.05,
                                        train_size=None, test_size=None, partition="dirichlet", alpha=0.1, seed=0)
"""flower-sim's defaults: a laptop-sized Fashion-MNIST federation (every other field: Config's)."""
_FLOWER_SUBSETS: dict[str, tuple[int, int]] = {"fmnist": (2000, 1000), "cifar10": (2000, 1000),
                                               "cifar100": (2000, 1000)}
"""flower-sim's train/test subsets when --train-size/--test-size are not given (digits and synthetic are
smaller than that: they are used whole)."""


def _add_flower_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("flower-sim", help="train one method as a Flower app with Flower's simulation engine "
                                          "(needs the [flower] extra)", allow_abbrev=False,
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for name, default in _FLOWER_DEFAULTS.items():
        # Config's description without the run command's notes (flower-sim has no --local-epochs)
        kwargs: dict[str, Any] = {"default": default, "help": help_text(name)}
        if name in _CHOICES:  # a Flower app trains named datasets only: no "custom" tensors
            kwargs["choices"] = [c for c in _CHOICES[name] if c != "custom"]
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            kwargs["type"] = type(default)
        if name in ("train_size", "test_size"):
            kwargs["type"] = int
            which = "training" if name == "train_size" else "test"
            kwargs["help"] = (f"class-balanced subset of the {which} set; %(default)s: " + ", ".join(
                f"{sizes[name == 'test_size']} of {d}" for d, sizes in _FLOWER_SUBSETS.items()) + ", all of the others")
        if name == "n_clients":
            kwargs["help"] += " (one Flower SuperNode each: at most 1000 per --num-cpus)"
        p.add_argument("--" + name.replace("_", "-"), **kwargs)
    p.add_argument("--sampling", default="uniform", choices=SAMPLINGS, help=_help("sampling"))
    p.add_argument("--schedule-path", default=None, help=_help("schedule_path"))
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="algorithm hyperparameter, repeatable (e.g. --param rho=0.05)")
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs Ray may use")
    p.add_argument("--cpus-per-client", type=float, default=1.0,
                   help="CPUs each ClientApp actor reserves (num_cpus / this = clients training at once)")
    p.add_argument("--verbose", action="store_true", help="Flower's and Ray's full logs")


def _cmd_flower_sim(args: argparse.Namespace) -> int:
    try:
        from fedlab.flower import check_servable, run_flower_simulation
        from fedlab.flower.simulation import check_federation_size
    except ImportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    check_servable(args.algorithm)
    check_federation_size(args.n_clients, args.num_cpus)  # before the Config, whose other limits it explains
    if not args.verbose:  # Flower logs every round at INFO; the lines below say what matters
        import logging

        logging.getLogger("flwr").setLevel(logging.WARNING)
    values = {name: getattr(args, name) for name in _FLOWER_DEFAULTS}
    subsets = _FLOWER_SUBSETS.get(args.dataset, (None, None))
    for name, size in zip(("train_size", "test_size"), subsets):
        values[name] = size if values[name] is None else values[name]
    config = Config(**values, sampling=args.sampling, schedule_path=args.schedule_path,
                    algorithm_params=_key_values(args.param, "--param"), eval_every=1)

    def show(r: Any) -> None:
        print(f"round {r.round:3d}/{config.rounds}  clients {len(r.clients):3d}  acc {r.test_acc:.4f}  "
              f"loss {r.test_loss:.4f}  down {r.downlink.payload_bytes:,} B  up {r.uplink.payload_bytes:,} B  "
              f"{r.wall_seconds:.1f} s", flush=True)

    print(f"Flower simulation: {config.algorithm} on {config.dataset} ({config.partition}, "
          f"{config.n_clients} SuperNodes)", flush=True)
    run = run_flower_simulation(config, num_cpus=args.num_cpus, cpus_per_client=args.cpus_per_client,
                                on_round=show, verbose=args.verbose)
    for label, t in (("downlink", run.downlink), ("uplink", run.uplink)):
        print(f"{label:9s} {t.floats:,} floats = {t.payload_bytes:,} B of array payload "
              f"({t.serialized_bytes:,} B as serialised by Flower, numpy headers included)")
    return 0


BENCH_COMMANDS = {
    "analysis": "fedlab.bench.curvature",  # curvature and landscape: fedlab new/old vs plain autograd
    "flsim": "fedlab.bench.flsim",  # FL-Simulator's CPU configuration: seconds per round, training and evaluation
    "gpu": "fedlab.bench.gpu",  # the CUDA check of the speed goals (--dry-run: the same code on CPU)
    "sweep": "fedlab.bench.sweep",  # the sweep backends' wall time: sequential vs local pool vs Ray
}
"""``python -m fedlab bench NAME ...`` runs ``main`` of these modules; anything else goes to :mod:`fedlab.bench.speed`."""


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    rest = list(args.bench_args)
    if rest[:1] and rest[0] in BENCH_COMMANDS:
        return importlib.import_module(BENCH_COMMANDS[rest[0]]).main(rest[1:])
    from fedlab.bench.speed import main as bench_main

    return bench_main(rest)


def _cmd_claims(args: argparse.Namespace) -> int:
    from fedlab.evidence.claims import claims_table, evaluate_claims, write_claims

    if args.paired or args.decide_at is not None or args.csv is not None:
        return _claims_paired(args)
    verdicts = evaluate_claims()
    table = claims_table(verdicts)
    with __import__("pandas").option_context("display.max_colwidth", 60, "display.width", 200):
        print(table[["claim", "numbers", "verdict"]].to_string(index=False))
    if args.write:
        for path in write_claims(verdicts).values():
            print(f"wrote {path}")
    return 0


def _claims_paired(args: argparse.Namespace) -> int:
    """``claims --paired [--decide-at N] [--csv PATH]``: every claim's unpaired and paired verdicts."""
    from fedlab.evidence.claims import evaluate_claims_paired, paired_table, paired_text
    from fedlab.evidence.paired import MIN_SEEDS_TO_DECIDE

    if not args.paired or args.write:
        print("error: --decide-at and --csv go with --paired, and --paired does not --write (the committed "
              "claims files keep the unpaired reading)", file=sys.stderr)
        return 2
    decide_at = MIN_SEEDS_TO_DECIDE if args.decide_at is None else args.decide_at
    if decide_at < 2:
        print(f"error: --decide-at must be at least 2 (an interval needs two pairs), got {decide_at}", file=sys.stderr)
        return 2
    verdicts = evaluate_claims_paired(min_seeds_to_decide=decide_at)
    print(paired_text(verdicts))
    if args.csv is not None:
        paired_table(verdicts).to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from fedlab.evidence.budget import estimate, print_estimate

    if not args.dry_run:
        print("error: only `figures --dry-run` is implemented here; `make figures` runs the notebooks",
              file=sys.stderr)
        return 2
    costs = None
    if args.grad_ms is not None:  # a quiet-machine calibration instead of measuring on a busy one
        fwd = args.forward_ms if args.forward_ms is not None else args.grad_ms / 3
        costs = {"cnn": {"grad_per_sample": args.grad_ms / 1e3, "forward_per_sample": fwd / 1e3}}
    est = estimate(seeds=args.seeds, cores=args.cores, costs=costs)
    return 0 if print_estimate(est, args.budget_hours) else 1


def _cmd_tune_profile(args: argparse.Namespace) -> int:
    from fedlab.evidence.protocol import tune_profile

    split_list = [s for s in (args.splits or "").split(",") if s] or None
    method_list = [m for m in (args.methods or "").split(",") if m] or None
    paths = tune_profile(args.profile, methods=method_list, splits=split_list, client_threads=args.client_threads,
                         record=not args.no_record, progress=not args.no_progress)
    for path in paths:
        best = __import__("json").loads(path.read_text())["best"]
        print(f"{path.parent.name:18s} {path.stem:18s} {best}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m fedlab`` parser (run, algorithms, bench, claims, figures, flower-sim)."""
    parser = _Parser(prog="python -m fedlab", description=__doc__.splitlines()[0],
                     allow_abbrev=False, epilog=_exit_code_text())
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_sweep_parser(sub)
    sub.add_parser("algorithms", help="list registered algorithms: paper, state, communication, cost",
                   allow_abbrev=False)
    b = sub.add_parser("bench", help="timings: ms per round per algorithm, speed modes (`bench --help`); "
                                     "bench analysis | flsim | gpu | sweep",
                       add_help=False)
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    c = sub.add_parser("claims", allow_abbrev=False,
                       help="evaluate the papers' claims (figures/claims.yaml) from committed results")
    c.add_argument("--write", action="store_true", help="write figures/claims_cpu.md and figures/claims_cpu.csv")
    c.add_argument("--paired", action="store_true",
                   help="read each claim by seed pairs (paired t-interval, sign-flip p from 6 seeds) beside the "
                        "unpaired verdict")
    c.add_argument("--decide-at", type=int, default=None, metavar="N",
                   help="with --paired: pairs needed for a verdict (default 6; 3 reads the committed evidence "
                        "as if decided)")
    c.add_argument("--csv", type=str, default=None, metavar="PATH",
                   help="with --paired: write the numeric table (one row per comparison) to PATH")
    f = sub.add_parser("figures", allow_abbrev=False,
                       help="`--dry-run`: estimate the cpu profile's time (make figures) without training",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    f.add_argument("--dry-run", action="store_true", help="print the per-notebook estimate; train nothing")
    f.add_argument("--seeds", type=int, default=3, help="seeds per comparison")
    f.add_argument("--cores", type=int, default=2, help="CPU cores (client_threads)")
    f.add_argument("--grad-ms", type=float, default=None,
                   help="ms per sample-gradient of the cnn instead of measuring it (README Benchmarks, quiet "
                        "2-core machine: 2145 ms per FedAvg round / 3200 sample-gradients = 0.67)")
    f.add_argument("--forward-ms", type=float, default=None, help="ms per sample-forward (default: grad-ms / 3)")
    f.add_argument("--budget-hours", type=float, default=4.0, help="exit 1 if the estimate exceeds this")
    t = sub.add_parser("tune-profile", allow_abbrev=False,
                       help="tune every method on every split of a profile on held-out validation data "
                            "(resumable; writes figures/tuning/<split>/<method>.csv/json and run records)")
    t.add_argument("--profile", default="cpu", help="the profile whose federation and splits are tuned")
    t.add_argument("--splits", default=None, help="comma-separated split keys (default: all), e.g. dirichlet-0.1")
    t.add_argument("--methods", default=None, help="comma-separated methods (default: every declared grid)")
    t.add_argument("--client-threads", type=int, default=1, help="clients trained at once (same numbers)")
    t.add_argument("--no-record", action="store_true", help="do not write the grid points' run records")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_flower_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the benchmark has its own parser: pass its options through untouched
        return _cmd_bench(argparse.Namespace(bench_args=[a for a in argv[1:] if a != "--"]))
    args = parser.parse_args(argv)
    commands = {"run": _cmd_run, "sweep": _cmd_sweep, "algorithms": _cmd_algorithms, "flower-sim": _cmd_flower_sim,
                "claims": _cmd_claims, "figures": _cmd_figures, "bench": _cmd_bench,
                "tune-profile": _cmd_tune_profile}
    try:
        return commands[args.command](args)
    except tuple(cls for cls, _ in _ERRORS) as err:
        if args.debug:
            raise
        code = next(code for cls, code in _ERRORS if isinstance(err, cls))
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return code
    except KeyboardInterrupt as err:  # RunInterrupted says where the run stopped; a bare Ctrl-C says less
        if args.debug:
            raise
        what = _one_line(err) if str(err) else ("stopped at once; a run resumes from its last checkpoint "
                                                "when the same command is run again")
        print(f"interrupted: {what}", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
