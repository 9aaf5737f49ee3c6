"""How long the cpu profile takes: a dry run of ``make figures`` that trains nothing.

``python -m lab figures --dry-run`` prints, per notebook, the federated runs its cpu profile
trains, and an estimate of the CPU time:

    time ≈ Σ_runs  T · (m · K · B · g · t_grad  +  n_eval · t_fwd / eval_every)  /  (cores · efficiency)

with m = round(p·N) clients per round, K local steps of B samples, g the gradient evaluations per
local step of the run's method (the algorithm registry: 2 for the SAM family, 1 otherwise), and
``t_grad`` / ``t_fwd`` the per-sample costs of one gradient / one forward pass of the model,
**measured here** in a short micro-benchmark at one thread (the fastest of several repetitions, so
that other jobs on a shared machine do not inflate it: the estimate is for quiet cores).

The runs come from :data:`PLAN`: per notebook, its families of runs (methods × variants × splits ×
seeds), with T, K, N, p, B and the evaluation read from the notebook's cpu parameters
(``notebooks/params/NN_*.cpu.yaml``). A run is identified by (method, variant, split, seed, T, K):
families that the notebooks share — notebooks 04–09 train on notebook 10's Dirichlet-0.1
federation with the tuned hyperparameters — are counted once, by the first notebook in run order
(10 first), *because* their parameters agree; if a yaml drifts from notebook 10's federation, its
runs stop being shared and the estimate shows it. Runs already committed as records
(``figures/records/``, matched on method, split, seed, T and K) are subtracted, and so is every
tuning already committed (``figures/tuning/<split>/<method>.json``). Tuning adds one run per point
of each method's declared grid (:data:`fedlab.tuning.DEFAULT_GRIDS`) per split, at
:data:`lab.evidence.protocol.TUNING`'s horizon. Analysis-only work (Hessians, landscapes) is not in
the formula: each family that analyses θ adds :data:`ANALYSIS_S_PER_MODEL` per model.
"""
from __future__ import annotations

import gzip
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path
from typing import Any

import torch

from lab.evidence.protocol import notebook_params
from lab.repro import FIGURES_DIR
from lab.style import METHOD_ORDER

ANALYSIS_S_PER_MODEL = 15.0
"""Seconds of analysis per analysed model (a top eigenvalue, a trace, a slice on the cpu sizes)."""
PARALLEL_EFFICIENCY = 0.9
"""Speed-up per extra core with ``client_threads`` (one client per thread; assumed, not measured)."""
RUN_ORDER = ("10_benchmarks", "00_quickstart", "02_flatness_incompatibility", "03_friendly_adversary",
             "04_sam_baselines", "05_fedsmoo", "06_fedswa_fedmoswa", "07_fednsam", "08_fedvssam",
             "09_sharpness_and_landscapes", "01_heterogeneity", "01b_foundations", "09b_global_perturbation")
"""The order ``make figures`` runs the notebooks in: 10 first, its runs are the ones the others share."""
ALL_METHODS = METHOD_ORDER
"""Every registered method, in the plots' order: what notebook 10 trains when no list is given."""
BENCH_SPLITS = ("dirichlet-0.5", "dirichlet-0.1", "pathological-3")


@dataclass(frozen=True)
class Family:
    """Runs of one kind in a notebook: ``methods`` × ``variants`` × ``splits`` × the notebook's seeds."""

    label: str
    methods: tuple[str, ...]
    variants: tuple[str, ...] = ("tuned",)  # hyperparameter points per method; "tuned" = the committed choice
    splits: tuple[str, ...] = ("dirichlet-0.1",)
    analysed: bool = False  # θ analysed after training (Hessians, slices)


PLAN: dict[str, list[Family]] = {
    "10_benchmarks": [Family("every method on three splits", ALL_METHODS, splits=BENCH_SPLITS)],
    "02_flatness_incompatibility": [
        Family("λ_max against α", ("fedavg", "fedsam"),
               splits=("dirichlet-0.1", "dirichlet-0.5", "dirichlet-1"), analysed=True)],
    "03_friendly_adversary": [Family("FedAvg for the decomposition", ("fedavg",), analysed=True)],
    "04_sam_baselines": [Family("SAM baselines", ("fedavg", "scaffold", "feddyn", "fedsam", "mofedsam", "fedgamma",
                                                  "fedspeed", "fedlesam"))],
    "05_fedsmoo": [Family("FedSMOO and neighbours", ("fedavg", "fedsam", "feddyn", "fedspeed", "fedsmoo",
                                                     "fedsmoo_adaptive"))],
    "06_fedswa_fedmoswa": [
        Family("FedSWA, FedMoSWA and baselines", ("fedavg", "fedsam", "scaffold", "fedswa", "fedmoswa")),
        Family("FedSWA ρ × α ablation", ("fedswa",),
               variants=tuple(f"rho={r},alpha={a}" for r in (0.1, 0.5, 1.0) for a in (1.0, 1.5)))],
    "07_fednsam": [Family("FedSAM and FedNSAM", ("fedavg", "fedsam", "fednsam")),
                   Family("FedNSAM variants", ("fednsam",), variants=("paper", "official_repo"))],
    "08_fedvssam": [Family("FedAvg and full FedVSSAM", ("fedavg", "fedvssam")),
                    Family("FedVSSAM ablations (the full method is the tuned run)", ("fedvssam",),
                           variants=("base", "GU only", "LU+GU", "LF+LU")),
                    Family("γ_l sweep (γ_l = 1 and the tuned γ_l are other runs)", ("fedvssam",),
                           variants=("gamma_l=0.1", "gamma_l=0.4", "gamma_l=0.7"))],
    "09_sharpness_and_landscapes": [Family("every method, curvature", ALL_METHODS, analysed=True)],
}
"""The cpu profile's runs, per notebook (what the notebooks train; see the module docstring)."""


@dataclass
class NotebookEstimate:
    notebook: str
    runs: int  # distinct federated runs this notebook adds (shared ones counted by the first notebook)
    committed: int  # of those, already in figures/records
    shared: int  # runs it uses that an earlier notebook trains
    rounds: int
    local_steps: int
    seconds: float

    def line(self) -> str:
        return (f"{self.notebook:30s} {self.runs:4d} runs ({self.committed:3d} committed, {self.shared:3d} shared)  "
                f"T={self.rounds:<3d} K={self.local_steps:<3d} {self.seconds / 60:7.1f} min")


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


def _grads(method: str) -> int:
    from fedlab.algorithms import algorithm_class

    return algorithm_class(method).grad_evals_per_step


def _round_seconds(p: Mapping[str, Any], costs: Mapping[str, float], grads: float, n_eval: int) -> float:
    m = max(1, round(float(p.get("participation", 0.1)) * int(p.get("n_clients", 100))))
    k, b = int(p.get("local_steps", 10)), int(p.get("batch_size", 32))
    per_round = m * k * b * grads * costs["grad_per_sample"]
    return per_round + n_eval * costs["forward_per_sample"] / int(p.get("eval_every", 1))


def committed_runs(records: Path) -> dict[tuple[str, str, int, int, int], int]:
    """Committed test-set runs by (method, split, seed, T, K): how many records of each."""
    from lab.evidence.protocol import split_key

    out: dict[tuple[str, str, int, int, int], int] = {}
    for path in sorted(records.glob("*.json.gz")):
        try:
            cfg = json.loads(gzip.decompress(path.read_bytes()))["config"]["config"]
        except (OSError, EOFError, json.JSONDecodeError, KeyError):
            continue  # lab.evidence.records reports a bad record when it is loaded
        if cfg.get("validation_size"):
            continue  # a tuning run
        key = (str(cfg["algorithm"]), split_key(SimpleNamespace(**cfg)), int(cfg["seed"]), int(cfg["rounds"]),
               int(cfg.get("local_steps") or 0))
        out[key] = out.get(key, 0) + 1
    return out


def estimate(seeds: int = 3, cores: int = 2, figures_dir: Path | None = None,
             costs: dict[str, dict[str, float]] | None = None, plan: Mapping[str, list[Family]] | None = None,
             tune: bool = True) -> dict[str, Any]:
    """The dry-run estimate: a :class:`NotebookEstimate` per notebook of ``plan``, tuning, and the total."""
    from lab.evidence.protocol import TUNING, profile_splits
    from fedlab.tuning import DEFAULT_GRIDS

    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    plan = PLAN if plan is None else plan
    speed = cores * PARALLEL_EFFICIENCY if cores > 1 else 1.0
    costs = dict(costs or {})
    have = committed_runs(figures_dir / "records")
    seen: set[tuple[str, str, str, int, int, int]] = set()
    rows = []
    for nb in [n for n in RUN_ORDER if n in plan] + [n for n in plan if n not in RUN_ORDER]:
        p = notebook_params(nb)
        model = (p.get("models") or [p.get("model", "cnn")])[0]
        if model not in costs:
            costs[model] = measure_costs(model)
        T, K = int(p["rounds"]), int(p.get("local_steps", 10))
        n_seeds = max(seeds, int(p.get("n_seeds", 1)))
        n_eval = int(p.get("eval_subsample") or 10000)
        new = committed = shared = 0
        sec = 0.0
        left = dict(have)
        for fam in plan[nb]:
            for method in fam.methods:
                for variant in fam.variants:
                    for split in fam.splits:
                        for seed in range(n_seeds):
                            ident = (method, variant, split, seed, T, K)
                            if fam.analysed:
                                sec += ANALYSIS_S_PER_MODEL
                            if ident in seen:
                                shared += 1
                                continue
                            seen.add(ident)
                            new += 1
                            key = (method, split, seed, T, K)
                            if left.get(key, 0) > 0:
                                left[key] -= 1
                                committed += 1
                                continue
                            sec += T * _round_seconds(p, costs[model], _grads(method), n_eval) / speed
        rows.append(NotebookEstimate(nb, new, committed, shared, T, K, sec))
    # tuning: every declared grid with more than one point, on each split, at the tuning horizon
    t_runs, t_done, t_sec = 0, 0, 0.0
    if tune:
        p10 = {**notebook_params("10_benchmarks"), "eval_every": TUNING["eval_every"]}
        model = str((p10.get("models") or ["cnn"])[0])
        costs.setdefault(model, measure_costs(model))
        n_eval = min(int(p10.get("eval_subsample") or TUNING["validation_size"]), TUNING["validation_size"])
        for split in profile_splits("cpu"):
            for method, grid in DEFAULT_GRIDS.items():
                points = math.prod(len(v) for v in grid.values()) if grid else 1
                if points < 2:
                    continue
                t_runs += points
                if (figures_dir / "tuning" / split / f"{method}.json").exists():
                    t_done += points
                    continue
                t_sec += points * TUNING["rounds"] * _round_seconds(p10, costs[model], _grads(method), n_eval) / speed
    total = sum(r.seconds for r in rows) + t_sec
    return {"notebooks": rows, "tuning": {"runs": t_runs, "committed": t_done, "rounds": TUNING["rounds"],
                                          "seconds": t_sec},
            "total_seconds": total, "seeds": seeds, "cores": cores, "costs": costs}


def print_estimate(est: dict[str, Any], budget_hours: float = 4.0) -> bool:
    """Print the estimate; True if it fits ``budget_hours``."""
    t = est["tuning"]
    print(f"{'tuning (every grid × split)':30s} {t['runs']:4d} runs ({t['committed']:3d} committed)"
          f"               T={t['rounds']:<3d}       {t['seconds'] / 60:7.1f} min")
    for r in est["notebooks"]:
        print(r.line())
    for k, c in est["costs"].items():
        print(f"cost {k}: {1e3 * c['grad_per_sample']:.3f} ms per sample-gradient, "
              f"{1e3 * c['forward_per_sample']:.3f} ms per sample-forward (1 thread)")
    hours = est["total_seconds"] / 3600
    fits = hours <= budget_hours
    print(f"total still to run: {hours:.2f} h on {est['cores']} cores at {est['seeds']} seeds "
          f"({'fits' if fits else 'exceeds'} the {budget_hours:g} h budget)")
    return fits
