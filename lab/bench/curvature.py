"""Benchmark of the curvature tools and the 2-D landscape: fedlab (new), fedlab (old), plain autograd.

    python -m lab bench analysis                   # cnn, 512 Fashion-MNIST images, k = 2, tol 1e-5, cap 200
    python -m lab bench analysis --n 128 --json out.json
    python -m lab bench analysis --quick           # seconds-long version (CI)

One fixed batch of ``--n`` class-balanced Fashion-MNIST training images and the ``cnn`` at its
initial weights define L(θ) = mean cross-entropy. For each solver it measures the top ``--k``
Hessian eigenvalues (relative tolerance ``--tol``, at most ``--cap`` Hessian-vector products per
eigenvalue for power iteration and in total for Lanczos) and a Hutchinson trace from ``--probes``
Rademacher probes, and prints, side by side: products used, seconds, the values, and how far each
solver's values lie from the plain-autograd reference and from a Lanczos run 1000× tighter (the
"λ error": Lanczos' residual bound certifies that one to ``tol``/1000, and power iteration's
relative-change rule certifies nothing, so this is how equal accuracy is judged).

Solvers (rows):

* ``fedlab new`` — one :class:`fedlab.analysis.HessianOperator` (the kept first-order graph) passed to
  :func:`fedlab.analysis.top_eigenvalues` with its defaults (Lanczos for k > 1) and then to
  :func:`fedlab.analysis.hessian_trace` (the graph is built once, as PyHessian does);
* ``fedlab power`` — the same products, power iteration (isolates what Lanczos buys);
* ``fedlab lanczos`` — only when named in ``--solvers``: the same products, ``method="lanczos"`` for any
  k (with ``--k 1``, Lanczos top-1 against the power-iteration rows; ``new`` is Lanczos already for k > 1);
* ``fedlab old`` — ``method="power", backend="func"``: the path before the speed work, where every
  product recomputes forward, backward and double backward through ``torch.func``;
* ``plain autograd`` — a reference on the ``nn.Module`` itself (:mod:`lab.bench.plain_hessian`): one
  ``loss.backward``-style gradient with ``create_graph=True``, then power iteration with deflation
  and Hutchinson probes on ``torch.autograd.grad(g, params, v)`` — the approach of PyHessian
  (Yao et al. 2020), independent of fedlab's flat-vector code;
* ``pyhessian`` — only with ``--pyhessian`` and when the ``pyhessian`` package is importable (it is
  not a fedlab dependency); its products are counted by wrapping its product function, and it draws
  its random vectors from torch's global generator, which is seeded for it here.

Every result carries its convergence flag ("conv": each eigenvalue's stopping rule; the trace's relative
standard error within :data:`fedlab.analysis.hessian.TRACE_TOL`). Then one line per estimator (top-1 by
power iteration and by Lanczos, top-k, trace) against the plain reference on the same model and batch,
timed in ``--repeats`` pairs (:mod:`lab.bench.estimators`). The same Rademacher probes (drawn from
:func:`fedlab.torch_generator`) are used by every solver but PyHessian, so their traces differ by float
rounding only. The landscape part times
:func:`fedlab.analysis.slice_2d` on a ``--grid`` × ``--grid`` grid over ``--landscape-n`` images
(notebook 09's cpu-ci measured F has 5 × 32) in the variants of :data:`LANDSCAPE_VARIANTS`: the
loss's own layout in a plain loop (old; once on the process's threads, once with every core as
intra-op threads, so that "new" is also compared on the same cores), channels-last on one thread,
and the default (channels-last, one grid point per usable core). One torch thread by default
(``--threads``); wall times on a shared machine are noisy, so the load average is printed with the
numbers.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedlab import torch_generator
from lab.bench.machine import load_average, machine_info, sync
from lab.bench.estimators import estimator_lines, print_lines
from lab.bench.plain_hessian import PlainAutogradHessian, plain_power, plain_trace


SOLVERS = ("new", "power", "lanczos", "old", "plain", "pyhessian")
DEFAULT_SOLVERS = ("new", "power", "old", "plain", "pyhessian")  # lanczos: on request (``new`` for k > 1)
LABELS = {"new": "fedlab new", "power": "fedlab power", "lanczos": "fedlab lanczos", "old": "fedlab old",
          "plain": "plain autograd", "pyhessian": "pyhessian"}


def _mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    var = sum((x - mean) ** 2 for x in values) / (n - 1)
    return mean, math.sqrt(var / n)


# ------------------------------------------------------------------------------------------------
# one row per solver
# ------------------------------------------------------------------------------------------------
def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """``(fn(), wall seconds)``; its process CPU seconds go to ``_last_cpu[0]``.

    On a shared machine the wall time of a one-thread computation grows with the load, its CPU time
    much less: both are reported.
    """
    sync(device)
    c0 = time.process_time()
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    _last_cpu[0] = time.process_time() - c0
    return out, time.perf_counter() - t0


_last_cpu = [0.0]


def _row(solver: str, eig_s: float, eig_cpu: float, eig_hvps: int, values: list[float], converged: list[bool],
         trace_s: float, trace_cpu: float, trace_values: Sequence[float]) -> dict[str, Any]:
    from fedlab.analysis import TraceEstimate

    mean, stderr = _mean_stderr(trace_values)
    tr = TraceEstimate(mean, stderr, len(trace_values), torch.tensor(list(trace_values), dtype=torch.float64))
    return {"solver": solver, "label": LABELS[solver], "eig_seconds": eig_s, "eig_cpu_seconds": eig_cpu,
            "trace_cpu_seconds": trace_cpu, "eig_hvps": eig_hvps,
            "eigenvalues": values, "converged": converged, "trace": mean, "trace_stderr": stderr,
            "trace_converged": tr.converged,
            "trace_hvps": len(trace_values), "trace_seconds": trace_s,
            "seconds_per_hvp": (eig_s + trace_s) / max(eig_hvps + len(trace_values), 1),
            "cpu_seconds_per_hvp": (eig_cpu + trace_cpu) / max(eig_hvps + len(trace_values), 1)}


def fedlab_row(solver: str, loss: Any, theta: Tensor, *, k: int, tol: float, cap: int, probes: int, seed: int,
               device: torch.device) -> dict[str, Any]:
    """fedlab's ``top_eigenvalues`` and ``hessian_trace``; ``solver`` = new | power | lanczos | old."""
    from fedlab.analysis import HessianOperator, hessian_trace, top_eigenvalues

    opts: dict[str, Any] = {"new": {}, "power": {"method": "power"}, "lanczos": {"method": "lanczos"},
                            "old": {"method": "power", "backend": "func"}}[solver]
    trace_opts = {"backend": "func"} if solver == "old" else {}

    def eigen() -> tuple[Any, Any]:
        # the graph paths build one operator and reuse it for the trace, as the plain reference does
        op = loss if solver == "old" else HessianOperator(loss, theta)
        return op, top_eigenvalues(op, theta, k, iters=cap, tol=tol,
                                   generator=torch_generator(seed, "bench-analysis-eig"), **opts)

    (op, eig), eig_s = _timed(eigen, device)
    eig_cpu = _last_cpu[0]
    tr, tr_s = _timed(lambda: hessian_trace(op, theta, probes, generator=torch_generator(seed, "bench-analysis-trace"),
                                            batch=1, **trace_opts), device)
    return _row(solver, eig_s, eig_cpu, eig.n_hvp, [float(v) for v in eig.values], list(eig.converged), tr_s,
                _last_cpu[0], tr.values.tolist())


def plain_row(module: nn.Module, x: Tensor, y: Tensor, *, k: int, tol: float, cap: int, probes: int, seed: int,
              device: torch.device) -> dict[str, Any]:
    def eig() -> tuple[PlainAutogradHessian, dict[str, Any]]:
        op = PlainAutogradHessian(module, x, y)
        return op, plain_power(op, k, tol, cap, torch_generator(seed, "bench-analysis-eig"))

    (op, res), eig_s = _timed(eig, device)
    eig_cpu = _last_cpu[0]
    eig_hvps = op.n_products
    # the trace reuses the graph the eigenvalues built (as PyHessian does): only the products are timed
    vals, tr_s = _timed(lambda: plain_trace(op, probes, torch_generator(seed, "bench-analysis-trace")), device)
    return _row("plain", eig_s, eig_cpu, eig_hvps, res["values"], res["converged"], tr_s, _last_cpu[0], vals)


def pyhessian_row(module: nn.Module, x: Tensor, y: Tensor, *, k: int, tol: float, cap: int, probes: int,
                  seed: int, device: torch.device) -> dict[str, Any] | None:
    """PyHessian 0.1 on the same module and batch, if it is installed (not a fedlab dependency)."""
    import importlib

    try:  # the module, not the class ``pyhessian.hessian`` that the package's __init__ re-exports
        ph = importlib.import_module("pyhessian.hessian")
    except ImportError:
        return None
    calls = [0]
    product = ph.hessian_vector_product

    def counted(*a: Any, **kw: Any) -> Any:
        calls[0] += 1
        return product(*a, **kw)

    ph.hessian_vector_product = counted
    try:
        torch.manual_seed(seed)  # PyHessian draws from the global generator; seeded for repeatability
        def eig() -> tuple[Any, Any]:
            h = ph.hessian(module, nn.CrossEntropyLoss(), data=(x, y), cuda=device.type == "cuda")
            return h, h.eigenvalues(maxIter=cap, tol=tol, top_n=k)[0]

        (h, values), eig_s = _timed(eig, device)
        eig_cpu = _last_cpu[0]
        eig_hvps = calls[0]
        # tol=0: never stop early, so all ``probes`` probes are used, as for the other solvers
        vals, tr_s = _timed(lambda: h.trace(maxIter=probes, tol=0.0), device)
    finally:
        ph.hessian_vector_product = product
        module.zero_grad(set_to_none=True)
    converged = [eig_hvps < k * cap] * k  # PyHessian does not report convergence; hitting the cap means no
    return _row("pyhessian", eig_s, eig_cpu, eig_hvps, [float(v) for v in values], converged, tr_s, _last_cpu[0],
                vals)


# ------------------------------------------------------------------------------------------------
# the landscape
# ------------------------------------------------------------------------------------------------
LANDSCAPE_VARIANTS = (
    # name, channels_last, point threads (None: one per core), intra-op threads (None: the process's)
    ("old", False, 1, None),
    ("old, all cores", False, 1, "cores"),
    ("new, 1 thread", None, 1, None),
    ("new", None, None, None),
)
"""The landscape rows: the path before the speed work in the process's threads (``--threads``) and
with every core as intra-op threads, channels-last on one thread, and the default (channels-last,
one grid point per core)."""


def landscape_rows(n: int, grid: int, seed: int, device: torch.device) -> list[dict[str, Any]]:
    """``slice_2d`` timed in each of :data:`LANDSCAPE_VARIANTS`, the variants taking turns."""
    import numpy as np

    from fedlab.analysis import filter_normalized_direction, global_loss_fn, slice_2d
    from fedlab.engine.hardware import usable_cores

    model, x, y = build_setting(n, seed, device)
    loss = global_loss_fn(model, [(x, y)])
    theta = model.theta0()
    d1 = filter_normalized_direction(model, theta, torch_generator(seed, "bench-analysis-d1"))
    d2 = filter_normalized_direction(model, theta, torch_generator(seed, "bench-analysis-d2"))
    cores, own = usable_cores(), torch.get_num_threads()

    def run(cl: bool | None, threads: int | None, intra: str | None, points: int) -> Any:
        torch.set_num_threads(cores if intra == "cores" else own)
        try:
            return slice_2d(loss, theta, d1, d2, n=points, channels_last=cl, threads=threads, progress=False)
        finally:
            torch.set_num_threads(own)

    for _, cl, threads, intra in LANDSCAPE_VARIANTS:
        run(cl, threads, intra, 3)  # warm-up (not timed)
    timings: dict[str, list[tuple[float, float]]] = {v[0]: [] for v in LANDSCAPE_VARIANTS}
    lands: dict[str, Any] = {}
    for _ in range(3):  # the variants take turns, so a change of the machine's load hits all alike
        for name, cl, threads, intra in LANDSCAPE_VARIANTS:
            lands[name], secs = _timed(lambda: run(cl, threads, intra, grid), device)
            timings[name].append((secs, _last_cpu[0]))
    ref = lands["old"].losses
    rows: list[dict[str, Any]] = []
    for name, cl, threads, intra in LANDSCAPE_VARIANTS:
        secs = statistics.median(t[0] for t in timings[name])
        cpu = statistics.median(t[1] for t in timings[name])
        rows.append({"solver": name, "seconds": secs, "cpu_seconds": cpu, "points": grid * grid,
                     "ms_per_point": 1e3 * secs / grid**2, "center": lands[name].center,
                     "point_threads": cores if threads is None and device.type == "cpu" else 1,
                     "intra_op_threads": cores if intra == "cores" else own,
                     "max_rel_diff_vs_old": float(np.max(np.abs(lands[name].losses - ref) / np.abs(ref)))})
    return rows


# ------------------------------------------------------------------------------------------------
def build_setting(n: int, seed: int, device: torch.device) -> tuple[Any, Tensor, Tensor]:
    """The ``cnn`` at its initial weights and ``n`` class-balanced Fashion-MNIST training images."""
    from fedlab.data import load_dataset
    from fedlab.models import FlatModel, build_model

    data = load_dataset("fmnist", train_size=n, device=device, seed=seed, download=False)
    model = FlatModel(build_model("cnn", data.input_shape, data.n_classes, seed=seed).to(device))
    return model, data.x_train, data.y_train


def run_benchmark(*, n: int = 512, k: int = 2, tol: float = 1e-5, cap: int = 200, probes: int = 100,
                  grid: int = 9, landscape_n: int = 160, solvers: Sequence[str] = DEFAULT_SOLVERS, seed: int = 0,
                  device: str = "cpu", repeats: int = 3) -> dict[str, Any]:
    """All rows of the benchmark as one JSON-able dict (settings, machine, load, rows, the per-estimator lines of
    :mod:`lab.bench.estimators` timed in ``repeats`` pairs (0: none), landscape)."""
    from fedlab.analysis import global_loss_fn, hvp, top_eigenvalues

    for s in solvers:
        if s not in SOLVERS:
            raise ValueError(f"solver {s!r} is unknown; allowed: {', '.join(SOLVERS)}")
    from fedlab.engine.malloc import stable_malloc

    # the allocator regime of a process that has built a Simulation (as notebook 09 has), so that no
    # variant's large activation buffers are mapped and faulted in anew on every call
    malloc = "fixed thresholds" if stable_malloc() else "glibc default"
    dev = torch.device(device)
    model, x, y = build_setting(n, seed, dev)
    loss = global_loss_fn(model, [(x, y)])
    theta = model.theta0()
    ones = torch.ones_like(theta)
    for backend in ("graph", "func"):  # warm-up of both product paths (not timed)
        hvp(loss, theta, ones, backend=backend)
    load_before = load_average()
    rows = []
    for s in solvers:
        kw = dict(k=k, tol=tol, cap=cap, probes=probes, seed=seed, device=dev)
        if s in ("new", "power", "lanczos", "old"):
            rows.append(fedlab_row(s, loss, theta, **kw))
        elif s == "plain":
            rows.append(plain_row(model.module, x, y, **kw))
        else:
            row = pyhessian_row(model.module, x, y, **kw)
            if row is not None:
                rows.append(row)
    ref = next((r for r in rows if r["solver"] == "plain"), rows[0] if rows else None)
    # accuracy: a Lanczos run 1000x tighter; its Ritz values are certified to tol/1000 by the residual bound
    tight, tight_s = _timed(lambda: top_eigenvalues(loss, theta, k, iters=max(2 * cap, 300), tol=tol * 1e-3,
                                                    method="lanczos", generator=torch_generator(seed, "bench-tight")),
                            dev)
    tight_values = [float(v) for v in tight.values]
    for r in rows:
        assert ref is not None
        r["max_rel_eig_diff_vs_ref"] = max(abs(a - b) / abs(b) for a, b in zip(r["eigenvalues"], ref["eigenvalues"]))
        r["max_rel_eig_error"] = max(abs(a - b) / abs(b) for a, b in zip(r["eigenvalues"], tight_values))
        r["trace_diff_vs_ref_in_stderr"] = abs(r["trace"] - ref["trace"]) / ref["trace_stderr"] \
            if ref["trace_stderr"] > 0 else float("nan")
    lines = estimator_lines(model.module, x, y, loss, theta, k=k, tol=tol, cap=cap, probes=probes, seed=seed,
                            repeats=repeats, device=dev, tight=tight_values) if repeats > 0 else []
    land = landscape_rows(landscape_n, grid, seed, dev) if grid >= 3 else []
    return {
        "settings": {"model": "cnn", "dataset": "fmnist", "n": n, "d": model.dim, "k": k, "tol": tol, "cap": cap,
                     "probes": probes, "grid": grid, "landscape_n": landscape_n, "seed": seed, "device": str(dev),
                     "reference": ref["solver"] if ref else None, "malloc": malloc, "repeats": repeats},
        "tight": {"eigenvalues": tight_values, "tol": tol * 1e-3, "hvps": tight.n_hvp, "seconds": tight_s,
                  "converged": bool(all(tight.converged))},
        "machine": machine_info(dev),
        "load_average": {"before": load_before, "after": load_average()},
        "rows": rows,
        "estimators": lines,
        "landscape": land,
    }


def print_report(res: dict[str, Any]) -> None:
    s = res["settings"]
    print(f"curvature of the cnn on {s['n']} Fashion-MNIST images (d = {s['d']}), top {s['k']} eigenvalues "
          f"(tol {s['tol']:g}, cap {s['cap']}), Hutchinson trace ({s['probes']} probes), {res['machine']['torch_threads']} "
          f"thread(s), torch {res['machine']['torch']}, malloc {s['malloc']}; load average "
          f"{res['load_average']['before']} → "
          f"{res['load_average']['after']}")
    head = f"{'solver':<15} {'eig HVPs':>8} {'eig s':>7} {'cpu s':>7} {'eigenvalues':<18} {'conv':<4} " \
           f"{'trace ± se':>16} {'conv':<4} {'trace s':>7} {'cpu s':>7} {'cpu s/HVP':>9} {'λ error':>8} {'Δλ/λ vs ref':>11} " \
           f"{'Δtr/se':>7}"
    print(head)
    print("-" * len(head))
    for r in res["rows"]:
        vals = " ".join(f"{v:.3f}" for v in r["eigenvalues"])
        print(f"{r['label']:<15} {r['eig_hvps']:>8} {r['eig_seconds']:>7.2f} {r['eig_cpu_seconds']:>7.2f} {vals:<18} "
              f"{'yes' if all(r['converged']) else 'no':<4} {r['trace']:>9.2f} ± {r['trace_stderr']:<5.2f}"
              f" {'yes' if r['trace_converged'] else 'no':<4}{r['trace_seconds']:>7.2f} {r['trace_cpu_seconds']:>7.2f} {r['cpu_seconds_per_hvp']:>9.3f} "
              f"{r['max_rel_eig_error']:>8.1e} "
              f"{r['max_rel_eig_diff_vs_ref']:>11.1e} "
              f"{r['trace_diff_vs_ref_in_stderr']:>7.3f}")
    t = res["tight"]
    print(f"λ error: max relative distance to a Lanczos run at tol {t['tol']:g} ({' '.join(f'{v:.5f}' for v in t['eigenvalues'])}, "
          f"{t['hvps']} HVPs, {t['seconds']:.1f} s); Δλ/λ vs ref, Δtr/se: distance to the {s['reference']} row")
    by = {r["solver"]: r for r in res["rows"]}
    if "new" in by and "old" in by:
        n, o = by["new"], by["old"]
        print(f"fedlab new vs old: eigenvalues {o['eig_seconds'] / n['eig_seconds']:.1f}x faster "
              f"({o['eig_cpu_seconds'] / n['eig_cpu_seconds']:.1f}x in CPU time; {o['eig_hvps']} → {n['eig_hvps']} "
              f"HVPs), trace {o['trace_seconds'] / n['trace_seconds']:.1f}x "
              f"({o['trace_cpu_seconds'] / n['trace_cpu_seconds']:.1f}x in CPU time)")
    if "lanczos" in by and "power" in by:
        lz, pw = by["lanczos"], by["power"]
        print(f"fedlab lanczos vs power: eigenvalues {1e3 * lz['eig_seconds']:.0f} vs {1e3 * pw['eig_seconds']:.0f} ms, "
              f"{lz['eig_hvps']} vs {pw['eig_hvps']} HVPs")
    for other in ("plain", "pyhessian"):
        if "new" in by and other in by:
            n, o = by["new"], by[other]
            print(f"fedlab new vs {o['label']}: eigenvalues {o['eig_seconds'] / n['eig_seconds']:.2f}x "
                  f"(CPU {o['eig_cpu_seconds'] / n['eig_cpu_seconds']:.2f}x), trace "
                  f"{o['trace_seconds'] / n['trace_seconds']:.2f}x (CPU {o['trace_cpu_seconds'] / n['trace_cpu_seconds']:.2f}x)"
                  " (above 1: fedlab faster)")
    print_lines(res["estimators"])
    if res["landscape"]:
        by_name = {r["solver"]: r for r in res["landscape"]}
        print(f"2-D landscape, {s['grid']}x{s['grid']} points on {s['landscape_n']} images (median of 3, the variants "
              "taking turns):")
        for r in res["landscape"]:
            print(f"  {r['solver']:<15} {r['seconds']:>7.2f} s ({r['ms_per_point']:>5.1f} ms/point, CPU {r['cpu_seconds']:.2f} s; "
                  f"{r['point_threads']} point thread(s) x {r['intra_op_threads']} intra-op)  max rel. diff. vs old "
                  f"{r['max_rel_diff_vs_old']:.1e}")
        old, new = by_name["old"], by_name["new"]
        print(f"  new vs old: {old['seconds'] / new['seconds']:.2f}x; on the same cores (old with every core as "
              f"intra-op threads): {by_name['old, all cores']['seconds'] / new['seconds']:.2f}x; on one thread: "
              f"{old['seconds'] / by_name['new, 1 thread']['seconds']:.2f}x")
    print("note: wall times on a shared machine are noisy; compare rows of one run")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench analysis", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--n", type=int, default=512, help="Fashion-MNIST images in the batch")
    p.add_argument("--k", type=int, default=2, help="eigenvalues")
    p.add_argument("--tol", type=float, default=1e-5, help="relative tolerance of the eigensolvers")
    p.add_argument("--cap", type=int, default=200, help="most products per eigenvalue (power) / in total (Lanczos)")
    p.add_argument("--probes", type=int, default=100, help="Hutchinson probes")
    p.add_argument("--grid", type=int, default=9, help="landscape points per axis (below 3: no landscape)")
    p.add_argument("--landscape-n", type=int, default=160, help="images in the landscape's loss")
    p.add_argument("--solvers", nargs="+", default=list(DEFAULT_SOLVERS), choices=SOLVERS)
    p.add_argument("--pyhessian", action="store_true", help="include PyHessian (if installed)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="pairs timing each estimator against the plain reference "
                                                          "(lab.bench.estimators; 0: none)")
    p.add_argument("--quick", action="store_true",
                   help="seconds-long version: n 32, tol 1e-3, cap 30, 4 probes, grid 3, 1 pair per estimator")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = p.parse_args(list(argv) if argv is not None else None)
    for name in ("n", "k", "cap", "probes", "threads", "landscape_n"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.repeats < 0:
        p.error(f"--repeats must be >= 0, got {args.repeats}")
    if not args.tol > 0:
        p.error(f"--tol must be > 0, got {args.tol}")
    if args.quick:
        args.n, args.tol, args.cap, args.probes, args.grid, args.landscape_n = 32, 1e-3, 30, 4, 3, 32
        args.repeats = min(args.repeats, 1)
    torch.set_num_threads(args.threads)
    solvers = [s for s in args.solvers if s != "pyhessian" or args.pyhessian]
    res = run_benchmark(n=args.n, k=args.k, tol=args.tol, cap=args.cap, probes=args.probes, grid=args.grid,
                        landscape_n=args.landscape_n, solvers=solvers, seed=args.seed, device=args.device,
                        repeats=args.repeats)
    print_report(res)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
