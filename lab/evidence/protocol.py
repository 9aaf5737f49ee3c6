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
  (:data:`fedlab.tuning.DEFAULT_GRIDS`), at the horizon :data:`TUNING` (shorter than the runs: a
  radius that collapses the model, or a weight that stalls it, shows within 15 rounds — notebook 04's
  ρ sweep), one seed. That was the K = 5 profile's tuning (``figures/tuning/<split>/``, :data:`K5_TUNING_DIR`,
  cited by its committed figures). The cpu profile's tuning is now the regime rerun's (``python -m lab regime
  rerun-tune``, :func:`lab.regime.rerun.tune` through :func:`tune_splits`): each method once, on
  :func:`tuning_split`, at half the run's horizon on held-out samples, its grid extended at an edge
  (:data:`EDGE_RULE`), written to :func:`tuning_dir` with every grid point's run as a committed record (so a
  rerun on another machine skips what is committed); :func:`tuned_params` reuses that choice on the other
  splits.
* **The rerun protocol** (issue 26, declared here once, applied by the rerun): the final metric is the mean
  test accuracy over the last :data:`FINAL_METRIC` ``last_fraction`` of the rounds (issue 41: rounds 81–100 of
  100), every one evaluated on the full test set (:func:`final_metric`, the one function every reader of a final
  accuracy goes through; a record without those rounds falls back, labelled, to its last evaluation);
  every seed draws its own partition (``partition_seed = seed``, :data:`RERUN_PROTOCOL`,
  :func:`rerun_config`), so a claim is no longer conditional on one partition; a tuning grid whose
  optimum sits on its edge is extended before the choice is recorded (:data:`EDGE_RULE`,
  :func:`extend_edges`).
* :func:`tuned_params` returns the committed choice for a method on a split (or the method's
  defaults, labelled untuned, when none is committed); the notebooks take their hyperparameters
  from it in every profile, so the ci run exercises the cpu profile's choices.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedlab.config import Config
from lab.evidence.paired import MIN_SEEDS_TO_DECIDE
from lab.evidence.tuning_protocol import (EDGE_RULE, K5_TUNING_DIR, RERUN_PLAN, TUNING, EdgeRule, edge_extension,
                                          extend_edges, tune_splits, tuning_dir, tuning_split)
from lab.repro import REPO_ROOT

__all__ = ["EDGE_RULE", "FINAL_METRIC", "PARTITION_SEED", "RERUN_PROTOCOL", "SEEDS", "TUNING", "EdgeRule", "FinalValue",
           "Curve", "Tuned", "edge_extension", "notebook_params", "extend_edges", "final_metric", "final_rounds",
           "RERUN_PLAN", "rerun_config", "profile_federation", "profile_splits", "run_seeds", "split_key",
           "tune_splits", "tuned_params", "tuning_dir", "tuning_split", "K5_TUNING_DIR",
           "UNTUNED_PROFILES"]

SEEDS: tuple[int, ...] = (0, 1, 2)
"""Training seeds of every real-data comparison in the cpu profile."""
PARTITION_SEED = 0
"""The seed of the partition, fixed per split so that the seeds vary only init, sampling and batches."""

FINAL_METRIC: dict[str, Any] = {"last_fraction": 0.2, "eval_every": 1, "eval_subsample": None}
"""The final metric of a run (issue 41): the mean test accuracy over the last ``last_fraction`` of its rounds (the
last ⌈0.2·T⌉ rounds: 81–100 of T = 100), the evaluation grid being every ``eval_every`` rounds, each evaluation on
the full test set (``eval_subsample`` None). A fraction, not a count, so that a longer run averages a window of
the same share of its training. Averaging the window divides the noise of a single evaluation; a drift over the
window (the pilot's R4) is a bias that the methods of one seed share as far as their curves move alike."""

RERUN_PROTOCOL: dict[str, Any] = {"partition_seed": "seed", "seeds": MIN_SEEDS_TO_DECIDE,
                                  **{f"final_{k}": v for k, v in FINAL_METRIC.items()}}
"""What the rerun changes: each training seed draws its own partition (``partition_seed = seed``; all methods of
one seed share it, so seeds stay common random numbers and the pairing holds), as many seeds as a verdict needs
(:data:`lab.evidence.paired.MIN_SEEDS_TO_DECIDE`, the one constant: 6), and the final metric of
:data:`FINAL_METRIC`."""

_FEDERATION_FIELDS = ("dataset", "model", "train_size", "test_size", "n_clients", "participation", "rounds",
                      "local_steps", "batch_size", "lr", "lr_schedule", "eval_every", "eval_subsample")


@dataclass(frozen=True)
class FinalValue:
    """A run's final accuracy and how it was computed (``how`` is shown wherever the number is)."""

    value: float
    how: str  # "mean of the last 20 % of rounds (81–100 of 100), full test set" or the labelled fallback
    protocol: bool  # True: FINAL_METRIC; False: the last evaluation, for a run off the protocol's grid


@dataclass(frozen=True)
class Curve:
    """What :func:`final_metric` reads of a run: its test accuracy by evaluated round, its length, whether each
    evaluation saw the full test set (``subsample``: the images of a subsample, None for the full set) and its
    last evaluation (the fallback). :meth:`of` takes it from a :class:`~fedlab.results.RunResult`; a per-round
    table (a committed figure's curve of one seed) builds it directly."""

    by_round: Mapping[int, float]
    total_rounds: int
    subsample: int | None = None
    last: float = math.nan

    @classmethod
    def of(cls, result: Any) -> "Curve":
        """The curve of a :class:`~fedlab.results.RunResult` (or a committed record loaded as one)."""
        cfg = result.config
        full = cfg.eval_subsample is None or (cfg.test_size is not None and cfg.eval_subsample >= cfg.test_size)
        m = result.metrics[["round", "test_acc"]].dropna()
        by_round = dict(zip(m["round"].astype(int), m["test_acc"].astype(float)))
        last = by_round[max(by_round)] if by_round else math.nan
        return cls(by_round, int(cfg.rounds), None if full else int(cfg.eval_subsample), last)


def final_rounds(total_rounds: int, final: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The rounds the final metric averages: of the last k = ⌈f·T⌉ rounds (f = ``last_fraction``, at least one
    round), those on the evaluation grid (T, T − e, T − 2e, …; e = ``eval_every``). T = 100, f = 0.2, e = 1:
    rounds 81, …, 100."""
    f = dict(FINAL_METRIC if final is None else final)
    fraction, every = float(f["last_fraction"]), int(f["eval_every"])
    if not 0 < fraction <= 1 or every < 1:
        raise ValueError(f"FINAL_METRIC needs 0 < last_fraction ≤ 1 and eval_every ≥ 1, got "
                         f"last_fraction={fraction}, eval_every={every}")
    if total_rounds < 1:
        raise ValueError(f"a run has at least one round, got total_rounds={total_rounds}")
    k = max(1, math.ceil(fraction * total_rounds - 1e-9))  # 1e-9: 0.2·100 is 20 in floating point, not 20.0000001
    return tuple(r for r in range(total_rounds - k + 1, total_rounds + 1) if (total_rounds - r) % every == 0)


def final_metric(result: Any, final: Mapping[str, Any] | None = None) -> FinalValue:
    """The final accuracy of ``result`` (a :class:`~fedlab.results.RunResult`, or a :class:`Curve`) under
    :data:`FINAL_METRIC`: the one place a final accuracy is computed (a test fails on a module of ``lab/`` that
    computes its own).

    When the run was evaluated on the full test set (``config.eval_subsample`` None or not below the test set)
    and holds a finite ``test_acc`` at every round of :func:`final_rounds` (R, its count n), the value is their
    mean, (1/n) Σ_{r ∈ R} acc(r). Otherwise (a ci run; a record from before the rerun) it is the last evaluation,
    labelled with the reason (``protocol`` False)."""
    curve = result if isinstance(result, Curve) else Curve.of(result)
    grid = final_rounds(curve.total_rounds, final)
    span = f"round {grid[0]}" if len(grid) == 1 else f"rounds {grid[0]}–{grid[-1]}"
    if curve.subsample is None and all(r in curve.by_round and math.isfinite(curve.by_round[r]) for r in grid):
        share = len(grid) * int(dict(FINAL_METRIC if final is None else final)["eval_every"]) / curve.total_rounds
        how = f"mean of the last {100 * share:.3g} % of rounds ({span} of {curve.total_rounds}), full test set"
        return FinalValue(sum(curve.by_round[r] for r in grid) / len(grid), how, True)
    why = f"not evaluated at every one of {span}" if curve.subsample is None else "not on the full test set"
    sub = "" if curve.subsample is None else f" on a {curve.subsample}-image test subsample"
    return FinalValue(float(curve.last), f"last evaluation{sub} ({why}, so not the protocol's mean)", False)


def rerun_config(config: Config, seed: int) -> Config:
    """``config`` at training seed ``seed`` under :data:`RERUN_PROTOCOL`: the partition is drawn with the same
    seed (``partition_seed = seed``), so every method of that seed shares one partition and each seed has its
    own; the evaluation grid is :data:`FINAL_METRIC`'s."""
    return config.replace(seed=int(seed), partition_seed=int(seed), eval_every=int(FINAL_METRIC["eval_every"]),
                          eval_subsample=FINAL_METRIC["eval_subsample"])


def notebook_params(notebook: str = "10_benchmarks", profile: str = "cpu") -> dict[str, Any]:
    """``notebooks/params/<notebook>.<profile>.yaml``: the parameters papermill gives the notebook in that profile."""
    import yaml

    path = REPO_ROOT / "notebooks" / "params" / f"{notebook}.{profile}.yaml"
    return yaml.safe_load(path.read_text()) or {}


def profile_federation(profile: str = "cpu") -> Config:
    """Notebook 10's federation of ``profile`` (Dirichlet 0.1, algorithm FedAvg, partition seed fixed)."""
    p = notebook_params("10_benchmarks", profile)
    values = {"dataset": (p.get("datasets") or ["fmnist"])[0], "model": (p.get("models") or ["cnn"])[0]}
    values |= {k: p[k] for k in _FEDERATION_FIELDS if k in p and k not in ("dataset", "model")}
    return Config(partition=p.get("partition", "dirichlet"), alpha=0.1, partition_seed=PARTITION_SEED, **values)


def profile_splits(profile: str = "cpu") -> dict[str, Config]:
    """The splits of ``profile``'s benchmark, by :func:`split_key`: each a Config of the federation."""
    p = notebook_params("10_benchmarks", profile)
    base = profile_federation(profile)
    splits = [base.replace(partition=p.get("partition", "dirichlet"), alpha=float(a))
              for a in p.get("dirichlet_alphas", [0.1])]
    splits += [base.replace(partition="pathological", alpha=None, classes_per_client=int(c))
               for c in p.get("pathological_classes", []) if c is not None]  # None: no pathological split
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
        return self.source.endswith(".json") or ".json (tuned on " in self.source  # its own split's file, or reused


UNTUNED_PROFILES = ("paper",)
"""Profiles that run the papers' own settings: the cpu tuning (Fashion-MNIST, a small CNN) does not apply."""


def tuned_params(algorithm: str, config: Config, directory: Path | None = None, *, profile: str = "cpu") -> Tuned:
    """The committed tuning choice of ``algorithm`` on ``config``'s split.

    Reads ``<directory>/<split_key>/<algorithm>.json`` (default :func:`tuning_dir`, written by ``python -m lab
    regime rerun-tune``), checked by :func:`~lab.evidence.tuning_files.load_tuning` (a TuningError naming the
    file if it is corrupt, edited, or its choice is not its grid's best finished point). A split without its own
    file takes the choice made on :func:`tuning_split` (with the default directory; ``source`` says so). Without
    either — a method with nothing to tune, or not tuned yet — the method runs at its defaults and ``source``
    says so; but a file the evidence manifest lists that is gone is a TuningError naming it (deleted evidence
    is never a silent fallback to the defaults). The choice is the grid point only
    (e.g. ``{"rho": 0.02}``); merge it into ``algorithm_params``. The ``ci`` profile takes the cpu
    profile's choices (so the quick run exercises them); a profile in :data:`UNTUNED_PROFILES` gets
    the method's defaults (its parameter file sets the paper's values).
    """
    from fedlab.tuning import DEFAULT_GRIDS
    from lab.evidence.tuning_files import load_tuning

    if profile in UNTUNED_PROFILES:
        return Tuned({}, f"{profile} profile: the paper's settings, not tuned here")

    root = tuning_dir() if directory is None else Path(directory)
    split = split_key(config)
    path = root / split / f"{algorithm}.json"
    reused = ""
    if not path.exists() and directory is None and (root / tuning_split() / path.name).exists():
        path, reused = root / tuning_split() / path.name, f" (tuned on {tuning_split()}, reused on {split})"
    if not path.exists():
        _check_not_deleted(root / split / f"{algorithm}.json")
    if path.exists():
        best = load_tuning(path)["best"]  # checked: digest, a finished best point of its own grid
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        return Tuned(dict(best), f"{shown}{reused}")
    if not DEFAULT_GRIDS.get(algorithm):
        return Tuned({}, "defaults (nothing declared to tune)")
    return Tuned({}, f"defaults (untuned: no {path.name} for split {split_key(config)})")


def _check_not_deleted(path: Path) -> None:
    """A TuningError naming ``path`` when its evidence manifest lists it (as ``.json`` or ``.csv``) but it is gone:
    a deleted tuning file must not turn into a run at the method's defaults."""
    from lab.evidence.manifest import manifest_path, read_manifest
    from lab.evidence.tuning_files import TuningError, tuning_root

    root = tuning_root(path)
    listed = read_manifest(root)
    for file in (path, path.with_suffix(".csv")):
        try:
            rel = file.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
        if rel in listed and not file.exists():
            raise TuningError(f"tuning file {file} is listed in {manifest_path(root)} but is missing; the "
                              "method would silently run at its defaults; restore it from git "
                              "(`git checkout -- <file>`), or remove its line with the change that removed it")

def run_seeds(config: Config, seeds: Sequence[int] | None = None, *, record: bool = False,
              need_theta: bool = False, dataset: Any = None, paired: bool = False) -> list[Any]:
    """``config`` once per training seed (default :data:`SEEDS`).

    Without ``paired`` the partition is fixed across seeds: its seed is ``config.partition_seed`` if set,
    else :data:`PARTITION_SEED`, so the seeds vary initialisation, client sampling and batch order only.
    With ``paired`` each seed runs :func:`rerun_config` (:data:`RERUN_PROTOCOL`): the seed draws its own
    partition, shared by every method run at that seed, and the evaluation grid is :data:`FINAL_METRIC`'s —
    the configs, and so the run keys, that the regime rerun (``lab.regime.rerun``) trains. Runs go through
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
        run = rerun_config(config, s) if paired else fixed.replace(seed=int(s))
        res = run_or_load(run, need_theta=need_theta, dataset=dataset)
        if record:
            write_record(res)
        out.append(res)
    return out
