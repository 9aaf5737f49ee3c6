"""Sharpness over training (notebook 09): the global model's top Hessian eigenvalue (and trace) every N
rounds, measured with the library's curvature tools (:mod:`fedlab.analysis`).

:func:`track_sharpness` drives an ordinary run in segments (``Simulation.run(stop_after_rounds=...)``,
which checkpoints and resumes bit-identically on CPU), measures ``RunResult.theta`` after each, and
writes ``<run_dir>/sharpness.csv`` atomically after every measurement, rows keyed by a digest of the
measurement settings (reused when called again; an interrupted tracking resumes). Rounds a finished
run already passed are replayed in a temporary directory (the same trajectory on CPU). The objective
is F = (1/N) Σ_i F_i on one fixed sample for every round."""
from __future__ import annotations

import hashlib
import io
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from torch import Tensor

from fedlab.analysis.federation import EmpiricalLoss, client_data, global_loss_fn
from fedlab.analysis.eigen import top_eigenvalues
from fedlab.analysis.hessian import hessian_trace, sam_sharpness
from fedlab import numpy_generator, torch_generator
from fedlab.results import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from fedlab.config import Config
    from fedlab.data import Dataset
    from fedlab.engine.loop import Simulation

__all__ = ["SHARPNESS_FILE", "read_sharpness", "sharpness_row", "track_sharpness"]

SHARPNESS_FILE = "sharpness.csv"


def sharpness_row(
    loss_fn: EmpiricalLoss,
    theta: Tensor,
    *,
    k: int = 1,
    iters: int = 20,
    tol: float = 1e-3,
    trace_samples: int = 0,
    rho: float | None = None,
    seed: int = 0,
    round_: int = 0,
) -> dict[str, Any]:
    """One measurement at θ: F(θ), the top-k eigenvalues, optionally the Hutchinson trace and SAM sharpness."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"round": int(round_)}
    finite = bool(theta.isfinite().all())
    row["loss"] = float(loss_fn(theta.detach())) if finite else float("nan")
    if finite:
        eig = top_eigenvalues(loss_fn, theta, k, iters=iters, tol=tol,
                              generator=torch_generator(seed, "track-eig", round_))
        for j in range(k):
            row[f"lambda_{j + 1}"] = float(eig.values[j])
        row["eig_iterations"] = int(eig.hvps)  # products in all, either method
        row["eig_converged"] = bool(all(eig.converged))
    else:
        for j in range(k):
            row[f"lambda_{j + 1}"] = float("nan")
        row["eig_iterations"], row["eig_converged"] = 0, False
    if trace_samples > 0:
        if finite:
            tr = hessian_trace(loss_fn, theta, trace_samples, generator=torch_generator(seed, "track-trace", round_))
            row["trace"], row["trace_stderr"] = tr.mean, tr.stderr
        else:
            row["trace"], row["trace_stderr"] = float("nan"), float("nan")
    if rho is not None:
        row["sam_sharpness"] = sam_sharpness(loss_fn, theta, rho) if finite else float("nan")
    row["measure_seconds"] = time.perf_counter() - t0
    return row


def read_sharpness(run_dir: str | Path) -> pd.DataFrame | None:
    """The ``sharpness.csv`` of a run directory, or ``None`` if there is none."""
    path = Path(run_dir) / SHARPNESS_FILE
    return pd.read_csv(path) if path.exists() else None


def _measure_key(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _rounds_done(sim: "Simulation") -> int:
    saved = sim.saved_state()
    return 0 if saved is None else saved.next_round


def _drive(sim: "Simulation", targets: list[int], upto: int, on_theta: Callable[[int, Tensor], None],
           progress: bool) -> str:
    """Run ``sim`` in segments up to round ``upto``, calling ``on_theta(round, θ)`` at each target."""
    done = _rounds_done(sim)
    status = "running"
    for r in [t for t in targets if done < t <= upto]:
        result = sim.run(progress=progress, stop_after_rounds=r - done)
        done = len(result.metrics)
        status = result.status
        if done != r:  # stopped early (diverged)
            on_theta(done, result.theta)
            break
        on_theta(r, result.theta)
        if status != "running":
            break
    return status


def track_sharpness(
    config: "Config",
    every: int = 5,
    *,
    batches: int | None = 2,
    batch_size: int = 64,
    max_clients: int | None = None,
    k: int = 1,
    iters: int = 20,
    tol: float = 1e-3,
    trace_samples: int = 0,
    rho: float | None = None,
    seed: int = 0,
    dataset: "Dataset | None" = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Train ``config`` (or resume / reuse it) and measure the global model every ``every`` rounds, at
    round 0 and at the last: F(θ), the top-``k`` Hessian eigenvalues, the Hutchinson trace
    (``trace_samples``), and SAM's sharpness F(θ + ρ∇F/‖∇F‖) − F(θ) (``rho``). Returns the metrics
    outer-merged with the measurements on ``round``."""
    from fedlab.engine.loop import Simulation

    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be an integer >= 1, got {every!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if max_clients is not None and max_clients < 1:
        raise ValueError(f"max_clients must be None or >= 1, got {max_clients!r}")
    if rho is not None and not (rho > 0):
        raise ValueError(f"rho must be None or > 0, got {rho!r}")

    sim = Simulation.build(config, dataset)
    clients = client_data(sim.dataset, sim.partition, seed=seed)
    if max_clients is not None and len(clients) > max_clients:
        keep = np.sort(numpy_generator(seed, "track-clients").choice(len(clients), max_clients, replace=False))
        clients = [clients[int(i)] for i in keep]
    loss_fn = global_loss_fn(sim.model, clients, batches, batch_size, seed)
    settings = {"batches": batches, "batch_size": batch_size, "max_clients": max_clients, "k": k,
                "iters": iters, "tol": tol, "trace_samples": trace_samples, "rho": rho, "seed": seed,
                "every": every}
    key = _measure_key(settings)
    rounds = config.rounds
    targets = sorted(set(range(0, rounds + 1, every)) | {rounds})

    path = sim.store.dir / SHARPNESS_FILE
    rows: dict[int, dict[str, Any]] = {}
    old = read_sharpness(sim.store.dir)
    if old is not None and "measure_key" in old:
        for rec in old[old["measure_key"] == key].to_dict("records"):
            rows[int(rec["round"])] = rec

    def record(r: int, theta: Tensor) -> None:
        if r in rows:
            return
        row = sharpness_row(loss_fn, theta, k=k, iters=iters, tol=tol, trace_samples=trace_samples, rho=rho,
                            seed=seed, round_=r)
        row["measure_key"] = key
        rows[r] = row
        table = pd.DataFrame([rows[i] for i in sorted(rows)])
        if old is not None and "measure_key" in old:  # keep other settings' rows
            table = pd.concat([old[old["measure_key"] != key], table], ignore_index=True)
        buf = io.StringIO()
        table.sort_values(["measure_key", "round"], kind="stable").to_csv(buf, index=False)
        atomic_write_text(path, buf.getvalue())

    record(0, sim.model.theta0())
    done = _rounds_done(sim)
    missing_past = [t for t in targets if 0 < t <= done and t not in rows]
    if missing_past:  # the run went past them without tracking: replay those rounds elsewhere
        with tempfile.TemporaryDirectory(prefix="fedlab-track-") as tmp:
            replay = Simulation.build(config.replace(runs_dir=tmp), sim.dataset)
            _drive(replay, missing_past, max(missing_past), record, progress)
    _drive(sim, targets, rounds, record, progress)

    metrics = sim.store.read_metrics() if sim.store.metrics_path.exists() else pd.DataFrame({"round": []})
    sharp = pd.DataFrame([rows[i] for i in sorted(rows)])
    return metrics.merge(sharp, on="round", how="outer").sort_values("round", kind="stable").reset_index(drop=True)
