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

``python -m lab regime rerun-plan`` (:func:`lab.regime.rerun.main`) prints the table and writes
``figures/regime/rerun_plan.md``; it exits 1 when the estimate is over the plan's budget.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.evidence.protocol import RERUN_PLAN as RERUN_FILE  # the plan; the protocol reads its tuning split
from lab.regime.criteria import REGISTERED_LATER, CriteriaError
from lab.repro import FIGURES_DIR
from lab.study.spec import read_design

__all__ = ["CLAIMS_FILE", "DEFAULT_SPLIT", "RERUN_FILE", "PlanRun", "analysis_seconds", "claim_arms", "claims_not_run",
           "estimate", "evaluation_seconds", "extra_evaluations", "is_tuned_run", "load_plan", "markdown",
           "method_cost", "method_seconds", "plan_part", "plan_runs", "split_key", "the_claims", "the_runs"]

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
    """Every arm of every claim that names a method, at the split its claim is judged on (not a study's claims, not
    a claim declared out of scope, not an arm of a method fedlab does not implement, nor of one registered after the
    plan, :data:`~lab.regime.criteria.REGISTERED_LATER`: training those takes an amendment, not a new claim)."""
    out = []
    # a study's claims (failure_map/…) plan their own runs
    for claim in (c for c in claims if "/" not in str(c.get("setting", {}).get("figure", ""))
                  and not c.get("not_testable")):
        split = split_key(claim.get("setting", {}).get("select"))
        for side in ("left", "right"):
            arms = claim.get(side)
            for arm in arms if isinstance(arms, list) else [arms]:
                if isinstance(arm, Mapping) and arm.get("algorithm") and not arm.get("planned") \
                        and arm["algorithm"] not in REGISTERED_LATER:
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
    from fedlab.tuning import DEFAULT_GRIDS

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


def method_cost(method: str, seconds: Mapping[str, float], two_gradient: Mapping[str, bool]) -> tuple[float, str]:
    """Seconds of one run of ``method`` and where the number comes from."""
    if method in seconds:
        return seconds[method], "measured"
    if two_gradient[method]:
        return seconds["fedsam"], "as FedSAM (two gradients per step)"
    first = [seconds[m] for m in seconds if not two_gradient.get(m, True)]
    return sum(first) / len(first), "as the first-order methods"


def plan_part(run: PlanRun) -> str:
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
        key = plan_part(run)
        parts[key] = parts.get(key, 0.0) + run.seeds * method_cost(run.method, seconds, two_gradient)[0]
        count[key] = count.get(key, 0) + run.seeds
    tuning = plan["tuning"]
    points = {m: math.prod(len(v) for v in g.values()) for m, g in grids.items() if g}
    planned = {r.method for r in runs}
    tuned = {m: p for m, p in points.items() if p > 1 and m in planned}
    parts["tuning"] = sum((1 + tuning["edge_allowance"]) * tuning["rounds_fraction"] * tuning["seeds"] * p
                          * method_cost(m, seconds, two_gradient)[0] for m, p in tuned.items())
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
        s, how = method_cost(r.method, seconds, two_gradient)
        lines.append(f"| {r.split} | {r.method} | {r.params if r.params != '{}' else 'tuned'} | {r.seeds} | {s:.0f} | "
                     f"{how} | {r.source} |")
    return "\n".join(lines) + "\n"
