"""Experiment tracking: hand every round's metrics, the config and the summary to a logger as a run trains.

A logger is anything with the three methods of :class:`Logger`; the engine calls ``start`` once
before the first round it trains (``rounds_done``: the rounds the checkpoint holds), ``log`` after
each round (the round's metrics row, as ``metrics.csv`` stores it) and ``finish`` once with the run
summary, however the run ends. A logger only reads: it changes no number and is not part of the run
key. Usage, resumed runs and adapters for W&B and MLflow: the book's guide ``tracking.md``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fedlab.config import Config, ConfigError

__all__ = ["LOGGERS", "Logger", "TensorBoardLogger", "get_logger", "tracked"]


@runtime_checkable
class Logger(Protocol):
    """What the engine calls; see the module docstring for when."""

    def start(self, config: Config, run_key: str, run_dir: Path, rounds_done: int) -> None: ...

    def log(self, round: int, metrics: dict[str, Any]) -> None: ...

    def finish(self, summary: dict[str, Any]) -> None: ...


class TensorBoardLogger:
    """Offline TensorBoard event files (``torch.utils.tensorboard``; the ``track`` extra installs it).

    ``root=None`` writes into ``<run dir>/tensorboard/``, so a run and its log live together and a
    resumed run finds its log; otherwise into ``<root>/<run dir name>/``. Scalars: every finite
    number of a row at step = round, accuracies (columns ending in ``acc``, ``acc_mean``, ...) in %
    under ``<name>_pct``; texts: ``config`` (the config as JSON, at the step the session starts) and
    ``summary`` (at the last round).
    """

    def __init__(self, root: str | Path | None = None) -> None:
        try:  # here, so a missing extra fails before any run starts
            import torch.utils.tensorboard  # noqa: F401
        except ImportError as err:
            raise ImportError(f"logger='tensorboard' needs the tensorboard package ({err}): "
                              'pip install "fedlab-sam[track]"') from None
        self.root = None if root is None else Path(root).expanduser()
        self.writer: Any = None
        self.step = 0

    def start(self, config: Config, run_key: str, run_dir: Path, rounds_done: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder = run_dir / "tensorboard" if self.root is None else self.root / run_dir.name
        self.writer = SummaryWriter(str(folder), purge_step=rounds_done + 1)
        self.step = rounds_done
        self.writer.add_text("config", _markdown({"run_key": run_key, **config.to_dict()}), rounds_done)

    def log(self, round: int, metrics: dict[str, Any]) -> None:
        self.step = round
        for name, value in metrics.items():
            if name != "round" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                pct = "_acc" in f"_{name}"
                self.writer.add_scalar(f"{name}_pct" if pct else name, 100.0 * value if pct else value, round)

    def finish(self, summary: dict[str, Any]) -> None:
        self.writer.add_text("summary", _markdown(summary), self.step)
        self.writer.close()
        self.writer = None


def _markdown(values: dict[str, Any]) -> str:
    """A JSON block TensorBoard's text plugin shows as code (it renders Markdown)."""
    return "    " + json.dumps(values, indent=2, sort_keys=True, default=str).replace("\n", "\n    ")


LOGGERS: dict[str, Callable[[], Logger]] = {"tensorboard": TensorBoardLogger}
"""The loggers a name selects (``logger="tensorboard"``, ``--log tensorboard``)."""


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
