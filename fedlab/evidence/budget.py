"""How long the cpu profile takes: a dry run of ``make figures`` that trains nothing.

``python -m fedlab figures --dry-run`` prints, per notebook, the federated runs its committed figures
rest on, the rounds and local steps its cpu parameters ask for, and an estimate of the CPU time:

    time ≈ Σ_runs  T · (m · K · g · t_grad  +  n_eval · t_fwd / eval_every)  /  (cores · efficiency)

with m = round(p·N) clients per round, K local steps, g the mean gradient evaluations per local step
of the methods (2 for the SAM family, 1 otherwise; the algorithm registry), ``t_grad`` / ``t_fwd`` the
per-sample costs of one gradient / one forward pass of the notebook's model, **measured here** in a
short micro-benchmark at one thread (the fastest of several repetitions, so that other jobs on a
shared machine do not inflate it; the estimate is therefore for quiet cores), and n_eval the evaluated samples. Runs are counted from the
figures' sidecars (``config_hashes``), scaled from the seeds they used to ``seeds`` (default 3), and
runs already committed as records (``figures/records/``) are subtracted. Tuning adds, per split, one
run per point of each method's declared grid (:data:`fedlab.evidence.tuning.DEFAULT_GRIDS`) at the tuning
horizon. Analysis-only work (Hessians, landscapes, toy problems) is not in the formula; the
estimate adds :data:`ANALYSIS_ALLOWANCE_S` per notebook that trains for it.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedlab.tools.repro import FIGURES_DIR, REPO_ROOT

ANALYSIS_ALLOWANCE_S = 120.0
"""Seconds per training notebook for its analysis cells (eigenvalues, slices, decompositions)."""
PARALLEL_EFFICIENCY = 0.9
"""Speed-up per extra core with ``client_threads`` (one client per thread; assumed, not measured)."""


@dataclass
class NotebookEstimate:
    notebook: str
    runs: int  # federated runs at the target seed count
    committed: int  # of those, already in figures/records
    rounds: int
    local_steps: int
    seconds: float

    def line(self) -> str:
        return (f"{self.notebook:32s} {self.runs:4d} runs ({self.committed:3d} committed)  T={self.rounds:<4d} "
                f"K={self.local_steps:<3d} {self.seconds / 60:7.1f} min")


def measure_costs(model: str = "cnn", as_cifar_shape: bool = False, batch: int = 32, reps: int = 10) -> dict[str, float]:
    """Seconds per sample of one gradient and of one forward pass (1 thread, Fashion-MNIST-shaped input)."""
    from fedlab.models import FlatModel, build_model

    shape = (3, 32, 32) if as_cifar_shape else (1, 28, 28)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fm = FlatModel(build_model(model, shape, 10, seed=0))
        theta = fm.theta0()
        gen = torch.Generator().manual_seed(0)
        x = torch.randn((batch, *shape), generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        fm.autograd_grad_fn(theta, (x, y))  # warm-up
        # the minimum over repetitions: on a shared machine the mean measures the other jobs too
        t_grad = min(_timed(lambda: fm.autograd_grad_fn(theta, (x, y))) for _ in range(reps)) / batch
        xe = torch.randn((256, *shape), generator=gen)
        with torch.no_grad():
            fm.forward(theta, xe)
            t_fwd = min(_timed(lambda: fm.forward(theta, xe)) for _ in range(max(2, reps // 2))) / 256
    finally:
        torch.set_num_threads(threads)
    return {"grad_per_sample": t_grad, "forward_per_sample": t_fwd}


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _params(nb: str) -> dict[str, Any]:
    import yaml

    path = REPO_ROOT / "notebooks" / "params" / f"{nb}.cpu.yaml"
    return yaml.safe_load(path.read_text()) or {}


def _figure_runs(nb: str, figures_dir: Path) -> tuple[set[str], int]:
    """The config hashes behind a notebook's committed figures, and the seeds they used."""
    hashes: set[str] = set()
    seeds = 1
    for sidecar in sorted(figures_dir.glob(f"{nb[:2]}_*.json")):
        meta = json.loads(sidecar.read_text())
        if Path(meta.get("notebook", "")).stem != nb:
            continue
        hashes |= set(meta.get("config_hashes") or [])
        seeds = max(seeds, len((meta.get("parameters") or {}).get("seeds") or [0]))
    return hashes, seeds


def _committed(hashes: set[str], records: Path) -> int:
    have = {p.name.removesuffix(".json.gz").rsplit("-", 1)[-1] for p in records.glob("*.json.gz")}
    return len(hashes & have)


def _mean_grads(methods: list[str] | None) -> float:
    from fedlab.algorithms import algorithm_class, algorithm_names

    names = methods or list(algorithm_names())
    return sum(algorithm_class(n).grad_evals_per_step for n in names) / len(names)


def _round_seconds(p: dict[str, Any], costs: dict[str, float], grads: float, n_eval: int) -> float:
    m = max(1, round(float(p.get("participation", 0.1)) * int(p.get("n_clients", 100))))
    k, b = int(p.get("local_steps", 10)), int(p.get("batch_size", 32))
    per_round = m * k * b * grads * costs["grad_per_sample"]
    return per_round + n_eval * costs["forward_per_sample"] / int(p.get("eval_every", 1))


def estimate(seeds: int = 3, cores: int = 2, tune_rounds: int | None = None, tune_splits: int = 3,
             figures_dir: Path | None = None, costs: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The dry-run estimate: a :class:`NotebookEstimate` per training notebook, tuning, and the total."""
    from fedlab.evidence.tuning import DEFAULT_GRIDS

    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    records = figures_dir / "records"
    speed = cores * PARALLEL_EFFICIENCY if cores > 1 else 1.0
    costs = dict(costs or {})
    rows = []
    seen: set[str] = set()  # runs shared between notebooks (04/05/06) are trained once, by the first
    for params_file in sorted((REPO_ROOT / "notebooks" / "params").glob("*.cpu.yaml")):
        nb = params_file.name.removesuffix(".cpu.yaml")
        hashes, used_seeds = _figure_runs(nb, figures_dir)
        hashes -= seen
        seen |= hashes
        if not hashes:
            continue
        p = _params(nb)
        model = (p.get("models") or [p.get("model", "cnn")])[0]
        key = f"{model}{'-cifar' if p.get('as_cifar_shape') else ''}"
        if key not in costs:
            costs[key] = measure_costs(model, bool(p.get("as_cifar_shape")))
        runs = math.ceil(len(hashes) * max(seeds, used_seeds) / used_seeds)
        committed = _committed(hashes, records)
        n_eval = int(p.get("eval_subsample") or 10000)
        sec = _round_seconds(p, costs[key], _mean_grads(p.get("methods")), n_eval)
        total = (runs - committed) * int(p["rounds"]) * sec / speed + ANALYSIS_ALLOWANCE_S
        rows.append(NotebookEstimate(nb, runs, committed, int(p["rounds"]), int(p.get("local_steps", 10)), total))
    # tuning: every method's grid on each split, one seed, at notebook 10's horizon unless given
    p10 = _params("10_benchmarks")
    t_rounds = tune_rounds or int(p10.get("rounds", 30))
    points = sum(max(1, math.prod(len(v) for v in g.values())) for g in DEFAULT_GRIDS.values())
    key = str((p10.get("models") or ["cnn"])[0])
    costs.setdefault(key, measure_costs(key))
    tune_sec = tune_splits * points * t_rounds * _round_seconds(p10, costs[key], _mean_grads(None), 5000) / speed
    total = sum(r.seconds for r in rows) + tune_sec
    return {"notebooks": rows, "tuning": {"runs": tune_splits * points, "rounds": t_rounds, "seconds": tune_sec},
            "total_seconds": total, "seeds": seeds, "cores": cores, "costs": costs}


def print_estimate(est: dict[str, Any], budget_hours: float = 4.0) -> bool:
    """Print the estimate; True if it fits ``budget_hours``."""
    for r in est["notebooks"]:
        print(r.line())
    t = est["tuning"]
    print(f"{'tuning (all methods × splits)':32s} {t['runs']:4d} runs                   T={t['rounds']:<4d}"
          f"       {t['seconds'] / 60:7.1f} min")
    for k, c in est["costs"].items():
        print(f"cost {k}: {1e3 * c['grad_per_sample']:.3f} ms per sample-gradient, "
              f"{1e3 * c['forward_per_sample']:.3f} ms per sample-forward (1 thread)")
    hours = est["total_seconds"] / 3600
    fits = hours <= budget_hours
    print(f"total: {hours:.2f} h on {est['cores']} cores at {est['seeds']} seeds "
          f"({'fits' if fits else 'exceeds'} the {budget_hours:g} h budget)")
    return fits
