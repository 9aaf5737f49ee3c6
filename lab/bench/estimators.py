"""One line per curvature estimator: fedlab against the plain-PyTorch reference on the same model and batch.

Part of ``python -m lab bench analysis`` (``--repeats``). The estimators, each called as a user calls it,
so building the kept first-order graph is inside the timed call, on both sides:

* ``top-1 power`` — ``top_eigenvalues(op, θ, 1)``: power iteration stopped by PyHessian's rule, fedlab's
  default for one eigenvalue;
* ``top-1 lanczos`` — the same with ``method="lanczos"`` (what :func:`fedlab.analysis.lambda_max` runs),
  stopped by its residual bound;
* ``top-k lanczos`` — ``top_eigenvalues(op, θ, k)``: Lanczos, the default for k > 1 (left out when k = 1);
* ``trace`` — ``hessian_trace(op, θ, probes)``: Hutchinson.

The reference of each (:mod:`lab.bench.plain_hessian`, PyHessian's approach on the ``nn.Module``): power
iteration with deflation for 1 or k eigenvalues under PyHessian's rule, and Hutchinson on the same
probes. The two take turns in ``repeats`` pairs (:func:`lab.bench.machine.paired_times`); a line gives
the median wall and CPU seconds of each, the median over the pairs of plain ÷ fedlab (above 1: fedlab
faster), the products each used, the values and the convergence flag of every result (the trace's:
relative standard error within :data:`fedlab.analysis.hessian.TRACE_TOL`), and each eigenvalue's
distance to a Lanczos run 1000× tighter (``tight``).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fedlab import torch_generator
from lab.bench.machine import paired_times
from lab.bench.plain_hessian import PlainAutogradHessian, plain_power, plain_trace

ESTIMATORS: tuple[str, ...] = ("top-1 power", "top-1 lanczos", "top-k lanczos", "trace")


def _trace_result(values: Sequence[float]) -> dict[str, Any]:
    """Mean, standard error and the library's convergence flag of Hutchinson values vᵀHv."""
    from fedlab.analysis import TraceEstimate

    t = torch.tensor(list(values), dtype=torch.float64)
    stderr = float(t.std() / math.sqrt(len(t))) if len(t) > 1 else float("nan")
    est = TraceEstimate(float(t.mean()), stderr, len(t), t)
    return {"values": [est.mean], "stderr": est.stderr, "converged": [est.converged], "hvps": len(t)}


def fedlab_estimate(estimator: str, loss: Any, theta: Tensor, *, k: int, tol: float, cap: int, probes: int,
                    seed: int) -> dict[str, Any]:
    """One call of fedlab's ``estimator`` from scratch (its operator built here): values, flags, products."""
    from fedlab.analysis import HessianOperator, hessian_trace, top_eigenvalues

    op = HessianOperator(loss, theta)
    if estimator == "trace":
        tr = hessian_trace(op, theta, probes, generator=torch_generator(seed, "bench-analysis-trace"), batch=1)
        return {"values": [tr.mean], "stderr": tr.stderr, "converged": [tr.converged], "hvps": op.n_products}
    eig = top_eigenvalues(op, theta, k if estimator == "top-k lanczos" else 1, iters=cap, tol=tol,
                          method=estimator.split()[1], generator=torch_generator(seed, "bench-analysis-eig"))
    return {"values": [float(v) for v in eig.values], "converged": list(eig.converged), "hvps": eig.n_hvp}


def plain_estimate(estimator: str, module: nn.Module, x: Tensor, y: Tensor, *, k: int, tol: float, cap: int,
                   probes: int, seed: int) -> dict[str, Any]:
    """The plain reference of ``estimator`` from scratch: power iteration (1 or k values) or Hutchinson."""
    op = PlainAutogradHessian(module, x, y)
    if estimator == "trace":
        return _trace_result(plain_trace(op, probes, torch_generator(seed, "bench-analysis-trace")))
    n = k if estimator == "top-k lanczos" else 1
    res = plain_power(op, n, tol, cap, torch_generator(seed, "bench-analysis-eig"))
    return {"values": res["values"], "converged": res["converged"], "hvps": op.n_products}


def estimator_lines(module: nn.Module, x: Tensor, y: Tensor, loss: Any, theta: Tensor, *, k: int, tol: float,
                    cap: int, probes: int, seed: int, repeats: int, device: torch.device,
                    tight: Sequence[float]) -> list[dict[str, Any]]:
    """The lines of :data:`ESTIMATORS` (``top-k`` only for k > 1), each timed in ``repeats`` pairs."""
    lines = []
    for est in ESTIMATORS:
        if est == "top-k lanczos" and k == 1:
            continue
        kw = dict(k=k, tol=tol, cap=cap, probes=probes, seed=seed)
        ours, plain, a, b = paired_times(lambda: fedlab_estimate(est, loss, theta, **kw),
                                         lambda: plain_estimate(est, module, x, y, **kw), repeats, device,
                                         warmup=False)
        line: dict[str, Any] = {"estimator": est, "reference": "plain Hutchinson" if est == "trace" else
                                f"plain power iteration (top {len(b['values'])})", "pairs": repeats}
        for side, times, res in (("fedlab", ours, a), ("plain", plain, b)):
            line[f"{side}_seconds"] = statistics.median(t[0] for t in times)
            line[f"{side}_cpu_seconds"] = statistics.median(t[1] for t in times)
            line[f"{side}_hvps"] = res["hvps"]
            line[f"{side}_values"] = res["values"]
            line[f"{side}_converged"] = res["converged"]
            line[f"{side}_stderr"] = res.get("stderr")
            line[f"{side}_error"] = None if est == "trace" else \
                max(abs(v - t) / abs(t) for v, t in zip(res["values"], tight))
        line["ratio"] = statistics.median(p[0] / o[0] for o, p in zip(ours, plain))
        line["cpu_ratio"] = statistics.median(p[1] / o[1] for o, p in zip(ours, plain))
        lines.append(line)
    return lines


def print_lines(lines: Sequence[dict[str, Any]]) -> None:
    """The per-estimator table."""
    if not lines:
        return
    print(f"\nper estimator, fedlab vs the plain-PyTorch reference on the same model and batch (median of "
          f"{lines[0]['pairs']} pair(s), taking turns; each call builds its own graph; ratio = plain ÷ fedlab, "
          "above 1: fedlab faster):")
    head = (f"{'estimator':<14} {'HVPs':>9} {'fedlab s (cpu)':>15} {'plain s (cpu)':>15} {'ratio (cpu)':>12}  "
            f"{'fedlab value(s)':<24}{'conv':<5}{'plain value(s)':<24}{'conv':<5}{'λ error fedlab/plain':>20}")
    print(head)
    print("-" * len(head))

    def vals(line: dict[str, Any], side: str) -> str:
        v = " ".join(f"{x:.3f}" for x in line[f"{side}_values"])
        return v + (f" ± {line[f'{side}_stderr']:.2f}" if line[f"{side}_stderr"] is not None else "")

    for r in lines:
        err = "-" if r["fedlab_error"] is None else f"{r['fedlab_error']:.1e} / {r['plain_error']:.1e}"
        print(f"{r['estimator']:<14} {r['fedlab_hvps']:>4}/{r['plain_hvps']:<4} "
              f"{r['fedlab_seconds']:>6.2f} ({r['fedlab_cpu_seconds']:>5.2f}) {r['plain_seconds']:>6.2f} "
              f"({r['plain_cpu_seconds']:>5.2f}) {r['ratio']:>5.2f} ({r['cpu_ratio']:>4.2f})  {vals(r, 'fedlab'):<24}"
              f"{'yes' if all(r['fedlab_converged']) else 'no':<5}{vals(r, 'plain'):<24}"
              f"{'yes' if all(r['plain_converged']) else 'no':<5}{err:>20}")
    print("HVPs: fedlab/plain products; the trace's conv: relative standard error ≤ TRACE_TOL "
          "(fedlab.analysis.hessian); λ error: distance to the tight Lanczos run")
