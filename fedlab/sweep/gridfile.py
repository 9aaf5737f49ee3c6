"""Grid files: a sweep written down in YAML, for ``python -m fedlab sweep GRID.yaml``.

The format (every key but ``grid`` optional)::

    # fmnist_sam.yaml — 2 methods × 2 splits × 3 seeds = 12 runs
    base:                  # Config fields shared by every run (the names of `python -m fedlab run
      dataset: fmnist      #   --help`, with underscores); defaults are Config's
      model: cnn
      n_clients: 100
      participation: 0.1
      rounds: 30
      runs_dir: /shared/fedlab-runs   # on a cluster: a path every node sees
    grid:                  # Config field -> list of values; the runs are the cartesian product
      algorithm: [fedavg, fedsam]     #   (first key slowest); values may be mappings, e.g.
      alpha: [0.5, 0.1]               #   algorithm_params: [{}, {rho: 0.05}]
    seeds: [0, 1, 2]       # each combination once per seed (default [0])
    target: 0.7            # test accuracy for the summary's rounds-to-target column (optional)
    max_runs: 1000         # the most runs the grid may expand to (optional; default fedlab.sweep.MAX_RUNS)

Everything is validated before any run starts, each error naming the file and the key: unknown
keys, ``base`` fields that are not Config fields (or ``seed``: use ``seeds``), empty or repeated grid
values and seeds, a target outside [0, 1], more than ``max_runs`` runs, every combination through
Config. A relative ``runs_dir`` is relative to the current directory.
"""
from __future__ import annotations

import functools
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedlab.config import Config, ConfigError
from fedlab.sweep.grid import MAX_RUNS, expand_grid

__all__ = ["EXAMPLE", "GRID_KEYS", "GridFile", "load_grid_file"]

GRID_KEYS = ("base", "grid", "seeds", "target", "max_runs")
EXAMPLE = textwrap.dedent(__doc__.split("::", 1)[1].split("\n\n")[1])
"""The example grid file of this module's docstring (``sweep --help`` prints it; a test loads it)."""


@dataclass(frozen=True)
class GridFile:
    """A validated grid file: what :func:`fedlab.sweep.sweep` takes, plus the summary's target."""

    path: Path
    base: Config
    grid: dict[str, list[Any]]
    seeds: list[int]
    target: float | None
    max_runs: int = MAX_RUNS

    @property
    def configs(self) -> list[Config]:
        """Every run's config, in sweep order."""
        return expand_grid(self.base, self.grid, self.seeds, max_runs=self.max_runs)


class _NoAliases(yaml.SafeLoader):
    """Safe YAML without aliases: a kilobyte of nested ``*a`` cannot expand into millions of nodes."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError(f"line {self.peek_event().start_mark.line + 1}: YAML aliases are not allowed")
        return super().compose_node(parent, index)


load_yaml_without_aliases = functools.partial(yaml.load, Loader=_NoAliases)


def load_grid_file(path: str | Path, *, runs_dir: str | None = None) -> GridFile:
    """Read and validate a grid file (format: this module's docstring); ``runs_dir`` overrides the file's."""
    path = Path(path)

    def bad(message: str) -> ConfigError:
        return ConfigError(f"{path}: {message}")

    try:
        data = load_yaml_without_aliases(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise bad("no such grid file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise bad(f"cannot read it ({err})") from None
    except yaml.YAMLError as err:
        raise bad(f"not valid YAML ({err})".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise bad(f"a grid file is a YAML mapping with the keys {', '.join(GRID_KEYS)} (got {type(data).__name__})")
    unknown = sorted(set(data) - set(GRID_KEYS), key=str)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r}; allowed: {', '.join(GRID_KEYS)}")
    if "grid" not in data:
        raise bad("the key 'grid' is required (a mapping of Config fields to lists of values; {} for one run)")

    base_values = data.get("base") or {}
    if not isinstance(base_values, dict):
        raise bad(f"'base' must be a mapping of Config fields to values (got {base_values!r})")
    if "seed" in base_values:
        raise bad("base: 'seed' is not allowed; list the seeds under 'seeds'")
    if runs_dir is not None:
        base_values = {**base_values, "runs_dir": runs_dir}
    try:
        base = Config.from_dict(base_values)
    except (ConfigError, TypeError) as err:
        raise bad(f"base: {err}") from None

    grid = data["grid"] if data["grid"] is not None else {}
    if not isinstance(grid, dict):
        raise bad(f"'grid' must be a mapping of Config fields to lists of values (got {grid!r})")

    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise bad(f"'seeds' must be a non-empty list of integers ≥ 0 (got {seeds!r})")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise bad(f"'seeds' lists seed {repeated[0]} more than once ({seeds}): a seed names one run, so a "
                  "repeat is that run again, not independent evidence; list each seed once")

    max_runs = data.get("max_runs", MAX_RUNS)
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise bad(f"'max_runs' must be an integer ≥ 1 (got {max_runs!r})")

    target = data.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not math.isfinite(target) or not 0 <= target <= 1):
        raise bad(f"'target' must be a test accuracy in [0, 1] (a fraction, 0.7 not 70), got {target!r}")

    try:
        expand_grid(base, grid, seeds, max_runs=max_runs)
    except ConfigError as err:
        raise bad(f"grid: {err}") from None
    return GridFile(path, base, {k: list(v) for k, v in grid.items()}, list(seeds),
                    None if target is None else float(target), max_runs)
