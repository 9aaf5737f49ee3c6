"""How the cpu profile's hyperparameters are tuned (the protocol's third rule, :mod:`lab.evidence.protocol`).

Each method is tuned per split on a validation set held out from the training data (:func:`fedlab.tune`, the test
set is never read), over its declared grid (:data:`fedlab.tuning.DEFAULT_GRIDS`), at a horizon shorter than
the runs (:data:`TUNING`); a grid whose optimum sits on its edge is extended before the choice is recorded
(:data:`EDGE_RULE`, :func:`extend_edges`). :func:`tune_splits` does it resumably, writing each choice (and each grid
point's run record) as it finishes. Where the choices live: :func:`tuning_dir` (the regime rerun's, tuned on
:func:`tuning_split`) and :data:`K5_TUNING_DIR` (the K = 5 profile's, which its committed figures cite).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

from fedlab.config import Config
from lab.repro import FIGURES_DIR

__all__ = ["EDGE_RULE", "K5_TUNING_DIR", "RERUN_PLAN", "TUNING", "EdgeRule", "edge_extension", "extend_edges",
           "tune_splits", "tuning_dir", "tuning_split"]

TUNING: dict[str, Any] = {"rounds": 15, "eval_every": 3, "validation_size": 5000, "seed": 0}
"""The tuning horizon and validation protocol (evaluations at rounds 3, 6, …, 15; the score averages
the last quarter, rounds 12 and 15, on 2,000 of the 5,000 held-out samples — ``eval_subsample``)."""


# --- grids whose optimum sits on an edge ---------------------------------------------------------------
@dataclass(frozen=True)
class EdgeRule:
    """How a tuning grid is extended when its optimum sits on an edge (declared once, :data:`EDGE_RULE`).

    For each key of ``keys`` whose candidates are numbers, sorted v_1 < … < v_m: if the chosen value is the
    largest, v_m·``factor`` is added (while it is ≤ ``cap[key]``); if it is the smallest *positive* value,
    v/``factor`` is added below it (it lies between the grid's 0, when present, and v — 0 itself is the
    boundary of the method, e.g. SAM off, and is never extended below); this repeats, re-tuning each time,
    at most ``max_steps`` times per key. An optimum still on an edge after that is recorded with
    ``on_edge`` named in the tuning file, never silently.
    """

    keys: tuple[str, ...] = ("rho", "rho_max", "rho_server", "lam", "mu")
    factor: float = 2.0
    max_steps: int = 3
    cap: Mapping[str, float] = dataclass_field(default_factory=lambda: {"rho": 1.0, "rho_server": 1.0,
                                                                        "rho_max": 1.0, "lam": 10.0, "mu": 10.0})

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "factor": self.factor, "max_steps": self.max_steps, "cap": dict(self.cap)}


EDGE_RULE = EdgeRule()
"""The declared edge rule of the rerun's tuning: ρ, ρ_max, ρ_server, λ and μ, ×2 per step, at most 3 steps,
capped (ρ ≤ 1, λ, μ ≤ 10)."""


def edge_extension(grid: Mapping[str, Sequence[Any]], best: Mapping[str, Any],
                   rule: EdgeRule = EDGE_RULE) -> dict[str, list[Any]]:
    """The new candidates to add to ``grid`` because ``best`` sits on an edge (empty: interior, or capped).

    Only keys of ``rule.keys`` with numeric candidates are extended (see :class:`EdgeRule`); a value already in
    the grid is not added again."""
    out: dict[str, list[Any]] = {}
    for key, values in grid.items():
        if key not in rule.keys or key not in best:
            continue
        nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(nums) != len(values) or len(nums) < 2:
            continue
        chosen = float(best[key])
        positive = sorted(v for v in nums if v > 0)
        new = None
        if chosen == max(nums) and chosen > 0:
            new = chosen * rule.factor
            if new > float(rule.cap.get(key, math.inf)) * (1 + 1e-12):
                new = None
        elif positive and chosen == positive[0]:
            new = chosen / rule.factor
        if new is not None and not any(math.isclose(new, v, rel_tol=1e-9) for v in nums):
            out[key] = [float(f"{new:.6g}")]
    return out


def extend_edges(tune_once: Any, grid: Mapping[str, Sequence[Any]],
                 rule: EdgeRule = EDGE_RULE) -> tuple[Any, dict[str, Any]]:
    """Tune, and while the choice sits on an extendable edge, add the next candidate and tune again.

    ``tune_once(grid)`` returns a :class:`~fedlab.tuning.TuneResult` (points already run are loaded
    from the run cache, not retrained). Returns the last result and what was done: ``declared_grid``, the
    ``added`` candidates per key in order, and ``on_edge`` (keys whose choice is still on an edge of the final
    grid: the cap or ``max_steps`` stopped the extension, or the choice is the boundary 0)."""
    current = {k: list(v) for k, v in grid.items()}
    added: dict[str, list[Any]] = {}
    steps: dict[str, int] = {}
    result = tune_once(current)
    while True:
        more = {k: v for k, v in edge_extension(current, result.best, rule).items()
                if steps.get(k, 0) < rule.max_steps}
        if not more:
            break
        for key, values in more.items():
            current[key] = sorted(current[key] + values)
            added.setdefault(key, []).extend(values)
            steps[key] = steps.get(key, 0) + 1
        result = tune_once(current)
    on_edge = sorted(k for k, v in current.items() if k in rule.keys and k in result.best
                     and all(isinstance(x, (int, float)) for x in v) and len(v) > 1
                     and float(result.best[k]) in (float(min(v)), float(max(v))))
    return result, {"declared_grid": {k: list(v) for k, v in grid.items()}, "added": added, "on_edge": on_edge,
                    "rule": rule.to_dict()}


K5_TUNING_DIR = FIGURES_DIR / "tuning"
"""The K = 5 profile's tuning, one folder per split: its committed figures cite it (and notebook 04 shows its
FedSAM ρ sweeps); the cpu profile no longer reads it."""


def tuning_dir() -> Path:
    """``figures/rerun/tuning``: the cpu profile's tuning, the regime rerun's (``lab/regime/rerun.yaml``): every
    method tuned once, on the plan's tuning split, one folder per split (:func:`tuning_split`)."""
    return FIGURES_DIR / "rerun" / "tuning"


RERUN_PLAN = Path(__file__).parents[1] / "regime" / "rerun.yaml"
"""The rerun's pre-registered plan, which :func:`lab.regime.rerun_plan.load_plan` reads and checks whole. The protocol
reads one choice of it (:func:`tuning_split`), so its path is declared here, below the regime that applies it."""


def tuning_split() -> str:
    """The split the cpu profile's methods are tuned on (the rerun plan's ``tuning.split``); its choice is reused
    on every other split (``rerun.yaml`` reasons.tuning_split)."""
    from fedlab.sweep.gridfile import load_yaml_without_aliases

    return str(load_yaml_without_aliases(RERUN_PLAN.read_text(encoding="utf-8"))["tuning"]["split"])


def _grid_size(grid: dict[str, Sequence[Any]]) -> int:
    return math.prod(len(v) for v in grid.values()) if grid else 1


def tune_splits(splits: Mapping[str, Config], *, methods: Iterable[str] | None = None,
                grids: Mapping[str, Mapping[str, Sequence[Any]]] | None = None, directory: Path | None = None,
                record: bool = True, records_directory: Path | None = None, tuning: Mapping[str, Any] | None = None,
                progress: bool = True, edges: EdgeRule | None = EDGE_RULE) -> list[Path]:
    """Tune every method on every split; write each result when it finishes; skip what is written.

    ``splits`` maps a split key to the federation's Config on that split. For each split and method
    (default: every method whose :data:`~fedlab.tuning.DEFAULT_GRIDS` entry has more than one
    point; ``grids`` replaces that table) it runs :func:`fedlab.tune` under :data:`TUNING` and
    writes ``<directory>/<split>/<method>.csv/.json`` (default ``figures/tuning``) as soon as that
    method is done, plus (``record``) each grid point's run record (``figures/records/`` or
    ``records_directory``); ``tuning`` replaces :data:`TUNING` (tests). With ``edges`` (default
    :data:`EDGE_RULE`) a choice on an edge of its grid is extended first (:func:`extend_edges`) and the file
    records the declared grid, the added candidates and any key still ``on_edge`` in its ``protocol``;
    ``edges=None`` tunes the declared grid only (the protocol of the committed cpu tuning). A method whose
    JSON exists, tuned under the same protocol, grid and base,
    is skipped; one whose file disagrees is an error naming the file (never silently replaced).
    Returns the JSON paths, in order.
    """
    from tqdm import tqdm

    from lab.evidence.records import run_or_load, write_record
    from lab.evidence.tuning_files import record_tuning
    from fedlab.tuning import DEFAULT_GRIDS, tune

    root = tuning_dir() if directory is None else Path(directory)
    given = {m: dict(g) for m, g in (grids or DEFAULT_GRIDS).items()}
    names = [m for m, g in given.items() if _grid_size(g) > 1] if methods is None else list(methods)
    grids = {m: dict(g) for m, g in DEFAULT_GRIDS.items()} | given
    missing = sorted(set(names) - set(grids))
    if missing:
        raise ValueError(f"no declared grid for {missing}; declared: {', '.join(sorted(grids))}")
    t = dict(TUNING if tuning is None else tuning)
    protocol: dict[str, Any] = {"rounds": t["rounds"], "seed": t["seed"], "validation_size": t["validation_size"]}
    if edges is not None:
        protocol["edge_rule"] = edges.to_dict()

    def run_and_record(config: Config, **kwargs: Any) -> Any:
        # each grid point's record is written as the point finishes, so a session that stops in the middle of
        # a large grid resumes from the committed points on any machine (run_or_load reads them back)
        res = run_or_load(config, **kwargs)
        if record:
            write_record(res, records_directory)
        return res

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
        def tune_once(points: dict[str, list[Any]], base: Config = base) -> Any:
            return tune(base, points, rounds=t["rounds"], seed=t["seed"], validation_size=t["validation_size"],
                        progress=False, runner=run_and_record)

        if edges is None:
            result = tune_once(grid)
        else:  # the choice is recorded only once it is not on an extendable edge
            result, ext = extend_edges(tune_once, grid, edges)
            result.protocol = {**result.protocol, "edge_rule": ext["rule"], "declared_grid": ext["declared_grid"],
                               "edge_added": ext["added"], "on_edge": ext["on_edge"]}
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
    fresh = Config()
    defaults = plain({f.name: getattr(fresh, f.name) for f in dataclasses.fields(Config)})
    committed = done.get("base", {})
    have = {k: committed.get(k, defaults.get(k)) for k in want}
    made = dict(done.get("protocol") or {})
    declared = made.pop("declared_grid", done.get("grid"))  # an edge-extended file: compare what was declared
    made = {k: v for k, v in made.items() if k not in ("edge_added", "on_edge")}
    if made != plain(protocol) or have != want or declared != plain(grid):
        differ = sorted(k for k in want if have.get(k) != want[k])
        raise ValueError(f"{path} was tuned under another protocol, grid or base config (differs in: "
                         f"{', '.join(differ) or 'protocol/grid'}); move it away (git keeps it) to retune, "
                         "or tune into another directory")
