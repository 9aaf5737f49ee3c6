"""The cpu profile's evidence protocol: splits, seeds, and hyperparameters tuned per split.

Every real-data comparison of the cpu profile follows the same rules (issue 14):

* **One federation per split.** Notebook 10's cpu parameters (``notebooks/params/10_benchmarks.cpu.yaml``)
  define the federation — Fashion-MNIST, the GroupNorm ``cnn``, 100 clients, 10 % per round, K local
  steps of B, η — and its splits (Dirichlet α for each of ``dirichlet_alphas``, pathological with
  ``pathological_classes``). Notebooks 00 and 04–09 train on the Dirichlet-0.1 split of the same
  federation, so a (method, hyperparameters, seed) run is trained once and shared by every figure
  that shows it (same config, same run key, one record).
* **The partition is fixed per split** (:data:`PARTITION_SEED`), the training seeds (init, sampling,
  batch order) are :data:`SEEDS`: at least three, reported as mean ± a 95 % interval.
* **Hyperparameters are tuned per split on a validation set** held out from the training data
  (:func:`fedlab.tune`, the test set is never read), over each method's declared grid
  (:data:`fedlab.evidence.tuning.DEFAULT_GRIDS`), at the horizon :data:`TUNING` (shorter than the runs: a
  radius that collapses the model, or a weight that stalls it, shows within 15 rounds — notebook 04's
  ρ sweep), one seed. :func:`tune_profile` does all of it, resumably: each method × split writes
  ``figures/tuning/<split>/<method>.csv/json`` when it finishes and every grid point's run as a
  committed record, so a rerun on another machine skips what is committed.
* :func:`tuned_params` returns the committed choice for a method on a split (or the method's
  defaults, labelled untuned, when none is committed); the notebooks take their hyperparameters
  from it in every profile, so the ci run exercises the cpu profile's choices.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedlab.config import Config
from lab.repro import FIGURES_DIR, REPO_ROOT

__all__ = ["PARTITION_SEED", "SEEDS", "TUNING", "Tuned", "profile_federation", "profile_splits", "run_seeds", "split_key",
           "tune_profile", "tune_splits", "tuned_params", "tuning_dir", "UNTUNED_PROFILES"]

SEEDS: tuple[int, ...] = (0, 1, 2)
"""Training seeds of every real-data comparison in the cpu profile."""
PARTITION_SEED = 0
"""The seed of the partition, fixed per split so that the seeds vary only init, sampling and batches."""
TUNING: dict[str, Any] = {"rounds": 15, "eval_every": 3, "validation_size": 5000, "seed": 0}
"""The tuning horizon and validation protocol (evaluations at rounds 3, 6, …, 15; the score averages
the last quarter, rounds 12 and 15, on 2,000 of the 5,000 held-out samples — ``eval_subsample``)."""

_FEDERATION_FIELDS = ("dataset", "model", "train_size", "test_size", "n_clients", "participation", "rounds",
                      "local_steps", "batch_size", "lr", "eval_every", "eval_subsample")


def tuning_dir() -> Path:
    """``figures/tuning``: committed tuning results, one folder per split."""
    return FIGURES_DIR / "tuning"


def _params(notebook: str = "10_benchmarks", profile: str = "cpu") -> dict[str, Any]:
    import yaml

    path = REPO_ROOT / "notebooks" / "params" / f"{notebook}.{profile}.yaml"
    return yaml.safe_load(path.read_text()) or {}


def profile_federation(profile: str = "cpu") -> Config:
    """Notebook 10's federation of ``profile`` (Dirichlet 0.1, algorithm FedAvg, partition seed fixed)."""
    p = _params("10_benchmarks", profile)
    values = {"dataset": (p.get("datasets") or ["fmnist"])[0], "model": (p.get("models") or ["cnn"])[0]}
    values |= {k: p[k] for k in _FEDERATION_FIELDS if k in p and k not in ("dataset", "model")}
    return Config(partition=p.get("partition", "dirichlet"), alpha=0.1, partition_seed=PARTITION_SEED, **values)


def profile_splits(profile: str = "cpu") -> dict[str, Config]:
    """The splits of ``profile``'s benchmark, by :func:`split_key`: each a Config of the federation."""
    p = _params("10_benchmarks", profile)
    base = profile_federation(profile)
    splits = [base.replace(partition=p.get("partition", "dirichlet"), alpha=float(a))
              for a in p.get("dirichlet_alphas", [0.1])]
    splits += [base.replace(partition="pathological", alpha=None, classes_per_client=int(c))
               for c in p.get("pathological_classes", [])]
    return {split_key(c): c for c in splits}


def split_key(config: Config) -> str:
    """A split's name for file paths: ``dirichlet-0.1``, ``dirichlet_client-0.5``, ``pathological-3``, ``iid``."""
    if config.partition in ("dirichlet", "dirichlet_client"):
        return f"{config.partition}-{config.alpha:g}"
    if config.partition == "pathological":
        return f"pathological-{config.classes_per_client}"
    return config.partition


@dataclass(frozen=True)
class Tuned:
    """A method's hyperparameters for a split and where they come from."""

    params: dict[str, Any]  # the chosen grid point (empty: the method's defaults)
    source: str  # the tuning file, or why there is none

    @property
    def tuned(self) -> bool:
        return self.source.endswith(".json")


UNTUNED_PROFILES = ("paper",)
"""Profiles that run the papers' own settings: the cpu tuning (Fashion-MNIST, a small CNN) does not apply."""


def tuned_params(algorithm: str, config: Config, directory: Path | None = None, *, profile: str = "cpu") -> Tuned:
    """The committed tuning choice of ``algorithm`` on ``config``'s split.

    Reads ``<directory>/<split_key>/<algorithm>.json`` (default ``figures/tuning``) written by
    :func:`tune_profile`, checked by :func:`~lab.evidence.tuning_files.load_tuning` (a TuningError naming
    the file if it is corrupt, edited, or its choice is not its grid's best finished point). Without one — a method with nothing to tune, or a split not tuned yet —
    the method runs at its defaults and ``source`` says so. The choice is the grid point only
    (e.g. ``{"rho": 0.02}``); merge it into ``algorithm_params``. The ``ci`` profile takes the cpu
    profile's choices (so the quick run exercises them); a profile in :data:`UNTUNED_PROFILES` gets
    the method's defaults (its parameter file sets the paper's values).
    """
    from fedlab.evidence.tuning import DEFAULT_GRIDS
    from lab.evidence.tuning_files import load_tuning

    if profile in UNTUNED_PROFILES:
        return Tuned({}, f"{profile} profile: the paper's settings, not tuned here")

    root = tuning_dir() if directory is None else Path(directory)
    path = root / split_key(config) / f"{algorithm}.json"
    if path.exists():
        best = load_tuning(path)["best"]  # checked: digest, a finished best point of its own grid
        return Tuned(dict(best), str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path))
    if not DEFAULT_GRIDS.get(algorithm):
        return Tuned({}, "defaults (nothing declared to tune)")
    return Tuned({}, f"defaults (untuned: no {path.name} for split {split_key(config)})")


def _grid_size(grid: dict[str, Sequence[Any]]) -> int:
    return math.prod(len(v) for v in grid.values()) if grid else 1


def tune_profile(profile: str = "cpu", *, methods: Iterable[str] | None = None, splits: Iterable[str] | None = None,
                 client_threads: int = 1, **kwargs: Any) -> list[Path]:
    """:func:`tune_splits` over the splits of ``profile`` (:func:`profile_splits`; ``splits`` picks some by key)."""
    all_splits = profile_splits(profile)
    chosen = list(all_splits) if splits is None else list(splits)
    unknown = sorted(set(chosen) - set(all_splits))
    if unknown:
        raise ValueError(f"unknown split(s) {unknown}; the {profile} profile has {', '.join(all_splits)}")
    return tune_splits({k: all_splits[k].replace(client_threads=client_threads) for k in chosen},
                       methods=methods, **kwargs)


def tune_splits(splits: Mapping[str, Config], *, methods: Iterable[str] | None = None,
                grids: Mapping[str, Mapping[str, Sequence[Any]]] | None = None, directory: Path | None = None,
                record: bool = True, records_directory: Path | None = None, tuning: Mapping[str, Any] | None = None,
                progress: bool = True) -> list[Path]:
    """Tune every method on every split; write each result when it finishes; skip what is written.

    ``splits`` maps a split key to the federation's Config on that split. For each split and method
    (default: every method whose :data:`~fedlab.evidence.tuning.DEFAULT_GRIDS` entry has more than one
    point; ``grids`` replaces that table) it runs :func:`fedlab.tune` under :data:`TUNING` and
    writes ``<directory>/<split>/<method>.csv/.json`` (default ``figures/tuning``) as soon as that
    method is done, plus (``record``) each grid point's run record (``figures/records/`` or
    ``records_directory``); ``tuning`` replaces :data:`TUNING` (tests). A method whose JSON exists, tuned under the same protocol, grid and base,
    is skipped; one whose file disagrees is an error naming the file (never silently replaced).
    Returns the JSON paths, in order.
    """
    from tqdm import tqdm

    from lab.evidence.records import run_or_load, write_record
    from lab.evidence.tuning_files import record_tuning
    from fedlab.evidence.tuning import DEFAULT_GRIDS, tune

    root = tuning_dir() if directory is None else Path(directory)
    given = {m: dict(g) for m, g in (grids or DEFAULT_GRIDS).items()}
    names = [m for m, g in given.items() if _grid_size(g) > 1] if methods is None else list(methods)
    grids = {m: dict(g) for m, g in DEFAULT_GRIDS.items()} | given
    missing = sorted(set(names) - set(grids))
    if missing:
        raise ValueError(f"no declared grid for {missing}; declared: {', '.join(sorted(grids))}")
    t = dict(TUNING if tuning is None else tuning)
    protocol = {"rounds": t["rounds"], "seed": t["seed"], "validation_size": t["validation_size"]}
    jobs = [(s, m) for s in splits for m in names]
    out: list[Path] = []
    bar = tqdm(jobs, desc="tune", disable=not progress)
    for split, method in bar:
        bar.set_postfix_str(f"{split} {method}")
        path = root / split / f"{method}.json"
        base = splits[split].replace(algorithm=method, eval_every=t["eval_every"], rounds=t["rounds"])
        grid = {k: list(v) for k, v in grids[method].items()}
        if path.exists():
            _check_done(path, base, protocol, grid)
            out.append(path)
            continue
        result = tune(base, grid, rounds=t["rounds"], seed=t["seed"], validation_size=t["validation_size"],
                      progress=False, runner=run_or_load)
        if record:
            for res in result.runs:
                write_record(res, records_directory)
        record_tuning(result.save(root / split / method))
        out.append(path)
    return out


def _check_done(path: Path, base: Config, protocol: dict[str, Any], grid: dict[str, list[Any]]) -> None:
    """Refuse a committed tuning file that is unusable (:func:`~lab.evidence.tuning_files.load_tuning`: never
    skipped as done) or made under another protocol, grid or base config."""
    from lab.evidence.tuning_files import load_tuning

    def plain(values: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(values, default=str))

    done = load_tuning(path)
    ignored = ("runs_dir", "client_threads", "name", "parallel_clients", "device")
    want = plain({k: v for k, v in base.to_dict().items() if k not in ignored})
    # a field the committed file does not name was added to Config later; at its default it changes nothing
    defaults = plain({f.name: getattr(Config(), f.name) for f in dataclasses.fields(Config)})
    committed = done.get("base", {})
    have = {k: committed.get(k, defaults.get(k)) for k in want}
    if done.get("protocol") != protocol or have != want or done.get("grid") != plain(grid):
        differ = sorted(k for k in want if have.get(k) != want[k])
        raise ValueError(f"{path} was tuned under another protocol, grid or base config (differs in: "
                         f"{', '.join(differ) or 'protocol/grid'}); move it away (git keeps it) to retune, "
                         "or tune into another directory")


def run_seeds(config: Config, seeds: Sequence[int] | None = None, *, record: bool = False,
              need_theta: bool = False, dataset: Any = None) -> list[Any]:
    """``config`` once per training seed (default :data:`SEEDS`), the partition fixed across them.

    The partition seed is ``config.partition_seed`` if set, else :data:`PARTITION_SEED`, so the seeds
    vary initialisation, client sampling and batch order only. Runs go through
    :func:`~lab.evidence.records.run_or_load` (cached under ``runs/``, or loaded from committed
    records unless ``need_theta``); with ``record``
    each finished run's record is written at once (``figures/records/``), so an interrupted profile
    keeps what it finished. Returns the :class:`~fedlab.results.RunResult` of each seed, in order.
    """
    from lab.evidence.records import run_or_load, write_record

    seeds = list(SEEDS if seeds is None else seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and non-empty, got {seeds}")
    fixed = config if config.partition_seed is not None else config.replace(partition_seed=PARTITION_SEED)
    out = []
    for s in seeds:
        res = run_or_load(fixed.replace(seed=int(s)), need_theta=need_theta, dataset=dataset)
        if record:
            write_record(res)
        out.append(res)
    return out
