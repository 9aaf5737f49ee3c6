"""A study file: a pre-registered design of arms, cells, seeds, estimands and decision rules.

A study is written and committed before its first run; :func:`require_registered` refuses to train one
that git does not hold unchanged, and every record the runner writes names the file's SHA-256, so a
record always says which design it was trained under. :func:`load_study` reads and checks the file,
naming the field and what is allowed for every defect, before anything is planned or written.

The design (``lab/study/failure_map.yaml`` is the first study on it): a ``federation`` of Config fields
shared by every run; ``splits`` (name → partition fields) × ``local_steps`` are the cells; ``arms`` run in
every cell, ``controls`` each in one cell; ``seeds`` pair across arms and cells (``partition_seed: seed``:
each seed draws its own partition). A control parameter ``calibrated`` is measured before the control runs
(:mod:`lab.study.calibrate`).

A file's ``kind`` says which design it is: ``map`` (the default, above) or ``staged`` (the regime pilot's
``lab/regime/pilot.yaml``, read by :mod:`lab.regime.pilot`). :data:`KINDS` names the module that plans, trains
and decides each kind for :mod:`lab.study.runner`.
"""
from __future__ import annotations

import hashlib
import importlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lab.repro import FIGURES_DIR, REPO_ROOT

__all__ = ["CALIBRATED", "KINDS", "Amendment", "Arm", "Cell", "Design", "Study", "StudyError", "kind_module", "load_study",
           "need", "out_dir", "read_design", "require_registered"]

CALIBRATED = "calibrated"
"""A parameter value that the study measures before the run (its ``calibration`` block says how)."""


KINDS = {"map": "lab.study.runner", "staged": "lab.regime.pilot"}
"""A study file's ``kind`` → the module implementing it: ``load_design(path, data, raw)`` (not for ``map``, read
here), ``training``, ``plan``, ``analyse`` and ``decide`` (see :func:`lab.study.runner.train` and ``main``)."""


class StudyError(ValueError):
    """A study file is missing, malformed or not pre-registered; the message names the file and field."""


class Design(Protocol):
    """What the runner asks of any kind of study: its file, that file's SHA-256, its name and kind, and every
    pre-registered file it is read from (each must be committed unchanged before a run trains)."""

    path: Path
    sha256: str
    name: str
    kind: str

    @property
    def designs(self) -> tuple[Path, ...]: ...


@dataclass(frozen=True)
class Cell:
    split: str
    local_steps: int

    @property
    def name(self) -> str:
        return f"{self.split}-K{self.local_steps}"


@dataclass(frozen=True)
class Arm:
    name: str
    algorithm: str
    params: Mapping[str, Any]
    cell: Cell | None = None  # a control's one cell; None: every cell of the map
    stage: int = 1  # 2: a fix or drift reference of an amendment's stage 2, run in its one cell


@dataclass(frozen=True)
class Amendment:
    """A later file of a map's pre-registration (``<study stem>_amendment<N>.yaml``), refused unless its
    ``amends.sha256`` is the study file's digest: its reasons, and a stage 2 (``arms``: each fix and drift
    reference of the study's ``stage2`` block in each of the amendment's cells, at its tuned hyperparameters)
    with its own budget."""

    path: Path
    sha256: str
    cells: tuple[Cell, ...]
    arms: tuple[Arm, ...]
    budget_hours: float
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class Study:
    """A checked study file (``raw`` keeps every block, the prose of the decision rules included)."""

    path: Path
    sha256: str
    name: str
    federation: Mapping[str, Any]
    seeds: tuple[int, ...]
    splits: Mapping[str, Mapping[str, Any]]
    local_steps: tuple[int, ...]
    arms: tuple[Arm, ...]
    controls: tuple[Arm, ...]
    raw: Mapping[str, Any]
    kind: str = "map"
    amendments: tuple[Amendment, ...] = ()

    @property
    def designs(self) -> tuple[Path, ...]:
        return (self.path, *(a.path for a in self.amendments))  # the map and every amendment of it

    @property
    def stage2(self) -> tuple[Arm, ...]:
        """The arms of the amendments' stage 2, each in one cell where the map decided that local SAM fails."""
        return tuple(arm for a in self.amendments for arm in a.arms)

    @property
    def cells(self) -> tuple[Cell, ...]:
        return tuple(Cell(s, k) for k in self.local_steps for s in self.splits)

    @property
    def reference_split(self) -> str:
        return str(self.raw["reference_split"])

    @property
    def baseline_arm(self) -> str:
        return str(self.raw["baseline_arm"])

    @property
    def last_fraction(self) -> float:
        return float(self.raw["final_metric"]["last_fraction"])

    def arm(self, name: str) -> Arm:
        for a in (*self.arms, *self.controls):
            if a.name == name:
                return a
        raise StudyError(f"{self.path.name}: no arm or control named {name!r}")


def need(block: Any, name: str, where: str, path: Path, kind: type | tuple[type, ...] = object) -> Any:
    """``block[name]`` if it is a ``kind``; else :class:`StudyError` naming the file, the field and what is
    allowed (a bool is no int here: ``seeds: [true]`` is a typo, not seed 1)."""
    if not isinstance(block, dict) or name not in block:
        raise StudyError(f"{path}: {where}{name} is missing")
    value = block[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise StudyError(f"{path}: {where}{name}={value!r} is invalid; allowed: {want}")
    return value


def read_design(path: Path, what: str = "study") -> tuple[bytes, dict[str, Any]]:
    """The bytes of a pre-registered YAML file (their SHA-256 is what records name) and the mapping they hold.
    YAML aliases are refused: a design is written out in full, so that what a reader sees is what runs.
    :class:`StudyError` naming ``what`` and the file when it cannot be read, is not YAML or not a mapping."""
    import yaml

    from fedlab.sweep.gridfile import load_yaml_without_aliases

    try:
        data = path.read_bytes()
    except OSError as err:
        raise StudyError(f"{what} file {path} cannot be read ({type(err).__name__}: {err})") from None
    try:
        raw = load_yaml_without_aliases(data)
    except yaml.YAMLError as err:
        raise StudyError(f"{what} file {path} is not YAML ({err})") from None
    if not isinstance(raw, dict):
        raise StudyError(f"{path}: a {what} file is a mapping of blocks, got {type(raw).__name__}")
    return data, raw


def _config_fields(fields: Mapping[str, Any], where: str, path: Path) -> None:
    from fedlab.config import Config

    known = {f for f in Config.__dataclass_fields__}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise StudyError(f"{path.name}: {where} has unknown Config field(s) {', '.join(unknown)}")


def _algorithm(name: Any, where: str, path: Path) -> str:
    from fedlab.algorithms import algorithm_names

    if name not in algorithm_names():
        raise StudyError(f"{path.name}: {where}algorithm={name!r} is invalid; allowed: "
                         f"{', '.join(algorithm_names())}")
    return str(name)


def kind_module(study: Design) -> Any:
    """The module implementing ``study``'s kind (:data:`KINDS`), imported only when asked for: the map's
    runner must not import the pilot's package, nor the pilot's the map's."""
    return importlib.import_module(KINDS[study.kind])


def out_dir(study: Study) -> Path:
    """Where a study's generated files go: ``figures/<study file's stem>/`` (``figures/failure_map``)."""
    return FIGURES_DIR / study.path.stem


def load_study(path: str | Path) -> Design:
    """Read and check a study file (:func:`read_design`) of any kind, naming the field and what is allowed for
    a defect; a file without ``kind`` is a map (``failure_map.yaml`` was written before kinds existed)."""
    path = Path(path)
    data, raw = read_design(path)
    kind = raw.get("kind", "map")
    if kind not in KINDS:
        raise StudyError(f"{path.name}: kind={kind!r} is invalid; allowed: {', '.join(KINDS)}")
    if kind != "map":
        design: Design = importlib.import_module(KINDS[kind]).load_design(path, data, raw)
        return design
    return _load_map(path, data, raw)


def _load_map(path: Path, data: bytes, raw: dict[str, Any]) -> Study:
    """A ``map`` study: the checks of the module docstring's design."""
    name = need(raw, "study", "", path, str)
    federation = need(raw, "federation", "", path, dict)
    _config_fields(federation, "federation", path)
    seeds = need(raw, "seeds", "", path, list)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise StudyError(f"{path.name}: seeds={seeds!r} is invalid; allowed: distinct integers >= 0")
    if raw.get("partition_seed", "seed") != "seed":
        raise StudyError(f"{path.name}: partition_seed={raw['partition_seed']!r} is invalid; allowed: seed")
    splits = need(raw, "splits", "", path, dict)
    for split, fields in splits.items():
        if not isinstance(fields, dict) or "partition" not in fields:
            raise StudyError(f"{path.name}: splits.{split} must be a mapping with a partition field")
        _config_fields(fields, f"splits.{split}", path)
    ks = need(raw, "local_steps", "", path, list)
    if not ks or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks):
        raise StudyError(f"{path.name}: local_steps={ks!r} is invalid; allowed: a list of integers >= 1")
    arms = []
    for arm, spec in need(raw, "arms", "", path, dict).items():
        arms.append(Arm(str(arm), _algorithm(need(spec, "algorithm", f"arms.{arm}.", path, str), f"arms.{arm}.",
                                             path), dict(spec.get("params") or {})))
    controls = []
    for arm, spec in (raw.get("controls") or {}).items():
        cell = need(spec, "cell", f"controls.{arm}.", path, dict)
        split = need(cell, "split", f"controls.{arm}.cell.", path, str)
        k = need(cell, "local_steps", f"controls.{arm}.cell.", path, int)
        if split not in splits or k not in ks:
            raise StudyError(f"{path.name}: controls.{arm}.cell={cell!r} is not a cell of the map; allowed: a split "
                             f"of {', '.join(splits)} and local_steps of {ks}")
        params = dict(spec.get("params") or {})
        for key, value in params.items():
            if value == CALIBRATED and arm not in (raw.get("calibration") or {}):
                raise StudyError(f"{path.name}: controls.{arm}.params.{key} is {CALIBRATED!r} but calibration.{arm} "
                                 "is missing")
        controls.append(Arm(str(arm), _algorithm(need(spec, "algorithm", f"controls.{arm}.", path, str),
                                                 f"controls.{arm}.", path), params, Cell(split, k)))
    names = [a.name for a in (*arms, *controls)]
    if len(set(names)) != len(names):
        raise StudyError(f"{path.name}: arm and control names must be distinct, got {names}")
    if raw.get("reference_split") not in splits:
        raise StudyError(f"{path.name}: reference_split={raw.get('reference_split')!r} is invalid; allowed: "
                         f"{', '.join(splits)}")
    if raw.get("baseline_arm") not in {a.name for a in arms}:
        raise StudyError(f"{path.name}: baseline_arm={raw.get('baseline_arm')!r} is invalid; allowed: "
                         f"{', '.join(a.name for a in arms)}")
    frac = need(need(raw, "final_metric", "", path, dict), "last_fraction", "final_metric.", path, (int, float))
    if not 0 < frac <= 1:
        raise StudyError(f"{path.name}: final_metric.last_fraction={frac!r} is invalid; allowed: (0, 1]")
    for block in ("estimands", "decision", "budget"):
        need(raw, block, "", path, dict)
    hours = need(raw["budget"], "hours", "budget.", path, (int, float))
    workers = need(raw["budget"], "workers", "budget.", path, int)
    if hours <= 0 or workers < 1:
        raise StudyError(f"{path.name}: budget needs hours > 0 and workers >= 1, got {hours}, {workers}")
    digest = hashlib.sha256(data).hexdigest()
    amendments = tuple(_load_amendment(p, path, digest, raw, splits, ks)
                       for p in sorted(path.parent.glob(f"{path.stem}_amendment*.yaml")))
    return Study(path=path, sha256=digest, name=name, federation=dict(federation),
                 seeds=tuple(seeds), splits={k: dict(v) for k, v in splits.items()}, local_steps=tuple(ks),
                 arms=tuple(arms), controls=tuple(controls), raw=raw, amendments=amendments)


def _load_amendment(path: Path, study_path: Path, digest: str, study_raw: Mapping[str, Any],
                    splits: Mapping[str, Any], ks: list[int]) -> Amendment:
    """An amendment of the map ``study_path`` (digest ``digest``), checked before anything is planned: it names
    the study's file and digest, its stage 2 lists cells of the map and a budget, and each of the study's
    ``stage2`` methods and references has a tuning file under ``stage2.tuning`` (or nothing to tune)."""
    from fedlab.tuning import DEFAULT_GRIDS
    from lab.evidence.tuning_files import load_tuning

    data, raw = read_design(path, "amendment")
    amends = need(raw, "amends", "", path, dict)
    if amends.get("file") != study_path.name or amends.get("sha256") != digest:
        raise StudyError(f"{path.name}: amends={amends!r} does not name {study_path.name} at its digest "
                         f"({digest[:12]}…): it amends another file, or that file changed after it was written")
    need(raw, "reasons", "", path, dict)
    stage = need(raw, "stage2", "", path, dict)
    declared = need(study_raw, "stage2", "", study_path, dict)
    cells = []
    for cell in need(stage, "cells", "stage2.", path, list):
        split, k = (cell or {}).get("split"), (cell or {}).get("local_steps")
        if split not in splits or k not in ks:
            raise StudyError(f"{path.name}: stage2.cells has {cell!r}, not a cell of the map; allowed: a split of "
                             f"{', '.join(splits)} and local_steps of {ks}")
        cells.append(Cell(str(split), int(k)))
    hours = need(stage, "budget_hours", "stage2.", path, (int, float))
    if not hours > 0:
        raise StudyError(f"{path.name}: stage2.budget_hours={hours!r} is invalid; allowed: a number > 0")
    tuning = REPO_ROOT / need(stage, "tuning", "stage2.", path, str)
    arms = []
    for method in [*need(declared, "methods", "stage2.", study_path, list),
                   *need(declared, "references", "stage2.", study_path, list)]:
        algorithm = _algorithm(method, "stage2.", study_path)
        file = tuning / f"{algorithm}.json"
        if file.exists():
            params = dict(load_tuning(file)["best"])  # checked: its manifest digest, its grid's best point
        elif not DEFAULT_GRIDS.get(algorithm):
            params = {}
        else:
            raise StudyError(f"{path.name}: stage2.tuning has no {file.name} for {algorithm}, which has "
                             "hyperparameters to tune")
        arms += [Arm(algorithm, algorithm, params, cell, stage=2) for cell in cells]
    return Amendment(path, hashlib.sha256(data).hexdigest(), tuple(cells), tuple(arms), float(hours), raw)


def require_registered(design: Design | Path, root: Path | None = None) -> str:
    """The commit that registered ``design`` (a study, or the path of any pre-registered file: the regime
    pilot's criteria and amendment) unchanged: the oldest commit holding these exact bytes. :class:`StudyError`
    when git does not hold the file as it is now — uncommitted, edited since its commit, or outside a git
    checkout. Training reads a design only once it is on record."""
    root = REPO_ROOT if root is None else Path(root)
    path = Path(design) if isinstance(design, (str, Path)) else design.path
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        raise StudyError(f"{path}: a study file must live in the repository ({root}) to be pre-registered") \
            from None

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
        except OSError as err:
            raise StudyError(f"{rel}: git is needed to check the pre-registration ({err})") from None
        if done.returncode != 0:
            raise StudyError(f"{rel}: not pre-registered: {done.stderr.strip() or 'git ' + ' '.join(args)}")
        return done.stdout.strip()

    blob = git("hash-object", str(rel))
    commits = git("log", "--format=%H", "--", str(rel)).split()
    for commit in reversed(commits):  # oldest first: the commit that registered these bytes
        try:
            if git("rev-parse", f"{commit}:{rel}") == blob:
                return commit
        except StudyError:
            continue  # the file did not exist at that commit (deleted later, re-added)
    raise StudyError(f"{rel}: not pre-registered: commit the study file before training "
                     "(its bytes must be in a commit; an edit after that is a new amendment file)")
