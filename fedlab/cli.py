"""Command line: ``python -m fedlab run | sweep | algorithms | flower-sim | flower-run``.

Every ``run`` option is a :class:`fedlab.Config` field, its help that field's description
(:func:`fedlab.config.help_text`); every fedlab error is one line ``error: ...`` on stderr and an
exit code of :data:`EXIT_CODES` (a traceback only with ``--debug``). The repository's own commands
are the lab's: ``python -m lab ...``.
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
from fedlab.engine.malloc import stable_malloc
from fedlab.results import CheckpointError

EXIT_CODES: dict[int, str] = {
    0: "the run finished or collapsed (a completed measurement; the status line says which), or was loaded so",
    1: "sweep: some runs failed (each is named with its error and log file; the others finished); flower-run: "
       "the Flower run failed (its status and error are printed)",
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
    (CheckpointError, 4), (DatasetNotFoundError, 5), (DatasetError, 5), (ValueError, 2),
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
    """An integer or the word ``auto`` (``parallel_clients``); argparse prefixes the flag to the message."""
    try:
        return text if text == "auto" else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid; allowed: an integer ≥ 1 or 'auto'") from None


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
    _add_config_flags(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _add_config_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = (), no_choice: tuple[str, ...] = ()) -> None:
    """A flag per Config field but ``skip`` (Config's default, its description, its type; choices but
    ``no_choice``), then the flags ``run`` and ``flower-sim`` share: --param, --partition-param, --log, --debug."""
    defaults = Config()
    hints = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        if f.name in ("algorithm_params", "partition_params", *skip):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kwargs: dict[str, Any] = {"default": default, "help": _help(f.name)}
        if f.name in _CHOICES:
            kwargs["choices"] = [c for c in _CHOICES[f.name] if c not in no_choice]
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
    _add_log_flag(p)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the Python traceback of an error")


def _add_log_flag(p: argparse.ArgumentParser) -> None:
    from fedlab.tracking import LOGGERS

    p.add_argument("--log", choices=sorted(LOGGERS), default=None,
                   help="hand every round trained to a tracker, offline, the run named by its method, settings "
                        "and seed (tensorboard: tensorboard --logdir RUNS_DIR/tensorboard, the [track] extra; "
                        "wandb: the [wandb] extra, wandb sync; mlflow: the [mlflow] extra, RUNS_DIR/mlruns)")


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
              if f.name not in ("algorithm_params", "partition_params") and hasattr(args, f.name)}
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
        result = run(config, progress=not args.no_progress, stop=stop, logger=args.log)
    return _report(config, result)


def _report(config: Config, result: Any) -> int:
    """Print what a run of ``run`` or ``flower-sim`` gave (a RunResult); its exit code."""
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
        from fedlab.engine.collapse import CHANCE_MARGIN

        print(f"note      collapsed: the last quarter's accuracy stayed within {CHANCE_MARGIN} of chance")
    # a collapsed run is a completed measurement (exit 0, status printed); a diverged one is an error
    return 0 if result.status in ("finished", "collapsed") else 3


def _cmd_algorithms(args: argparse.Namespace) -> int:
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.engine.accounting import communication_vectors

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
    _add_log_flag(p)


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
                        max_workers=args.max_workers, fail_fast=args.fail_fast, max_runs=spec.max_runs,
                        logger=args.log)
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


def _add_flower_parser(sub: argparse._SubParsersAction) -> None:
    from fedlab.config import CUSTOM_DATASET

    try:
        from fedlab.flower.simulation import NOT_SIMULATED
    except ImportError:  # without the [flower] extra the command says only that (_cmd_flower_sim)
        NOT_SIMULATED = ()

    p = sub.add_parser("flower-sim", help="train one method as a Flower app with Flower's simulation engine, "
                                          "stored as `run` stores it (needs the [flower] extra)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False,
                       epilog="the run's folder: RUNS_DIR/flower/<algorithm>-<run key>/; " + _exit_code_text())
    _add_config_flags(p, skip=NOT_SIMULATED, no_choice=(CUSTOM_DATASET,))
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs Ray may use (one Flower SuperNode per client: "
                                                          "at most 1000 per CPU)")
    p.add_argument("--cpus-per-client", type=float, default=1.0,
                   help="CPUs each ClientApp actor reserves (num_cpus / this = clients training at once)")
    p.add_argument("--verbose", action="store_true", help="Flower's and Ray's full logs")


def _cmd_flower_sim(args: argparse.Namespace) -> int:
    from fedlab.flower import run_flower_simulation
    from fedlab.flower.simulation import check_federation_size

    check_federation_size(args.n_clients, args.num_cpus)  # before the Config, whose other limits it explains
    if not args.verbose:  # Flower logs every round at INFO; the lines below say what matters
        import logging

        logging.getLogger("flwr").setLevel(logging.WARNING)
    config = _config_from_args(args)

    def show(r: Any) -> None:
        print(f"round {r.round:3d}/{config.rounds}  clients {len(r.clients):3d}  acc {r.test_acc:.4f}  "
              f"loss {r.test_loss:.4f}  down {r.downlink.payload_bytes:,} B  up {r.uplink.payload_bytes:,} B  "
              f"{r.wall_seconds:.1f} s", flush=True)

    print(f"Flower simulation: {config.algorithm} on {config.dataset} ({config.partition}, "
          f"{config.n_clients} SuperNodes)", flush=True)
    run = run_flower_simulation(config, num_cpus=args.num_cpus, cpus_per_client=args.cpus_per_client,
                                on_round=show, verbose=args.verbose, logger=args.log)
    for label, t in (("downlink", run.downlink), ("uplink", run.uplink)) if run.rounds else ():
        print(f"{label:9s} {t.floats:,} floats = {t.payload_bytes:,} B of array payload "
              f"({t.serialized_bytes:,} B as serialised by Flower, numpy headers included)")
    return _report(config, run.result)


def _add_flower_run_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("flower-run", help="run fedlab's Flower App with `flwr run` on a SuperLink this command starts "
                                          "and stops; exit 1 when the run fails (needs the [flower] extra)",
                       allow_abbrev=False, description="Unlike `flwr run . local`, which exits 0 once a run is "
                       "submitted and leaves its SuperLink running, this waits for the run, exits with its outcome "
                       "and stops every process it started (fedlab.flower.launch).")
    p.add_argument("app", nargs="?", default=None, help="the Flower App folder (default: fedlab/flower/deploy)")
    p.add_argument("--run-config", default=None, metavar="'KEY=VALUE ...'",
                   help="overrides of the App's [tool.flwr.app.config], as flwr run takes them, e.g. "
                        "\"rounds=3 algorithm='fedsam'\"")
    p.add_argument("--num-supernodes", type=int, default=None, help="virtual SuperNodes (default: the run's n-clients)")


def _cmd_flower_run(args: argparse.Namespace) -> int:
    from fedlab.flower.launch import DEPLOY_APP, run_local

    try:
        run = run_local(args.app or DEPLOY_APP, args.run_config, args.num_supernodes)
    except RuntimeError as err:  # the SuperLink did not start (its log's tail is in the message)
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 1
    if run.exit_code:  # what flwr printed is above; this line says how the run ended
        details = f": {_one_line(Exception(run.details))}" if run.details else ""
        print(f"error: the Flower run ended {run.status}{details}", file=sys.stderr)
    return run.exit_code


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m fedlab`` parser (run, sweep, algorithms, flower-sim, flower-run)."""
    parser = _Parser(prog="python -m fedlab", description=__doc__.splitlines()[0],
                     allow_abbrev=False, epilog=_exit_code_text())
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_sweep_parser(sub)
    sub.add_parser("algorithms", help="list registered algorithms: paper, state, communication, cost",
                   allow_abbrev=False)
    _add_flower_parser(sub)
    _add_flower_run_parser(sub)
    return parser


def dispatch(command: typing.Callable[[argparse.Namespace], int], args: argparse.Namespace,
             errors: tuple[tuple[type[BaseException], int], ...] = ()) -> int:
    """Run one subcommand: every fedlab error (and each of ``errors``, checked first) becomes one line
    ``error: ...`` on stderr and its exit code (:data:`EXIT_CODES`), Ctrl-C one line ``interrupted: ...``
    and 130; ``args.debug`` re-raises. The lab's command line (``python -m lab``) goes through here too,
    with its evidence errors, so both speak the same codes."""
    known = errors + _ERRORS
    try:
        return command(args)
    except tuple(cls for cls, _ in known) as err:
        if args.debug:
            raise
        code = next(code for cls, code in known if isinstance(err, cls))
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return code
    except KeyboardInterrupt as err:  # RunInterrupted says where the run stopped; a bare Ctrl-C says less
        if args.debug:
            raise
        what = _one_line(err) if str(err) else ("stopped at once; a run resumes from its last checkpoint "
                                                "when the same command is run again")
        print(f"interrupted: {what}", file=sys.stderr)
        return INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    # the command line fixes the allocator's thresholds (timing only, never numbers; fedlab.engine.malloc);
    # a library call leaves the process's allocator as it found it
    stable_malloc()
    commands = {"run": _cmd_run, "sweep": _cmd_sweep, "algorithms": _cmd_algorithms, "flower-sim": _cmd_flower_sim,
                "flower-run": _cmd_flower_run}
    return dispatch(commands[args.command], args)


if __name__ == "__main__":
    raise SystemExit(main())
