"""R5 of the regime pilot for the rerun itself: every run the plan trains, listed and costed.

``lab/regime/rerun.yaml`` declares the plan — the regime, the seeds, the tuning, the families of runs
the notebooks train — and ``figures/claims.yaml`` adds every claim's arms at the split it is judged on.
A run is (method, hyperparameters, split); the plan trains each distinct run once per seed (an arm two
claims share, or a claim and a notebook, is one run). The estimate, as amendment 1 (``reasons.r5``)
words it:

    hours = [ Σ_runs S_r · s(m) + Σ_tuning (1 + e) · f · s(m) + Σ_analyses n · a ] / (workers · 3600)

with S_r the seeds of run r (every seed for a claim's arm; ``descriptive_seeds`` for a run only a
figure shows, no claim judges), s(m) the regime's measured stage-B seconds of method m where stage B trained it and
otherwise of its class (two gradients per local step, the registry's ``grad_evals_per_step``: FedSAM's
seconds; one: the mean of FedAvg's and the drift correction's), f the tuning horizon's fraction of the
rounds, e the allowance for grid edges, and a the seconds of one model's analysis
(:data:`lab.evidence.budget.ANALYSIS_S_PER_MODEL`).

``python -m lab regime rerun-plan`` prints the table and writes ``figures/regime/rerun_plan.md``; it
exits 1 when the estimate is over the plan's budget.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.evidence.protocol import RERUN_PLAN as RERUN_FILE  # the plan; the protocol reads its tuning split
from lab.regime.pilot import REGISTERED_LATER, CriteriaError, load_criteria, load_records, records_dir
from lab.repro import FIGURES_DIR
from lab.study.spec import read_design

__all__ = ["RERUN_DIR", "RERUN_FILE", "PlanRun", "claim_arms", "estimate", "federation", "main", "main_tune",
           "SeedRun", "analysed", "check_outcome", "claims_not_run", "is_tuned_run", "main_train", "method_seconds",
           "plan_runs", "recorded", "run_config", "seed_runs", "train", "tune", "tuning_protocol"]

CLAIMS_FILE = FIGURES_DIR / "claims.yaml"
DEFAULT_SPLIT = "dirichlet-0.1"
"""The split of a claim whose setting selects none (notebooks 04–09 train on Dirichlet 0.1)."""


@dataclass(frozen=True, order=True)
class PlanRun:
    """One distinct run of the plan (trained once per seed); ``params`` canonical JSON ('{}': tuned)."""

    split: str
    method: str
    params: str
    source: str  # the first family or claim that needs it
    seeds: int = 0  # seeds it trains on (plan_runs: all for a claim's arm, descriptive_seeds otherwise)


def split_key(select: Mapping[str, Any] | None) -> str:
    """``dirichlet-0.5`` / ``pathological-3`` from a claim's ``select`` (none: Dirichlet 0.1)."""
    if not select:
        return DEFAULT_SPLIT
    if select.get("partition") == "dirichlet":
        return f"dirichlet-{select['alpha']:g}"
    if select.get("partition") == "pathological":
        return f"pathological-{select['classes_per_client']}"
    raise CriteriaError(f"claims: a select of {dict(select)!r} names no split the plan knows")


def _canonical(arm: Mapping[str, Any]) -> str:
    values = {**dict(arm.get("params") or {}), **{f"config.{k}": v for k, v in (arm.get("config") or {}).items()}}
    return json.dumps(values, sort_keys=True)


def claim_arms(claims: Sequence[Mapping[str, Any]]) -> list[PlanRun]:
    """Every arm of every claim that names a method, at the split its claim is judged on (not a study's claims)."""
    out = []
    for claim in (c for c in claims if "/" not in str(c.get("setting", {}).get("figure", ""))):  # failure_map/…: its own
        split = split_key(claim.get("setting", {}).get("select"))
        for side in ("left", "right"):
            arms = claim.get(side)
            for arm in arms if isinstance(arms, list) else [arms]:
                if isinstance(arm, Mapping) and arm.get("algorithm"):
                    out.append(PlanRun(split, arm["algorithm"], _canonical(arm), f"claim {claim['id']}"))
    return out


def is_tuned_run(run: PlanRun, defaults: Mapping[str, Any], grid: Mapping[str, Any]) -> bool:
    """Whether a claim arm's hyperparameters name the tuned run itself: each is the method's default and
    none is tuned (a grid with a ``preset`` may move any of them, so it never is)."""
    params = json.loads(run.params)
    return "preset" not in grid and not any(k.startswith("config.") or k in grid or defaults.get(k, object()) != v
                                            for k, v in params.items())


def plan_runs(plan: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], methods: Sequence[str],
              defaults: Mapping[str, Mapping[str, Any]] | None = None,
              grids: Mapping[str, Mapping[str, Any]] | None = None) -> list[PlanRun]:
    """The distinct runs: the families of ``plan`` and the claims' arms, each once (first source kept); a
    claim arm that :func:`is_tuned_run` (``defaults``, ``grids``: per method) is the tuned run."""
    arms = [a if defaults is None or not is_tuned_run(a, defaults.get(a.method, {}), (grids or {}).get(a.method, {}))
            else PlanRun(a.split, a.method, "{}", a.source) for a in claim_arms(claims)
            if a.split in plan["splits"]]
    runs: dict[tuple[str, str, str], PlanRun] = {}
    for fam in plan["families"]:
        for split in fam.get("splits", [DEFAULT_SPLIT]):
            if split not in plan["splits"]:
                raise CriteriaError(f"{RERUN_FILE.name}: family {fam['label']!r} trains on {split}, which is not one "
                                    f"of the plan's splits ({', '.join(plan['splits'])})")
            if fam["methods"] == "all":
                names = [m for m in methods if m not in fam.get("exclude", ()) and m not in REGISTERED_LATER]
            elif fam["methods"] == "claims":
                names = sorted({a.method for a in arms if a.split == split})
            else:
                names = list(fam["methods"])
            unknown = [m for m in names if m not in methods]
            if unknown:
                raise CriteriaError(f"{RERUN_FILE.name}: family {fam['label']!r} names unregistered method(s) "
                                    f"{', '.join(unknown)}")
            for m in names:
                for params in fam.get("params") or [{}]:
                    n = len(plan["seeds"]) if fam.get("seeds") == "all" else plan.get("descriptive_seeds")
                    run = PlanRun(split, m, json.dumps(params, sort_keys=True), f"{fam['notebook']}: {fam['label']}",
                                  int(n or len(plan["seeds"])))
                    runs.setdefault((run.split, run.method, run.params), run)
    for a in arms:  # a claim's arm trains on every seed, whoever needed the run first
        key = (a.split, a.method, a.params)
        runs[key] = dataclasses.replace(runs.get(key, a), seeds=len(plan["seeds"]))
    return sorted(runs.values())


def the_claims() -> list[dict[str, Any]]:
    """The claims of :data:`CLAIMS_FILE`."""
    import yaml

    return yaml.safe_load(CLAIMS_FILE.read_text())["claims"]


def the_runs(plan: Mapping[str, Any], claims: Sequence[Mapping[str, Any]] | None = None) -> list[PlanRun]:
    """:func:`plan_runs` of ``plan`` over every registered method, with their defaults and tuning grids
    (``claims``: :func:`the_claims` when None)."""
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.evidence.tuning import DEFAULT_GRIDS

    methods = list(algorithm_names())
    defaults = {m: dataclasses.asdict(algorithm_class(m).resolve_hparams(None, {})) for m in methods}
    return plan_runs(plan, the_claims() if claims is None else claims, methods, defaults, DEFAULT_GRIDS)


def method_seconds(records: Sequence[Any], candidate: str) -> dict[str, float]:
    """Mean measured seconds per run of each method in the candidate's stage-B records."""
    by: dict[str, list[float]] = {}
    for r in records:
        if r.meta["stage"] == "B" and r.meta["candidate"] == candidate and r.status == "finished":
            by.setdefault(r.meta["algorithm"], []).append(r.seconds)
    return {m: sum(v) / len(v) for m, v in by.items()}


def _cost(method: str, seconds: Mapping[str, float], two_gradient: Mapping[str, bool]) -> tuple[float, str]:
    """Seconds of one run of ``method`` and where the number comes from."""
    if method in seconds:
        return seconds[method], "measured"
    if two_gradient[method]:
        return seconds["fedsam"], "as FedSAM (two gradients per step)"
    first = [seconds[m] for m in seconds if not two_gradient.get(m, True)]
    return sum(first) / len(first), "as the first-order methods"


def _part(run: PlanRun) -> str:
    """The part of the plan a run is costed under: its notebook, or 'claim arms'."""
    return "claim arms" if run.source.startswith("claim") else run.source.split(":")[0]


def estimate(plan: Mapping[str, Any], runs: Sequence[PlanRun], seconds: Mapping[str, float],
             two_gradient: Mapping[str, bool], grids: Mapping[str, Mapping[str, Sequence[Any]]],
             analysis_seconds: float, extra_eval_seconds: float = 0.0) -> dict[str, Any]:
    """The plan's cost by part (seconds of one worker) and the hours on ``plan['workers']``;
    ``extra_eval_seconds``: what one run's evaluations cost beyond those stage B's seconds include."""
    if "fedsam" not in seconds or not any(not two_gradient.get(m, True) for m in seconds):
        raise CriteriaError("the rerun's estimate needs measured stage-B seconds of FedSAM and of a first-order "
                            f"method; measured: {', '.join(sorted(seconds)) or 'none'}")
    parts: dict[str, float] = {}
    count: dict[str, int] = {}
    for run in runs:
        key = _part(run)
        parts[key] = parts.get(key, 0.0) + run.seeds * _cost(run.method, seconds, two_gradient)[0]
        count[key] = count.get(key, 0) + run.seeds
    tuning = plan["tuning"]
    points = {m: math.prod(len(v) for v in g.values()) for m, g in grids.items() if g}
    planned = {r.method for r in runs}
    tuned = {m: p for m, p in points.items() if p > 1 and m in planned}
    parts["tuning"] = sum((1 + tuning["edge_allowance"]) * tuning["rounds_fraction"] * tuning["seeds"] * p
                          * _cost(m, seconds, two_gradient)[0] for m, p in tuned.items())
    count["tuning"] = round(sum((1 + tuning["edge_allowance"]) * tuning["seeds"] * p for p in tuned.values()))
    analysed = sum(a["models"] * a["seeds"] for a in plan["analyses"].values())
    replays = sum(a.get("replay_runs", 0) for a in plan["analyses"].values())
    parts["analyses"] = analysed * analysis_seconds + replays * seconds["fedsam"]
    count["analyses"] = analysed
    parts["evaluations beyond stage B's"] = sum(r.seeds for r in runs) * extra_eval_seconds
    count["evaluations beyond stage B's"] = sum(r.seeds for r in runs)
    total = sum(parts.values())
    hours = total / plan["workers"] / 3600
    return {"parts": parts, "count": count, "total_seconds": total, "hours": hours,
            "budget_hours": float(plan["budget_hours"]), "fits": hours <= float(plan["budget_hours"]),
            "runs": sum(r.seeds for r in runs)}


RERUN_DIR = FIGURES_DIR / "rerun"
"""The rerun's tuning, ``tuning/<split>/<method>.json`` (kept apart from the K = 5 profile's ``figures/tuning``,
which its committed figures cite). Its run records go where the notebooks read records,
:func:`lab.evidence.records.records_dir` (``figures/records``): a notebook's cpu run is a rerun run (same config,
same key), so it is loaded, not trained again."""


def _records(root: Path | None) -> Path:
    from lab.evidence.records import records_dir

    return records_dir() if root is None else Path(root) / "records"


def _split_fields(split: str) -> dict[str, Any]:
    """Config fields of a split key (``dirichlet-0.1``, ``pathological-3``, ``iid``)."""
    kind, _, value = split.partition("-")
    if kind == "dirichlet" and value:
        return {"partition": "dirichlet", "alpha": float(value)}
    if kind == "pathological" and value:
        return {"partition": "pathological", "alpha": None, "classes_per_client": int(value)}
    if split == "iid":
        return {"partition": "iid", "alpha": None}
    raise CriteriaError(f"split {split!r} is not dirichlet-<alpha>, pathological-<classes> or iid")


def federation(plan: Mapping[str, Any], criteria: Any, split: str, *, tuning: bool = False) -> Any:
    """The rerun's Config on ``split``: the regime's candidate with the criteria's ``fixed`` fields as
    amended for stage B (sequential clients), partition seed 0 (a run's seed replaces both). With
    ``tuning`` the training subset grows by the criteria's ``validation_size``, which tuning holds out, so
    every client keeps the regime's samples (as the pilot's stage A did)."""
    from fedlab.config import Config

    cand = criteria.candidates[plan["regime"]]
    fixed = criteria.stage_fixed("B")
    hold = int(fixed.pop("validation_size", 0) or 0)
    size = cand.train_size if cand.train_size is None or not tuning else cand.train_size + hold
    return Config.from_dict({**fixed, **_split_fields(split), "model": cand.model, "train_size": size,
                             "local_steps": cand.local_steps, "lr": cand.lr, "rounds": cand.rounds,
                             "partition_seed": 0, "seed": int(plan["seeds"][0])})


def tuning_protocol(plan: Mapping[str, Any], criteria: Any) -> dict[str, Any]:
    """The rerun's tuning horizon and hold-out (``lab.evidence.protocol.TUNING``'s keys)."""
    cand = criteria.candidates[plan["regime"]]
    return {"rounds": max(1, round(cand.rounds * plan["tuning"]["rounds_fraction"])),
            "eval_every": int(criteria.fixed["eval_every"]), "validation_size": int(criteria.fixed["validation_size"]),
            "seed": int(plan["seeds"][0])}


def tune(plan: Mapping[str, Any], criteria: Any, *, methods: Sequence[str] | None = None,
         client_threads: int = 2, root: Path | None = None, progress: bool = True) -> list[Path]:
    """Tune every method the plan trains that has a grid (``methods``: these), on the plan's tuning split,
    resumably (a method × split is written to ``<root>/tuning`` when it finishes, its grid points to
    ``<root>/records``; no root: :data:`RERUN_DIR` and ``records_dir()``)."""
    from lab.evidence.protocol import tune_splits

    split = plan["tuning"]["split"]
    if methods is None:  # a registered method the plan leaves out (rerun.yaml's reasons) is not tuned either
        methods = sorted({r.method for r in the_runs(plan)})
    base = federation(plan, criteria, split, tuning=True).replace(client_threads=client_threads)
    return tune_splits({split: base}, methods=methods, directory=(RERUN_DIR if root is None else Path(root)) / "tuning",
                       records_directory=_records(root),
                       tuning=tuning_protocol(plan, criteria), progress=progress)


RERUN_NAME = "regime-rerun-issue28"
"""``meta.rerun`` of every record :func:`train` writes (tuning's grid-point records in the folder have none)."""


@dataclass(frozen=True)
class SeedRun:
    """One run of the plan at one seed."""

    run: PlanRun
    seed: int

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.run.split, self.run.method, self.run.params, self.seed)

    def label(self) -> str:
        params = "" if self.run.params == "{}" else f" {self.run.params}"
        return f"{self.run.split} {self.run.method}{params} s{self.seed}"


def analysed(plan: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The (split, method) pairs whose tuned run's model an analysis of ``plan['analyses']`` reads (``methods:
    notebook`` is that notebook's cpu parameters' ``methods``; no ``splits``: the default split)."""
    from lab.evidence.protocol import notebook_params

    out = set()
    for notebook, spec in plan.get("analyses", {}).items():
        methods = spec.get("methods", ())
        if methods == "notebook":
            methods = notebook_params(notebook, "cpu").get("methods")
            if not methods:
                raise CriteriaError(f"{RERUN_FILE.name}: analyses.{notebook}.methods is 'notebook', but "
                                    f"notebooks/params/{notebook}.cpu.yaml lists no methods")
        out |= {(split, m) for split in spec.get("splits", [DEFAULT_SPLIT]) for m in methods}
    return out


def seed_runs(plan: Mapping[str, Any], runs: Sequence[PlanRun], *,
              only: Sequence[str] | None = None) -> list[SeedRun]:
    """Every (run, seed) of the plan, seed-major (all methods of seed 0 first: a session that stops early
    leaves complete pairs, not one method on many seeds), the tuned runs an analysis reads after all others
    (:func:`analysed`; their models must be trained in the session that analyses them). ``only`` names
    notebooks of ``plan['analyses']``: then just the runs their analyses read, so one session can train a
    notebook's models and run that notebook."""
    late = analysed(plan)
    items = [SeedRun(r, s) for i, s in enumerate(plan["seeds"]) for r in runs if i < r.seeds]
    if only is not None:
        unknown = sorted(set(only) - set(plan.get("analyses", {})))
        if unknown:
            raise CriteriaError(f"--only: {', '.join(unknown)} is no notebook of {RERUN_FILE.name}'s analyses "
                                f"(allowed: {', '.join(sorted(plan.get('analyses', {})))})")
        wanted = analysed({"analyses": {k: plan["analyses"][k] for k in only}})
        return [i for i in items if i.run.params == "{}" and (i.run.split, i.run.method) in wanted]
    return sorted(items, key=lambda i: i.run.params == "{}" and (i.run.split, i.run.method) in late)


def run_config(plan: Mapping[str, Any], criteria: Any, item: SeedRun, tuned: Mapping[str, Any]) -> Any:
    """The Config of one rerun run: the regime on its split, the method's tuned choice under the run's own
    hyperparameters (``config.*`` keys set Config fields), the seed drawing its own partition
    (``RERUN_PROTOCOL``) and the final metric's evaluation grid (``FINAL_METRIC``: every round, full test
    set)."""
    from lab.evidence.protocol import FINAL_METRIC

    values = json.loads(item.run.params)
    config = {k.removeprefix("config."): v for k, v in values.items() if k.startswith("config.")}
    params = {**tuned, **{k: v for k, v in values.items() if not k.startswith("config.")}}
    return federation(plan, criteria, item.run.split).replace(
        algorithm=item.run.method, algorithm_params=params, seed=item.seed, partition_seed=item.seed,
        eval_every=FINAL_METRIC["eval_every"], eval_subsample=FINAL_METRIC["eval_subsample"], **config)


def recorded(directory: Path) -> dict[tuple[str, str, str, int], str]:
    """The rerun's records in ``directory``: run key → record key (each checked by ``load_record``)."""
    from lab.evidence.records import SUFFIX, record_meta

    out = {}
    for path in sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []:
        key = path.name.removesuffix(SUFFIX)
        meta = record_meta(key, directory)
        if meta.get("rerun") == RERUN_NAME:
            out[(meta["split"], meta["method"], meta["params"], int(meta["seed"]))] = key
    return out


def train(plan: Mapping[str, Any], criteria: Any, *, workers: int = 2, root: Path | None = None,
          claims: Sequence[Mapping[str, Any]] | None = None, seconds: Mapping[str, float] | None = None,
          max_runs: int | None = None, only: Sequence[str] | None = None, out: Any = None,
          design: Path | None = RERUN_FILE, repository: Path | None = None) -> int:
    """Train every run of the plan (``only``: of those notebooks' analyses, :func:`seed_runs`) that has no
    record, ``workers`` at a time, writing each record to ``<root>/records`` (no root: ``records_dir()``) as it
    finishes, so it resumes from what is committed. A tuned method waits until ``<root>/tuning`` (no root:
    :data:`RERUN_DIR`'s) has its file. ``claims`` (default ``figures/claims.yaml``) add their arms; ``seconds``
    (default: the regime's stage-B seconds) cost the ETA. Returns the records written.

    Refused before anything trains unless git in ``repository`` (default this checkout) holds ``design``, the
    file ``plan`` was read from, unchanged (:func:`~lab.study.spec.require_registered`): the rerun is
    pre-registered like every study. ``design=None`` only for a plan made in memory (a test's tiny plan)."""
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.evidence.tuning import DEFAULT_GRIDS
    from lab.evidence.protocol import final_metric, tuned_params
    from lab.study.spec import require_registered
    from lab.study.workers import Progress, session, write_run

    if design is not None:
        require_registered(design, repository)
    out = sys.stdout if out is None else out
    directory, tuning = _records(root), (RERUN_DIR if root is None else Path(root)) / "tuning"
    methods = list(algorithm_names())
    items = seed_runs(plan, the_runs(plan, claims), only=only)
    on_tuning_split = federation(plan, criteria, plan["tuning"]["split"])
    if seconds is None:
        seconds = method_seconds(load_records(records_dir(), criteria), plan["regime"])
    two = {m: algorithm_class(m).grad_evals_per_step >= 2 for m in methods}
    state = {"done": recorded(directory)}

    def choice(method: str) -> dict[str, Any] | None:
        t = tuned_params(method, on_tuning_split, tuning)
        return dict(t.params) if t.tuned or not DEFAULT_GRIDS.get(method) else None

    def todo() -> list[SeedRun]:
        return [i for i in items if i.key not in state["done"] and choice(i.run.method) is not None]

    def write(item: SeedRun, result: dict[str, Any]) -> str:
        meta = {"rerun": RERUN_NAME, "regime": plan["regime"], "split": item.run.split, "method": item.run.method,
                "params": item.run.params, "seed": item.seed, "source": item.run.source}
        res, path, _ = write_run(result, meta, directory)
        state["done"][item.key] = path.name
        return f"{100 * final_metric(res).value:5.2f} % ({result['wall_seconds']:.0f} s)"

    def eta(running: Sequence[SeedRun]) -> float:
        if "fedsam" not in seconds or not any(not two.get(m, True) for m in seconds):
            return math.nan  # nothing measured to cost it from
        left = [i for i in items if i.key not in state["done"]]
        return sum(_cost(i.run.method, seconds, two)[0] for i in left) / max(1, workers)

    def n_done() -> int:  # the plan's (or --only's) runs recorded; the folder also holds others
        return sum(i.key in state["done"] for i in items)

    waiting = sorted({i.run.method for i in items if i.key not in state["done"] and choice(i.run.method) is None})
    written, _, _ = session(
        "rerun", Progress(todo=todo, done_total=lambda: (n_done(), len(items)), eta=eta),
        note=f", waiting for tuning: {', '.join(waiting)}" if waiting else "",
        config_of=lambda i: run_config(plan, criteria, i, choice(i.run.method) or {}),
        key_of=lambda i: i.key, label_of=SeedRun.label, write=write, workers=workers, out=out, max_runs=max_runs)
    return written


def evaluation_seconds(records: Sequence[Any], candidate: str) -> float:
    """Seconds of one test-set evaluation, read from the candidate's stage-B records under the conditions
    their seconds were measured in: per record, the mean wall time of its evaluated rounds minus that of the
    others (a round's wall time includes its evaluation); the median over the records."""
    diffs = []
    for r in records:
        if r.meta["stage"] == "B" and r.meta["candidate"] == candidate and "wall_seconds" in r.metrics:
            evaluated = r.metrics["test_acc"].notna()
            if evaluated.any() and (~evaluated).any():
                diffs.append(float(r.metrics.loc[evaluated, "wall_seconds"].mean()
                                   - r.metrics.loc[~evaluated, "wall_seconds"].mean()))
    return float(sorted(diffs)[len(diffs) // 2]) if diffs else math.nan


def extra_evaluations(plan: Mapping[str, Any], criteria: Any) -> int:
    """Evaluations one rerun run makes beyond stage B's: it evaluates every ``FINAL_METRIC['eval_every']``
    rounds where stage B evaluated every ``eval_every``."""
    from lab.evidence.protocol import FINAL_METRIC

    rounds = criteria.candidates[plan["regime"]].rounds
    return rounds // FINAL_METRIC["eval_every"] - rounds // int(criteria.fixed["eval_every"])


def analysis_seconds(model: str) -> float:
    """Seconds of one model's analyses: :data:`lab.evidence.budget.ANALYSIS_S_PER_MODEL` (stated for the
    cpu profile's ``cnn``) scaled by the measured cost of one sample-gradient of ``model`` over the cnn's
    (:func:`lab.evidence.budget.measure_costs`: the fastest of repetitions, so load does not inflate it) —
    the analyses are Hessian-vector products and forward passes, each a few gradients' worth."""
    from lab.evidence.budget import ANALYSIS_S_PER_MODEL, measure_costs

    ratio = measure_costs(model)["grad_per_sample"] / measure_costs("cnn")["grad_per_sample"]
    return ANALYSIS_S_PER_MODEL * ratio


def load_plan(path: Path | None = None) -> dict[str, Any]:
    """The plan file, checked for the fields :func:`estimate` reads (a :class:`CriteriaError` names one)."""
    path = RERUN_FILE if path is None else Path(path)
    _, raw = read_design(path, "rerun plan")
    for key in ("regime", "seeds", "splits", "workers", "budget_hours", "tuning", "families", "analyses"):
        if key not in raw:
            raise CriteriaError(f"{path}: {key} is missing")
    if len(raw["seeds"]) < 6:
        raise CriteriaError(f"{path}: seeds={raw['seeds']!r}: the paired protocol decides from 6 seeds")
    return raw


def claims_not_run(plan: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of the claims with an arm at a split the plan does not train."""
    return [c["id"] for c in claims if any(a.split not in plan["splits"] for a in claim_arms([c]))]


def markdown(plan: Mapping[str, Any], runs: Sequence[PlanRun], est: Mapping[str, Any], seconds: Mapping[str, float],
             two_gradient: Mapping[str, bool], load: float, not_run: Sequence[str] = ()) -> str:
    """``rerun_plan.md``: the cost table, the per-method seconds and every distinct run."""
    lines = ["# The rerun plan and R5's estimate", "",
             "Generated by `python -m lab regime rerun-plan` from `lab/regime/rerun.yaml` and `figures/claims.yaml`, "
             f"costed from {plan['regime']}'s stage-B seconds (median load at the runs' start {load:.1f} on 2 cores). "
             f"{len(runs)} distinct runs, {est['runs']} with their seeds (a claim's arm: {len(plan['seeds'])}; a "
             f"run no claim judges: {plan.get('descriptive_seeds', len(plan['seeds']))}), {plan['workers']} workers.",
             "", "| part | runs | hours (one worker) |", "|---|---|---|"]
    for key, s in est["parts"].items():
        lines.append(f"| {key} | {est['count'][key]} | {s / 3600:.2f} |")
    verdict = "fits" if est["fits"] else "does not fit"
    if not_run:
        lines += ["", "Claims not run (their split is not one of the plan's: "
                  f"{', '.join(plan['splits'])}; they print 'not run at cpu scale'): " + ", ".join(not_run) + "."]
    lines += ["", f"**Estimate: {est['hours']:.2f} h on {plan['workers']} workers against {est['budget_hours']:g} h: "
              f"R5 {'met' if est['fits'] else 'not met'} (the plan {verdict}).**", "",
              "Seconds per run (stage B, mean over its seeds): "
              + ", ".join(f"{m} {s:.0f}" for m, s in sorted(seconds.items())) + ".", "",
              "| split | method | hyperparameters | seeds | seconds | cost from | first needed by |",
              "|---|---|---|---|---|---|---|"]
    for r in runs:
        s, how = _cost(r.method, seconds, two_gradient)
        lines.append(f"| {r.split} | {r.method} | {r.params if r.params != '{}' else 'tuned'} | {r.seeds} | {s:.0f} | "
                     f"{how} | {r.source} |")
    return "\n".join(lines) + "\n"


def measured(plan: Mapping[str, Any], runs: Sequence[PlanRun], directory: Path | None = None,
             tuning_dir: Path | None = None) -> dict[str, dict[str, float]]:
    """What the plan's parts took, from the committed records: per part (as :func:`estimate` names them) the
    records found and their seconds of one worker (``meta.wall_seconds`` of each rerun record, counted once
    where two spellings of a run share its key; for tuning, the summed round times of every grid point's record
    in ``<tuning_dir>/<split>/*.csv``). The analyses run inside the notebooks and leave no record: not measured."""
    import csv

    from lab.evidence.records import load_record, record_meta

    directory = _records(None) if directory is None else Path(directory)
    tuning_dir = RERUN_DIR / "tuning" if tuning_dir is None else Path(tuning_dir)
    done, seen = recorded(directory), set()
    out: dict[str, dict[str, float]] = {}
    for item in seed_runs(plan, runs):
        key = done.get(item.key)
        part = out.setdefault(_part(item.run), {"records": 0, "seconds": 0.0, "planned": 0})
        part["planned"] += 1
        if key is None or key in seen:
            continue
        seen.add(key)
        part["records"] += 1
        part["seconds"] += float(record_meta(key, directory)["wall_seconds"])
    tuned = out.setdefault("tuning", {"records": 0, "seconds": 0.0, "planned": 0})
    for table in sorted((tuning_dir / plan["tuning"]["split"]).glob("*.csv")):
        with open(table, newline="") as fh:
            keys = [row["run"] for row in csv.DictReader(fh)]
        for key in keys:
            result = load_record(key, directory)
            if result is not None and key not in seen:
                seen.add(key)
                tuned["records"] += 1
                tuned["seconds"] += float(result.metrics["wall_seconds"].sum())
    return out


def measured_markdown(plan: Mapping[str, Any], est: Mapping[str, Any], got: Mapping[str, Mapping[str, float]]) -> str:
    """``rerun_measured.md``: the estimate of ``rerun_plan.md`` beside what the committed records measured."""
    runs = [k for k in est["parts"] if k in got and k != "tuning"]
    extra = "evaluations beyond stage B's"
    lines = ["# The rerun: estimate against measurement", "",
             "Generated by `python -m lab regime rerun-measured` from the committed records. The estimate is "
             "`rerun_plan.md`'s, made before the rerun ran (from the regime's stage-B seconds). Measured: each rerun "
             "record's wall time as it trained (2 cores, two runs at a time, so each under a load of about 2); tuning "
             "from its grid points' round times. Two spellings of one run share a record and count once, so a part "
             "can hold fewer records than its planned runs. A run's measured time includes its evaluations, so the "
             "runs are compared with their estimate plus the evaluations beyond stage B's. The analyses run inside "
             "the notebooks and leave no record.", "",
             "| part | planned runs | records | estimated hours (one worker) | measured hours (one worker) |",
             "|---|---|---|---|---|"]
    for key in runs + ["tuning"]:
        g = got[key]
        lines.append(f"| {key} | {est['count'][key]} | {int(g['records'])} | {est['parts'][key] / 3600:.2f} | "
                     f"{g['seconds'] / 3600:.2f} |")
    lines.append(f"| {extra} | {est['count'][extra]} | – | {est['parts'][extra] / 3600:.2f} | in the runs' |")
    run_est = (sum(est["parts"][k] for k in runs) + est["parts"][extra]) / 3600
    run_got = sum(got[k]["seconds"] for k in runs) / 3600
    tune_est, tune_got = est["parts"]["tuning"] / 3600, got["tuning"]["seconds"] / 3600
    w = plan["workers"]
    lines += ["", f"**Runs with their evaluations: estimated {run_est:.2f} h, measured {run_got:.2f} h "
              f"({100 * (run_got / run_est - 1):+.0f} %). Tuning: estimated {tune_est:.2f} h, measured {tune_got:.2f} h "
              f"({100 * (tune_got / tune_est - 1):+.0f} %). Together, on {w} workers: estimated "
              f"{(run_est + tune_est) / w:.2f} h, measured {(run_got + tune_got) / w:.2f} h** (one-worker hours / {w}; "
              "the sessions' wall clock adds the notebooks' analyses and the pauses between sessions)."]
    return "\n".join(lines) + "\n"


MEASURED_FILE = FIGURES_DIR / "regime" / "rerun_measured.md"


def measured_text(plan: Mapping[str, Any]) -> str:
    """:data:`MEASURED_FILE`'s text: the plan's estimate (stage-B seconds) beside the committed records."""
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.evidence.tuning import DEFAULT_GRIDS

    criteria = load_criteria()
    records = load_records(records_dir(), criteria)
    two = {m: algorithm_class(m).grad_evals_per_step >= 2 for m in algorithm_names()}
    runs = the_runs(plan)
    est = estimate(plan, runs, method_seconds(records, plan["regime"]), two, DEFAULT_GRIDS, 0.0,
                   extra_evaluations(plan, criteria) * evaluation_seconds(records, plan["regime"]))
    return measured_markdown(plan, est, measured(plan, runs))


def main_measured(args: Any) -> int:
    """``python -m lab regime rerun-measured``: writes :data:`MEASURED_FILE`."""
    out = MEASURED_FILE
    out.write_text(measured_text(load_plan(getattr(args, "plan", None))))
    print(out.read_text().splitlines()[-1])
    print(f"wrote {out}")
    return 0


def check_outcome(plan: Mapping[str, Any], sidecar: Path | None = None) -> None:
    """Refuse to start the rerun unless stage B's committed outcome (``figures/regime/stage_b.json``, written
    by ``python -m lab regime decide``) names the plan's regime."""
    sidecar = FIGURES_DIR / "regime" / "stage_b.json" if sidecar is None else Path(sidecar)
    try:
        params = json.loads(sidecar.read_text())["parameters"]
    except (OSError, ValueError, KeyError) as err:
        raise CriteriaError(f"{sidecar}: no stage-B outcome to check the plan against ({type(err).__name__}); run "
                            "`python -m lab regime decide` first") from None
    if params.get("outcome") not in ("regime", "if_none") or params.get("regime") != plan["regime"]:
        raise CriteriaError(f"{RERUN_FILE.name}: regime {plan['regime']!r}, but stage B's outcome is "
                            f"{params.get('outcome')!r} naming {params.get('regime')!r} ({sidecar.name}); the rerun "
                            "runs in the regime the outcome names")


def main_tune(args: Any) -> int:
    """``python -m lab regime rerun-tune [--methods a,b]``."""
    plan = load_plan(getattr(args, "plan", None))
    check_outcome(plan)
    methods = args.methods.split(",") if getattr(args, "methods", None) else None
    for path in tune(plan, load_criteria(), methods=methods, client_threads=args.client_threads):
        print(f"tuned: {path}")
    return 0


def main_train(args: Any) -> int:
    """``python -m lab regime rerun-train [--workers N] [--max-runs N] [--only NB,NB]``."""
    plan = load_plan(getattr(args, "plan", None))
    check_outcome(plan)
    only = getattr(args, "only", None)
    train(plan, load_criteria(), workers=args.workers, max_runs=args.max_runs, design=args.plan or RERUN_FILE,
          only=None if only is None else [n.strip() for n in only.split(",") if n.strip()])
    return 0


def main(args: Any) -> int:
    """``python -m lab regime rerun-plan``."""
    from fedlab.algorithms import algorithm_class, algorithm_names
    from fedlab.evidence.tuning import DEFAULT_GRIDS
    plan = load_plan(getattr(args, "plan", None))
    criteria = load_criteria()
    if plan["regime"] not in criteria.candidates:
        raise CriteriaError(f"{RERUN_FILE.name}: regime {plan['regime']!r} is no candidate of {criteria.path.name}")
    records = load_records(records_dir(), criteria)
    seconds = method_seconds(records, plan["regime"])
    methods = list(algorithm_names())
    two = {m: algorithm_class(m).grad_evals_per_step >= 2 for m in methods}
    runs = the_runs(plan)
    one_eval = evaluation_seconds(records, plan["regime"])
    per_model = analysis_seconds(criteria.candidates[plan["regime"]].model)
    est = estimate(plan, runs, seconds, two, DEFAULT_GRIDS, per_model, extra_evaluations(plan, criteria) * one_eval)
    loads = sorted(float(r.meta.get("load_at_start", math.nan)) for r in records
                   if r.meta["stage"] == "B" and r.meta["candidate"] == plan["regime"])
    load = loads[len(loads) // 2] if loads else math.nan
    out = FIGURES_DIR / "regime" / "rerun_plan.md"
    text = markdown(plan, runs, est, seconds, two, load, claims_not_run(plan, the_claims()))
    out.write_text(text.replace("Seconds per run (stage B", f"One test-set evaluation: {one_eval:.3f} s (from the "
                                f"stage-B records' round times); the rerun makes {extra_evaluations(plan, criteria)} "
                                f"more per run than stage B. One model's analyses: {per_model:.1f} s (scaled from the "
                                f"cnn's by the measured gradient cost). Seconds per run (stage B", 1))
    for key, s in est["parts"].items():
        print(f"{key:32s} {est['count'][key]:5d} runs {s / 3600:6.2f} h (one worker)")
    print(f"estimate {est['hours']:.2f} h on {plan['workers']} workers (budget {est['budget_hours']:g} h): "
          f"{'fits' if est['fits'] else 'does NOT fit'}; wrote {out}")
    return 0 if est["fits"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(None))
