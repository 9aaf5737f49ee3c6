"""Calibrated hyperparameters: measured on one trajectory before the arm that uses them runs.

FedGF's divergence threshold T_D (Lee et al., ICML 2024) switches its global perturbation on in the
rounds whose client divergence D_t = (1/m) Σ_{i∈S_t} ‖θ_{i,K} − θ^t‖ exceeds it. The released value
T_D = 0.2 was chosen for the authors' local work (K·η ≈ 0.08); with K = 50 and η = 0.1 every round
exceeds it from round 2, so FedGF runs with c = 1 and diverges. :func:`fedgf_threshold` measures D_t on
the trajectory of FedGF with the switch off (T_D = +∞ in effect: c ≡ 0, which is FedSAM) and returns a
statistic of it (the failure map's pre-registration: the median over rounds, 3 significant digits).
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["OFF_THRESHOLD", "client_divergence", "fedgf_threshold", "load_calibration", "round_sig"]

OFF_THRESHOLD = 1e30
"""A T_D no client divergence reaches: FedGF's switch stays off (c ≡ 0)."""


def round_sig(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))


def client_divergence(config: Any, *, progress: Callable[[int, float], None] | None = None) -> list[float]:
    """D_t for t = 1..T of ``config``'s trajectory: the mean over the round's sampled clients of
    ‖θ_{i,K} − θ^t‖ (θ^t the global model the round starts from), computed in this process (nothing is
    written under ``runs/``)."""
    import torch

    from fedlab.engine import Simulation

    sim = Simulation.build(config)
    state = sim.initial_state()
    out = []
    for t in range(config.rounds):
        theta = sim.algorithm.global_model(state.server).clone()
        outcome = sim.train_round(state, t)
        finals = torch.stack([r.theta_final for r in outcome.results])
        d = float(torch.linalg.vector_norm(finals - theta, dim=1).mean())
        out.append(d)
        if progress is not None:
            progress(t + 1, d)
    return out


def fedgf_threshold(config: Any, *, statistic: str = "median", digits: int = 3,
                    progress: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """T_D from ``config`` (a FedGF config; its threshold is replaced by :data:`OFF_THRESHOLD`): the
    ``statistic`` (median or mean) of D_t over its rounds, rounded to ``digits`` significant digits."""
    if config.algorithm != "fedgf":
        raise ValueError(f"fedgf_threshold calibrates FedGF, got algorithm={config.algorithm!r}")
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic={statistic!r} is invalid; allowed: median, mean")
    off = config.replace(algorithm_params={**config.algorithm_params, "divergence_threshold": OFF_THRESHOLD})
    series = client_divergence(off, progress=progress)
    value = statistics.median(series) if statistic == "median" else statistics.fmean(series)
    return {"divergence_threshold": round_sig(value, digits), "statistic": statistic, "digits": digits,
            "raw": value, "series": series, "config": off.to_dict()}


def load_calibration(path: Path) -> dict[str, dict[str, Any]]:
    """The calibrated values committed at ``path`` (arm → parameter → value; ``path`` sits in a folder of the
    evidence root, e.g. ``figures/failure_map/``, whose manifest lists it); {} when none is."""
    from lab.evidence.integrity import verify

    if not path.exists():
        return {}
    data = json.loads(verify(path, path.parents[1]))  # a calibration is evidence: refused if edited
    return {arm: dict(entry["values"]) for arm, entry in data.items()}


def save_calibration(path: Path, arm: str, values: Mapping[str, Any], details: Mapping[str, Any]) -> None:
    """Add ``arm``'s calibrated ``values`` (with how they were measured) to ``path``; a value already
    committed is never replaced."""
    data = json.loads(path.read_text()) if path.exists() else {}
    if arm in data:
        raise ValueError(f"{path}: {arm} is calibrated already; a new calibration is a new study amendment")
    data[arm] = {"values": dict(values), **dict(details)}
    from lab.evidence.integrity import add, rerecord

    known = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    (rerecord if known else add)(path, path.parents[1])  # the evidence manifest of figures/
