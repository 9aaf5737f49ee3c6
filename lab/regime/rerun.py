"""The rerun trained: its tuning and its runs at every seed, resumably from committed records, and what they took.

The plan and its estimate are :mod:`lab.regime.rerun_plan`'s (``python -m lab regime rerun-plan``, :func:`main`);
this module runs it: ``rerun-tune`` (:func:`tune`) and ``rerun-train`` (:func:`train`), each refused unless stage B's
committed outcome names the plan's regime (:func:`check_outcome`), and ``rerun-measured`` sets the estimate beside
what the committed records took (:func:`measured`). The plan's names are importable from here too.
"""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.regime.criteria import CriteriaError, load_criteria
from lab.regime.pilot_records import load_records, records_dir
from lab.regime.rerun_plan import (CLAIMS_FILE, DEFAULT_SPLIT, RERUN_FILE, PlanRun, analysis_seconds, claim_arms,
                                   claims_not_run, estimate, evaluation_seconds, extra_evaluations, is_tuned_run,
                                   load_plan, markdown, method_cost, method_seconds, plan_part, plan_runs, split_key,
                                   the_claims, the_runs)
from lab.repro import FIGURES_DIR

__all__ = ["CLAIMS_FILE", "DEFAULT_SPLIT", "MEASURED_FILE", "RERUN_DIR", "RERUN_FILE", "PlanRun", "SeedRun", "analysed",
           "check_outcome", "claim_arms", "claims_not_run", "estimate", "evaluation_seconds", "extra_evaluations",
           "federation", "is_tuned_run", "load_plan", "main", "main_measured", "main_train", "main_tune", "measured",
           "measured_text", "method_seconds", "plan_runs", "recorded", "run_config", "seed_runs", "split_key",
           "the_claims", "the_runs", "train", "tune", "tuning_protocol"]

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
    from fedlab.tuning import DEFAULT_GRIDS
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
        return sum(method_cost(i.run.method, seconds, two)[0] for i in left) / max(1, workers)

    def n_done() -> int:  # the plan's (or --only's) runs recorded; the folder also holds others
        return sum(i.key in state["done"] for i in items)

    waiting = sorted({i.run.method for i in items if i.key not in state["done"] and choice(i.run.method) is None})
    written, _, _ = session(
        "rerun", Progress(todo=todo, done_total=lambda: (n_done(), len(items)), eta=eta),
        note=f", waiting for tuning: {', '.join(waiting)}" if waiting else "",
        config_of=lambda i: run_config(plan, criteria, i, choice(i.run.method) or {}),
        key_of=lambda i: i.key, label_of=SeedRun.label, write=write, workers=workers, out=out, max_runs=max_runs)
    return written


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
        part = out.setdefault(plan_part(item.run), {"records": 0, "seconds": 0.0, "planned": 0})
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
    from fedlab.tuning import DEFAULT_GRIDS

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
    from fedlab.tuning import DEFAULT_GRIDS
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
