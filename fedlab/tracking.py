"""Experiment tracking: hand every round's metrics, the config and the summary to a logger as a run trains.

A logger is anything with the three methods of :class:`Logger`; the engine calls ``start`` once
before the first round it trains (``rounds_done``: the rounds the checkpoint holds), ``log`` after
each round (the round's metrics row, as ``metrics.csv`` stores it) and ``finish`` once with the run
summary, however the run ends. A logger only reads: it changes no number and is not part of the run
key. Every tracker names a run by :func:`run_name` (method, the settings that differ from Config's
defaults, seed), never by its key, which it keeps as the run's id or tag. TensorBoard, W&B and MLflow are
built in, each an optional extra imported only when chosen; usage and resumed runs: the book's guide
``tracking.md``.
"""
from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fedlab.config import _NOT_HASHED, Config, ConfigError

__all__ = ["LOGGERS", "Logger", "MLflowLogger", "TensorBoardLogger", "WandbLogger", "get_logger", "run_name",
           "tracked"]


@runtime_checkable
class Logger(Protocol):
    """What the engine calls; see the module docstring for when."""

    def start(self, config: Config, run_key: str, run_dir: Path, rounds_done: int) -> None: ...

    def log(self, round: int, metrics: dict[str, Any]) -> None: ...

    def finish(self, summary: dict[str, Any]) -> None: ...


_SPLITS = {"dirichlet": ("dir", "alpha"), "dirichlet_client": ("dirc", "alpha"),
           "pathological": ("path", "classes_per_client"), "shards": ("shards", "shards_per_client")}
"""A partition's short tag in :func:`run_name` and the field that parametrises it (``dir0.1``)."""


def _setting(name: str, value: Any) -> str:
    """One setting in a run's name: a word as itself (``digits``), a number after its name (``rounds20``), a
    flag by its name (``client_eval``, ``no_clip_norm``), a file by its stem, a dict setting by setting."""
    if isinstance(value, dict):
        return "-".join(_setting(k, v) for k, v in sorted(value.items()))
    if isinstance(value, str):
        return value.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[0] if "/" in value else value
    if value is None or isinstance(value, bool):
        return name if value else f"no_{name}"
    return f"{name}{value:g}" if isinstance(value, float) else f"{name}{value}"


def run_name(config: Config) -> str:
    """A run's name in a tracker: its label (``name``, else the method), the method's hyperparameters as
    given, the split, every other hashed field that differs from Config's default, and the seed, e.g.
    ``fedsam-rho0.05-dir0.1-s0`` — what the run is, where its key (a hash) says only which it is."""
    tag, param = _SPLITS.get(config.partition, (config.partition, None))
    values, defaults = config.to_dict(), Config().to_dict()
    shown = {"name", "algorithm", "algorithm_params", "partition", "seed", param} | _NOT_HASHED
    parts = [config.name or config.algorithm, _setting("", config.algorithm_params),
             _setting(tag, values[param]) if param else tag]
    parts += [_setting(k, v) for k, v in values.items() if k not in shown and v != defaults[k]
              and not (k == "client_eval_size" and not config.client_eval)]  # unhashed while client_eval is off
    return re.sub(r"[^\w.+=-]", "_", "-".join(p for p in parts + [f"s{config.seed}"] if p))


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row, ``round`` aside (it is the step); NaN means "not evaluated". The
    per-client columns (``client_acc/<i>``: one scalar per client and round) stay in the run folder: a tracker
    would draw a hundred curves no one reads; their summaries (``client_acc_mean`` ...) are logged."""
    return {k: v for k, v in metrics.items() if k != "round" and "/" not in k and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


def _require(module: str, logger: str, extra: str) -> None:
    """Import ``module`` now, so a missing extra fails before any run starts, with the pip line that adds it."""
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"logger={logger!r} needs the {module} package ({err}): "
                          f'pip install "fedlab-sam[{extra}]"') from None


class TensorBoardLogger:
    """Offline TensorBoard event files (``torch.utils.tensorboard``; the ``track`` extra installs it).

    The events of a run go to ``<root>/<run_name>/``, ``root`` by default the ``tensorboard`` folder beside
    the run folders (``tensorboard --logdir <runs_dir>/tensorboard`` lists the runs by name); a resumed run
    finds its log by its name. Scalars: every finite number of a row at step = round, accuracies
    (columns ending in ``acc``, ``acc_mean``, ...) in % under ``<name>_pct``; texts: ``config`` (the
    config as JSON, with the run key, at the step the session starts) and ``summary`` (at the last round).
    """

    def __init__(self, root: str | Path | None = None) -> None:
        _require("torch.utils.tensorboard", "tensorboard", "track")
        self.root = None if root is None else Path(root).expanduser()
        self.writer: Any = None
        self.step = 0

    def start(self, config: Config, run_key: str, run_dir: Path, rounds_done: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder = (run_dir.parent / "tensorboard" if self.root is None else self.root) / run_name(config)
        self.writer = SummaryWriter(str(folder), purge_step=rounds_done + 1)
        self.step = rounds_done
        self.writer.add_text("config", _markdown({"run_key": run_key, **config.to_dict()}), rounds_done)

    def log(self, round: int, metrics: dict[str, Any]) -> None:
        self.step = round
        for name, value in _numbers(metrics).items():
            pct = "_acc" in f"_{name}"
            self.writer.add_scalar(f"{name}_pct" if pct else name, 100.0 * value if pct else value, round)

    def finish(self, summary: dict[str, Any]) -> None:
        self.writer.add_text("summary", _markdown(summary), self.step)
        self.writer.close()
        self.writer = None


class WandbLogger:
    """Weights & Biases (the ``wandb`` extra), offline unless ``mode="online"`` (``wandb sync`` uploads an
    offline run later). The W&B run is named by :func:`run_name`, grouped over seeds, has the run key as
    its id (a resumed fedlab run continues its W&B run) and lives in the run folder; ``init`` goes to
    ``wandb.init`` as is (entity, tags, ...)."""

    def __init__(self, project: str = "fedlab", mode: str = "offline", **init: Any) -> None:
        _require("wandb", "wandb", "wandb")
        self.init = {"project": project, "mode": mode, **init}
        self.run: Any = None

    def start(self, config: Config, run_key: str, run_dir: Path, rounds_done: int) -> None:
        import wandb

        name = run_name(config)
        self.run = wandb.init(id=run_key, name=name, group=name.rsplit("-s", 1)[0], resume="allow",
                              config={"run_key": run_key, **config.to_dict()}, dir=str(run_dir), **self.init)

    def log(self, round: int, metrics: dict[str, Any]) -> None:
        self.run.log(_numbers(metrics), step=round)

    def finish(self, summary: dict[str, Any]) -> None:
        self.run.summary.update({k: v for k, v in summary.items() if v is not None})
        self.run.finish()


class MLflowLogger:
    """MLflow (the ``mlflow`` extra), offline by default: a file store in ``mlruns`` beside the run folders
    (``mlflow ui --backend-store-uri <runs_dir>/mlruns``) unless ``tracking_uri`` names a server. The
    MLflow run is named by :func:`run_name` and tagged ``fedlab.run_key``; a resumed fedlab run continues
    the MLflow run with its key."""

    def __init__(self, experiment: str = "fedlab", tracking_uri: str | None = None) -> None:
        _require("mlflow", "mlflow", "mlflow")
        self.experiment, self.tracking_uri = experiment, tracking_uri

    def start(self, config: Config, run_key: str, run_dir: Path, rounds_done: int) -> None:
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri or (run_dir.parent / "mlruns").resolve().as_uri())
        mlflow.set_experiment(self.experiment)
        earlier = mlflow.search_runs(filter_string=f"tags.`fedlab.run_key` = '{run_key}'", output_format="list")
        mlflow.start_run(run_id=earlier[0].info.run_id if earlier else None, run_name=run_name(config),
                         tags={"fedlab.run_key": run_key})
        if not earlier:  # MLflow's parameters are written once
            mlflow.log_params(config.to_dict())

    def log(self, round: int, metrics: dict[str, Any]) -> None:
        import mlflow

        mlflow.log_metrics(_numbers(metrics), step=round)

    def finish(self, summary: dict[str, Any]) -> None:
        import mlflow

        mlflow.set_tags({f"summary.{k}": v for k, v in summary.items() if v is not None})
        mlflow.end_run("FINISHED" if summary.get("status") in ("finished", "collapsed") else "KILLED")


def _markdown(values: dict[str, Any]) -> str:
    """A JSON block TensorBoard's text plugin shows as code (it renders Markdown)."""
    return "    " + json.dumps(values, indent=2, sort_keys=True, default=str).replace("\n", "\n    ")


LOGGERS: dict[str, Callable[[], Logger]] = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger,
                                             "mlflow": MLflowLogger}
"""The loggers a name selects (``logger="wandb"``, ``--log wandb``), each with its defaults (offline)."""


def get_logger(spec: Logger | str | None) -> Logger | None:
    """``None``, a logger, or the name of one in :data:`LOGGERS`; ConfigError naming ``logger`` otherwise."""
    if spec is None or isinstance(spec, Logger):
        return spec
    if isinstance(spec, str) and spec in LOGGERS:
        return LOGGERS[spec]()
    raise ConfigError(f"logger={spec!r} is invalid; allowed: None, {', '.join(map(repr, LOGGERS))} or an object "
                      "with start/log/finish (fedlab.tracking.Logger)")


@contextmanager
def tracked(logger: Logger | None, config: Config, run_key: str, run_dir: Path, rounds_done: int,
            summary: Callable[[], dict[str, Any]]) -> Iterator[Callable[[int, dict[str, Any]], None]]:
    """Start ``logger`` (if any), yield its ``log``, and finish it with ``summary()`` however the block ends."""
    if logger is None:
        yield lambda round, metrics: None
        return
    logger.start(config, run_key, run_dir, rounds_done)
    try:
        yield logger.log
    finally:
        logger.finish(summary())
